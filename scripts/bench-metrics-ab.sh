#!/usr/bin/env bash
# What the metrics cost (issue 16), three ways interleaved within one script run: A (a commit
# before metrics), B (one with them, each node serving them: pslite-launch local's default)
# and B with --no-metrics (counting, but no metrics servers). S=1 W=1, ZMQ van, PS_AUTH=none:
#   - push-pull p50 latency of one 4-byte key (one request in flight), 2 s: the per-message cost;
#   - push-pull of 100K keys per request, 4-byte values, 5 rounds: keys/s.
# Medians of RUNS rounds; the order rotates from round to round.
# Usage: scripts/bench-metrics-ab.sh A B [RUNS]      (default 6)
#   A and B: commits (built into target/ab/, once each), or directories holding a release
#   build's pslite-launch.
# Bounded: every run is time-limited, all traffic is on 127.0.0.1.
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -ge 2 ] || { sed -n 2,12p "$0" >&2; exit 2; }
RUNS=${3:-6}
. scripts/bench-lib.sh
A=$(bins "$1")
B=$(bins "$2")
export PS_AUTH=none

declare -A lat keys
variants=(A B B-off)
for i in $(seq "$RUNS"); do
    for k in 0 1 2; do
        v=${variants[$(((i + k) % 3))]}
        case $v in
            A) L=("$A/pslite-launch" local) ;;
            B) L=("$B/pslite-launch" local) ;;
            B-off) L=("$B/pslite-launch" local --no-metrics) ;;
        esac
        run() { timeout "$1" "${L[@]}" --servers 1 --workers 1 -- bench "${@:2}" --json 2>/dev/null; }
        lat[$v]+="$(printf '%.4f' "$(run 60 --mode push-pull --len 4 --keys-per-server 1 --seconds 2 | field p50_ms)") "
        keys[$v]+="$(printf '%.0f' "$(run 120 --mode push-pull --keys-per-request 100000 --len 4 --repeat 5 | field keys_per_s)") "
    done
    echo "round $i of $RUNS done" >&2
done

echo "S=1 W=1, ZMQ van, PS_AUTH=none, medians of $RUNS interleaved rounds; A = $1, B = $2"
echo
echo "| figure | A | B (metrics served) | B --no-metrics |"
echo "| --- | --- | --- | --- |"
lA=$(median_of "${lat[A]}") lB=$(median_of "${lat[B]}") lO=$(median_of "${lat[B-off]}")
kA=$(median_of "${keys[A]}") kB=$(median_of "${keys[B]}") kO=$(median_of "${keys[B-off]}")
echo "| push-pull p50, one 4-byte key | $lA ms | $lB ms ($(pct "$lA" "$lB")) | $lO ms ($(pct "$lA" "$lO")) |"
echo "| push-pull of 100K keys per request | $kA keys/s | $kB keys/s ($(pct "$kA" "$kB")) | $kO keys/s ($(pct "$kA" "$kO")) |"
echo
echo "runs: p50 A ${lat[A]}/ B ${lat[B]}/ B-off ${lat[B-off]}; keys/s A ${keys[A]}/ B ${keys[B]}/ B-off ${keys[B-off]}"
