"""How long `gputopo inspect --plot` takes per bundled example, as a user runs it (a fresh process each).

Run: python benchmarks/plot_speed.py   (target: under 3 s per PNG and per SVG on a CPU-only machine)
"""
import json
import subprocess
import sys
import tempfile
import time
from importlib import resources
from pathlib import Path

examples = [k for k in json.loads(resources.files("gputopo.examples").joinpath("index.json").read_text())
            if not k.startswith("_")]
with tempfile.TemporaryDirectory() as tmp:
    base = [sys.executable, "-m", "gputopo", "inspect", "--json"]
    t0 = time.perf_counter()
    subprocess.run(base + ["--example", examples[0]], check=True, capture_output=True)
    plain = time.perf_counter() - t0
    print(f"inspect without --plot: {plain:.2f} s (process start and imports)")
    worst = 0.0
    for name in examples:
        row = []
        for fmt in ("png", "svg"):
            out = Path(tmp) / f"{name}.{fmt}"
            t0 = time.perf_counter()
            subprocess.run(base + ["--example", name, "--plot", str(out)], check=True, capture_output=True)
            dt = time.perf_counter() - t0
            worst = max(worst, dt)
            row.append(f"{fmt} {dt:.2f} s ({out.stat().st_size // 1024} KiB)")
        print(f"{name:22s} " + "   ".join(row))
    print(f"slowest: {worst:.2f} s  target < 3 s: {'OK' if worst < 3 else 'MISSED'}")
