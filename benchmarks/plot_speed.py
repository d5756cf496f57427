"""How long `gputopo inspect --plot` takes per bundled example, as a user runs it (a fresh process each).

Run: python benchmarks/plot_speed.py   (target: under 3 s per PNG and per SVG on a CPU-only machine)
"""
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from importlib import resources
from pathlib import Path


def _cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


examples = [k for k in json.loads(resources.files("gputopo.examples").joinpath("index.json").read_text())
            if not k.startswith("_")]
with tempfile.TemporaryDirectory() as tmp:
    base = [sys.executable, "-m", "gputopo", "inspect", "--json"]
    t0 = time.perf_counter()
    subprocess.run(base + ["--example", examples[0]], check=True, capture_output=True)
    plain = time.perf_counter() - t0
    print(f"inspect without --plot: {plain:.2f} s (process start and imports)")
    worst = worst_cpu = 0.0
    for name in examples:
        row = []
        for fmt in ("png", "svg"):
            out = Path(tmp) / f"{name}.{fmt}"
            t0, c0 = time.perf_counter(), _cpu()
            subprocess.run(base + ["--example", name, "--plot", str(out)], check=True, capture_output=True)
            dt, cpu = time.perf_counter() - t0, _cpu() - c0
            worst, worst_cpu = max(worst, dt), max(worst_cpu, cpu)
            row.append(f"{fmt} {dt:.2f} s wall, {cpu:.2f} s CPU ({out.stat().st_size // 1024} KiB)")
        print(f"{name:22s} " + "   ".join(row))
    # On a shared machine wall time includes waiting for a core; CPU time (user + system of the child) is what
    # the same run costs on an idle core.
    print(f"slowest: {worst:.2f} s wall, {worst_cpu:.2f} s CPU  target < 3 s:"
          f" wall {'OK' if worst < 3 else 'MISSED'}, CPU {'OK' if worst_cpu < 3 else 'MISSED'}")

# The same in one process: what matplotlib's import costs once, and what drawing costs per figure.
t0 = time.perf_counter()
import matplotlib.figure  # noqa: E402,F401
from matplotlib.backends import backend_agg  # noqa: E402,F401

print(f"import matplotlib: {time.perf_counter() - t0:.2f} s")
from click.testing import CliRunner  # noqa: E402

from gputopo import plot  # noqa: E402
from gputopo.cli import cli  # noqa: E402

for name in examples:
    data = json.loads(CliRunner().invoke(cli, ["inspect", "--json", "--example", name]).output)
    t0 = time.perf_counter()
    plot.render(data, "png")
    t1 = time.perf_counter()
    plot.render(data, "svg")
    print(f"{name:22s} in process: png {t1 - t0:.2f} s, svg {time.perf_counter() - t1:.2f} s")
print(f"load average while measuring: {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
