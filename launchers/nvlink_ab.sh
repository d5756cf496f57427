#!/usr/bin/env bash
# bash launchers/nvlink_ab.sh --model gpt2 --steps 200 --batch-size 4
# The NVLink A/B of docs/sources.md#ddp-nvlink-benchmark on one node, as bare commands: the same DDP run
# twice, P2P allowed and then NCCL_P2P_DISABLE=1. Results go to a fresh folder (nothing is deleted).
# `gputopo bench-nvlink` does the same with statistics, an all-reduce sweep and a report.
set -euo pipefail
out=$(mktemp -d "${TMPDIR:-/tmp}/nvlink-ab.XXXXXX")
if [ -z "${NPROC:-}" ]; then
  NPROC=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
  [ "$NPROC" -gt 0 ] || NPROC=2
fi
torchrun --standalone --nproc_per_node "$NPROC" -m gputopo.worker "$@" --output "$out/p2p.json"
NCCL_P2P_DISABLE=1 torchrun --standalone --nproc_per_node "$NPROC" -m gputopo.worker "$@" --output "$out/no_p2p.json"
python - "$out" <<'PY'
import json, sys
a, b = (json.load(open(f"{sys.argv[1]}/{n}.json")) for n in ("p2p", "no_p2p"))
print(f"| NVLink | Time |\n|---|---|\n| Y | {a['timed_runtime_s']:.1f}s |\n| N | {b['timed_runtime_s']:.1f}s |")
print(f"P2P is {b['timed_runtime_s'] / a['timed_runtime_s']:.2f}x the speed of no-P2P; results in {sys.argv[1]}")
PY
