#!/usr/bin/env bash
# Elastic servers beyond bench-resize.sh, kv-app W=2 (--keys 1000000 --repeat 100, f32), RUNS
# rounds, each running the three jobs below one after the other:
#   - join: two servers; a third server process joins the running job 600 ms after the launch
#     (pslite-launch local --join-servers 1) and takes its share (the upper half of the widest
#     range); worker 0 then drains it (--resize drain:2): the job grows from 2 to 3 servers and
#     shrinks back to 2. Figures: the time from the scheduler's broadcast of the moves to the new
#     owner holding its rows, join and drain, with the bytes moved; the job's wall time;
#   - undisturbed: the same two servers, nothing joins (the wall time to compare with);
#   - checkpoints: three servers with PS_CHECKPOINT_DIR (every request logged, a snapshot at
#     each import, a moved range served once the move settled), server 2 drained, added back
#     and drained again (--resize drain:2,add:2,drain:2, 200 ms before each step): time to
#     settle per step (bench-resize.sh gives the same without checkpoints).
# Every run must end with status 0 and exact sums on both workers. Medians of RUNS. Bounded:
# each run is time-limited, all traffic on 127.0.0.1, checkpoints in a temporary directory.
# Usage: scripts/bench-elastic.sh [RUNS]   (default 5)
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS=${1:-5}
cargo build --release --quiet --bins
. scripts/bench-lib.sh
L=target/release/pslite-launch
CP=$(mktemp -d)
trap 'rm -rf "$CP"' EXIT
KV=(kv-app --keys 1000000 --repeat 100)

# run OUT ARGS…: the job, its output in OUT, checked; prints its wall time.
run() {
    local out=$1 t0
    shift
    t0=$(now)
    timeout 180 $L local "$@" >"$out" 2>&1 \
        || { echo "the run failed:" >&2; cat "$out" >&2; exit 1; }
    [ "$(grep -c "error: 0, 0" "$out")" = 2 ] || { echo "sums not exact:" >&2; cat "$out" >&2; exit 1; }
    elapsed "$t0"
}

# settled OUT: the "settled in MS ms, BYTES bytes" figures of OUT's kv-app and server lines.
settled_ms() { grep -o "settled in [0-9.]* ms" "$1" | awk '{print $3}' | tr '\n' ' '; }
settled_bytes() { grep -o "ms, [0-9]* bytes of rows moved" "$1" | awk '{print $2}' | tr '\n' ' '; }

wj="" w0="" wc="" join="" drain="" jb="" c1="" c2="" c3="" cb=""
out=$(mktemp)
for i in $(seq "$RUNS"); do
    w=$(run "$out" --servers 2 --workers 2 --join-servers 1 --join-after-ms 600 -- \
        "${KV[@]}" --resize drain:2 --resize-pause-ms 0)
    read -r mj md <<<"$(settled_ms "$out")"
    read -r bj _ <<<"$(settled_bytes "$out")"
    [ -n "${md:-}" ] || { echo "no join and drain:" >&2; cat "$out" >&2; exit 1; }
    wj+="$w " join+="$mj " drain+="$md " jb+="$bj "
    u=$(run "$out" --servers 2 --workers 2 -- "${KV[@]}")
    w0+="$u "
    rm -rf "${CP:?}"/*
    c=$(run "$out" --servers 3 --workers 2 --checkpoint-dir "$CP" -- \
        "${KV[@]}" --resize drain:2,add:2,drain:2 --resize-pause-ms 200)
    read -r m1 m2 m3 <<<"$(settled_ms "$out")"
    read -r b1 _ <<<"$(settled_bytes "$out")"
    [ -n "${m3:-}" ] || { echo "not three resizes:" >&2; cat "$out" >&2; exit 1; }
    wc+="$c " c1+="$m1 " c2+="$m2 " c3+="$m3 " cb+="$b1 "
    echo "round $i/$RUNS: join ${mj} ms, drain ${md} ms (${bj} bytes), wall ${w} s vs ${u} s undisturbed; with checkpoints ${m1} / ${m2} / ${m3} ms (${b1} bytes), wall ${c} s" >&2
done
rm -f "$out"
echo "| kv-app W=2, --keys 1000000 --repeat 100 (median of $RUNS) | value | runs |"
echo "| --- | --- | --- |"
echo "| a server joins a 2-server job and takes its share: moves broadcast → new owner holds its rows | $(median_of "$join" 1) ms | $join|"
echo "| worker 0 drains it again (3 → 2) | $(median_of "$drain" 1) ms | $drain|"
echo "| bytes of rows moved by the join | $(median_of "$jb" 0) | $jb|"
echo "| job wall time, 2 → 3 → 2 servers | $(median_of "$wj") s | $wj|"
echo "| job wall time, 2 servers undisturbed | $(median_of "$w0") s | $w0|"
echo "| with checkpoints, 3 servers: drain (3 → 2) | $(median_of "$c1" 1) ms | $c1|"
echo "| with checkpoints: add back (2 → 3) | $(median_of "$c2" 1) ms | $c2|"
echo "| with checkpoints: drain again (3 → 2) | $(median_of "$c3" 1) ms | $c3|"
echo "| with checkpoints: bytes of rows moved per step | $(median_of "$cb" 0) | $cb|"
echo "| with checkpoints: job wall time with the three resizes | $(median_of "$wc") s | $wc|"
