"""plan's search over what the user left open: micro-batch (powers of two up to what fits), gradient checkpointing
(off, on), ZeRO-3's parameter offload (on, off) and the strategy. Every combination that fits is priced with the
same memory (gputopo.plan) and time (gputopo.speed) as the table; the fastest by predicted tokens/s wins (at the
global batch asked for, when one is: the same samples per step, so the same optimization).

What is pinned on the command line (--batch-size, --[no-]grad-checkpointing, --[no-]offload-params, --grad-accum
with --global-batch) stays as given. Within advise.TIE of the best, the prediction's error, the strategy HF's
decision tree reaches first wins, then no recomputation, then the most tokens/s. A configuration without a step
time (an offload row whose host's cores were not given) ranks after every timed one; with no time at all (the
GPU model unknown) the decision tree's order ranks, then the largest micro-batch that fits, then no
recomputation."""
from __future__ import annotations

from dataclasses import dataclass, replace

from . import advise, speed
from .errors import BadInput
from .plan import HEADROOM, Training, strategies
from .request import Request, accumulation, bounded
from .units import gib

MAX_MICRO = 256      # micro-batches searched: 1, 2, 4 ... up to this
SHOWN = 5            # configurations shown beside the winner
OFFLOADS = ("zero3_offload_cpu", "zero3_offload_nvme")   # ZeRO-3 offload: parameters too, or not


@dataclass(frozen=True)
class Candidate:
    strategy: str
    training: Training
    per_gpu_bytes: int
    tight: bool
    step_s: float | None
    tokens_per_s: float | None
    untimed: str | None = None   # why there is no step time (None: there is one)

    def to_dict(self) -> dict:
        t = self.training
        return {"strategy": self.strategy, "micro_batch": t.batch_size, "grad_accum": t.grad_accum,
                "grad_checkpointing": t.grad_checkpointing, "selective": t.selective,
                "offload_params": t.offload_params if self.strategy in OFFLOADS else None,
                "per_gpu_bytes": self.per_gpu_bytes, "tight": self.tight, "step_s": self.step_s,
                "tokens_per_s": self.tokens_per_s}


def _accum(req: Request, micro: int) -> int | None:
    """Accumulation steps for this micro-batch: what makes --global-batch (None when it does not divide it),
    else the request's own (None when the global batch they make is past request.bounded's bound)."""
    try:
        accum = accumulation(micro, None if req.global_batch else req.training.grad_accum, req.global_batch,
                             req.world)
        bounded(micro, accum, req.gpus_per_node, req.nodes)   # a micro-batch past the bound is not tried
        return accum
    except BadInput:
        return None


def _micros(req: Request) -> list[int]:
    """Micro-batches to try, smallest first: the pinned one, else powers of two the global batch allows."""
    if "batch_size" not in req.searchable:
        return [req.training.batch_size]
    return [b for b in (2 ** i for i in range(MAX_MICRO.bit_length())) if _accum(req, b) is not None] \
        or [req.training.batch_size]


def _trainings(req: Request):
    """(Training, strategies it is priced for) for every open knob's value, micro-batch ascending per setting."""
    t = req.training
    ckpts = (False, True) if "grad_checkpointing" in req.searchable else (t.grad_checkpointing,)
    offloads = (True, False) if "offload_params" in req.searchable else (t.offload_params,)
    for ckpt in ckpts:
        for i, off in enumerate(offloads):
            only = None if i == 0 else OFFLOADS   # the only rows parameter offload changes
            yield [(replace(t, batch_size=b, grad_checkpointing=ckpt, offload_params=off, grad_accum=_accum(req, b)),
                    only) for b in _micros(req)]


def candidates(req: Request, rates, device: str = "cuda", allowed=None) -> list[Candidate]:
    """Every configuration that fits (tightly or not), priced; `allowed`: only these strategies."""
    m, lay = req.model, req.layout
    out = []
    for series in _trainings(req):
        for t, only in series:
            rows = [s for s in strategies(m, lay, t) if s.fits and (only is None or s.name in only)
                    and (allowed is None or s.name in allowed)]
            if not rows:
                break   # memory grows with the micro-batch: nothing larger fits either
            for s in rows:
                time = speed.step(s.name, m, lay, t, rates, device=device)
                out.append(Candidate(s.name, t, s.per_gpu_bytes["total"],
                                     s.per_gpu_bytes["total"] > HEADROOM * lay.gpu_mem_bytes, time.step_s,
                                     time.tokens_per_s, None if time.tokens_per_s else untimed(s.name, lay, time)))
    return out


def untimed(name: str, lay, time) -> str:
    """Why a strategy has no step time, in the words of what to give."""
    if "offload" in name and lay.cpu_cores is None:
        return "CPU cores per node not given: DeepSpeed's CPU Adam runs on them (--cpu-cores N)"
    if lay.gpus_per_node > 1 and lay.link_type is None and lay.gpu_model:
        return "the link between the GPUs is unknown (--link)"
    return time.basis


def rank(found: list[Candidate], order: tuple) -> tuple[list[Candidate], bool]:
    """(candidates best first, timed), among those advise.room_pool admits (room for fragmentation; plain DDP
    within the memory prediction's error of the sharded one with room that would be chosen).
    Timed (any of them has a step time): by tokens/s with advise.TIE's tie rule, those without a time after them
    in the untimed order. Untimed: the decision tree's order, then the largest micro-batch that fits (the most
    work per kernel where nothing says how fast it runs), then no recomputation, parameter offload last."""
    return _ranked(advise.room_pool(found, lambda c: c.per_gpu_bytes, lambda cs: _ranked(cs, order)[0],
                                    lambda c: c.strategy, _setting), order)


def _setting(c: Candidate) -> tuple:
    """What a candidate's memory depends on besides its strategy (parameter offload is the strategy's own)."""
    t = c.training
    return t.batch_size, t.grad_accum, t.grad_checkpointing, t.selective


def _ranked(pool: list[Candidate], order: tuple) -> tuple[list[Candidate], bool]:
    """rank()'s order of the candidates it admits."""
    where = {n: i for i, n in enumerate(order)}
    by_tree = sorted((c for c in pool if not c.tokens_per_s),
                     key=lambda c: (where.get(c.strategy, 99), -c.training.batch_size, c.training.grad_checkpointing,
                                    c.strategy in OFFLOADS and c.training.offload_params))
    timed = [c for c in pool if c.tokens_per_s]
    if not timed:
        return by_tree, False
    best = max(c.tokens_per_s for c in timed)
    ties = [c for c in timed if c.tokens_per_s >= best / (1 + advise.TIE)]
    # parameter offload last, as HF's decision tree has it: kept only where the GPU needs the room
    first = min(ties, key=lambda c: (where.get(c.strategy, 99), c.training.grad_checkpointing, -c.tokens_per_s,
                                     c.strategy in OFFLOADS and c.training.offload_params))
    return [first] + sorted((c for c in timed if c is not first), key=lambda c: -c.tokens_per_s) + by_tree, True


def leanest(req: Request) -> Training:
    """The configuration that needs least memory, for the table when nothing fits: micro-batch 1 (or the least
    the global batch allows) with checkpointing where they are open."""
    t = req.training
    micro = _micros(req)[0]
    return replace(t, batch_size=micro, grad_accum=_accum(req, micro) or t.grad_accum,
                   grad_checkpointing=t.grad_checkpointing or "grad_checkpointing" in req.searchable)


def losing(c: Candidate, first: Candidate, timed: bool, order: tuple = ()) -> str:
    """Why a shown configuration is not the recommendation."""
    why = _losing(c, first, timed, order)
    if first.tight and not c.tight and _setting(c) == _setting(first) \
            and advise.saves_nothing(first.per_gpu_bytes, c.per_gpu_bytes):
        # room_pool admitted the first (plain DDP) for needing no more than this one, within the prediction's error
        return (f"{gib(first.per_gpu_bytes - c.per_gpu_bytes)} less per GPU, within the memory prediction's error"
                f" ({advise.MEMORY_TIE:.0%}), and " + why)
    return why


def _losing(c: Candidate, first: Candidate, timed: bool, order: tuple) -> str:
    if c.tight and not first.tight:
        return f"fits only tightly ({gib(c.per_gpu_bytes)} per GPU)"
    if not c.tokens_per_s and timed:
        return f"no step time: {c.untimed}" if c.untimed else "no step time"
    if not timed:
        return _untimed_loss(c, first, order)
    if abs(c.tokens_per_s / first.tokens_per_s - 1) < 0.005:
        return "the same tokens/s: the simpler choice is taken"
    if c.tokens_per_s > first.tokens_per_s:
        return (f"{c.tokens_per_s / first.tokens_per_s - 1:.0%} more tokens/s, within {advise.TIE:.0%}, the"
                " prediction's error: the simpler choice is taken")
    return f"{1 - c.tokens_per_s / first.tokens_per_s:.0%} fewer tokens/s"


def _untimed_loss(c: Candidate, first: Candidate, order: tuple) -> str:
    """Why a configuration ranks after the first when no step time is known: the rule that decided, as rank()
    applies them (the decision tree, the micro-batch, recomputation, parameter offload)."""
    where = {n: i for i, n in enumerate(order)}
    a, b = c.training, first.training
    if where.get(c.strategy, 99) != where.get(first.strategy, 99):
        return f"later in HF's decision tree than {first.strategy}"
    if a.batch_size != b.batch_size:
        return f"a smaller micro-batch ({a.batch_size}, not {b.batch_size})"
    if a.grad_checkpointing != b.grad_checkpointing:
        return "the same micro-batch with recomputation (gradient checkpointing)"
    return "parameters offloaded too" if a.offload_params else "the same configuration, parameters on the GPU"


def best(req: Request, rates, device: str = "cuda", allowed=None) -> tuple[Request, dict | None]:
    """The request with the fastest configuration that fits (nothing left open), and what the search saw
    (None when nothing was open). When nothing fits, the leanest configuration, for the table's shortfalls.
    allowed: only these strategies (deepspeed-config --auto when the plan's pick is not DeepSpeed's)."""
    if req.model is None or req.layout is None:
        return req, None
    req = other_link(req, rates, device, allowed)
    if not req.searchable:
        return req, None
    lay = req.layout
    order = advise.order(lay)
    found = candidates(req, rates, device, allowed)
    ranked, timed = rank(found, order)
    chosen = ranked[0].training if ranked else leanest(req)
    shown, seen = [], set()
    for c in ranked[1:]:   # the best of each strategy and checkpointing setting: the alternatives that matter
        key = (c.strategy, c.training.grad_checkpointing, c.to_dict()["offload_params"])
        if key not in seen and key != (ranked[0].strategy, ranked[0].training.grad_checkpointing,
                                       ranked[0].to_dict()["offload_params"]):
            seen.add(key)
            shown.append({**c.to_dict(), "why": losing(c, ranked[0], timed, order)})
    info = {"searched": sorted(req.searchable), "priced": len(found), "timed": timed,
            "untimed": next((c.untimed for c in ranked if c.untimed), None),   # why some (or all) have no time
            "global_batch": req.global_batch, "chosen": ranked[0].to_dict() if ranked else None,
            "next": shown[:SHOWN]}
    return replace(req, training=chosen, searchable=frozenset()), info


def other_link(req: Request, rates, device: str = "cuda", allowed=None) -> Request:
    """The request with its link note saying what the other link gives (req.other_link: --link not given, a GPU
    model sold both on SXM boards and as PCIe cards): the same search, priced on that link from the datasheet."""
    if not req.other_link:
        return req
    from .plan import link_bandwidth
    lay = req.layout
    if rates != speed.gpu_rates(lay, req.training):   # calibrated here: nothing to price the other box with
        return replace(req, other_link=None)
    gbps, basis = link_bandwidth(req.other_link, lay.gpu_model)
    there = replace(lay, link_type=req.other_link, link_gbps=gbps, link_basis=basis)
    alt = replace(req, layout=there, other_link=None)
    ranked, timed = rank(candidates(alt, speed.gpu_rates(there, req.training), device, allowed), advise.order(there))
    if not ranked:
        what = "nothing fits"
    else:
        c = ranked[0]
        t = c.training
        what = (f"{c.strategy}, micro-batch {t.batch_size} x {t.grad_accum} accumulation"
                + (", gradient checkpointing" if t.grad_checkpointing else "")
                + (f", {c.step_s:.3f} s/step ({c.tokens_per_s:,.0f} tokens/s)" if c.step_s else ", no step time"))
    note = req.defaults.get("link", "").replace("the plan differs", f"the pick is {what}")
    return replace(req, defaults={**req.defaults, "link": note}, other_link=None)
