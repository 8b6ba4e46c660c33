#!/usr/bin/env bash
# Pull goodput through the rendezvous (--zero-copy) against the copying path, 1 MB and 4 MB
# values, S=1 W=1, and the meta-data round trips per key (1 in round 1, 0 after), all in one run.
# Usage: scripts/bench-rendezvous.sh [RUNS] [SECONDS] [VAN]     (defaults 3, 4, zmq)
# On the RDMA van, run it inside the Soft-RoCE guest (scripts/softroce-vm.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS=${1:-3}
SECS=${2:-4}
VAN=${3:-zmq}
[ -x target/release/pslite-launch ] || cargo build --release --quiet --bin pslite-launch
LAUNCH=target/release/pslite-launch
. scripts/bench-lib.sh

echo "| value | path | pull goodput, median of $RUNS x $SECS s (Gbit/s) | runs | meta-data round trips per key: round 1 / after |"
echo "| --- | --- | --- | --- | --- |"
for len in 1024000 4096000; do
    for zc in "" "--zero-copy"; do
        g=(); trips="-"
        for i in $(seq "$RUNS"); do
            line=$(timeout $((SECS + 120)) $LAUNCH local --van "$VAN" --servers 1 --workers 1 -- \
                bench --mode pull --len "$len" --keys-per-server 16 --seconds "$SECS" --json $zc | grep goodput_gbps)
            g+=("$(echo "$line" | field goodput_gbps | awk '{printf "%.2f", $1}')")
            if [ -n "$zc" ]; then
                trips="$(echo "$line" | field meta_round_trips_first) / $(echo "$line" | field meta_round_trips_after)"
            fi
        done
        name=$([ -n "$zc" ] && echo "rendezvous (--zero-copy)" || echo "copying pull")
        echo "| $((len / 1000000)) MB | $name | $(printf '%s\n' "${g[@]}" | median 2) | ${g[*]} | $trips |"
    done
done
