#!/usr/bin/env bash
# Issue 12's figures, in one run:
#   1. What resend (PS_RESEND=1) costs when nothing is lost, runs with it off and on interleaved:
#      bench push-pull goodput, S=1 W=1, 1 MB values (median of RUNS x SECS s); push-pull p50
#      latency of one 4-byte key (median of RUNS x 2 s); kv-app --keys 1000000, S=1 W=1, job wall
#      time (median of RUNS).
#   2. Fail fast: a server SIGKILLed during bench (S=2 W=2, defaults PS_HEARTBEAT_TIMEOUT=10 s,
#      PS_HEARTBEAT_INTERVAL=1 s), KILLS times: seconds from the kill to each worker's exit (with
#      its error naming the server), and the exit status of every surviving process.
# Usage: scripts/bench-failure.sh [RUNS] [SECS] [KILLS]      (defaults 5, 5, 5)
# Bounded: every process is time-limited, all traffic is on 127.0.0.1.
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS=${1:-5}
SECS=${2:-5}
KILLS=${3:-5}

cargo build --release --quiet --bins
B=target/release
. scripts/bench-lib.sh

# ---- 1. resend off / on ----
variant() { if [ "$1" = on ]; then export PS_RESEND=1; else export PS_RESEND=0; fi; }
interleave "off on" "$RUNS" "goodput=measure_goodput_1mb $SECS" "p50=measure_p50_4b 3" kv-app=measure_kv_app_1m
unset PS_RESEND

# ---- 2. a server killed during bench ----
kill_once() {
    local dir port victim="" p w
    dir=$(mktemp -d)
    port=$(( 20000 + RANDOM % 20000 ))
    export DMLC_PS_ROOT_URI=127.0.0.1 DMLC_PS_ROOT_PORT=$port DMLC_NUM_SERVER=2 DMLC_NUM_WORKER=2 DMLC_NODE_HOST=127.0.0.1
    ( DMLC_ROLE=scheduler timeout 120 $B/pslite-scheduler >"$dir/scheduler" 2>&1; echo $? >"$dir/scheduler.rc" ) &
    for r in 0 1; do
        ( DMLC_ROLE=server PSLITE_RANK=$r timeout 120 $B/pslite-server >"$dir/server$r" 2>&1; echo $? >"$dir/server$r.rc" ) &
    done
    for r in 0 1; do
        ( DMLC_ROLE=worker PSLITE_RANK=$r timeout 120 $B/pslite-worker bench --seconds 100 --len 4096 >"$dir/worker$r" 2>&1
          echo $? >"$dir/worker$r.rc"; now >"$dir/worker$r.end" ) &
    done
    # A random phase against the heartbeats (sent every second from each node's start).
    sleep "3.$((RANDOM % 10))"
    # Server rank 0 of this cluster, found by its environment.
    for p in $(pgrep -x pslite-server); do
        if tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | grep -qx "DMLC_PS_ROOT_PORT=$port" &&
           tr '\0' '\n' <"/proc/$p/environ" | grep -qx "PSLITE_RANK=0"; then victim=$p; fi
    done
    [ -n "$victim" ] || { echo "no server of rank 0 found" >&2; exit 1; }
    sigkill "$victim"
    wait
    for w in 0 1; do
        # When the worker learnt of the loss (its ERROR log line) and when it exited.
        echo "$(since_kill "$(grep -m1 "ERROR.*was declared lost" "$dir/worker$w")")/$(since_kill "$(cat "$dir/worker$w.end")")"
        grep -q "peer lost: server rank 0 (id 8) was declared lost" "$dir/worker$w" ||
            { echo "worker $w did not name the server:" >&2; cat "$dir/worker$w" >&2; }
    done
    echo "exit: scheduler $(cat "$dir/scheduler.rc") server1 $(cat "$dir/server1.rc") worker0 $(cat "$dir/worker0.rc") worker1 $(cat "$dir/worker1.rc")" >&2
    rm -rf "$dir"
}
kill_trials "$KILLS" kill_once

cat <<EOT
| figure (S=1 W=1 unless said) | resend off | resend on | change |
| --- | --- | --- | --- |
$(row "push-pull goodput, 1 MB values, median of ${RUNS} x ${SECS} s" Gbit/s goodput)
$(row "push-pull p50 latency, one 4-byte key, median of ${RUNS}" ms p50)
$(row "kv-app --keys 1000000, job wall time, median of ${RUNS}" s kv-app)

$(runs_line goodput p50 kv-app)

| server SIGKILLed during bench, S=2 W=2, PS_HEARTBEAT_TIMEOUT=10 s | seconds after the kill |
| --- | --- |
| each worker's error (its log line), ${KILLS} kills x 2 workers, sorted | ${KILL_T1}|
| each worker's exit (status 1, naming the server), sorted | ${KILL_T2}|
| median: error / exit | ${KILL_MED1} / ${KILL_MED2} |
EOT
