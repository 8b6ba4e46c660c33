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
A=$(bins "$1")
B=$(bins "$2")
export PS_AUTH=none

declare -A good good4 lat keys
for i in $(seq "$RUNS"); do
    order="A B"
    [ $((i % 2)) -eq 0 ] && order="B A"
    for v in $order; do
        L=$A
        [ "$v" = B ] && L=$B
        run() { timeout "$1" "$L/pslite-launch" local --servers 1 --workers 1 -- bench "${@:2}" --json 2>/dev/null; }
        good[$v]+="$(printf '%.2f' "$(run $((SECS + 60)) --mode push-pull --len 1024000 --seconds "$SECS" | field goodput_gbps)") "
        good4[$v]+="$(printf '%.2f' "$(run $((SECS + 60)) --mode push-pull --len 4096000 --seconds "$SECS" | field goodput_gbps)") "
        lat[$v]+="$(printf '%.4f' "$(run 60 --mode push-pull --len 4 --keys-per-server 1 --seconds 2 | field p50_ms)") "
        keys[$v]+="$(printf '%.0f' "$(run 120 --mode push-pull --keys-per-request 100000 --len 4 --repeat 5 | field keys_per_s)") "
    done
    echo "round $i of $RUNS done" >&2
done

gA=$(median_of "${good[A]}") gB=$(median_of "${good[B]}")
g4A=$(median_of "${good4[A]}") g4B=$(median_of "${good4[B]}")
lA=$(median_of "${lat[A]}") lB=$(median_of "${lat[B]}")
kA=$(median_of "${keys[A]}") kB=$(median_of "${keys[B]}")
cat <<EOT
S=1 W=1, ZMQ van, PS_AUTH=none, medians of $RUNS interleaved rounds; A = $1, B = $2

| figure | A | B | change |
| --- | --- | --- | --- |
| push-pull goodput, 1 MB values, ${SECS} s | $gA Gbit/s | $gB Gbit/s | $(pct "$gA" "$gB") |
| push-pull goodput, 4 MB values, ${SECS} s | $g4A Gbit/s | $g4B Gbit/s | $(pct "$g4A" "$g4B") |
| push-pull p50 latency, one 4-byte key | $lA ms | $lB ms | $(pct "$lA" "$lB") |
| push-pull of 100K keys per request | $kA keys/s | $kB keys/s | $(pct "$kA" "$kB") |

runs: goodput A ${good[A]}/ B ${good[B]}; 4 MB A ${good4[A]}/ B ${good4[B]}; p50 A ${lat[A]}/ B ${lat[B]}; keys/s A ${keys[A]}/ B ${keys[B]}
EOT
