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
[ $# -ge 2 ] || { sed -n 2,11p "$0" >&2; exit 2; }
RUNS=${3:-6}
. scripts/bench-lib.sh
A=$(bins "$1")
B=$(bins "$2")
export PS_AUTH=none

variant() {
    case $1 in
        A) LAUNCH=("$A/pslite-launch" local) ;;
        B) LAUNCH=("$B/pslite-launch" local) ;;
        B-off) LAUNCH=("$B/pslite-launch" local --no-metrics) ;;
    esac
}
interleave "A B B-off" "$RUNS" p50=measure_p50_4b keys/s=measure_keys_100k

echo "S=1 W=1, ZMQ van, PS_AUTH=none, medians of $RUNS interleaved rounds; A = $1, B = $2"
echo
table_head figure A "B (metrics served)" "B --no-metrics"
row "push-pull p50, one 4-byte key" ms p50
row "push-pull of 100K keys per request" keys/s keys/s
echo
runs_line p50 keys/s
