#!/usr/bin/env bash
# RDMA between two kernels (issue 15): the RDMA van's kv-app and every bench mode with the
# scheduler and servers in guest A and the workers in guest B (scripts/softroce-pair.sh: two
# qemu guests, each with its own rdma_rxe device, joined by a virtual Ethernet link), over
# RoCE v2 on 198.18.0.0/24; and ib_write_bw between the guests in the same run, as the reference
# for our goodput. Needs a release build with `--features rdma` (target/release/pslite-launch).
#
#   scripts/rdma-pair-tests.sh            boots the pair and runs every step in both guests
#   scripts/rdma-pair-tests.sh A|B        one guest's side (what the pair runs)
#
# Each step is one job of `pslite-launch task` ranks: 0…S (scheduler, servers) in A, the workers
# in B, on a port of its own; both sides go through the steps in order, and a step that fails
# on one side fails on the other within PS_TIMEOUT, so they stay in step; the steps after a
# failed one (ib_write_bw's included) are not run. Exit status: 0 when every step passed on both
# sides.
set -uo pipefail
cd "$(dirname "$0")/.."
if [[ $# == 0 ]]; then
    export PS_AUTH_TOKEN=${PS_AUTH_TOKEN:-pair-guests-token-$RANDOM$RANDOM$RANDOM}
    exec scripts/softroce-pair.sh "scripts/rdma-pair-tests.sh A" "scripts/rdma-pair-tests.sh B"
fi
side=$1
L=${PSLITE_LAUNCH:-target/release/pslite-launch}
export DMLC_PS_VAN_TYPE=rdma PS_TIMEOUT=120 PS_HEARTBEAT_TIMEOUT=30 PS_POOL_BYTES=67108864
root=198.18.0.1
out=$(mktemp -d)
failed=0 skipped=0 n=0

# step NAME S W WORKER_ARGS…: this side's ranks of one job. After a failed step the others are
# not run (named "skip"): both sides saw it fail, and the failures seen here so far came with the
# emulated link stalling, after which every later step only waited out PS_TIMEOUT.
step() {
    local name=$1 s=$2 w=$3; shift 3
    local t0=$SECONDS port=$((9100 + n)) ranks r rc=0
    n=$((n + 1))
    if ((failed > 0)); then echo "skip $name (an earlier step failed)"; skipped=$((skipped + 1)); return; fi
    if [[ $side == A ]]; then ranks=$(seq 0 "$s"); else ranks=$(seq $((s + 1)) $((s + w))); fi
    for r in $ranks; do
        PSLITE_TASK_RANK=$r PSLITE_TASK_COUNT=$((1 + s + w)) timeout 300 "$L" task \
            --servers "$s" --workers "$w" --root-uri $root --root-port $port -- "$@" \
            > "$out/$r" 2>&1 &
    done
    for r in $ranks; do wait -n || rc=$?; done
    if [[ $rc == 0 ]]; then
        echo "ok   $name ($((SECONDS - t0)) s)"
    else
        echo "FAIL $name (status $rc, $((SECONDS - t0)) s)"
        for r in $ranks; do grep -vE " (INFO|DEBUG|TRACE) " "$out/$r" | tail -8 | sed "s/^/     task $r: /"; done
        failed=$((failed + 1))
        guest_state | sed "s/^/     guest: /"
    fi
    cat "$out"/* | grep -E "error: 0, 0|goodput" | sed 's/^/     /'
    rm -f "$out"/*
}

# What this guest looks like after a failed step: the kernel's last RDMA and NIC messages, the
# rxe device's non-zero counters, the NIC's statistics, memory, and processes stuck in the kernel.
guest_state() {
    dmesg 2>/dev/null | grep -vE "rxe0: (set active|added)|rdma_rxe: loaded|NMI watchdog" |
        grep -E "rxe|rdma|infiniband|virtio|NETDEV|hung|blocked for|oom|Call Trace|BUG:|WARNING:" | tail -10
    local f v line=
    for f in /sys/class/infiniband/"$RDMA_DEVICE"/ports/1/hw_counters/*; do
        read -r v < "$f" 2>/dev/null && [[ $v != 0 ]] && line+=" ${f##*/}=$v"
    done
    echo "rxe counters:${line:- none}"
    ip -s link show dev "$SOFTROCE_NETDEV" 2>/dev/null | sed -n '3,6p'
    free -m 2>/dev/null | sed -n 2p
    ps -eo stat,pid,etimes,wchan:24,comm 2>/dev/null | awk '$1 ~ /^D/ || $5 ~ /^pslite/' | head -8
}

# The verbs reference: ib_write_bw, 1 MB messages, A serves, B connects (retrying until A is up).
if [[ $side == A ]]; then
    if ! timeout 120 ib_write_bw -d "$RDMA_DEVICE" -x "$RDMA_GID_INDEX" -s 1048576 -n 300 -F \
        --report_gbits >/dev/null 2>&1; then
        echo "FAIL ib_write_bw between the guests (server side): the emulated link is not working"
        guest_state | sed "s/^/     guest: /"
        failed=1
    fi
else
    SECONDS=0
    while ((SECONDS < 125)); do   # A's side gives up after 120 s
        bw=$(timeout 60 ib_write_bw -d "$RDMA_DEVICE" -x "$RDMA_GID_INDEX" -s 1048576 -n 300 -F \
            --report_gbits $root 2>/dev/null | awk '$1 == 1048576 {print $4}')
        [[ -n $bw ]] && break
        sleep 1
    done
    echo "ib_write_bw A<-B, 1 MB messages: ${bw:-none} Gbit/s (average)"
    if [[ -z $bw ]]; then
        echo "FAIL ib_write_bw between the guests: the emulated link is not working"
        guest_state | sed "s/^/     guest: /"
        failed=1
    fi
fi
sleep 2
step "kv-app S=2 W=2 (exact sums)" 2 2 kv-app --keys 1000 --repeat 10
step "kv-app f64, 3 values per key" 1 2 kv-app --dtype f64 --len 3 --keys 500 --repeat 5
for m in push pull push-pull push-then-pull; do
    step "bench $m" 1 1 bench --mode $m --len 65536 --keys-per-server 8 --seconds 3
done
step "bench push-pull, 1 MB values (goodput)" 1 1 bench --mode push-pull --len 1024000 --keys-per-server 4 --seconds 5
step "rendezvous pulls (kv-app --zero-copy)" 2 2 kv-app --zero-copy --keys 300 --repeat 5
step "rendezvous bench (pull --zero-copy, 1 MB)" 1 1 bench --mode pull --zero-copy --len 1024000 --keys-per-server 4 --repeat 4
rm -rf "$out"
echo "rdma pair tests, guest $side: $failed failed, $skipped not run"
exit $((failed > 0))
