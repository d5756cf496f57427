#!/usr/bin/env bash
# What a fleet test's "node" answers (gputopo inspect --fleet --remote-command "bash tests/fleet_answer.sh DIR"):
# the inspect report recorded for it, DIR/$GPUTOPO_NODE.json (made by the test with gputopo inspect --json under
# a fake NVML: one GPU machine per node name); DIR/$GPUTOPO_NODE.hang: it sleeps that many seconds (the test's
# own number, to find survivors by); else an error.
set -euo pipefail
dir=${1:?usage: fleet_answer.sh DIR}
node=${GPUTOPO_NODE:?GPUTOPO_NODE is not set}
if [ -f "$dir/$node.json" ]; then
  cat "$dir/$node.json"
elif [ -f "$dir/$node.hang" ]; then
  exec sleep "$(cat "$dir/$node.hang")"   # the fleet's per-node timeout must end it
else
  echo "no report recorded for $node" >&2
  exit 3
fi
