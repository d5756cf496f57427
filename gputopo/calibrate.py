"""This machine's rates for gputopo.speed, measured: the model's own matmul shapes, memory bandwidth as
elementwise kernels reach it, and the optimizer's parameters per second; the all-reduce bus bandwidth and
latency come from an all-reduce sweep (gputopo.bench's, or `allreduce_fit` on any sweep).

The parent never imports torch: `python -m gputopo.calibrate REQUEST_JSON` runs in a child with the threads
the training processes will have (OMP_NUM_THREADS), and prints one result line.
"""
from __future__ import annotations

import itertools
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from . import children, dsops
from .build import build_model
from .errors import BadInput, BenchmarkFailed

RESULT = "GPUTOPO_CALIBRATE "
SECONDS = 3.0           # the whole calibration's budget, shared among the shapes


COLD_BYTES = 2 ** 27    # tensors cycled through per elementwise size: more than a CPU's last-level cache
LARGEST = 2 ** 24       # elementwise rates level off beyond a few caches' worth: bigger ops are timed at this size


def request(model, training, threads: int | None = None, device: str = "cpu", cpu_adam: bool = False,
            half_weights: bool = False, sweep: list[int] | None = None, zero3: bool = False,
            sharded: bool = False, deepspeed: dict | None = None, deepspeed_budget: float | None = None,
            budget: float | None = None) -> dict:
    """What the child times: every distinct matmul shape of the step in the compute dtype, elementwise
    kernels at the sizes of the step's elementwise ops (a CPU's caches make small ones faster), and, when
    transformers can build the model, its first block and its head at the step's shape. half_weights:
    the weights themselves are 16-bit (DeepSpeed's bf16), else mixed precision is torch.autocast. zero3:
    also DeepSpeed's own cost per module at stage 3 (its hooks and gathers), among the copies (True, or
    "if-built": only when no op has to be built first). sharded: also what a pass of ZeRO's reduce-scatter
    and all-gather costs against an all-reduce's, among the copies. deepspeed: {strategy: DeepSpeed config}, each
    run on the model cut to 1 and to sample_blocks blocks among the copies (speed.sampled_extra); with
    deepspeed_budget (seconds), only those whose estimated time fits and whose ops are built already. budget:
    seconds for the whole calibration (plan --calibrate-seconds): what does not fit in them is skipped, named.
    need_bytes: each copy's memory for the larger sample at each size it may be cut to (run picks one)."""
    from .errors import BadInput
    from .models import hf_config
    try:
        config = hf_config(model)
    except BadInput:   # not a causal LM gputopo can rebuild: the op-by-op model alone
        config = None
    from .ops import attention_shapes, elementwise_ops, key, training_matmuls
    from .speed import sample_blocks, sample_spec
    # a fused attention kernel (SDPA on a GPU) is timed whole at the step's shape, not as its matmuls
    fused = attention_shapes(model, training, device)
    shapes = sorted({key(M, N, K) for _, M, N, K in training_matmuls(model, training, training.attention, device)}
                    - fused)
    # each copy holds the larger sample's weights, gradients and Adam's states, and its step's peak (gputopo.memory)
    from .memory import peak

    def need(blocks: int) -> int:
        sample = sample_spec(model, blocks)
        return int(16 * sample.params + peak(sample, training, training.attention, 4 * sample.params,
                                             device)["bytes"] + RUNTIME_BYTES)
    most = min(model.layers, sample_blocks(model))
    block, head = elementwise_ops(model, training, training.attention, device)
    # (an op of kernels only, no bytes — autocast's weight casts, whose bytes are speed.cast_bytes — has no size)
    sizes = sorted({min(int(op[1]), LARGEST) for op in block + head if op[1]} | {min(model.params, LARGEST)})
    return {"shapes": shapes, "sizes": sizes, "precision": training.precision, "tf32": training.tf32,
            "optimizer": training.optimizer,
            "optimizer_kwargs": training.optimizer_kwargs(),
            "threads": threads, "cpu_adam": cpu_adam, "config": config, "batch_size": training.batch_size,
            "seq_len": training.seq_len, "attention": training.attention, "layers": model.layers,
            "grad_checkpointing": training.grad_checkpointing, "half_weights": half_weights, "sweep": sweep,
            "zero3": zero3, "sharded": sharded, "sample_blocks": most, "deepspeed": deepspeed,
            "deepspeed_budget": deepspeed_budget, "budget": budget,
            "need_bytes": {str(n): need(n) for n in range(min(2, most), most + 1)},
            "attention_shape": _attention_shape(model, training) if fused else None, "device": device}


def _attention_shape(model, training) -> list:
    """[batch, heads, KV heads, sequence, head dim, dropout] of the model's attention at the step's shape."""
    from .memory import shape
    x = shape(model, training)
    return [x.b, x.a, x.kv, x.s, x.d, model.attn_dropout or 0.0]


RUNTIME_BYTES = 2 ** 30   # torch, transformers and the interpreter in each copy, besides the tensors


GRACE = 60.0             # seconds past --calibrate-seconds before the copies are stopped: interpreter starts, the
                         # step under way when the budget ran out
PROGRESS = "GPUTOPO_CALIBRATE_PROGRESS "   # a line the first copy prints on stderr as each part starts


def run(req: dict, copies: int = 1, timeout: float | None = None, env: dict | None = None, say=None) -> dict:
    """Calibrate in `copies` children at once, as many as the training will run on this machine, so the
    rates are those the processes reach while sharing its cores, caches and memory; averaged over them.
    Each child gets its LOCAL_RANK: on GPUs each times its own device, as each training process would.
    The sample is cut to as many blocks as fit, all copies, in 90 % of this machine's free memory (a 4 x 1024
    gpt2 sample took 6.4-8 GB a copy and the kernel's OOM killer ended them on a busier machine; estimated at
    9.3 GiB by gputopo.memory), and refused when not even two blocks do. With req["budget"] the copies work to
    its deadline (what does not fit is skipped and named) and are stopped GRACE seconds past it. `say` gets a line
    at the start, one as each part starts, one at least every 15 s while a part runs (children.Heartbeat) and one at
    the end."""
    from .units import gib
    req, cut = sized(req, copies)
    budget = req.get("budget")
    timeout = timeout or (budget + GRACE if budget else 600.0)
    if say:
        say(f"calibrating: {copies} process(es) time the model cut to 1 and {req.get('sample_blocks')} blocks"
            f"{cut} at {req.get('batch_size')} x {req.get('seq_len')} tokens, its matmuls, elementwise kernels and"
            " optimizer" + (", an all-reduce sweep" if req.get("sweep") else "")
            + (", DeepSpeed's strategies" if req.get("deepspeed") else "")
            + (f"; within {budget:g} s (--calibrate-seconds)" if budget else "")
            + f", about {gib(copies * req.get('need_bytes', 0))} of memory")
    started, before = time.monotonic(), cpu_seconds()
    env = dsops.deepspeed_env(env or os.environ, say)
    if req.get("threads"):
        env["OMP_NUM_THREADS"] = str(req["threads"])
    barrier = tempfile.TemporaryDirectory(prefix="gputopo-calibrate-")
    cmd = [sys.executable, "-m", "gputopo.calibrate",
           json.dumps({**req, "barrier": barrier.name, "copies": copies, "port": free_port(),
                       "deadline": time.time() + budget if budget else None})]
    env.setdefault("LOCAL_SIZE", str(copies))   # as gputopo.worker.deepspeed_local_size sets it for training
    # issue 43: a part (the model's sample, DeepSpeed's samples and the ops they build) runs for minutes on a CPU;
    # between the first copy's lines a heartbeat says which part is still running and for how long
    part = ["starting (Python, torch)"]
    beat = children.Heartbeat(lambda s: f"calibrating: still {part[0]} ({s:.0f} s so far)", say) if say else None

    def heard_part(line):
        part[0] = line.removeprefix("calibrating: ")
        beat.said()
        say(line)
    procs = [children.spawn(cmd, env={**env, "LOCAL_RANK": str(i), "RANK": str(i)}, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True) for i in range(copies)]
    heard = [_listen(p, heard_part if say and i == 0 else None) for i, p in enumerate(procs)]
    results = []
    try:
        if beat:
            beat.start()
        for proc, (out, err, readers) in zip(procs, heard):
            proc.wait(timeout=max(0.1, started + timeout - time.monotonic()))
            for r in readers:
                r.join()
            lines = result_lines("".join(out), RESULT)
            if not lines:   # a result printed is whole: an abort after it is the interpreter's exit
                last = ("".join(err).strip().splitlines() or ["no output"])[-1]
                if proc.returncode == -9:   # SIGKILL: what the kernel's OOM killer sends
                    last = (f"killed by SIGKILL, most likely the kernel's out-of-memory killer (about"
                            f" {gib(req.get('need_bytes', 0))} a copy was expected); lower --batch-size/--seq-len")
                raise BenchmarkFailed(f"calibration failed (exit {proc.returncode}): {last}")
            results.append(lines[0])
    except subprocess.TimeoutExpired:
        raise BenchmarkFailed(f"calibration ran {timeout:.0f} s" + (f", past --calibrate-seconds {budget:g}" if budget
                                                                   else "") + ", and was stopped") from None
    finally:   # Ctrl-C, SIGTERM, SIGHUP (gputopo.children), a failure: no copy outlives the calibration
        if beat:
            beat.stop()
        for proc in procs:
            if proc.poll() is None:
                children.end(proc, grace=2)
        barrier.cleanup()
    load = busy_share(before, cpu_seconds(), time.monotonic() - started)
    if say:
        say(f"calibrated in {time.monotonic() - started:.0f} s" + (f"; {load_words(load)}" if load else ""))
    # the model's own blocks (how far a sample is carried) and how busy the machine was meanwhile
    return {**average(results), "layers": req.get("layers"), "load": load}


# A calibration is flagged when, while it ran, other processes used more than this share of the cores, or the
# hypervisor stole more: it then timed a busier machine than the training will meet (issue 35: a run taken
# beside another job predicted 530 ms for a 272 ms step, and nothing said so).
BUSY_SHARE, STEAL_SHARE = 0.15, 0.05
# A sample whose repeated steps spread (10th to 90th percentile) wider than the 15 % the CPU twin's predictions are
# held to (docs/sources.md#step-time-accuracy) cannot promise them: flagged too. On 2026-11-26's VM every run
# whose DeepSpeed prediction missed by more than 15 % (9 of 24) had a sample spreading 20-52 %; 25 % left four
# of them unflagged.
SPREAD = 0.15


def cpu_seconds() -> dict | None:
    """This machine's CPU seconds so far (/proc/stat: busy and stolen), and this process's and its waited-for
    children's own (getrusage); None where /proc/stat is not there."""
    import resource
    try:
        fields = [int(x) for x in Path("/proc/stat").read_text().split("\n")[0].split()[1:]]
    except (OSError, ValueError, IndexError):
        return None
    tick = os.sysconf("SC_CLK_TCK")
    own = sum(getattr(resource.getrusage(who), f) for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)
              for f in ("ru_utime", "ru_stime"))
    busy = sum(fields[i] for i in (0, 1, 2, 5, 6) if i < len(fields)) / tick   # user nice system irq softirq
    return {"busy": busy, "steal": (fields[7] if len(fields) > 7 else 0) / tick, "own": own}


def busy_share(before: dict | None, after: dict | None, wall: float) -> dict | None:
    """Other processes' share of the cores and the hypervisor's (steal) while the calibration ran."""
    if not before or not after or wall <= 0:
        return None
    cores = os.cpu_count() or 1
    others = max(0.0, (after["busy"] - before["busy"]) - (after["own"] - before["own"]))
    return {"others": others / (wall * cores), "steal": (after["steal"] - before["steal"]) / (wall * cores),
            "seconds": wall}


def spread_words(sample: dict) -> str:
    """A sample's spread in words ("" for a sample that kept none), flagged past SPREAD."""
    if "spread" not in sample:
        return ""
    return (f"; the sample's steps spread {sample['spread']:.0%} (10th-90th percentile)"
            + (f": NOT TRUSTED, wider than the {SPREAD:.0%} the prediction is held to (the machine's pace changed"
               " while it ran); run it again on a quiet machine" if sample["spread"] > SPREAD else ""))


def load_words(load: dict) -> str:
    """The load in words, and whether the calibration can be trusted for it."""
    said = f"other processes used {load['others']:.0%} of the cores meanwhile, {load['steal']:.0%} stolen"
    if load["others"] > BUSY_SHARE or load["steal"] > STEAL_SHARE:
        return (f"NOT TRUSTED: {said}: it timed a busier machine than the training may meet; run it again on a"
                " quiet machine")
    return said


def sized(req: dict, copies: int) -> tuple[dict, str]:
    """(req, a note): the larger sample cut to as many blocks as fit, all copies, in 90 % of this machine's free
    memory (request's need_bytes per size): on a GPU each copy's in its own GPU's (issue 41: the host's RAM was
    judged for a step that runs on the GPU); BadInput when not even the smallest does."""
    import psutil

    from .errors import BadInput
    from .units import gib
    needs = req.get("need_bytes") or {}
    if not needs:
        return req, ""
    gpu = _gpu_free() if req.get("device") == "cuda" else None
    avail, each, where = ((gpu, 1, "its GPU's") if gpu else
                          (psutil.virtual_memory().available, copies, "this machine's"))
    fits = [int(n) for n, b in needs.items() if each * b <= 0.9 * avail]
    if not fits:
        least = min(needs, key=int)
        raise BadInput(f"calibration: {each} cop{'y' if each == 1 else 'ies'} of the model cut to {least} blocks at"
                       f" {req.get('batch_size')} x {req.get('seq_len')} tokens need about"
                       f" {gib(each * needs[least])}, and {where} memory has {gib(avail)} free: lower"
                       " --batch-size/--seq-len, or plan without --calibrate")
    blocks = max(fits)
    cut = (f" (cut from {req['sample_blocks']} to fit in {where} {gib(avail)} free)"
           if blocks < req["sample_blocks"] else "")
    return {**req, "sample_blocks": blocks, "need_bytes": needs[str(blocks)]}, cut


def _gpu_free() -> int | None:
    """Free bytes of the GPU the first copy computes on (NVML), None when NVML cannot say."""
    from . import probe
    from .errors import NvmlUnavailable
    try:
        return (probe.cuda_device() or {}).get("memory_free_bytes")
    except NvmlUnavailable:
        return None


def _listen(proc, say) -> tuple[list, list, list]:
    """(stdout chunks, stderr lines, reader threads) of a child, read as it writes them (a pipe left unread
    blocks a child that writes much); its progress lines go to `say` when given."""
    import threading
    out, err = [], []

    def read_out():
        out.extend(iter(proc.stdout.readline, ""))

    def read_err():
        for line in iter(proc.stderr.readline, ""):
            if line.startswith(PROGRESS):
                if say:
                    say(f"calibrating: {line[len(PROGRESS):].strip()}")
            else:
                err.append(line)
    readers = [threading.Thread(target=f, daemon=True) for f in (read_out, read_err)]
    for r in readers:
        r.start()
    return out, err, readers


def result_lines(out: str, prefix: str) -> list:
    """The JSON results a child printed, one per line after `prefix`; a line cut short (the child killed while
    writing it) ends the list: what came before it is whole."""
    found = []
    for line in out.splitlines():
        if line.startswith(prefix):
            try:
                found.append(json.loads(line[len(prefix):]))
            except json.JSONDecodeError:
                break
    return found


def free_port() -> int:
    """A TCP port free on this host now, for the copies' all-reduce sweep."""
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def average(results: list[dict]) -> dict:
    """One calibration from several children's: each time and rate averaged (the sweep is rank 0's)."""
    out = dict(results[0], copies=len(results))
    out["matmul_seconds"] = {k: statistics.fmean(r["matmul_seconds"][k] for r in results)
                             for k in results[0]["matmul_seconds"]}
    for k in ("matmul_flops", "mem_bytes_per_s", "optimizer_params_per_s", "cpu_adam_params_per_s"):
        out[k] = statistics.fmean(r[k] for r in results) if results[0].get(k) else None
    out["cpu_adam_params_per_s"] = out["cpu_adam_params_per_s"] and out["cpu_adam_params_per_s"] * len(results)
    out["allreduce"] = next((r["allreduce"] for r in results if r.get("allreduce")), None)
    if results[0].get("sampled"):
        out["sampled"] = {k: statistics.fmean(r["sampled"][k] for r in results) if k != "shape" else v
                          for k, v in results[0]["sampled"].items()}
    if results[0].get("attention_s"):
        out["attention_s"] = [statistics.fmean(r["attention_s"][i] for r in results) for i in (0, 1)]
    out["elementwise"] = {n: {kind: statistics.fmean(r["elementwise"][n][kind] for r in results)
                              for kind in results[0]["elementwise"][n]} for n in results[0]["elementwise"]}
    return out


def allreduce_fit(sweep: list[dict]) -> tuple[float, float]:
    """(bus bandwidth in bytes/s, latency in s) from an all-reduce sweep's rows {"bytes", "seconds",
    "busbw_gbps"}: a least-squares line through seconds = latency + bytes x 2(n-1)/n / busbw. A noisy sweep
    whose line does not rise (small sizes slower than large ones) falls back to the largest size's bus
    bandwidth, and the smallest size's time beyond it as the latency."""
    xs = [r["bytes"] * r["busbw_gbps"] / (r["bytes"] / r["seconds"] / 1e9) for r in sweep]  # bytes x 2(n-1)/n
    ys = [r["seconds"] for r in sweep]
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    spread = sum((x - mx) ** 2 for x in xs)
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / spread if spread else 0.0
    if slope <= 0:
        big, small = max(zip(xs, ys)), min(zip(xs, ys))
        busbw = big[0] / big[1]
        return busbw, max(0.0, small[1] - small[0] / busbw)
    return 1 / slope, max(0.0, my - slope * mx)


def carried(blocks: float, layers: int | None) -> str:
    """How far a sample of `blocks` is carried to the model's `layers` (issue 35: the basis says it)."""
    if not layers:
        return ""
    if blocks >= layers:
        return f" (the whole model: {layers} blocks, nothing carried)"
    return f" (sampled {blocks:g} of the model's {layers} blocks: the other {layers - blocks:g} carried at its rate)"


def rates(cal: dict, *, sweep: list[dict] | None = None):
    """speed.Rates from a calibration (and an all-reduce sweep, when there is one)."""
    from .speed import Rates
    sweep = sweep or cal.get("allreduce")
    busbw, latency = allreduce_fit(sweep) if sweep else (None, 0.0)
    device = f"{cal['device']}, {cal['threads']} thread(s)" if cal["device"] == "cpu" else cal["device"]
    basis = {"device": device, "matmul": f"calibrated: the model's {len(cal['matmul_seconds'])} matmul shapes timed"
                                         f" on {device}",
             "memory": f"calibrated: elementwise kernels at {len(cal['elementwise'])} sizes,"
                       f" {cal['mem_bytes_per_s'] / 1e9:.1f} GB/s (add, multiply, copy) at the largest",
             "optimizer": f"calibrated: {cal['optimizer_params_per_s'] / 1e6:.1f} M params/s"}
    if busbw:
        basis["link"] = f"measured: all-reduce sweep, {busbw / 1e9:.2f} GB/s bus bandwidth, {latency * 1e6:.0f} us"
    if cal.get("sample_error"):
        basis["compute"] = ("the matmul shapes and elementwise ops (the model itself was not timed:"
                            f" {cal['sample_error']})")
    if cal.get("sampled"):
        basis["compute"] = (f"sampled: the model cut to 1 and {cal['sampled'].get('blocks', 3):g} blocks"
                            f"{carried(cal['sampled'].get('blocks', 3), cal.get('layers'))}, timed at the"
                            " step's shape: one block"
                            f" {cal['sampled']['block_s'] * 1e3:.1f} ms, embeddings + head + loss"
                            f" {cal['sampled']['head_s'] * 1e3:.1f} ms"
                            + (f" (the median of {cal['sampled']['pairs']:.0f} pair(s): what --calibrate-seconds left"
                               " time for)" if cal["sampled"].get("pairs", 5) < 5 else "")
                            + spread_words(cal["sampled"]))
    if cal.get("attention_s"):
        fwd, bwd = cal["attention_s"]
        basis["attention"] = (f"calibrated: SDPA at the step's shape, {fwd * 1e3:.2f} ms forward and {bwd * 1e3:.2f} ms"
                              " backward a block")
    if cal.get("cpu_adam_params_per_s"):
        basis["cpu_adam"] = (f"calibrated: DeepSpeed's host step of an offloaded optimizer as training runs it (norm,"
                             f" clipping, CPU Adam, the 16-bit copy) over {CPU_ADAM_PARAMS // 2 ** 20}M parameters,"
                             f" {cal['cpu_adam_params_per_s'] / 1e6:.0f} M params/s")
    if cal.get("zero3_module_s"):
        basis["zero3"] = (f"calibrated: DeepSpeed's ZeRO-3 hooks and gathers, {cal['zero3_module_s'] * 1e3:.2f} ms per"
                          " module per step (half again for checkpointing's recomputed forward)")
    elif cal.get("zero3_skipped"):
        basis["zero3"] = f"DeepSpeed's ZeRO-3 cost per module {cal['zero3_skipped']}"
    if cal.get("collective_cost"):
        cost = cal["collective_cost"]
        basis["collectives"] = (f"measured: a reduce-scatter pass costs {cost['reduce_scatter']:.2f}, an all-gather"
                                f" pass {cost['all_gather']:.2f} all-reduce passes (8 MiB)")
    for name, ds in (cal.get("deepspeed_sampled") or {}).items():
        basis[f"sampled_{name}"] = (f"sampled: {name}'s DeepSpeed step on the model cut to 1 and {ds['blocks']:g}"
                                    f" blocks{carried(ds['blocks'], cal.get('layers'))} in {ds['processes']}"
                                    f" processes: {ds['one_s'] * 1e3:.0f} and"
                                    f" {ds['more_s'] * 1e3:.0f} ms; what it took beyond the parts is carried to"
                                    " the whole model" + spread_words(ds))
    basis["summary"] = f"calibrated on this machine ({device})"
    if cal.get("load"):
        basis["load"] = load_words(cal["load"])
    return Rates(matmul_flops=cal["matmul_flops"], mem_bytes_per_s=cal["mem_bytes_per_s"], busbw=busbw,
                 busbw_no_p2p=busbw, inter_node=busbw, latency_s=latency,
                 matmul_seconds=cal["matmul_seconds"], elementwise=cal["elementwise"],
                 cpu_adam=cal.get("cpu_adam_params_per_s"), sampled=cal.get("sampled"),
                 attention_s=tuple(cal["attention_s"]) if cal.get("attention_s") else None,
                 # on a CPU the "device" is the host: offloading is a copy in the same memory
                 host_link=cal["mem_bytes_per_s"] if cal["device"] == "cpu" else None,
                 optimizer_params_per_s=cal["optimizer_params_per_s"], zero3_module_s=cal.get("zero3_module_s"),
                 collective_cost=cal.get("collective_cost"), deepspeed_sampled=cal.get("deepspeed_sampled"),
                 basis=basis)


SWEEP = [2 ** k for k in range(16, 25, 2)]   # 64 KiB .. 16 MiB: the sizes of DDP's and ZeRO's buckets


def for_plan(req, budget: float | None = None, say=None) -> tuple[object, str]:
    """(Rates, device) for `plan --calibrate`: this machine timed in as many processes as the plan has per
    node (on a CPU at most one per core, the cores shared among them), those processes' all-reduce sweep;
    what this machine cannot show (the network between nodes; on GPUs: P2P disabled, the host link, NVMe)
    from the layout's figures as `plan` takes them without calibration. budget: seconds for the whole
    calibration (--calibrate-seconds, DEFAULT_SECONDS): the model's sample, ZeRO-3's probe and DeepSpeed's
    samples (speed.sampled_extra) each run only if they fit in what is left, and the basis names what did not."""
    from dataclasses import replace
    from importlib.util import find_spec

    from . import probe
    from .errors import NvmlUnavailable
    from .speed import gpu_rates
    try:
        gpus = len(probe.topology().gpus)
    except NvmlUnavailable:
        gpus = 0
    lay, t = req.layout, req.training
    cores = os.cpu_count() or 1
    device = "cuda" if gpus else "cpu"
    copies = min(lay.gpus_per_node, gpus or cores)
    deepspeed = find_spec("deepspeed") is not None
    budget = DEFAULT_SECONDS if budget is None else budget
    if budget < FLOOR[device]:
        raise BadInput(f"--calibrate-seconds {budget:g}: less than a calibration takes on this machine's"
                       f" {'GPUs' if gpus else 'CPU'} (at least {FLOOR[device]:g} s: starting torch in each process,"
                       " then the kernels, the optimizer and the all-reduce sweep, which always run); give"
                       f" {FLOOR[device]:g} or more, or leave it out ({DEFAULT_SECONDS:g})")
    unsampled = _why_no_deepspeed_sample(deepspeed, copies, lay, t)
    cal = run(request(req.model, t, None if gpus else max(1, cores // copies), device=device,
                      cpu_adam=deepspeed and "if-built", sweep=SWEEP if copies > 1 else None,
                      zero3=deepspeed and copies > 1 and "if-built", sharded=copies > 1,
                      deepspeed=None if unsampled else plan_configs(req.model, t, copies),
                      deepspeed_budget=budget, budget=budget), copies=copies, say=say)
    mine, sheet = rates(cal), gpu_rates(lay, t)
    fill = {k: getattr(sheet, k) for k in ("host_link", "cpu_adam", "nvme") if getattr(mine, k) is None}
    if gpus:
        fill["busbw_no_p2p"] = sheet.busbw_no_p2p
    basis = dict(mine.basis, inter_node=f"{lay.inter_node_gbps:g} GB/s between nodes (--inter-node-gbps)")
    if copies < lay.gpus_per_node:
        basis["processes"] = (f"{copies} process(es) timed for the plan's {lay.gpus_per_node} per node: this"
                              f" machine has {gpus or cores} {'GPU' if gpus else 'core'}(s)")
    by_why = {}
    for name, why in (cal.get("deepspeed_skipped") or {}).items():
        by_why.setdefault(why, []).append(name)
    skipped = unsampled or "; ".join(f"{', '.join(names)}: {why}" for why, names in by_why.items())
    if skipped:
        basis["deepspeed"] = (f"DeepSpeed's own time not sampled, the step from its parts alone for "
                              f"{'every ZeRO strategy: ' if unsampled else ''}{skipped}; on this project's CPU"
                              " runs, sampled, it was -16 % to +31 % of the measured step"
                              " (docs/sources.md#step-time-accuracy)")
    if not gpus:
        basis["summary"] = "calibrated on this machine's CPU: the CPU twin (gloo) stands in for the GPUs"
    return replace(mine, **fill, inter_node=sheet.inter_node, basis=basis), device


DEFAULT_SECONDS = 300.0   # plan --calibrate's budget unless --calibrate-seconds: gpt2 at 4 x 1024 in 2 CPU copies
                          # took 319 s here with five sample pairs; within 300 it takes three
# The least budget a calibration keeps: starting Python and torch in each copy, then the kernels, the optimizer and
# the sweep, which always run (RESERVE, RESERVE_CUDA). gpt2 in 2 CPU copies took 42 s at --calibrate-seconds 40, 33 s
# at 1 on a quiet machine and 53 s at 0.001 on a busy one (issue 42's review): a smaller budget is not one it holds.
FLOOR = {"cpu": 40.0, "cuda": 20.0}


def _why_no_deepspeed_sample(deepspeed: bool, copies: int, lay, t) -> str | None:
    """Why plan --calibrate cannot sample DeepSpeed's strategies here (None: it can)."""
    if not deepspeed:
        return "DeepSpeed is not installed"
    if lay.gpus < 2:
        return "one process: the samples run in a group of two or more"
    if copies != lay.gpus:
        return f"the plan's {lay.gpus} processes cannot all run here ({copies})"
    if t.grad_accum != 1:
        return "the sample times micro-steps and the plan accumulates gradients"
    return None


def plan_configs(model, t, copies: int) -> dict:
    """The DeepSpeed config of each ZeRO strategy plan compares (NVMe aside: it needs a path), as
    `deepspeed-config --no-hf` writes it for this model and batch in `copies` processes."""
    from .dsconfig import STRATEGY_TO_CONFIG, Shape, build
    from .errors import BadInput
    out = {}
    for name, (stage, offload) in STRATEGY_TO_CONFIG.items():
        if stage and offload != "nvme":
            try:
                out[name] = build(stage, offload, Shape(hf=False, precision=t.precision, hidden_size=model.hidden_size,
                                                        largest_layer=model.largest_layer_params,
                                                        batch_size=t.batch_size, gpus=copies, optimizer=t.optimizer))
            except BadInput:   # a combination DeepSpeed refuses (plan says so on its own)
                continue
    return out


# ---- the child ----------------------------------------------------------------------------------------------

BARRIER = {}   # the child's request, for _timed's barrier


RESERVE = 30.0   # seconds of the budget kept for what follows the model's sample: the kernels, the optimizer, the sweep
# ... on a GPU, where those run at its pace: the H200 record's whole calibration without the model's sample took 14 s
RESERVE_CUDA = 15.0


def _reserve() -> float:
    """The seconds kept for what follows the sample on this copy's device."""
    return RESERVE_CUDA if BARRIER.get("cuda") else RESERVE


class OverBudget(Exception):
    """A part that would not end before --calibrate-seconds' deadline: skipped, and said so."""


def _left() -> float:
    """Seconds left of the budget (--calibrate-seconds), infinite without one."""
    deadline = BARRIER.get("deadline")
    return deadline - time.time() if deadline else float("inf")


def _progress(text: str) -> None:
    """A line the parent shows as `calibrating: ...` (the first copy's only: the others do the same)."""
    if os.environ.get("RANK", "0") == "0":
        print(PROGRESS + text, file=sys.stderr, flush=True)


def _vote(yes: bool) -> bool:
    """True if any copy says yes: each leaves its vote in the barrier folder and waits for the others', so the
    copies take the same turns (one that skipped a part the others run would leave them waiting)."""
    folder, copies = BARRIER.get("barrier"), BARRIER.get("copies", 1)
    if not folder or copies < 2:
        return yes
    BARRIER["votes"] = BARRIER.get("votes", 0) + 1
    Path(folder, f"vote{BARRIER['votes']}.{os.getpid()}.{int(yes)}").touch()
    deadline = time.monotonic() + 600
    while len(found := list(Path(folder).glob(f"vote{BARRIER['votes']}.*"))) < copies \
            and time.monotonic() < deadline:
        time.sleep(0.01)
    return any(p.name.endswith(".1") for p in found)


def _barrier() -> None:
    """Wait until every copy reaches the same measurement, so each is timed while all copies run: a copy
    that ran ahead would time its last items alone, on an idle machine."""
    folder, copies = BARRIER.get("barrier"), BARRIER.get("copies", 1)
    if not folder or copies < 2:
        return
    BARRIER["n"] = BARRIER.get("n", 0) + 1
    Path(folder, f"{BARRIER['n']}.{os.getpid()}").touch()
    deadline = time.monotonic() + 600
    while len(list(Path(folder).glob(f"{BARRIER['n']}.*"))) < copies and time.monotonic() < deadline:
        time.sleep(0.002)


def _timed(fn, sync, budget: float) -> float:
    """Median seconds of fn after one warm-up, repeated within the budget (at least 3 times)."""
    _barrier()
    fn()
    sync()
    times = []
    start = time.perf_counter()
    while len(times) < 3 or (time.perf_counter() - start < budget and len(times) < 50):
        t0 = time.perf_counter()
        fn()
        sync()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def _cuda_timed(fn, budget: float, device) -> float:
    """Seconds of one call of fn on a GPU as a training step runs its kernels: back to back, nothing waiting
    between them, timed with CUDA events over a batch of calls after a warm-up (a synchronization per call would
    time the launch and the wait, not the kernel: the H200 record's calibration read 159 TFLOPS that way); the
    median of the batches within the budget."""
    import torch
    _barrier()
    for _ in range(3):
        fn()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    fn()
    end.record()
    end.synchronize()
    calls = max(1, min(100, int(budget / 5 / max(start.elapsed_time(end) / 1e3, 1e-6))))
    times, began = [], time.perf_counter()
    while len(times) < 3 or (time.perf_counter() - began < budget and len(times) < 20):
        start.record()
        for _ in range(calls):
            fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / 1e3 / calls)
    return statistics.median(times)


def child(req: dict) -> dict:
    """Time the shapes, the elementwise kernels and the optimizer on this device."""
    import torch
    cuda = torch.cuda.is_available()
    device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0))) if cuda else torch.device("cpu")
    sync = (lambda: torch.cuda.synchronize(device)) if cuda else (lambda: None)
    BARRIER["cuda"] = cuda
    if cuda:   # --precision tf32: fp32 matmuls (the sample's too) on the TF32 tensor cores, as the training sets it
        torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = bool(req.get("tf32"))

    def timer(fn, seconds: float) -> float:   # as the step runs it: on a GPU without a wait per call
        return _cuda_timed(fn, seconds, device) if cuda else _timed(fn, sync, seconds)
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(req["precision"], torch.float32)
    budget = SECONDS / max(1, len(req["shapes"]) + len(req["sizes"]))
    # The model first, in a fresh process like the training's: the kernels below leave the allocator's heap
    # grown (glibc's mmap threshold raised), which makes a step's later allocations cheaper than they are.
    sampled, why = None, None
    if req.get("config"):
        _progress(f"the model cut to 1 and {min(req.get('sample_blocks', 3), req['layers'])} blocks, forward and"
                  " backward")
        try:
            sampled = dict(_sample_blocks(torch, req, device, sync), shape=sample_shape(req))
        except OverBudget as e:
            why = str(e)
        except Exception as e:  # transformers cannot build it here: the op-by-op model stands in
            why = f"{type(e).__name__}: {e}"[:300]
    _progress(f"{len(req['shapes'])} matmul shapes, elementwise kernels at {len(req['sizes'])} sizes, the optimizer")
    out, flops, seconds = {}, 0, 0.0
    for k in req["shapes"]:
        M, N, K = map(int, k.split("x"))
        a = torch.randn(M, K, device=device, dtype=dtype)
        b = torch.randn(K, N, device=device, dtype=dtype)
        s = timer(lambda a=a, b=b: torch.mm(a, b), budget)
        out[k] = s
        flops += 2 * M * N * K
        seconds += s
    ew = {str(n): _elementwise(torch, n, device, timer, budget / 2) for n in req["sizes"]}
    mem = ew[str(max(req["sizes"]))]["stream"]
    return {"device": device.type, "threads": torch.get_num_threads(), "matmul_seconds": out,
            "matmul_flops": flops / seconds if seconds else None, "mem_bytes_per_s": mem, "elementwise": ew,
            "attention_s": _attention(torch, req["attention_shape"], device, dtype, timer) if cuda and req.get(
                "attention_shape") else None,
            "optimizer_params_per_s": _optimizer_rate(torch, req, device, timer, cuda), "torch": torch.__version__,
            "cpu_adam_params_per_s": _cpu_adam_rate(torch) if _op_ready("cpu_adam", req.get("cpu_adam")) else None,
            "sampled": sampled, "sample_error": why, **_in_group(req, device, cuda, sampled)}


def _attention(torch, shape: list, device, dtype, timer) -> list[float]:
    """[forward, backward] seconds of one block's fused attention (SDPA: FlashAttention-2 where it applies) at the
    step's shape, causal, with the model's attention dropout, as transformers calls it."""
    b, heads, kv, s, d, dropout = shape
    q = torch.randn(b, heads, s, d, device=device, dtype=dtype, requires_grad=True)
    k, v = (torch.randn(b, kv, s, d, device=device, dtype=dtype, requires_grad=True) for _ in range(2))
    gqa = {"enable_gqa": True} if kv != heads else {}

    def forward():
        return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True, dropout_p=dropout, **gqa)
    grad = torch.randn_like(forward())
    fwd = timer(forward, SECONDS / 4)
    both = timer(lambda: forward().backward(grad), SECONDS / 4)
    return [fwd, max(0.0, both - fwd)]


def _elementwise(torch, n: int, device, timer, budget: float) -> dict:
    """Bytes read + written per second on n fp32 elements: "stream" (add, multiply by a scalar, copy) and
    "math" (tanh, softmax over rows, layer norm): what gputopo.speed's elementwise ops are made of. Each call
    takes the next of enough tensors to overflow the caches, and its output is kept until that turn comes
    again: in a training step an op's input was mostly written long before (in forward, read in backward),
    and its output is saved for backward, so each op writes to memory not touched a moment ago. "inplace"
    (copy into, add into, scale in place): the framework's copies into buffers that live across steps
    (gradient buckets, partitions, optimizer states), which skip a fresh allocation's page faults: 3x the
    "stream" rate on this machine's CPU at 64 MiB."""
    reps = max(2, COLD_BYTES // (n * 4))
    kept = [None] * reps
    xs = [torch.randn(n, device=device) for _ in range(reps)]
    ys = [torch.randn(n, device=device) for _ in range(reps)]
    row = min(n, 1024)
    turn = itertools.cycle(range(reps))

    def rows(i):
        return xs[i][: n // row * row].view(-1, row)
    b = n * 4
    kinds = {"stream": [(lambda i: xs[i] + ys[i], 3 * b), (lambda i: xs[i] * 2.0, 2 * b),
                        (lambda i: xs[i].clone(), 2 * b)],
             "math": [(lambda i: torch.tanh(xs[i]), 2 * b), (lambda i: torch.softmax(rows(i), -1), 2 * b),
                      (lambda i: torch.nn.functional.layer_norm(rows(i), (row,)), 2 * b)],
             "inplace": [(lambda i: ys[i].copy_(xs[i]), 2 * b), (lambda i: ys[i].add_(xs[i]), 3 * b),
                         (lambda i: ys[i].mul_(-1.0), 2 * b)]}
    def call(f):
        i = next(turn)
        kept[i] = f(i)
    return {kind: sum(nb for _, nb in ops) / sum(timer(lambda f=f: call(f), budget / 3) for f, _ in ops)
            for kind, ops in kinds.items()}


def _optimizer_rate(torch, req: dict, device, timer, cuda: bool = False) -> float:
    """torch.optim.AdamW (its defaults, or --optimizer-impl's) on tensors of 1 M parameters each: parameters
    stepped per second. On a GPU 64 of them (as a model has tens to hundreds of tensors: foreach AdamW launches a
    few kernels for them all, and 4 would time the launches), on a CPU 4 (its loop over tensors costs the same for
    any count)."""
    count = 64 if cuda else 4
    params = [torch.nn.Parameter(torch.randn(2 ** 20, device=device)) for _ in range(count)]
    for p in params:
        p.grad = torch.randn_like(p)
    kwargs = req.get("optimizer_kwargs") or {}   # --optimizer-impl: foreach=, fused=
    opt = torch.optim.AdamW(params, lr=1e-4, **kwargs) if req["optimizer"] != "sgd" else \
        torch.optim.SGD(params, lr=1e-4, momentum=0.9, **kwargs)
    return count * 2 ** 20 / timer(opt.step, 1.0)


def _sample_blocks(torch, req: dict, device, sync) -> dict:
    """The model itself cut to 1 block and to req["sample_blocks"] (speed.sample_blocks: 3 to 6), forward and
    backward at the step's shape: the difference is the blocks, the rest the embeddings, head and loss. What the
    matmul shapes and elementwise rates leave out is in these: the framework's own overhead per op, allocation,
    caches.
    The two run in turns and the blocks are the median of the paired differences: a drift of the machine's
    speed (shared cores) then cancels instead of landing on one of them."""
    more = min(req.get("sample_blocks", 3), req["layers"])
    if more == 1:   # one block: the whole model is the sample
        step = _one_step(torch, req, device, 1)
        return {"block_s": _timed(step, sync, SECONDS), "head_s": 0.0, "blocks": 1}
    if _vote(_left() < 2 * _reserve()):   # not even time to time one block: left out before building it
        raise OverBudget(f"{max(0.0, _left()):.0f} s were left of --calibrate-seconds {req.get('budget'):g}, and"
                         f" {_reserve():g} s of them go to the kernels, the optimizer and the sweep")
    one = _one_step(torch, req, device, 1)
    for _ in range(2 if BARRIER.get("cuda") else 1):   # a GPU's first step also sets up cuBLAS and the allocator
        t0 = time.perf_counter()
        one()
        sync()
        first = time.perf_counter() - t0
    # the larger sample's step is at most `more` one-block steps (each holds the head): its warm-up, then a pair
    guess = first * more + first * (1 + more)
    if _vote(guess > _left() - _reserve()):   # any copy short of time: none samples, all go on alike
        raise OverBudget(f"its sample would take about {guess:.0f} s, more than the"
                         f" {max(0.0, _left()):.0f} s left of --calibrate-seconds {req.get('budget'):g}")
    steps = [one, _one_step(torch, req, device, more)]
    steps[1]()
    _barrier()
    pairs = []
    start = time.perf_counter()
    while len(pairs) < 5 or (time.perf_counter() - start < SECONDS and len(pairs) < 50):
        if pairs and _left() - _reserve() < sum(pairs[-1]):   # the budget: fewer pairs, a noisier median
            break
        t = []
        for step in steps:
            t0 = time.perf_counter()
            step()
            sync()
            t.append(time.perf_counter() - t0)
        pairs.append(t)
    block = max(0.0, statistics.median(b - a for a, b in pairs)) / (more - 1)
    return {"block_s": block, "head_s": max(0.0, statistics.median(a for a, _ in pairs) - block), "blocks": more,
            "pairs": len(pairs), "spread": spread([b for _, b in pairs])}


def spread(times: list[float]) -> float:
    """The 10th to 90th percentile of repeated timings over their median (0 for fewer than 3): how far one
    timing of the same work strayed from another while the calibration ran."""
    if len(times) < 3:
        return 0.0
    t = sorted(times)
    return (t[round(0.9 * (len(t) - 1))] - t[round(0.1 * (len(t) - 1))]) / statistics.median(t)


def _one_step(torch, req: dict, device, layers: int):
    """Forward and backward of the model cut to `layers` blocks, as the training runs it."""
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(req["precision"])
    model, cfg = build_model(req, device, layers)
    if dtype and req["half_weights"]:
        model.to(dtype)
    ids = torch.randint(0, cfg.vocab_size, (req["batch_size"], req["seq_len"]), device=device)
    autocast = bool(dtype) and not req["half_weights"]

    def step():
        with torch.autocast(device.type, dtype=dtype or torch.float32, enabled=autocast):
            loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        model.zero_grad(set_to_none=True)
    return step


def _in_group(req: dict, device, cuda: bool, sampled: dict | None = None) -> dict:
    """What the copies time together, in one process group (NCCL on GPUs, gloo on CPU): the all-reduce sweep
    (req["sweep"], as gputopo.worker's), DeepSpeed's ZeRO-3 cost per module (req["zero3"]), the cost of
    ZeRO's collectives (req["sharded"]) and each requested strategy's DeepSpeed step on the model's sample
    (req["deepspeed"]); rank 0's."""
    out = {"allreduce": None, "zero3_module_s": None, "zero3_skipped": None, "collective_cost": None,
           "deepspeed_sampled": None, "deepspeed_skipped": None}
    if not (req.get("sweep") or req.get("zero3") or req.get("sharded") or req.get("deepspeed")) \
            or req.get("copies", 1) < 2:
        return out
    import torch.distributed as dist

    from .worker import allreduce_sweep
    rank = int(os.environ["RANK"])
    # DeepSpeed names its shared-memory buffer by these (worker.run_child removes it as the child ends): without
    # them every calibration's would be the same
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(req["port"]))
    dist.init_process_group("nccl" if cuda else "gloo", init_method=f"tcp://127.0.0.1:{req['port']}", rank=rank,
                            world_size=req["copies"])
    try:
        if req.get("sweep"):
            _progress("an all-reduce sweep among the copies")
            out["allreduce"] = allreduce_sweep(req["sweep"], 10, device, req["copies"])
        if req.get("sharded") or req.get("zero3"):
            out["collective_cost"] = _collective_cost(device, req["copies"])
        # on a CPU DeepSpeed's processes talk through its shared-memory op, built on first use
        if req.get("zero3") and (cuda or _op_ready("deepspeed_shm_comm", req["zero3"])):
            if _agreed_left(device) > ZERO3_SECONDS:
                _progress("DeepSpeed's ZeRO-3 cost per module")
                out["zero3_module_s"] = _zero3_module_seconds(device)
            else:
                out["zero3_skipped"] = f"not timed: it takes about {ZERO3_SECONDS:g} s, over --calibrate-seconds"
        if req.get("deepspeed") and req.get("config"):
            if BARRIER.get("deadline"):   # what is left of the budget, the same for every copy
                req = dict(req, deepspeed_budget=max(0.001, _agreed_left(device) - 5))
            _progress("DeepSpeed's strategies on the model's sample, each as its estimate fits")
            out["deepspeed_sampled"], out["deepspeed_skipped"] = _deepspeed_samples(req, device, cuda, sampled)
    finally:
        dist.destroy_process_group()
    return out if rank == 0 else {**out, "allreduce": None}


ZERO3_SECONDS = 40.0   # DeepSpeed's ZeRO-3 probe: four deepspeed.initialize and their steps, on this machine's CPU


def _agreed_left(device) -> float:
    """The least time left of the budget among the copies (each must take the same turns)."""
    left = _left()
    return left if left == float("inf") else -_agreed_max(-left, device)


SHARD_ELEMENTS = 2 ** 21   # 8 MiB of fp32: large enough that the bandwidth, not the latency, sets the time


def _collective_cost(device, world: int) -> dict:
    """{"reduce_scatter", "all_gather"}: each collective's time for a ring pass over an all-reduce pass's, on
    one 8 MiB buffer (an all-reduce makes two passes, a reduce-scatter of the buffer or an all-gather into it
    one). NCCL's rings give about 1 for both; torch's gloo reduce-scatter takes longer than an all-reduce of
    the same buffer (3.5 passes here), which is what ZeRO-3 on CPUs pays for every gradient bucket."""
    import statistics

    import torch
    import torch.distributed as dist
    whole = torch.ones(SHARD_ELEMENTS, device=device)
    part = torch.ones(SHARD_ELEMENTS // world, device=device)
    runs = {"all_reduce": lambda: dist.all_reduce(whole),
            "reduce_scatter": lambda: dist.reduce_scatter_tensor(part, whole),
            "all_gather": lambda: dist.all_gather_into_tensor(whole, part)}
    took = {}
    for kind, call in runs.items():
        times = []
        for _ in range(8):
            dist.barrier()
            t0 = time.perf_counter()
            call()
            if device.type == "cuda":
                torch.cuda.synchronize(device)
            times.append(time.perf_counter() - t0)
        took[kind] = statistics.median(times[2:])
    t = torch.tensor([took["all_reduce"] / 2, took["reduce_scatter"], took["all_gather"]], dtype=torch.float64,
                     device=device)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)   # the slowest rank sets the pace
    ar, rs, ag = t.tolist()
    return {"reduce_scatter": rs / ar, "all_gather": ag / ar}


ZERO3_PROBE = (2, 10)   # linear layers of the two probe models: their difference is 8 modules' cost


def _zero3_module_seconds(device) -> float:
    """DeepSpeed's stage-3 cost per module with parameters, per training step: its pre/post forward and
    backward hooks, the gather of the module's parameters before forward and again before backward, the
    release after each, timed on this machine's Python and this process group. Two stacks of small linear
    layers (persistence threshold 0, so every one is gathered) step through deepspeed.initialize; the step
    difference per layer is the cost, the layers' own arithmetic being negligible at 64 x 64. Each stack
    steps in two turns, alternating, and the fastest step of each counts: another process taking the cores only
    ever adds time, and a burst of it during one stack's steps once made the difference negative."""
    import deepspeed
    import torch
    # torch's SGD: the step is one call on the flat partition whatever the optimizer, and DeepSpeed's fused Adam
    # would first build its op (a minute and a half here)
    cfg = {"train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 1, "gradient_clipping": 1.0,
           "zero_allow_untested_optimizer": True, "steps_per_print": 10 ** 9,
           "zero_optimization": {"stage": 3, "stage3_param_persistence_threshold": 0, "overlap_comm": True,
                                 "contiguous_gradients": True}}
    fastest = {layers: float("inf") for layers in ZERO3_PROBE}
    for layers in ZERO3_PROBE * 2:
        model = torch.nn.Sequential(*[torch.nn.Linear(64, 64) for _ in range(layers)])
        engine, *_ = deepspeed.initialize(model=model, optimizer=torch.optim.SGD(model.parameters(), lr=1e-4),
                                          config=cfg)
        x = torch.randn(4, 64, device=engine.device)
        loss = lambda engine=engine, x=x: engine(x).float().pow(2).mean()   # noqa: E731 (bound now, not late)
        fastest[layers] = min(fastest[layers], *_engine_steps(engine, loss, 4, 8, device))
        engine.destroy()
    few, many = ZERO3_PROBE
    return max(0.0, (fastest[many] - fastest[few]) / (many - few))


DS_SAMPLE_STEPS = 16   # timed pairs of steps (1 block, then the larger sample), after 2 warm-up pairs
DS_SAMPLE_SECONDS = 30.0   # ... and more, up to DS_MAX_PAIRS, while their time stays under this
DS_MAX_PAIRS = 64   # the median of the paired differences steadies as 1/sqrt(pairs): 64 halves 16's noise


def _deepspeed_samples(req: dict, device, cuda: bool, sampled: dict | None) -> tuple[dict, dict]:
    """({strategy: sample}, {strategy: why not}) for req["deepspeed"]. Under a budget (plan --calibrate) a
    strategy runs only if the ops it needs are built already and its estimated time still fits: its 18 pairs of
    steps (2 of them warm-up) at twice the compute sample's forward and backward each, or as long as the
    longest strategy sampled before it took, if longer. Pairs beyond those run in what is left of its share."""
    from . import dsops
    done, skipped, longest = {}, {}, 0.0
    budget = req.get("deepspeed_budget")
    how = "if-built" if budget else True
    left = budget or float("inf")
    more = min(req.get("sample_blocks", 3), req["layers"])
    for i, (name, cfg) in enumerate(req["deepspeed"].items()):
        ops = [op for op in (["deepspeed_shm_comm"] if not cuda else []) + [n.op for n in dsops.needed(cfg)]
               if not _op_ready(op, how)]
        guess = max(longest, _agreed_max(2 * (2 + DS_SAMPLE_STEPS) * (2 * sampled["head_s"] + (1 + more)
                                                                      * sampled["block_s"])
                                         if sampled else float("inf"), device))
        if not cfg.get("optimizer"):
            skipped[name] = "the script's own optimizer (the config has none to run)"
        elif ops:
            skipped[name] = f"DeepSpeed's {' and '.join(ops)} op{'s' if len(ops) > 1 else ''} not built yet"
        elif guess > left:
            skipped[name] = (f"about {guess:.0f} s, over the {left:.0f} s left of --calibrate-seconds"
                             f" {req.get('budget') or budget:g}" if budget else "no compute sample")
        else:
            t0 = time.perf_counter()
            try:
                # pairs beyond the least in this strategy's share of what is left (the same on every copy)
                share = left / (len(req["deepspeed"]) - i) - guess if budget else DS_SAMPLE_SECONDS
                done[name] = _deepspeed_sample(req, device, cfg, min(DS_SAMPLE_SECONDS, share))
            except Exception as e:  # DeepSpeed refused it here: the parts stand alone, and the output says why
                skipped[name] = f"DeepSpeed failed: {type(e).__name__}: {e}"[:200]
            took = _agreed_max(time.perf_counter() - t0, device)
            pairs = len(done[name]["one_times"]) if name in done else DS_SAMPLE_STEPS
            # the next one's guess: this one's time at the least pairs (more ran only in its own share)
            left, longest = left - took, max(longest, took * (2 + DS_SAMPLE_STEPS) / (2 + pairs))
    return done, skipped


def _agreed_max(x: float, device) -> float:
    """The largest of the copies' values: each copy timed its own sample, and all must take the same turns
    (one that skips a strategy the other runs leaves it waiting in a collective)."""
    import torch
    import torch.distributed as dist
    t = torch.tensor([x], dtype=torch.float64, device=device)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return t.item()


def _deepspeed_sample(req: dict, device, cfg: dict, seconds: float = DS_SAMPLE_SECONDS) -> dict:
    """One strategy's DeepSpeed step (deepspeed.initialize on the config the training uses) on the model cut to
    1 and to sample_blocks blocks, at the step's shape, in this process group. Both engines are built first and
    step in turns, a pair at a time, as the compute's sample does: the blocks are the median of the paired
    differences. Timed a turn of steps apart (the rule before issue 35), a drift of the machine's pace between
    the turns landed on one sample and was carried, times the blocks not sampled, to the whole model
    (benchmarks/ds_block_profile.py: the line through 1 and 3 blocks +14 % at 10 blocks in turns, +1 % in pairs).
    Each step's time is kept (one_times, more_times): the output's spread, and the benchmark's rule before.
    DS_SAMPLE_STEPS pairs at least; more, up to DS_MAX_PAIRS, as `seconds` allows at the warm-up's pace (a
    noisy machine's median of 16 differences, carried over the blocks not sampled, strayed 10-20 % run to run:
    docs/sources.md#step-time-accuracy)."""
    import deepspeed
    import torch
    more = min(req.get("sample_blocks", 3), req["layers"])
    engines = []
    for layers in sorted({1, more}):
        model, mcfg = build_model(req, device, layers)
        engine, *_ = deepspeed.initialize(model=model, model_parameters=model.parameters(), config=cfg)
        ids = torch.randint(0, mcfg.vocab_size, (req["batch_size"], req["seq_len"]), device=engine.device)
        engines.append((engine, lambda engine=engine, ids=ids: engine(ids, labels=ids).loss))  # bound now
    def pair():
        return [_engine_steps(engine, loss, 0, 1, device)[0] for engine, loss in engines]
    warm = [pair() for _ in range(2)]
    # every copy takes the same number of steps (each holds collectives): counted from the slowest copy's pace
    n = max(DS_SAMPLE_STEPS, min(DS_MAX_PAIRS, int(seconds / _agreed_max(sum(warm[-1]), device))))
    pairs = [pair() for _ in range(n)]
    for engine, _ in engines:
        engine.destroy()
    one = statistics.median(p[0] for p in pairs)
    more_s = one + statistics.median(p[-1] - p[0] for p in pairs)
    return {"one_s": one, "more_s": more_s, "blocks": more, "processes": req["copies"],
            "shape": sample_shape(req), "spread": spread([p[-1] for p in pairs]),
            "one_times": [round(p[0], 6) for p in pairs], "more_times": [round(p[-1], 6) for p in pairs]}


def sample_shape(req: dict) -> list:
    """The step's shape a sample was timed at (speed.shape_of for the Training it stands for)."""
    return [req["batch_size"], req["seq_len"], bool(req.get("grad_checkpointing"))]


def _engine_steps(engine, loss, warmup: int, steps: int, device) -> list[float]:
    """Seconds of each of `steps` DeepSpeed steps (forward, backward, optimizer) after `warmup` untimed ones;
    on a GPU each waits for the device."""
    import torch
    times = []
    for i in range(warmup + steps):
        t0 = time.perf_counter()
        engine.backward(loss())
        engine.step()
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        if i >= warmup:
            times.append(time.perf_counter() - t0)
    return times


def _op_ready(op: str, how) -> bool:
    """True times what needs DeepSpeed's op `op` (building it if need be, 30-90 s); "if-built" only when
    DeepSpeed ships it prebuilt or torch's JIT built it already here (plan --calibrate stays within its budget)."""
    if how != "if-built":
        return bool(how)
    from deepspeed.git_version_info import installed_ops
    from torch.utils.cpp_extension import _get_build_directory
    return bool(installed_ops.get(op)) or os.path.exists(os.path.join(_get_build_directory(op, False), f"{op}.so"))


CPU_ADAM_PARAMS = 2 ** 26   # 64M: 1 GiB of fp32 weights, gradients and moments, past any CPU's caches


def _cpu_adam_rate(torch) -> float:
    """DeepSpeed's host step of an offloaded optimizer as training runs it, in this process's threads: over
    CPU_ADAM_PARAMS (in caches the kernel alone ran 9.84G parameters a second on the H200 record's host, where
    training stepped about 1.4G), the gradients' norm and clipping, CPU Adam, the updated fp32 weights copied to
    their 16-bit copy (stage_1_and_2's step around DeepSpeedCPUAdam): parameters per second. Builds the cpu_adam
    op on first use (about 40 s)."""
    from deepspeed.ops.adam import DeepSpeedCPUAdam
    p = torch.nn.Parameter(torch.randn(CPU_ADAM_PARAMS))
    p.grad = torch.randn(CPU_ADAM_PARAMS)
    half = torch.empty(CPU_ADAM_PARAMS, dtype=torch.bfloat16)
    opt = DeepSpeedCPUAdam([p], lr=1e-4)

    def step():
        norm = float(torch.linalg.vector_norm(p.grad))
        p.grad.mul_(min(1.0, 1.0 / (norm + 1e-6)))
        opt.step()
        half.copy_(p.detach())
    return CPU_ADAM_PARAMS / _timed(step, lambda: None, 1.0)


def _main() -> None:
    """The child: one calibration, printed as one RESULT line."""
    BARRIER.update(json.loads(sys.argv[1]))
    print(RESULT + json.dumps(child(BARRIER)), flush=True)


if __name__ == "__main__":
    from .worker import run_child
    run_child(_main)   # a result printed is whole even if the interpreter's exit would abort after it
