"""DeepSpeed's CPU Adam on this machine: parameters per second per core, the figure plan's offload rate rests on.

Run: .venv/bin/python benchmarks/cpu_adam_rate.py [--params N] [--steps N]

What ZeRO-Offload steps on the host each optimizer step: DeepSpeedCPUAdam over fp32 master weights with fp32
gradients (deepspeed/ops/adam/cpu_adam.py), on one thread and on every core (OpenMP, as each rank runs it when
OMP_NUM_THREADS is not 1). Prints the median step, parameters per second, and per core; gputopo.speed's
CPU_ADAM_PER_CORE is this machine's per-core figure, the vector width (AVX-512 here, 16 fp32 lanes; AVX2 8:
DeepSpeed's csrc/includes/simd.h) from /proc/cpuinfo as DeepSpeed's op builder reads it.
Needs DeepSpeed's cpu_adam op (bash .ci/setup builds it).
"""
import argparse
import os
import statistics
import subprocess
import sys
import time

CHILD = "--child"


def child(params: int, steps: int) -> None:
    import torch
    from deepspeed.ops.adam import DeepSpeedCPUAdam
    p = torch.nn.Parameter(torch.randn(params))
    p.grad = torch.randn(params)
    opt = DeepSpeedCPUAdam([p], lr=1e-4)
    opt.step()   # warm-up: the op loads, pages are touched
    times = []
    for _ in range(steps):
        t = time.perf_counter()
        opt.step()
        times.append(time.perf_counter() - t)
    print(statistics.median(times))


def simd() -> str:
    flags = open("/proc/cpuinfo").read()
    return "AVX-512" if "avx512f" in flags else "AVX2" if "avx2" in flags else "scalar"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--params", type=int, default=50_000_000)
    ap.add_argument("--steps", type=int, default=7)
    ap.add_argument(CHILD, action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        return child(a.params, a.steps)
    import psutil
    cores = psutil.cpu_count(logical=False) or os.cpu_count()
    print(f"this machine: {cores} core(s), {simd()}; {a.params / 1e6:.0f}M fp32 parameters, median of {a.steps} steps")
    for threads in sorted({1, cores}):
        env = {**os.environ, "OMP_NUM_THREADS": str(threads)}
        out = subprocess.run([sys.executable, __file__, CHILD, "--params", str(a.params), "--steps", str(a.steps)],
                             env=env, capture_output=True, text=True, check=True).stdout.split()[-1]
        s = float(out)
        rate = a.params / s
        print(f"  {threads} thread(s): {s:.3f} s per step, {rate / 1e6:.0f}M params/s, {rate / threads / 1e6:.0f}M per"
              " core")


if __name__ == "__main__":
    main()
