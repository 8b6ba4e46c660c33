#!/usr/bin/env bash
# Embedding tables and the key path of sparse models, in one run (all S=1 W=1, pslite-worker
# `table`, which pushes a new sorted key list every request):
#   1. lists that never repeat, through the summing handler: push-pulls of ~77k random
#      single-f32 keys per request (`table --app 0 --dim 1 --keys 77000 --universe 10^12
#      --zipf 0`), key caching on and off (PS_KEY_CACHE): keys/s — and, with BASE (a commit),
#      the same for BASE's binaries, interleaved, for a before/after;
#   2. the table path: push-pulls of 100k Zipf(1.05) draws from 4M keys per request into a
#      dim-16 AdaGrad table, without and with a checkpoint (PS_CHECKPOINT_DIR: the log and
#      snapshots): rows/s;
#   3. memory: 50M new keys (500 rounds of 100k) through one server whose dim-16 AdaGrad table
#      has a 256 MiB budget: the server's peak RSS (VmHWM), rows held, rows evicted.
# Medians of RUNS runs, interleaved; all traffic on 127.0.0.1; every run bounded by `timeout`.
# Usage: scripts/bench-table.sh [RUNS [BASE]]   (default 5 runs, no base)
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS=${1:-5}
BASE=${2:-}
. scripts/bench-lib.sh
cargo build --release --quiet --bins
NEW=target/release
OLD=""
[ -n "$BASE" ] && OLD=$(bins "$BASE")
declare -A R

# rows/s of one `table --json` run: rows_per_s [VAR=VALUE...] COMMAND ARGS...
rows_per_s() {
    local out
    out=$(env "$@" 2>&1) || { echo "run failed: $out" >&2; exit 1; }
    echo "$out" | grep -o '"rows_per_s":[0-9.e+-]*' | head -1 | cut -d: -f2
}

random_keys=(table --app 0 --dim 1 --keys 77000 --universe 1000000000000 --zipf 0 --rounds 150 --json)
table16=(--table "app=0,dim=16,init=normal:0:0.01,opt=adagrad:lr=0.05")
zipf_rows=(table --app 0 --dim 16 --keys 100000 --universe 4000000 --zipf 1.05 --rounds 60 --json)
cp_dir=$(mktemp -d)
trap 'rm -rf "$cp_dir"' EXIT

for i in $(seq "$RUNS"); do
    for kc in 1 0; do
        R[random_new_$kc]+="$(rows_per_s PS_KEY_CACHE=$kc timeout 120 $NEW/pslite-launch local --no-metrics -- "${random_keys[@]}") "
        if [ -n "$OLD" ]; then
            R[random_old_$kc]+="$(rows_per_s PS_KEY_CACHE=$kc timeout 120 $OLD/pslite-launch local --no-metrics -- "${random_keys[@]}") "
        fi
    done
    R[table_plain]+="$(rows_per_s timeout 120 $NEW/pslite-launch local --no-metrics "${table16[@]}" -- "${zipf_rows[@]}") "
    rm -rf "${cp_dir:?}"/*
    R[table_cp]+="$(rows_per_s timeout 120 $NEW/pslite-launch local --no-metrics --checkpoint-dir "$cp_dir" "${table16[@]}" -- "${zipf_rows[@]}") "
    echo "round $i/$RUNS done" >&2
done

mk() { printf '%s\n' ${R[$1]} | median 0 | awk '{printf "%.2f", $1 / 1e6}'; }
runs() { printf '%s\n' ${R[$1]} | awk '{printf "%.2f ", $1 / 1e6}'; }
echo "| figure (median of $RUNS, M rows/s = M keys/s for dim 1) | value | runs |"
echo "| --- | --- | --- |"
echo "| ~77k random single-f32 keys per push-pull, summing handler, key caching on | $(mk random_new_1) | $(runs random_new_1)|"
echo "| the same, key caching off | $(mk random_new_0) | $(runs random_new_0)|"
if [ -n "$OLD" ]; then
    echo "| the same at $BASE, key caching on | $(mk random_old_1) | $(runs random_old_1)|"
    echo "| the same at $BASE, key caching off | $(mk random_old_0) | $(runs random_old_0)|"
fi
echo "| dim-16 AdaGrad table, 100k Zipf draws per push-pull, no checkpoint | $(mk table_plain) | $(runs table_plain)|"
echo "| the same with PS_CHECKPOINT_DIR (log + snapshots) | $(mk table_cp) | $(runs table_cp)|"
echo "| checkpoint cost on the table path | $(pct "$(median_of "${R[table_plain]}")" "$(median_of "${R[table_cp]}")") | |"

# Memory: one run (deterministic in what it stores).
out=$(timeout 600 $NEW/pslite-launch local --no-metrics --table "app=0,dim=16,opt=adagrad:lr=0.05,budget=256MiB" -- table --app 0 --dim 16 --keys 100000 --universe 0 --rounds 500 2>&1) || { echo "memory run failed: $out" >&2; exit 1; }
echo
echo "50M new keys, dim-16 AdaGrad table, budget 256 MiB (268435456 bytes):"
echo "$out" | grep -E "rounds,|table app 0: [0-9]+ rows|peak RSS" | sed 's/^\[[a-z 0-9]*\] //'
