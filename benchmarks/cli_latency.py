"""Wall time of `gputopo --help`, `inspect --from-file`, `deepspeed-config` and `plan` beside `accelerate env`.

deepspeed-config rows are repeats: one unmeasured run first fills the validation cache (~/.cache/gputopo),
as a user's second run finds it. NVMe configs also cache DeepSpeed's libaio probe (a test compile, ~2 s).

Run: .venv/bin/python benchmarks/cli_latency.py [--repeat 5]
Every command runs once before it is timed, with Python's bytecode cache on (as a user's shell has it).
Targets: gputopo at least 20x faster than `accelerate env` (plan's rows aside); plan's search of a 70B model
on 8 nodes x 8 GPUs (every micro-batch, checkpointing, parameter offload and strategy) under 2 s (issue 34);
`inspect --from-file` within 1.5x of the floor, a bare
`python -c "import click"` process in the same venv (issue 18; 1.5x: issue 50), timed in alternating pairs so a busy
machine slows both sides alike: the ratio printed is the median of the per-pair ratios.
"""
import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
FLOOR_TARGET = 1.5   # inspect --from-file / `python -c "import click"`, at most (issue 50)


# As a user's shell runs them: Python writes and reuses its bytecode cache (some sandboxes set
# PYTHONDONTWRITEBYTECODE, which recompiles every module on every run), and each command runs once unmeasured.
ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}


def wall(cmd: list[str], repeat: int) -> float:
    subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=ENV)  # warm: not measured
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=ENV)
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def floor_ratio(cmd: list[str], repeat: int) -> tuple[float, float, float]:
    """(median ratio, median command s, median floor s): the command against `python -c "import click"`, paired."""
    floor = [sys.executable, "-c", "import click"]
    for warm in (floor, cmd):
        subprocess.run(warm, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=ENV)
    ratios, a, b = [], [], []
    for _ in range(repeat):
        t0 = time.perf_counter()
        subprocess.run(floor, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=ENV)
        t1 = time.perf_counter()
        subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=ENV)
        t2 = time.perf_counter()
        a.append(t2 - t1)
        b.append(t1 - t0)
        ratios.append((t2 - t1) / (t1 - t0))
    return statistics.median(ratios), statistics.median(a), statistics.median(b)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    fixture = HERE / "tests/fixtures/topo/dgx_a100_nv12_mlx5_old_names_trailing_cmds.txt"
    gputopo = str(BIN / "gputopo")
    rows = [("gputopo --help", [gputopo, "--help"]),
            ("gputopo inspect --from-file (DGX A100)", [gputopo, "inspect", "--from-file", str(fixture)]),
            ("gputopo inspect (live probe)", [gputopo, "inspect"])]
    nvme = tempfile.mkdtemp(prefix="gputopo-bench-nvme-")
    configs = [("gputopo deepspeed-config --stage 3 --offload cpu (repeat)",
                [gputopo, "deepspeed-config", "--stage", "3", "--offload", "cpu"]),
               ("gputopo deepspeed-config --offload nvme (repeat)",
                [gputopo, "deepspeed-config", "--stage", "3", "--offload", "nvme", "--nvme-path", nvme])]
    for _, cmd in configs:
        subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fills the cache
    rows += configs
    searched = [("gputopo plan (searched): mistral-7b, 4x RTX 4090",
                 [gputopo, "plan", "--model", "mistral-7b", "--gpus", "4", "--gpu-model", "RTX 4090", "--cpu-mem",
                  "128GiB"]),
                ("gputopo plan (searched): llama-2-70b, 8 nodes x 8 H100",
                 [gputopo, "plan", "--model", "llama-2-70b", "--gpus", "8", "--nodes", "8", "--gpu-model", "H100",
                  "--cpu-mem", "2TiB"]),
                ("gputopo deepspeed-config --auto (searched, repeat)",
                 [gputopo, "deepspeed-config", "--auto", "--model", "mistral-7b", "--gpus", "4", "--gpu-model",
                  "RTX 4090", "--cpu-mem", "128GiB", "--launcher", "torchrun"])]
    rows += searched
    for name, exe in (("accelerate env", "accelerate"), ("ds_report", "ds_report")):
        path = BIN / exe if (BIN / exe).exists() else shutil.which(exe)
        if path:
            rows.append((name, [str(path)] + (["env"] if exe == "accelerate" else [])))
    results = {name: wall(cmd, args.repeat if "gputopo" in name else max(1, args.repeat // 2)) for name, cmd in rows}
    shutil.rmtree(nvme, ignore_errors=True)
    ref = results.get("accelerate env")
    print(f"{'command':58} {'median s':>9} {'x faster than accelerate env':>30}")
    for name, t in results.items():
        print(f"{name:58} {t:9.3f} {(f'{ref / t:.1f}x' if ref else 'n/a'):>30}")
    ratio, cmd_s, floor_s = floor_ratio(rows[1][1], max(10, 2 * args.repeat))
    print(f"inspect --from-file / floor (python -c 'import click'): {ratio:.2f}"
          f" ({cmd_s * 1000:.0f} ms vs {floor_s * 1000:.0f} ms, medians of paired runs); target <= {FLOOR_TARGET}:"
          f" {'met' if ratio <= FLOOR_TARGET else 'NOT met'}")
    big = results[searched[1][0]]
    print(f"plan's search, 70B on 8 x 8 GPUs: {big:.2f} s; target < 2 s: {'met' if big < 2 else 'NOT met'}")
    if ref:
        worst = max(t for n, t in results.items() if n.startswith("gputopo") and "searched" not in n)
        print(f"target >= 20x: {'met' if ref / worst >= 20 else 'NOT met'}"
              f" ({ref / worst:.1f}x for the slowest gputopo command)")


if __name__ == "__main__":
    main()
