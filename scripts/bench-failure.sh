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
declare -A good lat kv
for i in $(seq "$RUNS"); do
    for mode in off on; do
        r=0; [ "$mode" = on ] && r=1
        g=$(PS_RESEND=$r timeout $((SECS + 60)) $B/pslite-launch local --servers 1 --workers 1 -- \
            bench --mode push-pull --len 1024000 --seconds "$SECS" --json | field goodput_gbps)
        l=$(PS_RESEND=$r timeout 60 $B/pslite-launch local --servers 1 --workers 1 -- \
            bench --mode push-pull --len 4 --keys-per-server 1 --seconds 2 --json | field p50_ms)
        t0=$(now)
        PS_RESEND=$r timeout 300 $B/pslite-launch local --servers 1 --workers 1 -- \
            kv-app --keys 1000000 >/dev/null
        k=$(elapsed "$t0")
        good[$mode]+="$(printf '%.2f' "$g") "
        lat[$mode]+="$(printf '%.3f' "$l") "
        kv[$mode]+="$k "
        echo "run $i resend $mode: goodput $g Gbit/s, p50 $l ms, kv-app 1M keys $k s" >&2
    done
done
g_off=$(median_of "${good[off]}"); g_on=$(median_of "${good[on]}")
l_off=$(median_of "${lat[off]}"); l_on=$(median_of "${lat[on]}")
k_off=$(median_of "${kv[off]}"); k_on=$(median_of "${kv[on]}")

# ---- 2. a server killed during bench ----
kill_once() {
    local dir port pids=() w
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
    local victim=""
    # Server rank 0 of this cluster, found by its environment.
    for p in $(pgrep -x pslite-server); do
        if tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | grep -qx "DMLC_PS_ROOT_PORT=$port" &&
           tr '\0' '\n' <"/proc/$p/environ" | grep -qx "PSLITE_RANK=0"; then victim=$p; fi
    done
    [ -n "$victim" ] || { echo "no server of rank 0 found" >&2; exit 1; }
    local t_kill
    t_kill=$(now)
    kill -9 "$victim"
    wait
    for w in 0 1; do
        # When the worker learnt of the loss (its ERROR log line) and when it exited.
        learnt=$(grep -m1 "ERROR.*was declared lost" "$dir/worker$w" | cut -d' ' -f1)
        learnt=$(date -d "$learnt" +%s.%N 2>/dev/null || echo 0)
        awk -v a="$t_kill" -v l="$learnt" -v b="$(cat "$dir/worker$w.end")" \
            'BEGIN {printf "%.2f/%.2f\n", l-a, b-a}' >>"$dir/times"
        grep -q "peer lost: server rank 0 (id 8) was declared lost" "$dir/worker$w" ||
            { echo "worker $w did not name the server:" >&2; cat "$dir/worker$w" >&2; }
    done
    echo "exit: scheduler $(cat "$dir/scheduler.rc") server1 $(cat "$dir/server1.rc") worker0 $(cat "$dir/worker0.rc") worker1 $(cat "$dir/worker1.rc")" >&2
    cat "$dir/times"
    rm -rf "$dir"
}
times=()
for i in $(seq "$KILLS"); do
    t=$(kill_once | tr '\n' ' ')
    echo "kill $i: workers' error/exit after $t s" >&2
    times+=($t)
done
t_learnt=$(printf '%s\n' "${times[@]}" | cut -d/ -f1 | sort -g | tr '\n' ' ')
t_exit=$(printf '%s\n' "${times[@]}" | cut -d/ -f2 | sort -g | tr '\n' ' ')
l_med=$(printf '%s\n' "${times[@]}" | cut -d/ -f1 | median)
e_med=$(printf '%s\n' "${times[@]}" | cut -d/ -f2 | median)

cat <<EOT
| figure (S=1 W=1 unless said) | resend off | resend on | change |
| --- | --- | --- | --- |
| push-pull goodput, 1 MB values, median of ${RUNS} x ${SECS} s | ${g_off} Gbit/s | ${g_on} Gbit/s | $(pct "$g_off" "$g_on") |
| push-pull p50 latency, one 4-byte key, median of ${RUNS} | ${l_off} ms | ${l_on} ms | $(pct "$l_off" "$l_on") |
| kv-app --keys 1000000, job wall time, median of ${RUNS} | ${k_off} s | ${k_on} s | $(pct "$k_off" "$k_on") |

runs: goodput off ${good[off]}/ on ${good[on]}; p50 off ${lat[off]}/ on ${lat[on]}; kv-app off ${kv[off]}/ on ${kv[on]}

| server SIGKILLed during bench, S=2 W=2, PS_HEARTBEAT_TIMEOUT=10 s | seconds after the kill |
| --- | --- |
| each worker's error (its log line), ${KILLS} kills x 2 workers, sorted | ${t_learnt}|
| each worker's exit (status 1, naming the server), sorted | ${t_exit}|
| median: error / exit | ${l_med} / ${e_med} |
EOT
