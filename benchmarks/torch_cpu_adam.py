"""torch's AdamW on the host against DeepSpeed's CPU Adam, on one flat fp32 tensor as FSDP's CPU offload hands
torch's optimizer its shard (speed.TORCH_CPU_ADAM_SLOWDOWN). Prints each one's parameters per second and their
ratio; the cores torch and DeepSpeed may use are this machine's (run it on the host that will train).

    .venv/bin/python benchmarks/torch_cpu_adam.py [--params 50e6] [--steps 5]
"""
import argparse
import json
import os
import time

import torch


def rate(opt, p, steps: int) -> float:
    p.grad = torch.randn_like(p)
    opt.step()                       # states allocated outside the timing
    start = time.perf_counter()
    for _ in range(steps):
        opt.step()
    return steps * p.numel() / (time.perf_counter() - start)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--params", type=float, default=50e6)
    ap.add_argument("--steps", type=int, default=5)
    args = ap.parse_args()
    n = int(args.params)
    out = {"params": n, "threads": torch.get_num_threads(), "cores": os.cpu_count(), "torch": torch.__version__}
    for impl in ("foreach", "for-loop"):
        p = torch.nn.Parameter(torch.zeros(n))
        opt = torch.optim.AdamW([p], lr=1e-4, foreach=impl == "foreach")
        out[f"torch_adamw_{impl}_params_per_s"] = rate(opt, p, args.steps)
    from deepspeed.ops.adam import DeepSpeedCPUAdam
    p = torch.nn.Parameter(torch.zeros(n))
    out["deepspeed_cpu_adam_params_per_s"] = rate(DeepSpeedCPUAdam([p], lr=1e-4), p, args.steps)
    # torch picks foreach only for CUDA tensors (torch.optim.optimizer._default_to_fused_or_foreach): on the host
    # AdamW runs its for-loop, the default FSDP's CPU offload gets
    for impl in ("foreach", "for-loop"):
        out[f"slowdown_{impl}"] = out["deepspeed_cpu_adam_params_per_s"] / out[f"torch_adamw_{impl}_params_per_s"]
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
