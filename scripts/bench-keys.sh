#!/usr/bin/env bash
# Key-heavy work (issue 10's figures), all in one run, key caching on and off (PS_KEY_CACHE):
#   - ps-lite's test_kv_app with 10M single-f32 keys (1 push, 1 pull, 1 push-pull through the
#     summing store), S=1 W=1: wall time of the whole job, its phases, payload bytes sent;
#   - 100 rounds of push-pull of 1M single-f32 keys in one request (bench --keys-per-request),
#     S=1 W=1: seconds and payload bytes;
#   - push and pull of 1M keys per request: keys/s, and the ratio to one memcpy of the same key
#     and value bytes measured in the same process;
#   - test_kv_app as shipped (10K keys, 50 rounds), S=2 W=2: wall time.
# Medians of RUNS runs, interleaved (on, off, then off, on, ...). All traffic on 127.0.0.1; every
# run is bounded by `timeout`. Usage: scripts/bench-keys.sh [RUNS]   (default 5)
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS=${1:-5}
cargo build --release --quiet --bins

. scripts/bench-lib.sh
variant() { if [ "$1" = on ]; then export PS_KEY_CACHE=1; else export PS_KEY_CACHE=0; fi; }
# As shipped, once a round, with the default key caching (variant sets it again before the next).
round_done() {
    local t
    unset PS_KEY_CACHE
    t=$(measure_kv_app_s2w2) || exit 1
    R[s2w2 on]+="$t "
}
interleave "on off" "$RUNS" "${KEYS_MEASURES[@]}"

echo "| figure (median of $RUNS) | key caching on | off | runs (on / off) |"
echo "| --- | --- | --- | --- |"
for r in "${KEYS_ROWS[@]}"; do
    k=${r##*=}
    echo "| ${r%=*} | $(med "$k" on) | $(med "$k" off) | ${R[$k on]}/ ${R[$k off]}|"
done
echo "| test_kv_app as shipped (10K keys, 50 rounds) S2W2: job wall time, s | $(med s2w2 on) | | ${R[s2w2 on]}|"
