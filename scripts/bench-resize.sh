#!/usr/bin/env bash
# Elastic servers' figures: kv-app S=3 W=2 (--keys 1000000 --repeat 100, f32), runs
# undisturbed and runs in which worker 0 drains server 2, adds it back and drains it again
# while both workers push (--resize drain:2,add:2,drain:2, 200 ms before each step),
# interleaved:
#   - per step: the time from the scheduler's broadcast of the moves to the last new owner
#     holding its rows, the bytes of rows moved (every key-value server of the node: the f32
#     sums, the other value types' empty stores, the lr optimizer's) and their rate;
#   - request parts answered "moved" or "not yet" and sent again (both workers);
#   - the job's wall time, undisturbed and with the three resizes;
#   - that every run ended with status 0 and exact sums on both workers.
# Medians of RUNS runs of each. Bounded: each run is time-limited, all traffic on 127.0.0.1.
# Usage: scripts/bench-resize.sh [RUNS]   (default 5)
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS=${1:-5}
cargo build --release --quiet --bins
. scripts/bench-lib.sh
L=target/release/pslite-launch

one() { # one RESIZE(0|1): prints "WALL" and, with resizes, "MS1 MS2 MS3 BYTES1 BYTES2 BYTES3 PARTS"
    local out t0 extra=()
    out=$(mktemp)
    [ "$1" = 1 ] && extra=(--resize drain:2,add:2,drain:2 --resize-pause-ms 200)
    t0=$(now)
    timeout 180 $L local --servers 3 --workers 2 \
        -- kv-app --keys 1000000 --repeat 100 "${extra[@]}" >"$out" 2>&1 \
        || { echo "the run failed:" >&2; cat "$out" >&2; exit 1; }
    local wall
    wall=$(elapsed "$t0")
    [ "$(grep -c "error: 0, 0" "$out")" = 2 ] || { echo "sums not exact:" >&2; cat "$out" >&2; exit 1; }
    if [ "$1" = 1 ]; then
        local ms bytes parts
        ms=$(grep -o "settled in [0-9.]* ms" "$out" | awk '{print $3}' | tr '\n' ' ')
        bytes=$(grep -o "ms, [0-9]* bytes of rows moved" "$out" | awk '{print $2}' | tr '\n' ' ')
        parts=$(grep -o "worker [01]: [0-9]* request parts answered" "$out" | awk '{s += $3} END {print s}')
        [ "$(wc -w <<<"$ms")" = 3 ] || { echo "not three resizes:" >&2; cat "$out" >&2; exit 1; }
        echo "$wall $ms $bytes $parts"
    else
        echo "$wall"
    fi
    rm -f "$out"
}

walls0="" walls1="" s1="" s2="" s3="" b1="" parts=""
for i in $(seq "$RUNS"); do
    w0=$(one 0)
    walls0+="$w0 "
    read -r w1 m1 m2 m3 by1 _ _ p <<<"$(one 1)"
    walls1+="$w1 " s1+="$m1 " s2+="$m2 " s3+="$m3 " b1+="$by1 " parts+="$p "
    echo "round $i/$RUNS: undisturbed ${w0} s; with resizes ${w1} s (drain ${m1} ms, add ${m2} ms, drain ${m3} ms, ${by1} bytes each, ${p} parts sent again)" >&2
done
bytes=$(median_of "$b1" 0)
rate() { awk -v b="$bytes" -v ms="$1" 'BEGIN {printf "%.0f", b / ms / 1e3}'; }
echo "| kv-app S=3 W=2, --keys 1000000 --repeat 100 (median of $RUNS) | value | runs |"
echo "| --- | --- | --- |"
echo "| job wall time, undisturbed | $(median_of "$walls0") s | $walls0|"
echo "| job wall time, server 2 drained, added back, drained again | $(median_of "$walls1") s | $walls1|"
echo "| drain (3 → 2 servers): moves broadcast → last new owner holds its rows | $(median_of "$s1" 1) ms ($(rate "$(median_of "$s1" 1)") MB/s) | $s1|"
echo "| add (2 → 3) | $(median_of "$s2" 1) ms ($(rate "$(median_of "$s2" 1)") MB/s) | $s2|"
echo "| drain again (3 → 2) | $(median_of "$s3" 1) ms ($(rate "$(median_of "$s3" 1)") MB/s) | $s3|"
echo "| bytes of rows moved per step | $bytes | $b1|"
echo "| request parts answered moved or not yet and sent again (both workers, whole run) | $(median_of "$parts" 0) | $parts|"
