#!/usr/bin/env bash
# bash launchers/torchrun_deepspeed.sh ds_configs/hf_zero2.json --model gpt2 --steps 50
# One node: every visible GPU (or NPROC processes; 2 on a CPU-only machine) trains gpt2 under DeepSpeed with
# the given config. Extra arguments go to `python -m gputopo.worker` (see its --help).
set -euo pipefail
config=${1:?usage: bash launchers/torchrun_deepspeed.sh CONFIG.json [worker args]}
shift
if [ -z "${NPROC:-}" ]; then
  NPROC=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
  [ "$NPROC" -gt 0 ] || NPROC=2
fi
exec torchrun --standalone --nproc_per_node "$NPROC" -m gputopo.worker --deepspeed "$config" "$@"
