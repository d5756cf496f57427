"""Topology (+ later a model's memory plan) -> Advice: which distributed strategy to start from. Pure."""
from __future__ import annotations

from dataclasses import asdict, dataclass

from .gpus import supports_bf16
from .topology import Topology, explain
from .units import gib, size


@dataclass(frozen=True)
class Advice:
    """A strategy and the reasons for it, with what ZeRO's traffic costs on the interconnect."""
    strategy: str | None        # "single", "ddp", or a plan strategy name once memory is known
    interconnect: str           # "nvlink", "pcie", "mixed", "unknown", "none"
    zero_traffic_cost: str      # "low", "high", "unknown"
    reasons: tuple[str, ...]
    basis: str = "interconnect"  # "interconnect" or "memory+interconnect"

    def to_dict(self) -> dict:
        d = asdict(self)
        d["reasons"] = list(self.reasons)
        return d


def interconnect(topo: Topology, names: list[str]) -> Advice:
    """First advice from the links alone: DDP tolerates a slow link, ZeRO-DP needs a fast one
    (docs/sources.md#ddp-vs-zero-interconnect)."""
    links = topo.gpu_links(names)
    if len(names) < 2:
        return Advice("single", "none", "unknown", ("one GPU: no inter-GPU traffic; DeepSpeed helps only if the"
                                                    " model does not fit (CPU/NVMe offload)",))
    if any(l.type is None for l in links):
        return Advice(None, "unknown", "unknown", ("link types unknown: give `nvidia-smi topo -m` to get advice",))
    weakest = topo.weakest(names)
    nv = [l for l in links if l.nvlinks]
    if len(nv) == len(links):
        return Advice("ddp", "nvlink", "low", (
            f"every pair of the {len(names)} GPUs is joined by NVLink (weakest {weakest.type}): ZeRO-1/2/3 each"
            " move about 1.5x the elements DDP's all-reduce moves (DeepSpeed all-reduces gradient buckets and"
            " gathers parameters), which is cheap here, so shard (ZeRO-2/3) freely when memory asks for it;",
            "DDP moves the fewest elements while the model, its gradients and optimizer states fit on one GPU;"
            " in bytes a 16-bit ZeRO stage can move fewer than DDP's fp32 gradients: with --model the plan prices"
            " each, and its recommendation stands over this one."))
    return Advice("ddp", "mixed" if nv else "pcie", "high", (
        f"the weakest link is {weakest.a}-{weakest.b} {weakest.type} ({explain(weakest.type)}): every all-reduce"
        " waits for it;",
        "DDP and ZeRO-1 sync gradients once per step (gradient accumulation then cuts the traffic); ZeRO-2"
        " reduces on every micro-step and ZeRO-3 gathers every module's parameters before it runs (each about"
        " 1.5x DDP's elements), so prefer DDP and, if memory is short, ZeRO-1/2 or CPU offload before ZeRO-3."))


ORDER = {
    "one": ("single", "zero2_offload_cpu", "zero3_offload_cpu", "fsdp_offload_cpu", "zero3_offload_nvme"),
    # With NVLink everywhere ZeRO-3's traffic is cheap, so it comes before offloading to the host.
    "fast": ("ddp", "zero1", "zero2", "zero3", "fsdp", "zero2_offload_cpu", "zero3_offload_cpu", "fsdp_offload_cpu",
             "zero3_offload_nvme"),
    # On PCIe/SYS prefer what communicates less: ZeRO-2 + CPU offload before ZeRO-3's 1.5x traffic.
    "slow": ("ddp", "zero1", "zero2", "zero2_offload_cpu", "zero3", "fsdp", "zero3_offload_cpu", "fsdp_offload_cpu",
             "zero3_offload_nvme"),
}
WHAT = {
    "single": "one GPU, no sharding", "ddp": "plain data parallel, no sharding (PyTorch DDP)",
    "zero1": "DeepSpeed ZeRO-1 (optimizer states sharded)",
    "zero2": "DeepSpeed ZeRO-2 (optimizer states and gradients sharded)",
    "zero2_offload_cpu": "DeepSpeed ZeRO-2 with the optimizer offloaded to CPU",
    "zero3": "DeepSpeed ZeRO-3 (parameters, gradients and optimizer states sharded)",
    "fsdp": "PyTorch FSDP, full shard (parameters, gradients and optimizer states sharded; no DeepSpeed)",
    "zero3_offload_cpu": "DeepSpeed ZeRO-3 with parameters and optimizer offloaded to CPU",
    "zero3_offload_nvme": "DeepSpeed ZeRO-3 with parameters and optimizer offloaded to NVMe",
    "fsdp_offload_cpu": "PyTorch FSDP, full shard, with parameters, gradients and optimizer steps on the CPU"
                        " (CPUOffload(offload_params=True))",
}


def fast_link(layout) -> bool:
    """NVLink between every pair of one node's GPUs: ZeRO-3's traffic is cheap there."""
    from .topology import kind_of
    return layout.gpus > 1 and layout.nodes == 1 and kind_of(layout.link_type) == "NV"


def order(layout) -> tuple:
    """HF's decision tree for this layout (ORDER)."""
    return ORDER["one"] if layout.gpus == 1 else ORDER["fast" if fast_link(layout) else "slow"]


def _levers(training) -> str:
    """What could still make it fit, leaving out what is already done."""
    out = ["add GPUs or memory"]
    if training.batch_size > 1:
        out.append("lower --batch-size")
    out.append("lower --seq-len")
    if not training.grad_checkpointing:
        out.append("use --grad-checkpointing")
    if training.optimizer == "adamw":
        out.append("--optimizer adamw-8bit")
    if training.loss == "hf":
        out.append("--loss chunked (Liger's fused linear cross-entropy)")
    return ", ".join(out) + ", or give more --cpu-mem/--nvme-free."


def nothing_fits(model, layout, training, strategies) -> Advice:
    """No strategy fits: say by how much the leanest misses, so the table that follows can be read."""
    # Nearest: the least GPU memory missing (the hardest to add), then the least host RAM and NVMe missing.
    lean = min(strategies, key=lambda s: (not s.short_bytes, s.short_bytes.get("gpu", 0),
                                          s.short_bytes.get("cpu", 0) + s.short_bytes.get("nvme", 0)))
    short = " and ".join(f"{size(v)} {'per GPU' if k == 'gpu' else 'of CPU RAM' if k == 'cpu' else 'on NVMe'}"
                         for k, v in lean.short_bytes.items()) or lean.why_not[0]
    return Advice(None, "none" if layout.gpus == 1 else "unknown", "unknown", (
        f"{model.name} ({model.params / 1e9:.2f}B params) fits no strategy on {layout.gpus} x"
        f" {gib(layout.gpu_mem_bytes)}: the nearest, {lean.name}, is short by {short}.",
        _levers(training)[0].upper() + _levers(training)[1:]),
        basis="memory+interconnect")


# Tensor Cores run a 16-bit matmul at full rate when its dimensions are multiples of 8 (of 64 for A100's best
# case): https://docs.nvidia.com/deeplearning/performance/dl-performance-matrix-multiplication/index.html
# In a transformer those are the hidden, MLP and vocabulary sizes and the tokens of a micro-batch, not the
# batch size alone.
ALIGN = 8


def alignment(model, training) -> list[str]:
    """Matmul dimensions of this model and batch that are not multiples of 8 in 16-bit training, with the fix."""
    if training.precision == "fp32":
        return []
    out = []
    if model.vocab_size and model.vocab_size % ALIGN:
        out.append(f"Vocabulary {model.vocab_size} is not a multiple of {ALIGN}: the LM head's matmul misses Tensor"
                   " Cores' full rate; model.resize_token_embeddings(len(tokenizer), pad_to_multiple_of=64) pads it.")
    odd = [f"{name} {v}" for name, v in (("hidden size", model.hidden_size), ("MLP size", model.intermediate_size))
           if v and v % ALIGN]
    tokens = training.batch_size * training.seq_len
    if tokens % ALIGN:
        odd.append(f"tokens per micro-batch {training.batch_size} x {training.seq_len} = {tokens}")
    if odd:
        out.append(f"{', '.join(odd)}: not a multiple of {ALIGN}, so those matmuls miss Tensor Cores' full rate.")
    return out


def traffic_words(chosen, by_name, model, layout, training, fast_link: bool, timed: bool = False) -> list[str]:
    """What the chosen strategy sends and what it costs, from the same figures as the table."""
    from dataclasses import replace

    from .health import expected_transport
    link = (f"the weakest link, {layout.link_type} ({layout.link_gbps:g} GB/s per direction, {layout.link_basis})"
            if layout.link_gbps else None)
    if link and expected_transport(layout.link_type, {}) != "P2P":   # NCCL's own rule: host memory there
        link = (f"host memory (SHM: NCCL takes no P2P over {layout.link_type} by default), a quarter of its PCIe"
                " link")
    if layout.nodes > 1:
        link = f"the network between nodes ({layout.inter_node_gbps:g} GB/s per direction, --inter-node-gbps)"
    t = chosen.comm_seconds_per_step
    sent = f"Traffic: {gib(chosen.comm_bytes_per_step)} sent per GPU per step"
    sent += f", about {t:.3f} s over {link} (latency and bus efficiency included)." if t is not None and link else (
        ". The link between the GPUs is unknown, so no time is estimated: give --link (e.g. NV12, PHB).")
    out = [sent]
    ddp = by_name.get("ddp")
    if ddp is not None and chosen.name != "ddp" and ddp.comm_bytes_per_step:
        ratio = chosen.comm_bytes_per_step / ddp.comm_bytes_per_step
        how = ("ZeRO-3 adds the parameter all-gathers of forward and backward to the gradient reduce-scatter"
               if chosen.name.startswith("zero3") else
               "FSDP all-gathers each block's parameters before its forward and its backward and reduce-scatters"
               " the gradients" if chosen.name.startswith("fsdp") else
               "ZeRO-1/2 all-reduce gradients (DeepSpeed's bucket all-reduce) and all-gather the updated parameters,"
               f" in {'16-bit' if training.value_bytes == 2 else 'fp32'} where DDP all-reduces fp32 gradients")
        out.append(f"That is {ratio:.2f}x DDP's {gib(ddp.comm_bytes_per_step)}: {how}.")
    if layout.link_type and not fast_link and layout.nodes == 1 and not timed:
        z3, z2 = by_name.get("zero3"), by_name.get("zero2_offload_cpu")
        if z3 and z2 and z3.comm_bytes_per_step > z2.comm_bytes_per_step:
            out.append(f"On {layout.link_type} the strategy that communicates less wins: ZeRO-3's"
                       f" {gib(z3.comm_bytes_per_step)} per step ranks it after ZeRO-2 with CPU offload.")
        elif z3:  # as many bytes, but ZeRO-3's gathers stand in the critical path, one per module
            out.append(f"On {layout.link_type} HF's decision tree puts ZeRO-2 with CPU offload before ZeRO-3: ZeRO-3"
                       f" gathers each module's parameters before it runs, in forward and in backward"
                       f" ({gib(z3.comm_bytes_per_step)} per step, one collective per module).")
    # Accumulation helps only where the sync happens once per optimizer step (DDP's no_sync, ZeRO-1): compare
    # the traffic per sample with twice the accumulation, from the same arithmetic as the table.
    more = replace(training, grad_accum=2 * training.grad_accum)
    from .plan import comm_bytes  # the plan's arithmetic: not loaded for link-only advice (inspect stays fast)
    now = comm_bytes(chosen.name, model, layout, training) / training.grad_accum
    then = comm_bytes(chosen.name, model, layout, more) / more.grad_accum
    if now and then <= 0.6 * now and (t is None or t > 0.01):
        out.append(f"Gradient accumulation cuts it: {chosen.name} syncs once per optimizer step, so"
                   f" --grad-accum {more.grad_accum} sends {then / now:.0%} as much per sample.")
    elif now and chosen.name.startswith(("zero2", "zero3", "fsdp")):
        out.append(f"Gradient accumulation does not cut it much: {chosen.name} communicates on every micro-step.")
    return out


# Step times closer than this are within the prediction's error (benchmarks/time_accuracy.py): the simpler
# strategy, earlier in ORDER, is recommended among them.
TIE = 0.05


# Memory totals closer than this are within the memory prediction's error (the plan holds within 2.0 % of the
# measured allocated peak on an H100 and on CPU: docs/plan.md's Accuracy): two plans this close fit or fail alike.
MEMORY_TIE = 0.02
PLAIN = ("single", "ddp")   # neither shards nor offloads: what sharding or offload would be chosen over


def saves_nothing(tight: float, roomy: float) -> bool:
    """The roomy plan's saving on the tight one's bytes is within the memory prediction's error."""
    return tight <= roomy * (1 + MEMORY_TIE)


def room_pool(items: list, total, rank, name, setting=lambda x: None) -> list:
    """What the answer chooses among: those with the 10 % room for fragmentation (not tight); every one when none
    has room. A tight plain DDP (or one-GPU) plan joins them when the one they would choose (rank(items)[0])
    saves at most MEMORY_TIE on it at the same setting (setting(item): the search's micro-batch and
    checkpointing; a larger micro-batch's total says nothing of what sharding saves): sharding or offload is worth
    its traffic and machinery for the memory it saves, and a saving within the prediction's error is none. One
    rule for plan's table and its search (total(item): bytes per GPU; name(item): its strategy)."""
    room = [x for x in items if not x.tight]
    if not room:
        return list(items)
    first = rank(room)[0]
    return room + [x for x in items if x.tight and name(x) in PLAIN and name(first) not in PLAIN
                   and setting(x) == setting(first) and saves_nothing(total(x), total(first))]


def _timed(times: dict, name: str) -> bool:
    return times.get(name) is not None and times[name].step_s is not None


def _by_speed(names: list[str], times: dict, order: tuple) -> list[str]:
    """Fastest predicted first (ties within TIE in `order`), then those without a step time in `order`."""
    timed = [n for n in names if _timed(times, n)]
    fastest = min((times[n].step_s for n in timed), default=0)
    ties = [n for n in order if n in timed and times[n].step_s <= fastest * (1 + TIE)]
    return ties + sorted((n for n in timed if n not in ties), key=lambda n: times[n].step_s) + \
        [n for n in order if n in names and n not in timed]


def fitting(strategies, times: dict | None = None, order: tuple = ()) -> list[str]:
    """The strategies that fit, as room_pool admits them (ranked by speed, else by `order`)."""
    fit = {s.name: s for s in strategies if s.fits}
    pool = room_pool(list(fit.values()), lambda s: s.per_gpu_bytes["total"],
                     lambda ss: [fit[n] for n in _by_speed([s.name for s in ss], times or {}, order)],
                     lambda s: s.name)
    return [s.name for s in pool]


def by_speed(strategies, times: dict, order: tuple) -> list[str] | None:
    """The strategies that fit, fastest predicted first (ties within TIE in `order`), then those without a step
    time (an offload row whose host's cores were not given) in `order`; None when none has a step time."""
    fit = fitting(strategies, times, order)
    return _by_speed(fit, times, order) if any(_timed(times, n) for n in fit) else None


def run_words(seconds: float) -> str:
    """A time in the unit that reads best, written one way everywhere (a step, a whole run; plan's tables and
    deepspeed-config's line): 0.432 s, 7.2 min, 2.0 h, 13.5 d."""
    return (f"{seconds:.3f} s" if seconds < 100 else f"{seconds / 60:.1f} min" if seconds < 6000 else
            f"{seconds / 3600:.1f} h" if seconds < 172800 else f"{seconds / 86400:.1f} d")


def speed_words(ranked: list[str], times: dict) -> str:
    """The chosen strategy's predicted step, and by how much it beats the next that fits (with a step time)."""
    first = times[ranked[0]]
    out = f"Predicted: {first.step_s:.3f} s/step ({first.tokens_per_s:,.0f} tokens/s)"
    if first.run_s is not None:
        out += f", {run_words(first.run_s)} for the whole run"
    ranked = [n for n in ranked if _timed(times, n)]
    if len(ranked) > 1:
        nxt = times[ranked[1]]
        gain = nxt.step_s / first.step_s - 1
        faster = f"{gain:.0%} faster than" if gain < 1 else f"{gain + 1:.1f}x as fast as"
        out += (f"; {faster} {ranked[1]} ({nxt.step_s:.3f} s/step)" if gain > TIE else
                f"; {ranked[1]} is within {TIE:.0%} ({nxt.step_s:.3f} s/step), the prediction's error, so the one"
                " HF's decision tree reaches first is chosen")
    return out + "."


def untimed_words(names: list[str], layout, times: dict) -> str:
    """Why these strategies have no step time, in the words of what to give."""
    if any("offload" in n for n in names) and layout.cpu_cores is None:
        return "the CPU cores per node are not given, and DeepSpeed's CPU Adam runs on them (--cpu-cores N)"
    return times[names[0]].basis


def why(s, layout) -> str:
    """Why a strategy was passed over: what does not fit, or that it fits only into the fragmentation margin."""
    if s.why_not:
        return " and ".join(s.why_not)
    return (f"fits only tightly ({gib(s.per_gpu_bytes['total'])} of {gib(layout.gpu_mem_bytes)},"
            f" {s.per_gpu_bytes['total'] / layout.gpu_mem_bytes:.0%})")


def _room(chosen, layout, roomy=()) -> list[str]:
    """What the chosen strategy's fit rests on: the fragmentation margin (and what has it: `roomy`, those that fit
    with room, as fitting() admits them), the target's disk."""
    from .plan import HEADROOM
    out = []
    if chosen.tight:
        share = chosen.per_gpu_bytes["total"] / layout.gpu_mem_bytes
        near = max(roomy, key=lambda s: s.per_gpu_bytes["total"], default=None)
        out.append(f"Tight: {gib(chosen.per_gpu_bytes['total'])} of {gib(layout.gpu_mem_bytes)} ({share:.0%}),"
                   f" into the {1 - HEADROOM:.0%} kept for the allocator's fragmentation: it may run"
                   " (PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True helps) or stop out of memory; "
                   + (f"{near.name} fits with that room at {gib(near.per_gpu_bytes['total'])}, within the memory"
                      f" prediction's error ({MEMORY_TIE:.0%}) of it: it would fail alike, so the one that"
                      " neither shards nor offloads is chosen." if near else "nothing with that room fits."))
    if chosen.condition:
        out.append(f"Fits only with {chosen.condition}: the machine planned for is not this one, and the options do"
                   " not say what it has.")
    return out


def _host_words(chosen, layout) -> list[str]:
    """What the chosen strategy asks of each node's host: loading the weights, CPU Adam's threads."""
    out = []
    if "offload" not in chosen.name and layout.cpu_mem_bytes and chosen.cpu_bytes > layout.cpu_mem_bytes:
        init = ("FSDP's sync_module_states with the model built on the meta device on all but rank 0"
                if chosen.name.startswith("fsdp") else "deepspeed.zero.Init")
        out.append(f"Loading: every rank first builds the weights on the host ({gib(chosen.cpu_bytes)} with"
                   f" DeepSpeed's 1.5x margin, of {gib(layout.cpu_mem_bytes)} per node): load with"
                   f" low_cpu_mem_usage=True or {init}, or from sharded checkpoints.")
    if "offload" in chosen.name and layout.gpus_per_node > 1:
        cores = layout.cpu_cores
        out.append("CPU Adam runs on the node's cores" + (f" ({cores} assumed)" if cores else "")
                   + " only if each rank may use them: torchrun sets OMP_NUM_THREADS=1 for several processes per"
                   " node, so export OMP_NUM_THREADS="
                   + (f"{max(1, cores // layout.gpus_per_node)} (cores / ranks)" if cores else
                      f"<cores per node / {layout.gpus_per_node}>")
                   + " before it, or launch with deepspeed --bind_cores_to_rank.")
    return out


def from_plan(model, layout, training, strategies, global_batch: int | None = None,
              times: dict | None = None, pick: str | None = None, tried: frozenset = frozenset()) -> Advice:
    """The fastest strategy that fits, with its reasons: by predicted step time (gputopo.speed) when every one
    that fits has one, else HF's DeepSpeed decision tree (docs/sources.md#deepspeed-decision-tree) ordered by
    the link rule (docs/sources.md#ddp-vs-zero-interconnect)."""
    from .plan import HEADROOM
    by_name = {s.name: s for s in strategies}
    fast, sequence = fast_link(layout), order(layout)
    ranked = by_speed(strategies, times or {}, sequence)
    if ranked and pick in ranked:   # gputopo.search chose it over every configuration, this one's rivals included
        ranked = [pick] + [n for n in ranked if n != pick]
    if ranked and not _timed(times, ranked[0]):   # only untimed ones at the search's pick: the decision tree's
        ranked = None
    if ranked:  # what is faster first, then the rest in the usual order, for "faster choices do not fit"
        sequence = tuple(n for n in sequence if n not in ranked and times[n].step_s is not None
                         and times[n].step_s < times[ranked[0]].step_s) + tuple(ranked)
    fit = fitting(strategies, times, sequence)
    chosen = next((by_name[n] for n in sequence if n in fit), None)
    if chosen is None:
        return nothing_fits(model, layout, training, strategies)
    what = WHAT[chosen.name] if not chosen.name.startswith("zero3_offload") or training.offload_params else \
        f"DeepSpeed ZeRO-3 with the optimizer offloaded to {chosen.name.rsplit('_', 1)[1].upper()} (parameters on" \
        " the GPU)"
    reasons = [f"{what}: {gib(chosen.per_gpu_bytes['total'])} per GPU of {gib(layout.gpu_mem_bytes)}"
               f" (weights {gib(chosen.per_gpu_bytes['weights'])}, gradients {gib(chosen.per_gpu_bytes['gradients'])},"
               f" optimizer {gib(chosen.per_gpu_bytes['optimizer'])}; at the step's peak, {chosen.peak['phase']}:"
               f" activations {gib(chosen.per_gpu_bytes['activations'])},"
               f" temporaries {gib(chosen.per_gpu_bytes['temporaries'])})."]
    skipped = [n for n in sequence[:sequence.index(chosen.name)] if n in by_name]
    if ranked:
        reasons.append(speed_words(ranked, times))
        untimed = [n for n in ranked if not _timed(times, n)]
        if untimed:
            reasons.append(f"No step time for {', '.join(untimed)}: {untimed_words(untimed, layout, times)}; ranked"
                           " after every strategy with one.")
    if skipped:
        tight = " or fit only tightly" if any(by_name[n].tight for n in skipped) else ""
        head = f"Faster predicted, but do not fit{tight}: " if ranked else f"Faster choices do not fit{tight}: "
        reasons.append(head + "; ".join(f"{n} {why(by_name[n], layout)}" for n in skipped) + ".")
    reasons += _room(chosen, layout, [by_name[n] for n in fit if not by_name[n].tight])
    if layout.gpus == 1 and chosen.name == "single":
        reasons.append(("The model fits one GPU, but only tightly (above)" if chosen.tight else
                        "The model fits one GPU with room for its batch: no ZeRO stage or offload is needed (HF's"
                        " DeepSpeed decision tree)")
                       + "; plain PyTorch trains it as planned, or DeepSpeed at ZeRO stage 0"
                       " (what `deepspeed-config --auto` writes for a DeepSpeed launch).")
    elif layout.gpus > 1:
        reasons += traffic_words(chosen, by_name, model, layout, training, fast, bool(ranked))
    reasons += _host_words(chosen, layout)
    ddp = by_name.get("ddp") or by_name.get("single")
    if ddp is not None and not ddp.fits and chosen.name != ddp.name and training.optimizer == "adamw":
        slim = ddp.per_gpu_bytes["total"] - ddp.per_gpu_bytes["optimizer"] + 2 * model.params
        if slim <= HEADROOM * layout.gpu_mem_bytes:
            reasons.append("Optimizer states are what does not fit: with 8-bit Adam"
                           " (--optimizer adamw-8bit, 2 B/param)"
                           f" or Adafactor, {ddp.name} would need {gib(slim)} per GPU.")
    if not training.grad_checkpointing and not training.selective and "grad_checkpointing" not in tried \
            and chosen.per_gpu_bytes["activations"] > chosen.per_gpu_bytes["total"] / 3:
        reasons.append("Activations are a large share: --grad-checkpointing trades about 30 % more compute"
                       " for most of them.")
    reasons += alignment(model, training)
    amp = supports_bf16(layout.gpu_model)
    if training.precision == "fp16" and amp:
        reasons.append("bf16 is available on this GPU: same memory as fp16, no loss scaling, no overflow.")
    if training.precision == "fp32" and amp and not training.tf32:
        reasons.append("fp32 on Ampere or newer: TF32 matmuls (torch.backends.cuda.matmul.allow_tf32, the HF"
                       " Trainer's --tf32) run it several times faster: --precision tf32 plans that.")
    if global_batch:  # exact: gputopo.request refuses a global batch that does not divide
        reasons.append(f"Global batch {global_batch}: {training.batch_size} per GPU x {layout.gpus} GPUs x"
                       f" {training.grad_accum} accumulation steps.")
    unknown = layout.gpus > 1 and layout.nodes == 1 and layout.link_type is None
    return Advice(chosen.name,
                  "none" if layout.gpus == 1 else "unknown" if unknown else ("nvlink" if fast else "pcie"),
                  "low" if fast else ("high" if layout.gpus > 1 and not unknown else "unknown"), tuple(reasons),
                  basis="memory+interconnect")
