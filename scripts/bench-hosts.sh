#!/usr/bin/env bash
# The cluster across hosts vs on loopback (issue 15), rounds interleaved in one run, medians:
#   - bench push-pull goodput, 1 MB (1024000 B) values, S=2 W=2, summed over the workers:
#     every node on its own host (a network namespace, scripts/netns.sh: veth pairs on a bridge)
#     vs every node on 127.0.0.1;
#   - the TCP reference: iperf3, one stream, 3 s, host 3 → host 1 vs 127.0.0.1 → 127.0.0.1
#     (what the network path itself costs);
#   - start-up of a 1 + 4 + 16 node cluster (scheduler, 4 servers, 16 workers): from starting
#     the scheduler until every node has logged that it started (it is past the first barrier),
#     on 21 hosts vs on loopback.
# Usage: scripts/bench-hosts.sh [RUNS] [SECONDS_PER_RUN]     (defaults 5 and 4). Needs root.
# Bounded: every process is time-limited; traffic stays on loopback and the namespaces'
# 198.18.0.0/24, which the script removes at the end.
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS=${1:-5}
SECS=${2:-4}
cargo build --release --quiet --bin pslite-launch
L=$PWD/target/release/pslite-launch
. scripts/bench-lib.sh
. scripts/need-debs.sh
need_debs iperf3
NAME=bh$$
tmp=$(mktemp -d)
trap 'scripts/netns.sh down $NAME; rm -rf "$tmp"' EXIT
scripts/netns.sh up $NAME 21
export PS_AUTH_TOKEN=bench-hosts-token-0123456789 PS_TIMEOUT=60 DMLC_PS_ROOT_PORT=9200

# start WHERE I ROLE RANK ARGS…: node I (host I in "hosts", or 127.0.0.1), output in $tmp/I.
start() {
    local where=$1 i=$2 role=$3 rank=$4; shift 4
    local wrap=() root=127.0.0.1
    if [[ $where == hosts ]]; then wrap=(ip netns exec $NAME-h$i); root=198.18.0.1; fi
    DMLC_PS_ROOT_URI=$root DMLC_ROLE=$role PSLITE_RANK=$rank \
        timeout $((SECS + 90)) "${wrap[@]}" "$L" node "$role" "$@" > "$tmp/$i" 2>&1 &
}

# The measures, of the variant WHERE ($VARIANT: hosts or loopback):
# goodput: summed goodput of the S2W2 bench (Gbit/s).
goodput() {
    set -- "$VARIANT"
    export DMLC_NUM_SERVER=2 DMLC_NUM_WORKER=2 PS_VERBOSE=0
    start "$1" 0 scheduler 0
    start "$1" 1 server 0; start "$1" 2 server 1
    start "$1" 3 worker 0 bench --mode push-pull --len 1024000 --seconds "$SECS" --json
    start "$1" 4 worker 1 bench --mode push-pull --len 1024000 --seconds "$SECS" --json
    wait
    cat "$tmp/3" "$tmp/4" | grep -o '"goodput_gbps":[0-9.e+-]*' | cut -d: -f2 \
        | awk '{s += $1} END {if (NR != 2) exit 1; printf "%.2f", s}'
}

# iperf: one-stream TCP goodput, host 3 → host 1 or loopback (Gbit/s).
iperf() {
    set -- "$VARIANT"
    local srv=() cli=() addr=127.0.0.1
    if [[ $1 == hosts ]]; then srv=(ip netns exec $NAME-h1); cli=(ip netns exec $NAME-h3); addr=198.18.0.2; fi
    timeout 30 "${srv[@]}" iperf3 -s -1 -B $addr -p 9300 >/dev/null 2>&1 &
    sleep 0.5
    timeout 30 "${cli[@]}" iperf3 -c $addr -p 9300 -t 3 -f g | awk '/receiver/ {print $7}'
    wait
}

# startup: seconds from the scheduler's start until all 21 nodes logged "started".
startup() {
    set -- "$VARIANT"
    export DMLC_NUM_SERVER=4 DMLC_NUM_WORKER=16 PS_VERBOSE=1
    local t0 i n
    t0=$(now)
    start "$1" 0 scheduler 0
    for i in 1 2 3 4; do start "$1" $i server $((i - 1)); done
    for i in $(seq 5 20); do start "$1" $i worker $((i - 5)) kv-app --keys 10 --repeat 1; done
    while :; do
        n=$(grep -l " started: " "$tmp"/{0..20} 2>/dev/null | wc -l)
        [[ $n == 21 ]] && break
        if [[ $(elapsed "$t0" | cut -d. -f1) -ge 60 ]]; then echo "start-up did not finish" >&2; exit 1; fi
        sleep 0.01
    done
    elapsed "$t0"
    wait
}

# Each measure starts from an empty output directory.
variant() { rm -f "$tmp"/*; }
interleave "hosts loopback" "$RUNS" goodput iperf3=iperf start-up=startup

COLS="loopback hosts"
echo "ZMQ van, medians of $RUNS interleaved rounds; hosts: one network namespace per node (veth + bridge)"
echo
table_head figure loopback "own hosts" change
row "push-pull goodput, 1 MB values, S=2 W=2, ${SECS} s" Gbit/s goodput
row "TCP reference, iperf3 one stream, 3 s" Gbit/s iperf3
row "start-up, 1 + 4 + 16 nodes (scheduler start → all past the first barrier)" s start-up
echo
runs_line goodput iperf3 start-up
