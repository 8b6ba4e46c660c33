#!/usr/bin/env bash
# Key-heavy work (issue 10's figures), all in one run, key caching on and off (PS_KEY_CACHE):
#   - ps-lite's test_kv_app with 10M single-f32 keys (1 push, 1 pull, 1 push-pull through the
#     summing store), S=1 W=1: wall time of the whole job, its phases, payload bytes sent;
#   - 100 rounds of push-pull of 1M single-f32 keys in one request (bench --keys-per-request),
#     S=1 W=1: seconds and payload bytes;
#   - push and pull of 1M keys per request: keys/s, and the ratio to one memcpy of the same key
#     and value bytes measured in the same process;
#   - test_kv_app as shipped (10K keys, 50 rounds), S=2 W=2: wall time.
# Medians of RUNS runs, interleaved (on, off, on, off, ...). All traffic on 127.0.0.1; every
# run is bounded by `timeout`. Usage: scripts/bench-keys.sh [RUNS]   (default 5)
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS=${1:-5}
cargo build --release --quiet --bins
L=target/release/pslite-launch

. scripts/bench-lib.sh
declare -A R

for i in $(seq "$RUNS"); do
    for kc in 1 0; do
        t0=$(now)
        out=$(PS_KEY_CACHE=$kc timeout 120 $L local --servers 1 --workers 1 -- kv-app --keys 10000000 --repeat 1 --outstanding 1)
        wall=$(elapsed "$t0")
        echo "$out" | grep -q "error: 0, 0" || { echo "kv-app failed: $out" >&2; exit 1; }
        R[kv10m_wall_$kc]+="$wall "
        for ph in push pull push-pull; do
            R[kv10m_${ph}_$kc]+="$(echo "$out" | grep -o " $ph [0-9.]* s" | awk '{print $2}') "
        done
        R[kv10m_sent_$kc]+="$(echo "$out" | grep -o 'sent [0-9.]* MB' | awk '{print $2}') "
        line=$(PS_KEY_CACHE=$kc timeout 120 $L local --servers 1 --workers 1 -- bench --mode push-pull --keys-per-request 1000000 --len 4 --repeat 100 --json | grep goodput_gbps)
        R[pp100_s_$kc]+="$(echo "$line" | field seconds) "
        R[pp100_sent_$kc]+="$(echo "$line" | field sent_bytes | awk '{printf "%.1f", $1 / 1e6}') "
        for m in push pull; do
            line=$(PS_KEY_CACHE=$kc timeout 60 $L local --servers 1 --workers 1 -- bench --mode $m --keys-per-request 1000000 --len 4 --seconds 3 --json | grep goodput_gbps)
            R[${m}_mkeys_$kc]+="$(echo "$line" | field keys_per_s | awk '{printf "%.1f", $1 / 1e6}') "
            R[${m}_ratio_$kc]+="$(echo "$line" | awk -F'"keys_per_s":|,"memcpy_keys_per_s":|,"sent_bytes"' '{printf "%.3f", $2 / $3}') "
            R[${m}_p50_$kc]+="$(echo "$line" | field p50_ms) "
        done
    done
    t0=$(now)
    timeout 60 $L local --servers 2 --workers 2 -- kv-app | grep -c "error: 0, 0" | grep -qx 2 || { echo "kv-app S2W2 failed" >&2; exit 1; }
    R[kvapp_s2w2]+="$(elapsed "$t0") "
    echo "round $i/$RUNS done" >&2
done

med() { printf '%s\n' ${R[$1]} | median; }
row() { echo "| $1 | $(med "$2_1") | $(med "$2_0") | ${R[$2_1]}/ ${R[$2_0]}|"; }
echo "| figure (median of $RUNS) | key caching on | off | runs (on / off) |"
echo "| --- | --- | --- | --- |"
row "kv-app 10M keys S1W1: job wall time, s" kv10m_wall
row "kv-app 10M keys: push phase, s" kv10m_push
row "kv-app 10M keys: pull phase, s" kv10m_pull
row "kv-app 10M keys: push-pull phase, s" kv10m_push-pull
row "kv-app 10M keys: payload sent by the worker, MB" kv10m_sent
row "100 push-pulls of 1M keys (one request each): seconds" pp100_s
row "100 push-pulls of 1M keys: payload sent by the worker, MB" pp100_sent
row "push of 1M keys per request: M keys/s" push_mkeys
row "push of 1M keys: keys/s ÷ memcpy of the same bytes" push_ratio
row "push of 1M keys: p50 latency, ms" push_p50
row "pull of 1M keys per request: M keys/s" pull_mkeys
row "pull of 1M keys: keys/s ÷ memcpy of the same bytes" pull_ratio
row "pull of 1M keys: p50 latency, ms" pull_p50
echo "| test_kv_app as shipped (10K keys, 50 rounds) S2W2: job wall time, s | $(med kvapp_s2w2) | | ${R[kvapp_s2w2]}|"
