"""`plan --measure`: train the planned model for two real steps in a child process and measure its peak.

The parent (measure) never imports torch; the child (`python -m gputopo.measure REQUEST_JSON`) builds the
model from its configuration with random weights, runs a warm-up step, then measures the second one:
- CUDA: torch.cuda.max_memory_allocated() after reset_peak_memory_stats(), and NVML's figure for the process;
- CPU: the process's high-water mark (VmHWM) after `echo 5 > /proc/self/clear_refs`, with glibc told to mmap
  every block >= 64 KiB and never keep freed memory (set before the child starts: malloc reads its tunables
  once), so a freed tensor leaves the resident set at once and the high-water mark is the tensors' peak.
"""
from __future__ import annotations

import contextlib
import gc
import importlib.util
import json
import os
import statistics
import subprocess
import sys

from .children import Heartbeat, on_stderr
from .errors import BadInput, BenchmarkFailed

MALLOC_ENV = {"MALLOC_MMAP_THRESHOLD_": "65536", "MALLOC_TRIM_THRESHOLD_": "0"}
RESULT = "GPUTOPO_MEASURE "


def request(model, training, attention: str) -> dict:
    """What the child needs to rebuild the same step: the model's transformers config and the training setup."""
    from .models import hf_config
    return {"config": hf_config(model), "attention": attention, "precision": training.precision,
            "optimizer": training.optimizer, "batch_size": training.batch_size, "seq_len": training.seq_len,
            "grad_checkpointing": training.grad_checkpointing, "optimizer_kwargs": training.optimizer_kwargs(),
            "zero_grad": training.zero_grad, "finetune": training.finetune.to_dict()}


def run(req: dict, *, timeout: float = 3600, **need) -> dict:
    """Run the child; refuse first when its step would not fit in the memory it will use (room)."""
    return run_many([req], timeout=timeout, **need)[0]


def run_many(reqs: list[dict], *, need_bytes: int, gpu: dict | None = None, gpu_bytes: int = 0,
             timeout: float = 3600, malloc: bool = True, say=on_stderr) -> list[dict]:
    """Measure several steps one after the other in one child (the high-water mark is reset for each).
    need_bytes: host RAM the child needs; gpu_bytes: memory on `gpu` (target()) when it trains on one.
    malloc=False: glibc as a training process has it (the memory measurement's settings slow allocation).
    `say` gets a line as the child starts and a heartbeat while it runs (None: silent)."""
    if any(r["optimizer"] == "adamw-8bit" for r in reqs):
        raise BadInput("--measure: 8-bit Adam needs bitsandbytes on CUDA; measure with --optimizer adamw instead")
    room(need_bytes, gpu, gpu_bytes)
    # offline: nothing is fetched (bitsandbytes asks a kernel hub on import), no progress bars in the output
    env = {**os.environ, **(MALLOC_ENV if malloc else {}), "HF_HUB_OFFLINE": "1", "HF_HUB_DISABLE_PROGRESS_BARS": "1",
           "TRANSFORMERS_VERBOSITY": "error"}
    env.setdefault("OMP_NUM_THREADS", str(min(os.cpu_count() or 1, 4)))
    doing = (f"measuring: the model's step time (2 warm-up steps, then {TIMED_STEPS} timed)" if reqs[0].get("time_only")
             else "measuring: the model's memory (a warm-up step, then the measured one)")
    doing += f"{f' for {len(reqs)} setups' if len(reqs) > 1 else ''} in a child process"
    if say:
        say(doing)
    try:
        with Heartbeat(doing, say) if say else contextlib.nullcontext():
            proc = subprocess.run([sys.executable, "-m", "gputopo.measure", json.dumps(reqs)], env=env,
                                  capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise BenchmarkFailed(f"--measure: the measuring process took more than {timeout:.0f} s and was stopped") \
            from None
    from .calibrate import result_lines
    lines = result_lines(proc.stdout, RESULT)
    if len(lines) != len(reqs):   # every result printed is whole: an abort after them is the interpreter's exit
        last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        raise BenchmarkFailed(f"--measure: the measuring process failed (exit {proc.returncode}): {last}")
    return lines


RUNTIME_BYTES = 2 ** 30   # torch, transformers and the interpreter in the child, besides the tensors


def room(need_bytes: int, gpu: dict | None = None, gpu_bytes: int = 0) -> None:
    """Refuse a step that would not fit: in the GPU's free memory as plan judges a fit (allocated peak and CUDA
    context within it; a GPU that runs short only raises), and in 80 % of the host's free RAM for what stays on
    the host (a host that runs short swaps, or its OOM killer ends a process)."""
    import psutil

    from .units import gib
    free = gpu["memory_free_bytes"] if gpu else None
    if free is not None and gpu_bytes > free:
        name = gpu["name"] + (f" ({gpu['model']})" if gpu["model"] else "")
        raise BadInput(f"--measure: the step needs about {gib(gpu_bytes)} of GPU memory and {name}, where it runs,"
                       f" has {gib(free)} free; lower --batch-size/--seq-len, pick a freer GPU with"
                       " CUDA_VISIBLE_DEVICES or measure a smaller model")
    avail = psutil.virtual_memory().available
    if need_bytes > 0.8 * avail:
        what = f"the process beside its step on {gpu['name']}" if gpu else "the step"
        raise BadInput(f"--measure: {what} needs about {gib(need_bytes)} of host RAM and this machine has"
                       f" {gib(avail)} free; " + ("free some RAM" if gpu else "lower --batch-size/--seq-len or"
                                                  " measure a smaller model"))


def target() -> dict | None:
    """The GPU the child will train on (probe.cuda_device()), None for the CPU: decided as the child decides
    (torch.cuda.is_available(): a CUDA build of torch and a GPU CUDA sees), without importing torch."""
    from . import probe, system
    from .errors import NvmlUnavailable
    build = system.torch_build()
    if not build or not build["cuda"]:
        return None
    try:
        return probe.cuda_device()
    except NvmlUnavailable:   # no driver, or no nvidia-ml-py: judged as a CPU step, all of it in host RAM
        return None


def check(data: dict, say=on_stderr) -> dict:
    """Measure the planned step on this machine and compare it with the prediction, per component. `say` gets
    each part as it starts and a heartbeat while it runs: the memory, the step time and the calibration each run
    a child for minutes on a CPU."""
    import time
    from dataclasses import fields

    from .models import ModelSpec
    from .plan import Training
    model = ModelSpec(**data["model"])
    training = Training(**{f.name: data["training"][f.name] for f in fields(Training)})
    needs = {"lora": ("peft",), "qlora": ("peft", "bitsandbytes")}.get(training.finetune.mode, ())
    missing = [n for n in needs if importlib.util.find_spec(n) is None]
    if missing:
        raise BadInput(f"--measure --finetune {training.finetune.mode} trains with {' and '.join(missing)}, not"
                       " installed here: pip install 'gputopo[peft]'")
    req = request(model, training, training.attention)
    gpu = target()
    predicted = _predict(model, training, training.attention, "cuda" if gpu else "cpu")
    step = predicted["weights"] + predicted["optimizer"] + predicted["step"]
    # The child builds the model on its device (build.build_model: `with device:`): on a GPU only the
    # runtime stays on the host.
    need = ({"need_bytes": RUNTIME_BYTES, "gpu": gpu, "gpu_bytes": step + training.context_bytes} if gpu
            else {"need_bytes": step + RUNTIME_BYTES})
    started = time.monotonic()
    result = run(req, **need, say=say)
    out = compare(model, training, result)
    out["time"] = step_time(model, training, req, need, say)
    if say:
        say(f"measured in {time.monotonic() - started:.0f} s")
    return out


def step_time(model, training, req: dict, need: dict, say=on_stderr) -> dict:
    """One process's step, predicted from this machine's calibration (gputopo.calibrate) and measured: the
    median of TIMED_STEPS steps after two warm-up steps, in a child with glibc's usual settings (need: run_many's
    memory arguments). `say`: as run_many's, and calibrate.run's."""
    from . import calibrate, speed
    from .plan import Layout
    threads = int(os.environ.get("OMP_NUM_THREADS") or min(os.cpu_count() or 1, 4))
    timed = run_many([{**req, "time_only": True}], **need, malloc=False, say=say)[0]
    cal = calibrate.run(calibrate.request(model, training, threads, device=timed["device"]), say=say)
    rates = calibrate.rates(cal)
    p = speed.step("single", model, Layout(gpus_per_node=1, gpu_mem_bytes=0), training, rates,
                   device=timed["device"])
    measured = statistics.median(timed["step_times_s"])
    return {"predicted_s": p.step_s, "measured_s": measured, "error": p.step_s / measured - 1,
            "step_times_s": timed["step_times_s"], "prediction": p.to_dict(), "basis": rates.basis}


def _predict(model, training, attention: str, device: str) -> dict:
    from . import memory
    from .plan import Layout, model_states, torch_optimizer_bytes
    if training.finetune.peft:   # the plan's own one-GPU states: the frozen base, the adapters and theirs
        states, _, _ = model_states("single", model, Layout(gpus_per_node=1, gpu_mem_bytes=0), training)
        pk = memory.peak(model, training, attention, states["gradients"], device=device)
        return {**{k: states[k] for k in ("weights", "gradients", "optimizer")}, "step": pk["bytes"],
                "phase": pk["phase"]}
    pk = memory.peak(model, training, attention, 4 * model.params, device=device)
    return {"weights": 4 * model.params, "gradients": 4 * model.params,
            "optimizer": torch_optimizer_bytes(model, training), "step": pk["bytes"], "phase": pk["phase"]}


def compare(model, training, result: dict) -> dict:
    """Rows of predicted vs measured; error = predicted / measured - 1."""
    from .plan import ALLOCATOR_RESERVE_BYTES, CUDA_CONTEXT_BYTES
    p = _predict(model, training, result["attention"], result["device"])
    rows = [("weights", p["weights"], result["weights"]), ("gradients", p["gradients"], result["gradients"]),
            ("optimizer states", p["optimizer"], result["optimizer"]),
            ("step (peak above weights and optimizer)", p["step"], result["step"])]
    notes = []
    if result["device"] == "cuda":
        allocated = p["weights"] + p["optimizer"] + p["step"]
        rows.append(("peak allocated", allocated, result["peak"]))
        rows.append(("nvidia-smi (this process)", allocated + CUDA_CONTEXT_BYTES + ALLOCATOR_RESERVE_BYTES,
                     result["nvml_process_bytes"]))
        method = "torch.cuda.max_memory_allocated() over the second step, after reset_peak_memory_stats()"
    else:
        method = ("the process's VmHWM over the second step after `echo 5 > /proc/self/clear_refs`, glibc mmapping"
                  " every block >= 64 KiB")
        if model.attn_dropout or model.hidden_dropout or model.embd_dropout:
            notes.append("dropout > 0: on CPU PyTorch keeps dropout masks in the value dtype (CUDA: 1 byte) and SDPA"
                         " runs dropout through its math kernel, which keeps the scores and Q/K/V in fp32 even under"
                         " autocast (CUDA: fused); the prediction above is the CPU one")
        if training.precision != "fp32":
            notes.append("autocast on CPU casts a different set of ops than on CUDA (e.g. HF's Python GeLU stays 16-bit"
                         " on CPU, fp32 on CUDA); the prediction above is the CPU one")
    if result["attention"] != training.attention:
        notes.append(f"transformers ran {result['attention']} attention where the plan assumed {training.attention}")
    out = [{"component": c, "predicted": int(a), "measured": b, "error": (a / b - 1) if b else None}
           for c, a, b in rows]
    return {"device": result["device"], "attention": result["attention"], "torch": result["torch"],
            "transformers": result["transformers"], "method": method, "predicted_phase": p["phase"],
            "rows": out, "notes": notes, "raw": result}


# ---- the child ----------------------------------------------------------------------------------------------

def _status(key: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1]) * 1024
    raise RuntimeError(f"{key} not in /proc/self/status")


def _optimizer(torch, name: str, params, kwargs: dict | None = None):
    """The optimizer as plan priced it: torch's defaults (foreach on CUDA, per tensor on CPU) unless --optimizer-impl
    says (kwargs: foreach= or fused=)."""
    if name == "adamw":
        return torch.optim.AdamW(params, lr=1e-4, **(kwargs or {}))
    if name == "sgd":
        return torch.optim.SGD(params, lr=1e-4, momentum=0.9, **(kwargs or {}))
    if name == "adafactor":
        return torch.optim.Adafactor(params, lr=1e-4)
    raise SystemExit(f"error: optimizer {name} cannot be measured here")


def child(req: dict) -> dict:
    import torch
    import transformers
    cuda = torch.cuda.is_available()
    device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0))) if cuda else torch.device("cpu")
    from .build import build_model
    model, cfg = build_model(req, device)
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(req["precision"])
    opt = _optimizer(torch, req["optimizer"], [p for p in model.parameters() if p.requires_grad],
                     req.get("optimizer_kwargs"))
    ids = torch.randint(0, cfg.vocab_size, (req["batch_size"], req["seq_len"]), device=device)
    scaler = torch.amp.GradScaler(device.type) if req["precision"] == "fp16" else None

    def step():
        with torch.autocast(device.type, dtype=dtype or torch.float32, enabled=dtype is not None):
            loss = model(input_ids=ids, labels=ids).loss
        if scaler:
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
        else:
            loss.backward()
            opt.step()
        opt.zero_grad(set_to_none=req.get("zero_grad") != "zeros")   # zeros: torch 1.x's default, --zero-grad
        return loss.item()

    step()  # warm-up: optimizer states, lazy buffers, kernel choices
    if req.get("time_only"):
        step()
        return {"device": device.type, "step_times_s": _timed_steps(step, device, TIMED_STEPS)}
    gc.collect()
    params = list(model.parameters())
    out = {"device": device.type, "attention": model.config._attn_implementation,
           "weights": sum(p.numel() * p.element_size() + _quant_state_bytes(torch, p) for p in params),
           "gradients": sum(p.numel() * 4 for p in params if p.requires_grad),  # fp32 like the weights
           "optimizer": sum(v.numel() * v.element_size() for s in opt.state.values() for k, v in s.items()
                            if torch.is_tensor(v) and k != "step"),
           "torch": torch.__version__, "transformers": transformers.__version__}
    # "The step" is the peak above the weights and optimizer states: gradients still allocated from the warm-up
    # (zero_grad(set_to_none=False), --zero-grad zeros) are the step's, as plan counts them, not the base's.
    kept = sum(p.grad.numel() * p.grad.element_size() for p in params if p.grad is not None)
    if cuda:
        torch.cuda.synchronize(device)
        base = torch.cuda.memory_allocated(device) - kept
        torch.cuda.reset_peak_memory_stats(device)
        step()
        torch.cuda.synchronize(device)
        peak = torch.cuda.max_memory_allocated(device)
        out.update(baseline=base, peak=peak, step=peak - base, reserved=torch.cuda.max_memory_reserved(device),
                   nvml_process_bytes=_nvml_process_bytes(device.index or 0))
    else:
        base = _status("VmRSS") - kept
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")  # reset VmHWM to the current resident set
        step()
        peak = _status("VmHWM")
        out.update(baseline=base, peak=peak, step=peak - base, reserved=None, nvml_process_bytes=None)
    return out


def _quant_state_bytes(torch, p) -> int:
    """bitsandbytes' quantization state beside a 4-bit weight (absmax, its nested absmax and codes)."""
    state = getattr(p, "quant_state", None)
    if state is None:
        return 0
    tensors = [state.absmax, state.code] + ([state.state2.absmax, state.state2.code] if state.nested else [])
    return sum(t.numel() * t.element_size() for t in tensors if torch.is_tensor(t))


TIMED_STEPS = 3   # after two warm-up steps; their median is compared with the predicted step


def _timed_steps(step, device, n: int) -> list[float]:
    """Seconds of n more steps, each to its end on the device (CUDA: synchronized)."""
    import time

    import torch
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        step()  # ends in loss.item(), which waits for the device
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        times.append(time.perf_counter() - t0)
    return times


def _nvml_process_bytes(index: int) -> int | None:
    """What nvidia-smi shows for this process on that GPU (context, allocator reserve, workspaces)."""
    try:
        import pynvml
        pynvml.nvmlInit()
        handle = pynvml.nvmlDeviceGetHandleByIndex(index)
        for p in pynvml.nvmlDeviceGetComputeRunningProcesses(handle):
            if p.pid == os.getpid():
                return p.usedGpuMemory
    except Exception:  # NVML missing or restricted (containers): the figure is optional
        return None
    return None


def _main() -> None:
    """The child: each requested configuration measured in turn, one RESULT line each."""
    for one in json.loads(sys.argv[1]):
        print(RESULT + json.dumps(child(one)), flush=True)
        gc.collect()
        torch = sys.modules["torch"]
        if torch.cuda.is_available():
            torch.cuda.empty_cache()  # the next configuration starts from an empty cache


if __name__ == "__main__":
    from .worker import run_child
    run_child(_main)
