#!/usr/bin/env bash
# bash launchers/deepspeed_multinode.sh hostfile ds_configs/zero3.json --model gpt2 --steps 50
# Several nodes with the deepspeed launcher: hostfile lines look like `node1 slots=8`; the launcher reaches the
# other nodes over passwordless ssh and starts `python -m gputopo.worker` on each GPU.
set -euo pipefail
hostfile=${1:?usage: bash launchers/deepspeed_multinode.sh HOSTFILE CONFIG.json [worker args]}
config=${2:?usage: bash launchers/deepspeed_multinode.sh HOSTFILE CONFIG.json [worker args]}
shift 2
master=$(awk 'NF && $1 !~ /^#/ {print $1; exit}' "$hostfile")
exec deepspeed --hostfile "$hostfile" --master_addr "$master" --master_port "${MASTER_PORT:-29500}" \
  --module gputopo.worker --deepspeed "$config" "$@"
