"""Wall time of `gputopo doctor` (target: well under a second without --config), `doctor --config` on a
ZeRO-3 NVMe config (imports DeepSpeed and asks its op builders), and `ds_report` beside them.

Run: .venv/bin/python benchmarks/doctor_latency.py [--repeat 5]
"""
import argparse
import json
import shutil
import subprocess
import tempfile
from pathlib import Path

from cli_latency import BIN, wall  # the same median-of-runs timer (run from the repository root)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    gputopo = str(BIN / "gputopo")
    with tempfile.TemporaryDirectory() as tmp:
        cfg = Path(tmp) / "ds.json"
        subprocess.run([gputopo, "deepspeed-config", "--stage", "3", "--offload", "nvme", "--nvme-path", tmp,
                        "-o", str(cfg)], check=True, capture_output=True)
        rows = [("gputopo doctor", [gputopo, "doctor"]),
                ("gputopo doctor --config (ZeRO-3 NVMe)", [gputopo, "doctor", "--config", str(cfg)])]
        ds = BIN / "ds_report" if (BIN / "ds_report").exists() else shutil.which("ds_report")
        if ds:
            rows.append(("ds_report", [str(ds)]))
        out = json.loads(subprocess.run([gputopo, "doctor", "--json"], capture_output=True, text=True).stdout)
        for name, cmd in rows:
            print(f"{name:<42} {wall(cmd, args.repeat if 'ds_report' not in name else 1):7.3f} s (median wall)")
        print(f"{'doctor checks alone (elapsed_s in --json)':<42} {out['elapsed_s']:7.3f} s")


if __name__ == "__main__":
    main()
