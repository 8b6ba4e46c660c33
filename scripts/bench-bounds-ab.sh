#!/usr/bin/env bash
# What a change costs on the request path, A against B, runs interleaved within one script run
# (made for issue 14's bounds: the in-flight budget taken and given back per request and part,
# the parked count, the connection cap's thread), S=1 W=1 on the ZMQ van, PS_AUTH=none so that
# only the change differs:
#   - push-pull goodput, 1 MB (1024000 B) values, SECONDS s;
#   - push-pull goodput, 4 MB (4096000 B) values, SECONDS s (over a ZMQ frame: in pieces);
#   - push-pull p50 latency of one 4-byte key (one request in flight), 2 s;
#   - key-heavy: push-pull of 100K keys per request, 4-byte values, 5 rounds: keys/s.
# Medians of RUNS rounds; the order alternates from round to round.
# Usage: scripts/bench-bounds-ab.sh A B [RUNS] [SECONDS]      (defaults 6 and 4)
#   A and B: commits (built into target/ab/, once each), or directories holding a release
#   build's pslite-launch.
# Bounded: every run is time-limited, all traffic is on 127.0.0.1.
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -ge 2 ] || { sed -n 2,13p "$0" >&2; exit 2; }
RUNS=${3:-6}
SECS=${4:-4}
. scripts/bench-lib.sh
declare -A dir
dir[A]=$(bins "$1") dir[B]=$(bins "$2")
export PS_AUTH=none

variant() { LAUNCH=("${dir[$1]}/pslite-launch" local); }
interleave "A B" "$RUNS" "goodput=measure_goodput_1mb $SECS" "4-MB=measure_goodput 4096000 $SECS" \
    p50=measure_p50_4b keys/s=measure_keys_100k

echo "S=1 W=1, ZMQ van, PS_AUTH=none, medians of $RUNS interleaved rounds; A = $1, B = $2"
echo
table_head figure A B change
row "push-pull goodput, 1 MB values, ${SECS} s" Gbit/s goodput
row "push-pull goodput, 4 MB values, ${SECS} s" Gbit/s 4-MB
row "push-pull p50 latency, one 4-byte key" ms p50
row "push-pull of 100K keys per request" keys/s keys/s
echo
runs_line goodput "4 MB=4-MB" p50 keys/s
