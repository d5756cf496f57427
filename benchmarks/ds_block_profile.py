"""DeepSpeed's step against the model's depth: is it a straight line in the blocks? (issue 35, item 1)

Run: .venv/bin/python benchmarks/ds_block_profile.py [--model llama-h256] [--strategy zero2] [--blocks 1 3 6 10 16]
     [--batch 4] [--seq 256] [--precision fp32] [--turns 3] [--interleave] [--save JSON] [--load JSON]

plan --calibrate times DeepSpeed's step on the model cut to 1 and k blocks and carries the difference per
block to the model's L blocks (gputopo/speed.py, sampled_extra). That is right only if the step is a straight
line in the blocks. This script measures it: the same config `gputopo deepspeed-config --no-hf` writes, two
processes over gloo (one thread each, as the CPU twin runs), each depth in turns of steps as the calibration
sampled before issue 35, or with --interleave every depth's engine built first and stepped a step of each in
turn, as it samples now; the forward, backward and optimizer step timed apart on every step, and the minimum
and median over the steps of all turns. It prints each depth's step, the increment per block from the
previous depth, and the straight line through 1 and k carried to the deepest.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from time_accuracy import CONFIGS, DS_ARGS, bin_path, ds_config  # noqa: E402


def child(args) -> None:
    """One process of the torchrun pair: every depth in turns; rank 0 prints the timings as JSON."""
    import deepspeed
    import torch
    import torch.distributed as dist

    from gputopo import build
    deepspeed.init_distributed(dist_backend="gloo")
    cfg = json.loads(Path(args.config).read_text())
    base = dict(CONFIGS[args.model])
    req = {"config": base, "attention": "auto", "grad_checkpointing": False}
    times = {n: {"fwd": [], "bwd": [], "step": [], "all": []} for n in args.blocks}

    def engine_for(n):
        model, mcfg = build.build_model(req, torch.device("cpu"), n)
        engine, *_ = deepspeed.initialize(model=model, model_parameters=model.parameters(), config=cfg)
        return engine, torch.randint(0, mcfg.vocab_size, (args.batch, args.seq))

    def one_step(n, engine, ids, keep):
        dist.barrier()
        t0 = time.perf_counter()
        loss = engine(ids, labels=ids).loss
        t1 = time.perf_counter()
        engine.backward(loss)
        t2 = time.perf_counter()
        engine.step()
        t3 = time.perf_counter()
        if keep:
            for k, v in (("fwd", t1 - t0), ("bwd", t2 - t1), ("step", t3 - t2), ("all", t3 - t0)):
                times[n][k].append(v)

    if args.interleave:   # every depth's engine at once, one step of each in turn: a drift lands on all alike
        engines = {n: engine_for(n) for n in args.blocks}
        for i in range(2 + args.steps * args.turns):
            for n, (engine, ids) in engines.items():
                one_step(n, engine, ids, i >= 2)
    else:
        for _ in range(args.turns):
            for n in args.blocks:
                engine, ids = engine_for(n)
                for i in range(2 + args.steps):
                    one_step(n, engine, ids, i >= 2)
                engine.destroy()
    if dist.get_rank() == 0:
        print("PROFILE " + json.dumps({str(n): v for n, v in times.items()}), flush=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="llama-h256", help="a config of time_accuracy.CONFIGS without its -L<n>")
    ap.add_argument("--strategy", default="zero2", choices=sorted(DS_ARGS))
    ap.add_argument("--blocks", type=int, nargs="+", default=[1, 3, 6, 10, 16])
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--seq", type=int, default=256)
    ap.add_argument("--precision", default="fp32")
    ap.add_argument("--steps", type=int, default=6, help="timed steps per depth and turn (after 2 warm-up)")
    ap.add_argument("--turns", type=int, default=3)
    ap.add_argument("--interleave", action="store_true", help="all depths' engines at once, stepped in turn")
    ap.add_argument("--save", metavar="JSON")
    ap.add_argument("--load", metavar="JSON", help="print a saved profile (nothing is run)")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--config", help=argparse.SUPPRESS)
    args = ap.parse_args()
    name = next((k for k in CONFIGS if k.startswith(args.model + "-L")), None)
    if name is None:
        raise SystemExit(f"no config {args.model}-L<n> in time_accuracy.CONFIGS")
    args.model = name
    if args.child:
        child(args)
        return 0
    if args.load:
        prof = json.loads(Path(args.load).read_text())
    else:
        with tempfile.TemporaryDirectory() as d:
            model_dir = Path(d) / "m"
            model_dir.mkdir()
            (model_dir / "config.json").write_text(json.dumps(CONFIGS[name]))
            cfg = ds_config(args.strategy, model_dir, args.precision, args.batch, 2, Path(d) / "ds.json")
            os.environ.setdefault("TORCH_EXTENSIONS_DIR", str(Path(sys.prefix) / "torch_extensions"))
            cmd = [bin_path("torchrun"), "--standalone", "--nproc_per_node", "2", __file__, "--child",
                   "--config", str(cfg), "--model", args.model.rsplit("-L", 1)[0], "--batch", str(args.batch),
                   "--seq", str(args.seq), "--steps", str(args.steps), "--turns", str(args.turns),
                   *(["--interleave"] if args.interleave else []),
                   "--blocks", *map(str, args.blocks)]
            proc = subprocess.run(cmd, env={**os.environ, "OMP_NUM_THREADS": "1"}, capture_output=True, text=True)
            lines = [l for l in proc.stdout.splitlines() if l.startswith("PROFILE ")]
            if not lines:
                raise SystemExit(proc.stderr[-3000:])
            prof = {"model": args.model.rsplit("-L", 1)[0], "strategy": args.strategy, "precision": args.precision,
                    "batch": args.batch, "seq": args.seq,
                    "interleave": args.interleave, "times": json.loads(lines[0][8:])}
        if args.save:
            Path(args.save).write_text(json.dumps(prof, indent=1))
    times = prof["times"]
    depths = sorted(int(n) for n in times)
    how = "all depths built at once, a step of each in turn" if prof.get("interleave") else "each depth a turn of steps"
    print(f"{prof['model']} {prof['strategy']} {prof['precision']} {prof['batch']}x{prof['seq']}, 2 processes, {how}:"
          " ms per step (median of the steps; min in brackets), increment per block from the previous depth")
    print(f"  {'blocks':>6} {'forward':>14} {'backward':>14} {'opt step':>14} {'whole':>14} {'per block':>10}")
    prev = None
    for n in depths:
        t = times[str(n)]
        med = {k: statistics.median(v) * 1e3 for k, v in t.items()}
        low = {k: min(v) * 1e3 for k, v in t.items()}
        inc = f"{(med['all'] - prev[1]) / (n - prev[0]):>10.1f}" if prev else f"{'':>10}"
        print(f"  {n:>6} " + " ".join(f"{med[k]:>7.1f} [{low[k]:>5.1f}]" for k in ("fwd", "bwd", "step", "all"))
              + f" {inc}")
        prev = (n, med["all"])
    one, deepest = depths[0], depths[-1]
    for k in depths[1:-1]:
        a, b = (statistics.median(times[str(n)]["all"]) for n in (one, k))
        line = a + (deepest - one) * (b - a) / (k - one)
        real = statistics.median(times[str(deepest)]["all"])
        print(f"  the line through {one} and {k} blocks, carried to {deepest}: {line * 1e3:.1f} ms against"
              f" {real * 1e3:.1f} measured ({line / real - 1:+.1%})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
