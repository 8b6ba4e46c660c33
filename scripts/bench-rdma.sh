#!/usr/bin/env bash
# Issue 3's figures, all in ONE Soft-RoCE guest run:
#   scripts/softroce-vm.sh scripts/bench-rdma.sh [RUNS] [SECONDS]
# - perftest ib_write_bw -F, 1 MiB messages, on rxe0 (the emulated wire's ceiling)
# - bench --mode push-pull --len 1024000 over the RDMA van (median of RUNS)
# - the same bench over the ZMQ van, in the same guest
# - pull goodput, 1 MB and 4 MB, rendezvous (--zero-copy) against the copying path, RDMA van
# Goodput counts value bytes once per request, as bench --help states; a push-pull moves twice
# that on the wire, so the wire figure to set against ib_write_bw is 2 x goodput.
set -uo pipefail
cd "$(dirname "$0")/.."
# perftest (ib_write_bw): softroce-vm.sh installs it on the host, whose root the guest sees.
. scripts/need-debs.sh
need_debs perftest
# Registering the pool pins its pages: keep it modest in the 2 GiB guest.
export PS_POOL_BYTES=${PS_POOL_BYTES:-67108864}
RUNS=${1:-3}
SECS=${2:-8}
L=target/release/pslite-launch
. scripts/bench-lib.sh
dev=${RDMA_DEVICE:-rxe0}; gid=${RDMA_GID_INDEX:-1}

bws=()
for i in $(seq "$RUNS"); do
    timeout 120 ib_write_bw -F -d "$dev" -x "$gid" -s 1048576 -n 300 -p $((18515 + i)) >/dev/null 2>&1 &
    sleep 1
    mb=$(timeout 120 ib_write_bw -F -d "$dev" -x "$gid" -s 1048576 -n 300 -p $((18515 + i)) 127.0.0.1 2>/dev/null | awk '$1 == 1048576 {print $4}')
    wait
    bws+=("$(awk -v m="${mb:-0}" 'BEGIN {printf "%.3f", m * 8 * 1048576 / 1e9}')")
done
bw=$(printf '%s\n' "${bws[@]}" | median)

bench() { # van mode len extra...
    local van=$1 mode=$2 len=$3; shift 3
    local g=()
    for i in $(seq "$RUNS"); do
        g+=("$(timeout $((SECS + 120)) $L local --van "$van" --servers 1 --workers 1 -- bench --mode "$mode" --len "$len" \
            --keys-per-server 8 --seconds "$SECS" --json "$@" 2>/dev/null | field goodput_gbps | awk '{printf "%.3f", $1}')")
    done
    echo "$(printf '%s\n' "${g[@]}" | median) (runs: ${g[*]})"
}
rd=$(bench rdma push-pull 1024000)
zq=$(bench zmq push-pull 1024000)
rdv=${rd%% *}
echo "| figure (Soft-RoCE guest, TCG) | Gbit/s |"
echo "| --- | --- |"
echo "| ib_write_bw -F, 1 MiB, rxe0 (median of $RUNS) | $bw (runs: ${bws[*]}) |"
echo "| push-pull goodput, 1 MB, RDMA van, S=1 W=1 (median of $RUNS x $SECS s) | $rd |"
echo "| same, wire bytes (2 x goodput) / ib_write_bw | $(awk -v g="$rdv" -v b="$bw" 'BEGIN {if (b > 0) printf "%.2f", 2 * g / b; else print "n/a"}') |"
echo "| push-pull goodput, 1 MB, ZMQ van, same guest | $zq |"
for len in 1024000 4096000; do
    echo "| pull goodput, $((len / 1000000)) MB, RDMA van, copying | $(bench rdma pull $len) |"
    echo "| pull goodput, $((len / 1000000)) MB, RDMA van, rendezvous --zero-copy | $(bench rdma pull $len --zero-copy) |"
done
