#!/usr/bin/env bash
# The GPU session's second command (issue 41's done-when on a GPU): plan --calibrate and plan --measure of
# gpt2-large at 8 x 1024 bf16 on this machine's GPU, each with a time limit, their JSON and stderr under $OUT.
#   PYTHONPATH=. bash benchmarks/gpu_checks.sh            (from the repository's root; about 3 minutes on an H200)
# The first command is the harness: PYTHONPATH=. timeout 480 python benchmarks/gpu_truth.py --budget 440 --out $OUT/gpu-truth.json
# Compare: the harness's gpt2-large-bf16-8x1024 step against calibrate.json's single step_s (target: within 10 %),
# measure.json's measured peak and step against its predictions.
set -uo pipefail
out=${OUT:-out}
mkdir -p "$out"
py=${PYTHON:-python3}
ask=(--model gpt2-large --gpus 1 --batch-size 8 --seq-len 1024 --precision bf16 --no-grad-checkpointing --json)
run() {   # name, seconds, plan's extra arguments: each in the background, waited on by its own id
  local name=$1 limit=$2; shift 2
  echo "gpu_checks: $name (at most $limit s)" >&2
  timeout "$limit" "$py" -m gputopo plan "${ask[@]}" "$@" > "$out/$name.json" 2> "$out/$name.log" &
  local pid=$!
  wait "$pid"
  echo "gpu_checks: $name exit $? ($(tail -n 1 "$out/$name.log"))" >&2
}
run calibrate 150 --calibrate --calibrate-seconds 90
run measure 240 --measure
