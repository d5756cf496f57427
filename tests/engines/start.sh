#!/usr/bin/env bash
# Real engines for the launch tests, all on this machine: munge, slurmctld and two slurmd "nodes" (node1, node2,
# each its own port; 2 GPUs each, advertised as gres backed by character devices made here), sshd on a free
# 127.0.0.1 port with a root key, pdsh. node1/node2 are the names gputopo's generated hostfile uses, so its launch runs unedited.
#
#   tests/engines/start.sh STATE_DIR     # installs what is missing (apt, root), starts, prints STATE_DIR/engines.env
#   tests/engines/stop.sh STATE_DIR      # stops exactly what start.sh started, restores /etc/hosts, ~/.ssh/config
#
# Everything it writes lives under STATE_DIR except: a marked line in /etc/hosts (node1 node2 -> 127.0.0.1), a
# marked block at the top of ~/.ssh/config (node1/node2 -> this sshd), /run/sshd if it was missing; stop.sh
# removes exactly those (backups of both files are kept in STATE_DIR/backup). Idempotent: run again on a live
# STATE_DIR, it only prints the state. Exit 77 with "reason: ..." on stderr when it cannot run here (not root,
# no apt-get, the install failed); any other non-zero exit is a failure, its logs in STATE_DIR/log.
# Nothing outside this machine is contacted (apt-get excepted, and only when a package is missing).
set -euo pipefail

cannot() { echo "reason: $*" >&2; exit 77; }
fail() {
  echo "error: $*" >&2
  for f in "$STATE"/log/*; do [ -s "$f" ] && { echo "--- $f" >&2; tail -n 20 "$f" >&2; }; done
  exit 1
}

[ $# -eq 1 ] || { echo "usage: $0 STATE_DIR" >&2; exit 2; }
mkdir -p "$1"
STATE=$(cd "$1" && pwd)
HERE=$(cd "$(dirname "$0")" && pwd)
NODES=(node1 node2)
SILENT=node5          # a Slurm node no slurmd serves: Slurm lists it down (what a fleet check must name)
SSH_ONLY=(node3 node4)  # more names for this sshd: four hosts for the fleet tests over pdsh/ssh
GPUS=2     # per node; the files below stand for them
CPUS=4     # per node, fewer than the 8 gputopo once hard-coded (such a job pends for ever); slurmd takes it as true
MARK="# gputopo-engines $STATE"

[ "$(id -u)" = 0 ] || cannot "not root: the engines need apt-get install and /etc/hosts"

# A live state: print it and stop here.
if [ -s "$STATE/pids" ] && "$HERE/stop.sh" --check "$STATE"; then
  cat "$STATE/engines.env"
  exit 0
fi
# Another state's engines still running on this machine would own node1/node2 in ~/.ssh/config.
if [ -f /etc/hosts ]; then
  while read -r other; do
    [ "$other" = "$STATE" ] && continue
    if [ -s "$other/pids" ] && "$HERE/stop.sh" --check "$other"; then
      echo "error: engines already run from $other (stop them: tests/engines/stop.sh $other)" >&2; exit 1
    fi
    "$HERE/stop.sh" "$other" >/dev/null 2>&1 || true   # a dead session's leftovers: its lines and blocks
  done < <(sed -n 's/.*# gputopo-engines \(\/.*\)$/\1/p' /etc/hosts | sort -u)
fi
"$HERE/stop.sh" "$STATE" >/dev/null 2>&1 || true   # a half-started state: start again from nothing

# --- packages
need=()
for pair in munged:munge slurmctld:slurmctld slurmd:slurmd sbatch:slurm-client pdsh:pdsh sshd:openssh-server \
            ssh:openssh-client; do
  command -v "${pair%%:*}" >/dev/null 2>&1 || [ -x "/usr/sbin/${pair%%:*}" ] || need+=("${pair#*:}")
done
if [ ${#need[@]} -gt 0 ]; then
  command -v apt-get >/dev/null || cannot "no apt-get to install ${need[*]}"
  mkdir -p "$STATE/log"
  # No service of the packages starts (they would start with the distribution's config): a policy-rc.d
  # that denies every start, only while installing, unless one is there already.
  policy=""
  if [ ! -e /usr/sbin/policy-rc.d ]; then
    policy=/usr/sbin/policy-rc.d
    printf '#!/bin/sh\nexit 101\n' > "$policy"; chmod +x "$policy"
  fi
  install() { DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${need[@]}"; }
  ok=1
  install >> "$STATE/log/apt.log" 2>&1 || { apt-get update -q >> "$STATE/log/apt.log" 2>&1 && install >> "$STATE/log/apt.log" 2>&1; } || ok=0
  [ -n "$policy" ] && rm -f "$policy"
  [ $ok = 1 ] || cannot "apt-get install ${need[*]} failed: $(tail -n 1 "$STATE/log/apt.log")"
fi

# --- ports: free ones on 127.0.0.1 (nothing answers a connect)
used=()
free_port() {
  local p=$1
  while (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null || [[ " ${used[*]} " == *" $p "* ]]; do p=$((p + 1)); done
  used+=("$p"); echo "$p"
}
CTLD_PORT=$(free_port 16817); used+=("$CTLD_PORT")
NODE_PORTS=(); for _ in "${NODES[@]}"; do p=$(free_port $((CTLD_PORT + 1))); used+=("$p"); NODE_PORTS+=("$p"); done
SSH_PORT=$(free_port 12222); used+=("$SSH_PORT")
SILENT_PORT=$(free_port $((CTLD_PORT + 10))); used+=("$SILENT_PORT")

mkdir -p "$STATE"/{log,munge,ctld,dev,ssh,backup}
chmod 700 "$STATE" "$STATE/munge" "$STATE/ssh"
: > "$STATE/pids"

started() { echo "$1 $2" >> "$STATE/pids"; }  # name pid: what stop.sh stops

# --- munge, with its own key and socket (any system munged is left alone)
[ -s "$STATE/munge/munge.key" ] || mungekey -c -k "$STATE/munge/munge.key" >/dev/null 2>&1 \
  || dd if=/dev/urandom of="$STATE/munge/munge.key" bs=1024 count=1 status=none
chmod 400 "$STATE/munge/munge.key"
SOCKET="$STATE/munge/munge.socket"
setsid /usr/sbin/munged -F --force --key-file="$STATE/munge/munge.key" --socket="$SOCKET" \
  --pid-file="$STATE/munge/munged.pid" --seed-file="$STATE/munge/munged.seed" --log-file="$STATE/log/munged.log" \
  </dev/null >>"$STATE/log/munged.out" 2>&1 &
started munged $!

# --- Slurm: one controller, two slurmd on their own ports, GPUs as gres backed by files
for n in "${NODES[@]}" "$SILENT"; do
  mkdir -p "$STATE/spool/$n"
  for ((g = 0; g < GPUS; g++)); do  # character devices like /dev/null (slurmd wants devices; a file still works)
    [ -c "$STATE/dev/$n-gpu$g" ] || { rm -f "$STATE/dev/$n-gpu$g"; mknod -m 666 "$STATE/dev/$n-gpu$g" c 1 3 2>/dev/null; } || : > "$STATE/dev/$n-gpu$g"
  done
done
{
  echo "ClusterName=gputopo"
  echo "SlurmctldHost=localhost"
  echo "SlurmctldPort=$CTLD_PORT"
  echo "AuthType=auth/munge"
  echo "CredType=cred/munge"
  echo "AuthInfo=socket=$SOCKET"
  echo "SlurmUser=root"
  echo "SlurmdUser=root"
  echo "StateSaveLocation=$STATE/ctld"
  echo "SlurmdSpoolDir=$STATE/spool/%n"
  echo "SlurmctldPidFile=$STATE/ctld/slurmctld.pid"
  echo "SlurmdPidFile=$STATE/spool/%n/slurmd.pid"
  echo "SlurmctldLogFile=$STATE/log/slurmctld.log"
  echo "SlurmdLogFile=$STATE/log/slurmd-%n.log"
  echo "ProctrackType=proctrack/linuxproc"
  echo "TaskPlugin=task/none"
  echo "JobAcctGatherType=jobacct_gather/none"
  echo "AccountingStorageType=accounting_storage/none"
  echo "JobCompType=jobcomp/none"
  echo "SelectType=select/cons_tres"
  echo "SelectTypeParameters=CR_Core"
  echo "SchedulerType=sched/backfill"
  echo "SlurmdParameters=config_overrides"
  echo "MpiDefault=none"
  echo "MailProg=/bin/true"
  echo "GresTypes=gpu"
  echo "ReturnToService=2"
  echo "SlurmctldTimeout=30"
  echo "SlurmdTimeout=60"
  echo "InactiveLimit=0"
  echo "KillWait=5"
  for i in "${!NODES[@]}"; do
    echo "NodeName=${NODES[$i]} NodeAddr=127.0.0.1 NodeHostname=${NODES[$i]} Port=${NODE_PORTS[$i]}" \
         "CPUs=$CPUS Gres=gpu:$GPUS State=UNKNOWN"
  done
  echo "NodeName=$SILENT NodeAddr=127.0.0.1 NodeHostname=$SILENT Port=$SILENT_PORT CPUs=$CPUS Gres=gpu:$GPUS" \
       "State=UNKNOWN"
  echo "PartitionName=gputopo Nodes=$(IFS=,; echo "${NODES[*]},$SILENT") Default=YES MaxTime=INFINITE State=UP"
} > "$STATE/slurm.conf"
{
  echo "AutoDetect=off"
  for n in "${NODES[@]}" "$SILENT"; do echo "NodeName=$n Name=gpu File=$STATE/dev/$n-gpu[0-$((GPUS - 1))]"; done
} > "$STATE/gres.conf"
export SLURM_CONF="$STATE/slurm.conf"

for _ in $(seq 50); do [ -S "$SOCKET" ] && break; sleep 0.1; done
[ -S "$SOCKET" ] || fail "munged did not open $SOCKET"

setsid /usr/sbin/slurmctld -D -i -f "$SLURM_CONF" </dev/null >>"$STATE/log/slurmctld.out" 2>&1 &
started slurmctld $!
for n in "${NODES[@]}"; do
  setsid /usr/sbin/slurmd -D -N "$n" -f "$SLURM_CONF" </dev/null >>"$STATE/log/slurmd-$n.out" 2>&1 &
  started "slurmd-$n" $!
done

# --- sshd on 127.0.0.1:SSH_PORT, root by key only; node1/node2 reach it through ~/.ssh/config
[ -s "$STATE/ssh/host_ed25519" ] || ssh-keygen -q -t ed25519 -N '' -f "$STATE/ssh/host_ed25519"
[ -s "$STATE/ssh/id_ed25519" ] || ssh-keygen -q -t ed25519 -N '' -C gputopo-engines -f "$STATE/ssh/id_ed25519"
cp "$STATE/ssh/id_ed25519.pub" "$STATE/ssh/authorized_keys"
cat > "$STATE/ssh/sshd_config" <<EOF
Port $SSH_PORT
ListenAddress 127.0.0.1
HostKey $STATE/ssh/host_ed25519
PidFile $STATE/ssh/sshd.pid
AuthorizedKeysFile $STATE/ssh/authorized_keys
PermitRootLogin prohibit-password
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
StrictModes no
EOF
if [ ! -d /run/sshd ]; then mkdir -p /run/sshd; chmod 755 /run/sshd; echo /run/sshd > "$STATE/created"; fi
setsid /usr/sbin/sshd -D -e -f "$STATE/ssh/sshd_config" </dev/null >>"$STATE/log/sshd.log" 2>&1 &
started sshd $!

# --- global state, marked and backed up: node names in /etc/hosts, ssh client entries in ~/.ssh/config
cp -p /etc/hosts "$STATE/backup/hosts"
[ -z "$(tail -c 1 /etc/hosts)" ] || echo >> /etc/hosts   # a last line without its newline
echo "127.0.0.1 ${NODES[*]} ${SSH_ONLY[*]} $SILENT $MARK" >> /etc/hosts
block="$MARK
Host ${NODES[*]} ${SSH_ONLY[*]}
    HostName 127.0.0.1
    Port $SSH_PORT
    User root
    IdentityFile $STATE/ssh/id_ed25519
    IdentitiesOnly yes
    StrictHostKeyChecking no
    UserKnownHostsFile /dev/null
    LogLevel ERROR
    BatchMode yes
$MARK end"
# ssh reads the account's home from the password database, not $HOME
ssh_dir="$(getent passwd "$(id -un)" | cut -d: -f6)/.ssh"
echo "$ssh_dir/config" > "$STATE/ssh_config_path"
if [ ! -d "$ssh_dir" ]; then mkdir -m 700 "$ssh_dir"; echo "$ssh_dir" >> "$STATE/created"; fi
if [ -f "$ssh_dir/config" ]; then
  cp -p "$ssh_dir/config" "$STATE/backup/ssh_config"
  { echo "$block"; cat "$STATE/backup/ssh_config"; } > "$ssh_dir/config.gputopo-engines"
  mv "$ssh_dir/config.gputopo-engines" "$ssh_dir/config"
else
  echo "$block" > "$ssh_dir/config"; chmod 600 "$ssh_dir/config"; echo "$ssh_dir/config" >> "$STATE/created"
fi

# --- ready: every daemon alive, both nodes idle, ssh answers on both names
for _ in $(seq 300); do
  "$HERE/stop.sh" --check "$STATE" || fail "a daemon died while starting"
  idle=$(sinfo -h -N -o "%N %t" 2>/dev/null | awk '$2 == "idle"' | wc -l)
  [ "$idle" -ge ${#NODES[@]} ] && break
  sleep 0.1
done
[ "$idle" -ge ${#NODES[@]} ] || fail "the nodes did not become idle: $(sinfo -h -N -o '%N %t %E' 2>&1 | tr '\n' ';')"
for n in "${NODES[@]}"; do
  for _ in $(seq 50); do ssh "$n" true 2>/dev/null && break; sleep 0.1; done
  ssh "$n" true 2>>"$STATE/log/ssh-check.log" || fail "ssh $n did not answer"
done
pdsh -R ssh -w "$(IFS=,; echo "${NODES[*]}")" true 2>>"$STATE/log/ssh-check.log" || fail "pdsh -R ssh to the nodes failed"

cat > "$STATE/engines.env" <<EOF
SLURM_CONF=$SLURM_CONF
ENGINES_STATE=$STATE
ENGINES_NODES=$(IFS=,; echo "${NODES[*]}")
ENGINES_SILENT_NODE=$SILENT
ENGINES_SSH_HOSTS=$(IFS=,; echo "${NODES[*]},${SSH_ONLY[*]}")
ENGINES_GPUS_PER_NODE=$GPUS
ENGINES_CPUS_PER_NODE=$CPUS
ENGINES_PARTITION=gputopo
ENGINES_SSH_PORT=$SSH_PORT
ENGINES_PIDS=$(awk '{printf "%s%s=%s", (NR > 1 ? "," : ""), $1, $2}' "$STATE/pids")
EOF
cat "$STATE/engines.env"
