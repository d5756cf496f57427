#!/usr/bin/env bash
# bash launchers/deepspeed_multinode.sh hostfile ds_configs/zero3.json --model gpt2 --steps 50
# Several nodes with the deepspeed launcher: hostfile lines look like `node1 slots=8`, the first is the head.
# Run on the head node: the launcher reaches the others over passwordless ssh. Without ssh, run it on every
# node with NODE_RANK set (0 on the first host of the hostfile, then in hostfile order). A hostfile naming one
# host launches here directly. Each GPU runs `python -m gputopo.worker`.
set -euo pipefail
hostfile=${1:?usage: bash launchers/deepspeed_multinode.sh HOSTFILE CONFIG.json [worker args]}
config=${2:?usage: bash launchers/deepspeed_multinode.sh HOSTFILE CONFIG.json [worker args]}
shift 2
master=$(awk 'NF && $1 !~ /^#/ {print $1; exit}' "$hostfile")
hosts=$(awk 'NF && $1 !~ /^#/' "$hostfile" | wc -l)
mode=()
if [ -n "${NODE_RANK:-}" ]; then
  mode=(--no_ssh --node_rank "$NODE_RANK")
elif [ "$hosts" -eq 1 ]; then
  mode=(--no_ssh_check)  # one host: DeepSpeed starts the ranks locally, no ssh needed
fi
exec deepspeed --hostfile "$hostfile" "${mode[@]}" --master_addr "$master" --master_port "${MASTER_PORT:-29500}" \
  --module gputopo.worker --deepspeed "$config" "$@"
