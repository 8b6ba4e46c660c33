#!/usr/bin/env bash
# Measures the ZMQ van on this machine (issue 2's figures), all in one run:
#   - the TCP ceiling: iperf3 -c 127.0.0.1 (5 s, one stream)
#   - push-pull goodput, S=1 W=1, 1 MB (1024000 B) values, 40 keys: median of RUNS runs
#   - push-pull p50 latency of one 4-byte key (one request in flight)
# Usage: scripts/bench-zmq.sh [RUNS] [SECONDS_PER_RUN]      (defaults 5 and 5)
# Bounded: every run is time-limited, all traffic is on 127.0.0.1.
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS=${1:-5}
SECS=${2:-5}

. scripts/need-debs.sh
need_debs iperf3
cargo build --release --quiet --bin pslite-launch
. scripts/bench-lib.sh

port=$(( 20000 + RANDOM % 20000 ))
timeout 30 iperf3 -s -1 -B 127.0.0.1 -p "$port" >/dev/null 2>&1 &
sleep 0.5
iperf_gbps=$(timeout 30 iperf3 -c 127.0.0.1 -p "$port" -t 5 -f g | awk '/receiver/ {print $7}')
wait || true

interleave head "$RUNS" "goodput=measure_goodput_1mb $SECS"
interleave head 3 "p50=measure_p50_4b 3"
g=$(med goodput head)
goodputs=${R[goodput head]% }

cat <<EOT
| figure | value |
| --- | --- |
| TCP ceiling, iperf3 -c 127.0.0.1 (one stream, 5 s) | ${iperf_gbps} Gbit/s |
| push-pull goodput, 1 MB values, S=1 W=1, median of ${RUNS} x ${SECS} s | ${g} Gbit/s (runs: ${goodputs}) |
| ratio goodput / TCP ceiling | $(awk -v a="$g" -v b="$iperf_gbps" 'BEGIN {printf "%.2f", a/b}') |
| push-pull p50 latency, one 4-byte key, median of 3 | $(med p50 head) ms |
EOT
