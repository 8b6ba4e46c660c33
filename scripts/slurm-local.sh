#!/usr/bin/env bash
# slurm-local.sh — a real one-node Slurm cluster on this Debian machine, for tests that run
# `srun -n 7 ...`. Root only; no systemd needed (the daemons run in the background on their own).
#
#   scripts/slurm-local.sh start|stop|status
#
# start: installs slurm-wlm and munge when missing, makes a munge key when there is none, starts
# munged, writes /etc/slurm/slurm.conf (one node, this host, $PSLITE_SLURM_CPUS CPUs, default 64:
# more than the cores, so -n 7 fits on a small machine; no cgroups, no accounting), starts
# slurmctld and slurmd, and waits (≤ $PSLITE_SLURM_WAIT s, default 60) until the node is idle.
# What already runs is left running. stop: ends slurmd, slurmctld and munged (by their pid files).
# Everything talks over the IPv4 address that /etc/hosts gives `hostname -s` (127.0.0.1 is added
# for it when it has none) and the daemons bind to that address only (NoInAddrAny); munge talks
# over a unix socket. State and logs: $PSLITE_SLURM_DIR (default /var/lib/pslite-slurm).
# Exit status: 0, or 1 with a message.
set -euo pipefail

DIR=${PSLITE_SLURM_DIR:-/var/lib/pslite-slurm}
CPUS=${PSLITE_SLURM_CPUS:-64}
WAIT=${PSLITE_SLURM_WAIT:-60}
CONF=/etc/slurm/slurm.conf
MARK="# written by scripts/slurm-local.sh"
MUNGE_PID=/run/munge/munged.pid

say() { echo "slurm-local: $*" >&2; }
fail() { say "$*"; exit 1; }
exec 3>&2   # the command lines go here even when run's output is redirected
run() { echo "+ $*" >&3; "$@"; }
alive() { [[ -s $1 ]] && kill -0 "$(cat "$1")" 2>/dev/null; }
host=$(hostname -s)

stop_one() {   # stop_one NAME PIDFILE: TERM the daemon and wait (≤ 10 s) for it to go
    alive "$2" || return 0
    local pid; pid=$(cat "$2")
    run kill "$pid"
    for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || return 0; sleep 0.1; done
    fail "$1 (pid $pid) did not stop"
}
node_state() { sinfo -h -n "$host" -o %t 2>/dev/null | head -1; }

case ${1:-} in
    stop) [[ $(id -u) == 0 ]] || fail "stop needs root"; stop_one slurmd "$DIR/slurmd.pid"
          stop_one slurmctld "$DIR/slurmctld.pid"; stop_one munged "$MUNGE_PID"; exit 0 ;;
    status) sinfo -N -l; exit ;;
    start) ;;
    *) sed -n '2,15p' "$0" >&2; exit 2 ;;
esac
[[ $(id -u) == 0 ]] || fail "start needs root (it installs packages and starts daemons)"
[[ $CPUS =~ ^[1-9][0-9]*$ && $WAIT =~ ^[0-9]+$ ]] || fail "PSLITE_SLURM_CPUS and PSLITE_SLURM_WAIT must be numbers"

. "$(dirname "$0")/need-debs.sh"
need_debs slurm-wlm munge

# --- the name and address: only /etc/hosts is asked, so nothing goes out to DNS ------------------
addr=$(getent -s files ahostsv4 "$host" | awk 'NR == 1 {print $1}' || true)
if [[ -z $addr ]]; then
    say "$host has no IPv4 address in /etc/hosts: adding 127.0.0.1"
    echo "127.0.0.1 $host" >> /etc/hosts
    addr=127.0.0.1
fi

# --- munge: key, directories, daemon (as the munge user) -----------------------------------------
install -d -o munge -g munge -m 0700 /etc/munge /var/lib/munge /var/log/munge
install -d -o munge -g munge -m 0755 /run/munge
[[ -s /etc/munge/munge.key ]] || run dd if=/dev/urandom of=/etc/munge/munge.key bs=1024 count=1 status=none
chown munge:munge /etc/munge/munge.key; chmod 0400 /etc/munge/munge.key
if ! alive "$MUNGE_PID"; then
    run runuser -u munge -- /usr/sbin/munged </dev/null >>/var/log/munge/munged.out 2>&1 \
        || fail "munged did not start: $(tail -n 3 /var/log/munge/munged.log 2>/dev/null)"
fi
munge -n | unmunge >/dev/null || fail "munge does not work (see /var/log/munge/munged.log)"

# --- slurm.conf: one node, no cgroups, no accounting, loopback only -------------------------------
if [[ -e $CONF ]] && ! grep -qF -- "$MARK" "$CONF"; then
    fail "$CONF exists and was not written by this script: move it away first"
fi
mkdir -p /etc/slurm "$DIR/ctld" "$DIR/d"
conf=$(cat <<EOF
$MARK — a one-node cluster on this machine (root runs
# everything; munge authenticates; no accounting; no MPI plugin unless srun --mpi= asks for one)
ClusterName=pslite
SlurmctldHost=$host($addr)
CommunicationParameters=NoCtldInAddrAny,NoInAddrAny
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SlurmdParameters=config_overrides
MailProg=/bin/true
ReturnToService=2
KillWait=5
StateSaveLocation=$DIR/ctld
SlurmdSpoolDir=$DIR/d
SlurmctldPidFile=$DIR/slurmctld.pid
SlurmdPidFile=$DIR/slurmd.pid
SlurmctldLogFile=$DIR/slurmctld.log
SlurmdLogFile=$DIR/slurmd.log
NodeName=$host NodeAddr=$addr NodeHostname=$host CPUs=$CPUS State=UNKNOWN
PartitionName=local Nodes=$host Default=YES MaxTime=INFINITE State=UP
EOF
)
if [[ ! -f $CONF ]] || [[ $(cat "$CONF") != "$conf" ]]; then
    if alive "$DIR/slurmctld.pid" || alive "$DIR/slurmd.pid"; then
        say "$CONF changes: restarting the daemons"
        stop_one slurmd "$DIR/slurmd.pid"; stop_one slurmctld "$DIR/slurmctld.pid"
    fi
    say "writing $CONF"
    printf '%s\n' "$conf" > "$CONF"
fi

# --- the daemons ----------------------------------------------------------------------------------
if ! alive "$DIR/slurmctld.pid"; then
    run slurmctld -c </dev/null >>"$DIR/slurmctld.out" 2>&1 \
        || fail "slurmctld did not start: $(tail -n 5 "$DIR/slurmctld.log" "$DIR/slurmctld.out" 2>/dev/null)"
fi
if ! alive "$DIR/slurmd.pid"; then
    run slurmd </dev/null >>"$DIR/slurmd.out" 2>&1 \
        || fail "slurmd did not start: $(tail -n 5 "$DIR/slurmd.log" "$DIR/slurmd.out" 2>/dev/null)"
fi
case $(node_state) in   # drained (by hand, or after a task that would not die): back to work
    drain*|drng*) run scontrol update nodename="$host" state=resume ;;
esac
say "waiting (≤ ${WAIT}s) for $host to be idle"
for ((i = 0; ; i++)); do
    state=$(node_state)
    case $state in idle|mix|alloc) say "ready: $host ($addr) is $state, $CPUS CPUs; try srun -n 7 hostname"; exit 0 ;; esac
    (( i < WAIT * 2 )) || break
    sleep 0.5
done
sinfo -R >&2 || true
tail -n 5 "$DIR/slurmctld.log" "$DIR/slurmd.log" >&2 2>/dev/null || true
fail "$host is '${state:-unknown}' after ${WAIT}s (logs in $DIR)"
