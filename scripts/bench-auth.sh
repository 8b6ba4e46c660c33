#!/usr/bin/env bash
# What authentication costs (issue 14), with and without a token, runs interleaved in one
# script run (the order alternates from round to round), S=1 W=1 on the ZMQ van:
#   - push-pull goodput, 1 MB (1024000 B) values;
#   - push-pull p50 latency of one 4-byte key (one request in flight).
# "token": pslite-launch's default (a fresh PS_AUTH_TOKEN per run: every connection
# authenticates, every message's sender is checked); "none": PS_AUTH=none.
# Usage: scripts/bench-auth.sh [RUNS] [SECONDS_PER_RUN]      (defaults 6 and 4)
# Bounded: every run is time-limited, all traffic is on 127.0.0.1.
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS=${1:-6}
SECS=${2:-4}
cargo build --release --quiet --bin pslite-launch
LAUNCH=target/release/pslite-launch
. scripts/bench-lib.sh

declare -A good lat
for i in $(seq "$RUNS"); do
    order="token none"
    [ $((i % 2)) -eq 0 ] && order="none token"
    for v in $order; do
        if [ "$v" = none ]; then export PS_AUTH=none; else unset PS_AUTH; fi
        j=$(timeout $((SECS + 60)) $LAUNCH local --servers 1 --workers 1 -- bench \
            --mode push-pull --len 1024000 --seconds "$SECS" --json 2>/dev/null)
        good[$v]+="$(printf '%.2f' "$(echo "$j" | field goodput_gbps)") "
        j=$(timeout 60 $LAUNCH local --servers 1 --workers 1 -- bench --mode push-pull \
            --len 4 --keys-per-server 1 --seconds 2 --json 2>/dev/null)
        lat[$v]+="$(printf '%.4f' "$(echo "$j" | field p50_ms)") "
    done
    echo "round $i of $RUNS done" >&2
done
unset PS_AUTH

g0=$(median_of "${good[none]}") g1=$(median_of "${good[token]}")
l0=$(median_of "${lat[none]}") l1=$(median_of "${lat[token]}")
cat <<EOT
S=1 W=1, ZMQ van, medians of $RUNS interleaved rounds

| figure | PS_AUTH=none | token | change |
| --- | --- | --- | --- |
| push-pull goodput, 1 MB values, ${SECS} s | $g0 Gbit/s | $g1 Gbit/s | $(pct "$g0" "$g1") |
| push-pull p50 latency, one 4-byte key | $l0 ms | $l1 ms | $(pct "$l0" "$l1") |

runs: goodput none ${good[none]}/ token ${good[token]}; p50 none ${lat[none]}/ token ${lat[token]}
EOT
