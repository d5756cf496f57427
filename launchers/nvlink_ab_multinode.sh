#!/usr/bin/env bash
# NNODES=2 NODE_RANK=0 MASTER_ADDR=node1 bash launchers/nvlink_ab_multinode.sh --model gpt2 --steps 200
# The A/B across nodes: run it on every node with its NODE_RANK; c10d rendezvous at MASTER_ADDR:29500.
# NCCL_P2P_DISABLE only changes the links inside each node; the network between nodes is the same both times.
set -euo pipefail
: "${NNODES:?set NNODES}" "${NODE_RANK:?set NODE_RANK}" "${MASTER_ADDR:?set MASTER_ADDR}"
out=$(mktemp -d "${TMPDIR:-/tmp}/nvlink-ab.XXXXXX")
# every GPU here, else 2 processes (CPU, gloo); grep -c prints 0 and fails on none, hence || true
nproc=${NPROC:-$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)}
[ "$nproc" -gt 0 ] || nproc=2
run() {
  torchrun --nnodes "$NNODES" --node_rank "$NODE_RANK" --nproc_per_node "$nproc" --rdzv_backend c10d \
    --rdzv_endpoint "$MASTER_ADDR:${MASTER_PORT:-29500}" --rdzv_id "nvlink-ab-$1" -m gputopo.worker "${@:2}"
}
run p2p "$@" --output "$out/p2p.json"
NCCL_P2P_DISABLE=1 run no_p2p "$@" --output "$out/no_p2p.json"
echo "results in $out (rank 0 of node 0 writes them)"
