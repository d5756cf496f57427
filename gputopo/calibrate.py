"""This machine's rates for gputopo.speed, measured: the model's own matmul shapes, memory bandwidth as
elementwise kernels reach it, and the optimizer's parameters per second; the all-reduce bus bandwidth and
latency come from an all-reduce sweep (gputopo.bench's, or `allreduce_fit` on any sweep).

The parent never imports torch: `python -m gputopo.calibrate REQUEST_JSON` runs in a child with the threads
the training processes will have (OMP_NUM_THREADS), and prints one result line.
"""
from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time

from .errors import BenchmarkFailed

RESULT = "GPUTOPO_CALIBRATE "
SECONDS = 3.0           # the whole calibration's budget, shared among the shapes


def request(model, training, threads: int | None = None) -> dict:
    """What the child times: every distinct matmul shape of the step, in the compute dtype."""
    from .speed import key, training_matmuls
    shapes = sorted({key(M, N, K) for _, M, N, K in training_matmuls(model, training, training.attention)})
    return {"shapes": shapes, "precision": training.precision, "optimizer": training.optimizer,
            "threads": threads}


def run(req: dict, copies: int = 1, timeout: float = 600) -> dict:
    """Calibrate in `copies` children at once, as many as the training will run on this machine, so the
    rates are those the processes reach while sharing its cores, caches and memory; averaged over them."""
    env = dict(os.environ)
    if req.get("threads"):
        env["OMP_NUM_THREADS"] = str(req["threads"])
    cmd = [sys.executable, "-m", "gputopo.calibrate", json.dumps(req)]
    procs = [subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for _ in range(copies)]
    results = []
    try:
        for proc in procs:
            out, err = proc.communicate(timeout=timeout)
            lines = [json.loads(l[len(RESULT):]) for l in out.splitlines() if l.startswith(RESULT)]
            if proc.returncode or not lines:
                last = (err.strip().splitlines() or ["no output"])[-1]
                raise BenchmarkFailed(f"calibration failed (exit {proc.returncode}): {last}")
            results.append(lines[0])
    except subprocess.TimeoutExpired:
        raise BenchmarkFailed(f"calibration took more than {timeout:.0f} s and was stopped") from None
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
    return average(results)


def average(results: list[dict]) -> dict:
    """One calibration from several children's: each time and rate averaged."""
    out = dict(results[0], copies=len(results))
    out["matmul_seconds"] = {k: statistics.fmean(r["matmul_seconds"][k] for r in results)
                             for k in results[0]["matmul_seconds"]}
    for k in ("matmul_flops", "mem_bytes_per_s", "optimizer_params_per_s"):
        out[k] = statistics.fmean(r[k] for r in results)
    return out


def allreduce_fit(sweep: list[dict]) -> tuple[float, float]:
    """(bus bandwidth in bytes/s, latency in s) from an all-reduce sweep's rows {"bytes", "seconds",
    "busbw_gbps"}: a least-squares line through seconds = latency + bytes x 2(n-1)/n / busbw."""
    xs = [r["bytes"] * r["busbw_gbps"] / (r["bytes"] / r["seconds"] / 1e9) for r in sweep]  # bytes x 2(n-1)/n
    ys = [r["seconds"] for r in sweep]
    if len(xs) < 2:
        return xs[0] / ys[0], 0.0
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sum((x - mx) ** 2 for x in xs)
    latency = max(0.0, my - slope * mx)
    return 1 / slope, latency


def rates(cal: dict, *, sweep: list[dict] | None = None):
    """speed.Rates from a calibration (and an all-reduce sweep, when there is one)."""
    from .speed import Rates
    busbw, latency = allreduce_fit(sweep) if sweep else (None, 0.0)
    device = f"{cal['device']}, {cal['threads']} thread(s)" if cal["device"] == "cpu" else cal["device"]
    basis = {"device": device, "matmul": f"calibrated: the model's {len(cal['matmul_seconds'])} matmul shapes timed"
                                         f" on {device}",
             "memory": f"calibrated: {cal['mem_bytes_per_s'] / 1e9:.1f} GB/s through elementwise kernels",
             "optimizer": f"calibrated: {cal['optimizer_params_per_s'] / 1e6:.1f} M params/s"}
    if busbw:
        basis["link"] = f"measured: all-reduce sweep, {busbw / 1e9:.2f} GB/s bus bandwidth, {latency * 1e6:.0f} us"
    basis["summary"] = f"calibrated on this machine ({device})"
    return Rates(matmul_flops=cal["matmul_flops"], mem_bytes_per_s=cal["mem_bytes_per_s"], busbw=busbw,
                 busbw_no_p2p=busbw, inter_node=busbw, latency_s=latency,
                 matmul_seconds=cal["matmul_seconds"],
                 optimizer_params_per_s=cal["optimizer_params_per_s"], basis=basis)


# ---- the child ----------------------------------------------------------------------------------------------

def _timed(fn, sync, budget: float) -> float:
    """Median seconds of fn after one warm-up, repeated within the budget (at least 3 times)."""
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


def child(req: dict) -> dict:
    """Time the shapes, the elementwise kernels and the optimizer on this device."""
    import torch
    cuda = torch.cuda.is_available()
    device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0))) if cuda else torch.device("cpu")
    sync = (lambda: torch.cuda.synchronize(device)) if cuda else (lambda: None)
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(req["precision"], torch.float32)
    budget = SECONDS / max(1, len(req["shapes"]) + 2)
    out, flops, seconds = {}, 0, 0.0
    for k in req["shapes"]:
        M, N, K = map(int, k.split("x"))
        a = torch.randn(M, K, device=device, dtype=dtype)
        b = torch.randn(K, N, device=device, dtype=dtype)
        s = _timed(lambda a=a, b=b: torch.mm(a, b), sync, budget)
        out[k] = s
        flops += 2 * M * N * K
        seconds += s
    # Elementwise: a GeLU, a residual add and a softmax on a 64 MiB fp32 tensor; bytes read + written.
    x = torch.randn(16 * 2 ** 20, device=device)
    y = torch.randn(16 * 2 ** 20, device=device)
    n = x.numel() * 4
    ew = [(lambda: torch.nn.functional.gelu(x), 2 * n), (lambda: x + y, 3 * n),
          (lambda: torch.softmax(x.view(-1, 1024), -1), 2 * n)]
    mem = sum(b for _, b in ew) / sum(_timed(f, sync, budget) for f, _ in ew)
    return {"device": device.type, "threads": torch.get_num_threads(), "matmul_seconds": out,
            "matmul_flops": flops / seconds if seconds else None, "mem_bytes_per_s": mem,
            "optimizer_params_per_s": _optimizer_rate(torch, req, device, sync), "torch": torch.__version__}


def _optimizer_rate(torch, req: dict, device, sync) -> float:
    """torch.optim.AdamW (its defaults) on tensors of 4 M parameters: parameters stepped per second."""
    params = [torch.nn.Parameter(torch.randn(2 ** 20, device=device)) for _ in range(4)]
    for p in params:
        p.grad = torch.randn_like(p)
    opt = torch.optim.AdamW(params, lr=1e-4) if req["optimizer"] != "sgd" else \
        torch.optim.SGD(params, lr=1e-4, momentum=0.9)
    return 4 * 2 ** 20 / _timed(opt.step, sync, 1.0)


if __name__ == "__main__":
    print(RESULT + json.dumps(child(json.loads(sys.argv[1]))), flush=True)
