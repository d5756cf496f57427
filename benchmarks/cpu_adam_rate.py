"""DeepSpeed's CPU Adam on this machine: the kernel alone and the host step of a ZeRO-Offload training, per core.

Run: .venv/bin/python benchmarks/cpu_adam_rate.py [--params N] [--steps N] [--training] [--width W --layers L]

The kernel: DeepSpeedCPUAdam over fp32 master weights with fp32 gradients (deepspeed/ops/adam/cpu_adam.py), on
one thread and on every core (OpenMP, as each rank runs it when OMP_NUM_THREADS is not 1), on --params parameters
(50M: 800 MB of weights, gradients and moments, past the caches). Prints the median step, parameters per second,
and per core, with the vector width (AVX-512 here, 16 fp32 lanes; AVX2 8: DeepSpeed's csrc/includes/simd.h) from
/proc/cpuinfo as DeepSpeed's op builder reads it.

--training: what ZeRO-Offload's host step takes in training, where gputopo.speed's CPU_ADAM_PER_CORE comes from:
a GPT-2 of --width x --layers (1024 x 24: gpt2-medium's 355M parameters) trained by deepspeed.initialize with
ZeRO-2, the optimizer offloaded to the CPU, bf16, in one process on every core (gloo), its engine.step() timed
(the gradient norm, clipping, CPU Adam, the updated fp32 weights copied to the 16-bit model) after 2 warm-up
steps; the parameters stepped per second of it, per core. On a CPU the "GPU" is this machine too: the copies
between them are memory copies, as on a GPU's host they are the host's side of the transfers.
Needs DeepSpeed's cpu_adam op (bash .ci/setup builds it).
"""
import argparse
import os
import statistics
import subprocess
import sys
import time

CHILD = "--child"


def kernel(params: int, steps: int) -> float:
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
    return statistics.median(times)


def training(width: int, layers: int, steps: int) -> tuple[int, float]:
    """(parameters, median seconds of engine.step()) of a ZeRO-2 CPU-offload bf16 training in this process."""
    os.environ.update(RANK="0", WORLD_SIZE="1", LOCAL_RANK="0", MASTER_ADDR="127.0.0.1",
                      MASTER_PORT=os.environ.get("MASTER_PORT", "29561"))
    import deepspeed
    import torch
    import transformers
    transformers.logging.set_verbosity_error()
    cfg = transformers.GPT2Config(n_embd=width, n_layer=layers, n_head=max(1, width // 64))
    model = transformers.GPT2LMHeadModel(cfg)
    params = sum(p.numel() for p in model.parameters())
    ds = {"train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": 1, "gradient_clipping": 1.0,
          "bf16": {"enabled": True}, "optimizer": {"type": "AdamW", "params": {"lr": 1e-5}},
          "zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu", "pin_memory": True},
                                "overlap_comm": True, "contiguous_gradients": True,
                                "reduce_bucket_size": width * width}}
    engine, *_ = deepspeed.initialize(model=model, config=ds, model_parameters=model.parameters())
    ids = torch.randint(0, cfg.vocab_size, (1, 32))
    times = []
    for i in range(steps + 2):
        engine.backward(engine(input_ids=ids, labels=ids).loss)
        t = time.perf_counter()
        engine.step()
        if i >= 2:
            times.append(time.perf_counter() - t)
    return params, statistics.median(times)


def simd() -> str:
    flags = open("/proc/cpuinfo").read()
    return "AVX-512" if "avx512f" in flags else "AVX2" if "avx2" in flags else "scalar"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--params", type=int, default=50_000_000)
    ap.add_argument("--steps", type=int, default=7)
    ap.add_argument("--training", action="store_true", help="time ZeRO-Offload's host step in training")
    ap.add_argument("--width", type=int, default=1024)
    ap.add_argument("--layers", type=int, default=24)
    ap.add_argument(CHILD, action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        if a.training:
            params, s = training(a.width, a.layers, a.steps)
            print(params, s, flush=True)
            os._exit(0)   # DeepSpeed's exit can abort after a good run (docs/measurements/cpu-install-2026-11.md)
        print(0, kernel(a.params, a.steps))
        return
    import psutil
    cores = psutil.cpu_count(logical=False) or os.cpu_count()
    what = (f"ZeRO-2 CPU-offload host step of a GPT-2 {a.width} x {a.layers}, bf16" if a.training else
            f"the kernel on {a.params / 1e6:.0f}M fp32 parameters")
    print(f"this machine: {cores} core(s), {simd()}; {what}, median of {a.steps} steps")
    for threads in [cores] if a.training else sorted({1, cores}):
        env = {**os.environ, "OMP_NUM_THREADS": str(threads)}
        out = subprocess.run([sys.executable, __file__, CHILD, *sys.argv[1:]], env=env, capture_output=True,
                             text=True, check=True).stdout.split()
        params, s = (int(out[-2]) or a.params), float(out[-1])
        rate = params / s
        print(f"  {threads} thread(s): {params / 1e6:.0f}M parameters, {s:.3f} s per step, {rate / 1e6:.0f}M params/s,"
              f" {rate / threads / 1e6:.0f}M per core")


if __name__ == "__main__":
    main()
