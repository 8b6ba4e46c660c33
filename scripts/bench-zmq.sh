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
LAUNCH=target/release/pslite-launch

. scripts/bench-lib.sh

port=$(( 20000 + RANDOM % 20000 ))
timeout 30 iperf3 -s -1 -B 127.0.0.1 -p "$port" >/dev/null 2>&1 &
sleep 0.5
iperf_gbps=$(timeout 30 iperf3 -c 127.0.0.1 -p "$port" -t 5 -f g | awk '/receiver/ {print $7}')
wait || true

goodputs=()
for i in $(seq "$RUNS"); do
    line=$(timeout $((SECS + 60)) $LAUNCH local --servers 1 --workers 1 -- bench --mode push-pull --len 1024000 --seconds "$SECS" --json | grep goodput_gbps)
    g=$(echo "$line" | field goodput_gbps | awk '{printf "%.2f", $1}')
    echo "run $i: push-pull 1 MB goodput $g Gbit/s" >&2
    goodputs+=("$g")
done
med=$(printf '%s\n' "${goodputs[@]}" | median)

lat=()
for i in $(seq 3); do
    line=$(timeout 60 $LAUNCH local --servers 1 --workers 1 -- bench --mode push-pull --len 4 --keys-per-server 1 --seconds 2 --json | grep p50_ms)
    lat+=("$(echo "$line" | field p50_ms | awk '{printf "%.3f", $1}')")
done
lat_med=$(printf '%s\n' "${lat[@]}" | median)

cat <<EOT
| figure | value |
| --- | --- |
| TCP ceiling, iperf3 -c 127.0.0.1 (one stream, 5 s) | ${iperf_gbps} Gbit/s |
| push-pull goodput, 1 MB values, S=1 W=1, median of ${RUNS} x ${SECS} s | ${med} Gbit/s (runs: ${goodputs[*]}) |
| ratio goodput / TCP ceiling | $(awk -v a="$med" -v b="$iperf_gbps" 'BEGIN {printf "%.2f", a/b}') |
| push-pull p50 latency, one 4-byte key, median of 3 | ${lat_med} ms |
EOT
