#!/usr/bin/env bash
# The replaceable scheduler's figures: kv-app S=2 W=2 (--keys 10000 --repeat 3000) under
# `pslite-launch local --restart 1 --checkpoint-dir`, runs undisturbed and runs with the
# scheduler SIGKILLed 1.0-1.9 s after the workers started interleaved (defaults
# PS_HEARTBEAT_INTERVAL=1 s):
#   - seconds from the kill to the new scheduler having every node re-registered (its log line
#     "all 4 nodes re-registered with this scheduler");
#   - the job's wall time, undisturbed and with the kill (data does not pass through the
#     scheduler: the workers train on while it is gone);
#   - that every run ended with status 0 and exact sums on both workers.
# Medians of RUNS runs of each. Bounded: each run is time-limited, all traffic on 127.0.0.1.
# Usage: scripts/bench-scheduler-restart.sh [RUNS]   (default 5)
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS=${1:-5}
cargo build --release --quiet --bins
. scripts/bench-lib.sh
L=target/release/pslite-launch

one() { # one KILL(0|1): prints "WALL REREG" (REREG "-" without a kill)
    local dir out t0 rereg=-
    dir=$(mktemp -d)
    out="$dir/out"
    : >"$out"
    t0=$(now)
    timeout 120 $L local --servers 2 --workers 2 --restart 1 --checkpoint-dir "$dir/ckpt" \
        -- kv-app --keys 10000 --repeat 3000 >>"$out" 2>&1 &
    local launcher=$!
    if [ "$1" = 1 ]; then
        await_line "started worker 1 (pid" "$out" || exit 1
        sleep "1.$((RANDOM % 10))"
        sigkill "$(launched_pid scheduler "$out")"
    fi
    wait "$launcher" || { echo "the run failed:" >&2; cat "$out" >&2; exit 1; }
    local wall
    wall=$(elapsed "$t0")
    [ "$(grep -c "error: 0, 0" "$out")" = 2 ] || { echo "sums not exact:" >&2; cat "$out" >&2; exit 1; }
    if [ "$1" = 1 ]; then
        rereg=$(since_kill "$(grep -m1 "all 4 nodes re-registered with this scheduler" "$out")")
        [ "$rereg" != - ] || { echo "no re-registration:" >&2; cat "$out" >&2; exit 1; }
    fi
    rm -rf "$dir"
    echo "$wall $rereg"
}

walls0="" walls1="" rereg=""
for i in $(seq "$RUNS"); do
    read -r w0 _ <<<"$(one 0)"
    walls0+="$w0 "
    read -r w1 r <<<"$(one 1)"
    walls1+="$w1 "
    rereg+="$r "
    echo "round $i/$RUNS: undisturbed ${w0} s; scheduler killed ${w1} s, every node re-registered ${r} s after the kill" >&2
done
echo "| kv-app S=2 W=2, --keys 10000 --repeat 3000 (median of $RUNS) | value | runs |"
echo "| --- | --- | --- |"
echo "| job wall time, undisturbed | $(median_of "$walls0") s | $walls0|"
echo "| job wall time, scheduler killed once and restarted | $(median_of "$walls1") s | $walls1|"
echo "| kill → every node re-registered with the new scheduler | $(median_of "$rereg" 2) s (max $(printf '%s\n' $rereg | sort -g | tail -1) s) | $rereg|"
