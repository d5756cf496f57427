#!/usr/bin/env bash
# Stops what tests/engines/start.sh started for STATE_DIR, by the PIDs it recorded (each checked to still be that
# daemon: its command line names STATE_DIR), and removes its marked line from /etc/hosts, its marked block from
# ~/.ssh/config, and what it created (/run/sshd, ~/.ssh) when empty. Jobs still in the fake cluster are cancelled
# first. Logs and configs stay in STATE_DIR.
#
#   tests/engines/stop.sh STATE_DIR            # stop
#   tests/engines/stop.sh --check STATE_DIR    # exit 0 when every recorded daemon is alive, else 1
set -uo pipefail

check=0
[ "${1:-}" = "--check" ] && { check=1; shift; }
[ $# -eq 1 ] || { echo "usage: $0 [--check] STATE_DIR" >&2; exit 2; }
if [ -d "$1" ]; then STATE=$(cd "$1" && pwd); else
  [ $check = 1 ] && exit 1
  STATE=$1  # gone (an old test run's folder): only its marked line and block are left to remove
fi
MARK="# gputopo-engines $STATE"

ours() {  # pid: alive and started for this STATE (a reused PID is someone else's)
  [ -r "/proc/$1/cmdline" ] && tr '\0' ' ' < "/proc/$1/cmdline" | grep -qF -- "$STATE"
}

if [ $check = 1 ]; then
  [ -s "$STATE/pids" ] || exit 1
  while read -r _ pid; do ours "$pid" || exit 1; done < "$STATE/pids"
  exit 0
fi

if [ -s "$STATE/pids" ]; then
  ctld=$(awk '$1 == "slurmctld" {print $2}' "$STATE/pids")
  if [ -n "$ctld" ] && ours "$ctld"; then
    export SLURM_CONF="$STATE/slurm.conf"
    scancel --partition gputopo 2>/dev/null
    for _ in $(seq 100); do [ -z "$(squeue -h -o %i 2>/dev/null)" ] && break; sleep 0.2; done
  fi
  # slurmd before slurmctld before munged (each still answers the one before it while stopping)
  pids=()
  for name in sshd slurmd slurmctld munged; do
    while read -r n pid; do
      [[ "$n" == "$name"* ]] && ours "$pid" && { kill -TERM "$pid" 2>/dev/null; pids+=("$pid"); }
    done < "$STATE/pids"
  done
  for _ in $(seq 100); do
    alive=0; for pid in "${pids[@]}"; do ours "$pid" && alive=1; done
    [ $alive = 0 ] && break; sleep 0.1
  done
  for pid in "${pids[@]}"; do ours "$pid" && kill -KILL "$pid" 2>/dev/null; done
  mv "$STATE/pids" "$STATE/pids.stopped"
fi

# In place (cat >, not mv): /etc/hosts is often a bind mount.
if [ -f /etc/hosts ] && grep -qF -- "$MARK" /etc/hosts; then
  kept=$(awk -v m="$MARK" 'index($0, m) == 0' /etc/hosts) && printf '%s\n' "$kept" > /etc/hosts
fi
cfg=$(cat "$STATE/ssh_config_path" 2>/dev/null || echo "$(getent passwd "$(id -un)" | cut -d: -f6)/.ssh/config")
if [ -f "$cfg" ] && grep -qF -- "$MARK" "$cfg"; then
  awk -v m="$MARK" '$0 == m {skip = 1; next} $0 == m " end" {skip = 0; next} !skip' "$cfg" > "$cfg.gputopo-engines"
  cat "$cfg.gputopo-engines" > "$cfg"; rm -f "$cfg.gputopo-engines"
fi
if [ -f "$STATE/created" ]; then  # last created first: ~/.ssh/config before ~/.ssh
  tac "$STATE/created" | while read -r path; do
    if [ -f "$path" ]; then [ -s "$path" ] || rm -f "$path"; else rmdir "$path" 2>/dev/null; fi
  done
  rm -f "$STATE/created"
fi
exit 0
