"""Harness cost of `gputopo bench-nvlink`: its reported per-step time against a bare DDP loop on the same
model, batch and data (CPU, gloo, 2 processes). Target: at most 5 %.

Run: .venv/bin/python benchmarks/bench_overhead.py [--steps 30] [--hidden 256 --layers 4]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

BIN = Path(sys.executable).parent

BARE = r'''
import os, statistics, sys, time, json
import torch, torch.distributed as dist, transformers
from torch.nn.parallel import DistributedDataParallel as DDP
transformers.logging.set_verbosity_error()
model_dir, steps, warmup, batch, seq = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
torch.manual_seed(0)
model = transformers.AutoModelForCausalLM.from_config(transformers.AutoConfig.from_pretrained(model_dir))
ddp = DDP(model)
opt = torch.optim.AdamW(ddp.parameters(), lr=5e-5)
g = torch.Generator().manual_seed(0)
data = torch.randint(0, model.config.vocab_size, (max(steps * world, 8) * batch, seq), generator=g).view(-1, batch, seq)
times = []
for step in range(steps):
    x = data[(step * world + rank) % len(data)]
    t0 = time.perf_counter()
    loss = ddp(x, labels=x).loss
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    times.append(time.perf_counter() - t0)
if rank == 0:
    print("BARE " + json.dumps(times[warmup:]), flush=True)
dist.barrier()
'''


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--repeat", type=int, default=2, help="alternating runs of each, to even out drift")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        model = Path(tmp, "model")
        model.mkdir()
        (model / "config.json").write_text(json.dumps({
            "model_type": "gpt2", "architectures": ["GPT2LMHeadModel"], "n_embd": args.hidden, "n_layer": args.layers,
            "n_head": max(1, args.hidden // 64), "vocab_size": 5000, "n_positions": args.seq, "bos_token_id": 0,
            "eos_token_id": 0}))
        script = Path(tmp, "bare.py")
        script.write_text(BARE)
        env = {**os.environ, "OMP_NUM_THREADS": "1"}
        bare, harness = [], []
        for _ in range(args.repeat):
            out = subprocess.run([str(BIN / "torchrun"), "--standalone", "--nproc_per_node", "2", str(script), str(model),
                                  str(args.steps), str(args.warmup), str(args.batch), str(args.seq)],
                                 capture_output=True, text=True, env=env, check=True).stdout
            bare += json.loads(next(l for l in out.splitlines() if l.startswith("BARE "))[5:])
            out = subprocess.run([str(BIN / "gputopo"), "bench-nvlink", "--model", str(model), "--train-only", "--json",
                                  "--steps", str(args.steps), "--warmup-steps", str(args.warmup), "--batch-size",
                                  str(args.batch), "--seq-len", str(args.seq), "--dataset", "synthetic"],
                                 capture_output=True, text=True, env=env, check=True).stdout
            harness += json.loads(out)["runs"][0]["step_times_s"]
    b, h = statistics.median(bare), statistics.median(harness)
    print(f"GPT-2 h={args.hidden} L={args.layers}, batch {args.batch} x {args.seq}, 2 CPU processes (gloo),"
          f" {args.steps} steps ({args.warmup} warm-up) x {args.repeat}")
    print(f"bare DDP loop median step   {b * 1000:8.2f} ms")
    print(f"bench-nvlink P2P arm median {h * 1000:8.2f} ms")
    print(f"harness overhead            {h / b - 1:+8.1%} (target: at most +5 %)")


if __name__ == "__main__":
    main()
