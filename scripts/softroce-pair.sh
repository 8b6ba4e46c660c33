#!/usr/bin/env bash
# softroce-pair.sh — run two commands in two throw-away qemu guests, A and B, joined by a virtual
# Ethernet link, each with Soft-RoCE (rdma_rxe) on its NIC: RDMA between two kernels.
#
#   scripts/softroce-pair.sh [--prepare] [--] 'COMMAND_A' 'COMMAND_B'
#
# Each guest is softroce-vm.sh's (host / read-only under a tmpfs overlay, $PSLITE_VM_OUT shared
# read-write by both) plus a virtio NIC on a tap; the two taps are bridged in a network namespace
# the script makes (and removes), so the guests reach nothing else. A command
# runs once its peer answers ping, with the host's environment plus RDMA_DEVICE=rxe0,
# RDMA_GID_INDEX, SOFTROCE_GUEST=A|B, SOFTROCE_IP, SOFTROCE_PEER_IP (198.18.0.1 for A, .2 for B),
# SOFTROCE_IP6, SOFTROCE_PEER_IP6 (fd00::1, fd00::2) and SOFTROCE_NETDEV. Their output is
# prefixed "[A] " and "[B] ". Exit status: 0 when both exit 0, else the first non-zero (named on
# stderr); 124 on timeout; 125 if a guest could not be set up. When one command fails, the other
# gets PSLITE_VM_GRACE seconds (30) to end before its guest is killed.
#
# Knobs as softroce-vm.sh's: PSLITE_VM_TIMEOUT (s, 1500, both guests together), PSLITE_VM_MEM
# (MiB per guest, 1536), PSLITE_VM_SMP (per guest, 1: on a 2-core host under TCG, 2 made
# ib_write_bw slower, 0.19-0.21 against 0.22-0.28 Gbit/s, and the runs ~6 s longer),
# PSLITE_VM_CACHE, PSLITE_VM_OUT, PSLITE_VM_VERBOSE=1 (kernel messages, and the NIC and GID per
# guest); and PSLITE_VM_GRACE. Needs the same host packages as softroce-vm.sh, plus iputils-ping,
# and root with /dev/net/tun (the namespace, the bridge and the taps).
set -euo pipefail

MEM=${PSLITE_VM_MEM:-1536}
SMP=${PSLITE_VM_SMP:-1}
GRACE=${PSLITE_VM_GRACE:-30}
. "$(dirname "$0")/softroce-lib.sh"   # the kernel, the initramfs, the guest's common parts

prepare_only=0
[[ ${1:-} == --prepare ]] && { prepare_only=1; shift; }
[[ ${1:-} == -- ]] && shift
[[ $prepare_only == 1 || $# == 2 ]] || { sed -n '2,14p' "$0" >&2; exit 2; }

softroce_prepare iputils-ping
[[ $prepare_only == 1 ]] && { say "ready: $kver"; exit 0; }

# Inside each guest's real root: the NIC (found by its MAC) up with addresses, rxe0 on it, wait
# for the peer, run the job.
run_sh() {
softroce_run_common
cat <<'RUN'
. /job/vars
ME="softroce-pair guest $G"
quiet modprobe -a virtio_net rdma_rxe ib_uverbs || setup_fail "modprobe failed"
ip link set lo up
echo "softroce-${G,,}" > /proc/sys/kernel/hostname
nic=
for _ in $(seq 100); do
    for d in /sys/class/net/*; do
        read -r a < "$d/address" 2>/dev/null && [[ $a == "$MAC" ]] && { nic=${d##*/}; break 2; }
    done
    sleep 0.1
done
[[ -n $nic ]] || setup_fail "no NIC with MAC $MAC"
ip link set "$nic" mtu 9000 2>/dev/null || ip link set "$nic" mtu 1500
ip addr add "$IP/24" dev "$nic" || setup_fail "cannot address $nic"
ip -6 addr add "$IP6/64" dev "$nic" nodad 2>/dev/null
ip link set "$nic" up
rxe_up "$nic"
SECONDS=0
until ping -c 1 -W 1 -q "$PEER" >/dev/null 2>&1; do
    ((SECONDS < 300)) || setup_fail "the peer $PEER does not answer ping"; sleep 0.2
done
[[ $(cat /job/verbose) == 1 ]] &&
    echo "$ME: rxe0 on $nic (mtu $(cat /sys/class/net/$nic/mtu)), GID index $gid, peer up after ${SECONDS}s"
run_job RDMA_DEVICE=rxe0 RDMA_GID_INDEX="$gid" SOFTROCE_GUEST="$G" SOFTROCE_NETDEV="$nic" \
    SOFTROCE_IP="$IP" SOFTROCE_PEER_IP="$PEER" SOFTROCE_IP6="$IP6" SOFTROCE_PEER_IP6="$PEER6"
RUN
}

# --- the two jobs --------------------------------------------------------------------------------
tmp=$(mktemp -d /tmp/pslite-pair.XXXXXX)
declare -A qpid=() spid=() rc=() took=()
cleanup() {
    set +e; local g
    for g in "${!qpid[@]}"; do kill -9 "${qpid[$g]}" 2>/dev/null; done
    for g in "${!spid[@]}"; do wait "${spid[$g]}" 2>/dev/null; done   # the prefixers' last lines
    rm -rf "$tmp"
    [[ -n ${ns:-} ]] && ip netns del "$ns" 2>/dev/null
}
trap cleanup EXIT
trap 'exit 130' INT TERM HUP QUIT

declare -A ip=([A]=198.18.0.1 [B]=198.18.0.2) ip6=([A]=fd00::1 [B]=fd00::2)
declare -A mac=([A]=52:54:00:c6:12:0a [B]=52:54:00:c6:12:0b) peer=([A]=B [B]=A)
declare -A cmd=([A]=$1 [B]=$2)
for g in A B; do
    mkdir "$tmp/$g"
    softroce_job_dir "$tmp/$g" "${cmd[$g]}"
    run_sh > "$tmp/$g/run.sh"
    p=${peer[$g]}
    printf 'G=%s IP=%s PEER=%s IP6=%s PEER6=%s MAC=%s\n' \
        "$g" "${ip[$g]}" "${ip[$p]}" "${ip6[$g]}" "${ip6[$p]}" "${mac[$g]}" > "$tmp/$g/vars"
done
softroce_qemu_args

start_guest() {   # A|B: boot it on its tap, its console through a "[G] " prefixer
    local g=$1
    rm -f "$tmp/$g.out"; mkfifo "$tmp/$g.out"
    sed -u "s/^/[$g] /" < "$tmp/$g.out" &
    spid[$g]=$!
    ip netns exec "$ns" qemu-system-x86_64 "${qemu_args[@]}" \
        -virtfs "local,path=$tmp/$g,mount_tag=job,security_model=none,multidevs=remap" \
        -netdev "tap,id=n0,ifname=tap$g,script=no,downscript=no" \
        -device "virtio-net-pci,netdev=n0,mac=${mac[$g]}" \
        </dev/null >"$tmp/$g.out" 2> >(sed -u "s/^/[$g] /" >&2) &
    qpid[$g]=$!
}

# The link: a network namespace of its own with a bridge and one tap per guest (the kernel's
# bridge; qemu's TCP socket netdev lost frames between the guests under load).
(( EUID == 0 )) || fail "needs root: the guests' link is a bridge in a network namespace"
for old in $(ip netns list | awk '/^pslite-pair-[0-9]+/ {print $1}'); do
    kill -0 "${old#pslite-pair-}" 2>/dev/null || ip netns del "$old"   # a killed run's
done
ns=pslite-pair-$$
ip netns add "$ns" || fail "cannot make network namespace $ns (ip netns add)"
ip -n "$ns" link add br0 type bridge || fail "cannot make a bridge in $ns"
ip -n "$ns" link set br0 mtu 9000 up || fail "cannot bring up the bridge in $ns"
for g in A B; do
    ip -n "$ns" tuntap add dev "tap$g" mode tap || fail "cannot make tap$g in $ns (/dev/net/tun)"
    ip -n "$ns" link set "tap$g" mtu 9000 txqueuelen 10000 master br0 up \
        || fail "cannot bring up tap$g in $ns"
done
t0=$SECONDS
start_guest A
start_guest B

# Wait: for both, for the time limit, or for the other's grace after a failure.
first= grace_end=
while (( ${#rc[@]} < 2 )); do
    for g in A B; do
        [[ -z ${rc[$g]:-} ]] && ! kill -0 "${qpid[$g]}" 2>/dev/null || continue
        qrc=0; wait "${qpid[$g]}" || qrc=$?
        wait "${spid[$g]}" 2>/dev/null || true   # its console's last lines
        unset 'qpid[$g]' 'spid[$g]'
        took[$g]=$((SECONDS - t0))
        if [[ -f $tmp/$g/status ]]; then rc[$g]=$(cat "$tmp/$g/status")
        else rc[$g]=125; say "guest $g ended without a status (qemu exit $qrc)"; fi
        if [[ ${rc[$g]} != 0 && -z $first ]]; then first=$g; grace_end=$((SECONDS + GRACE)); fi
    done
    (( ${#rc[@]} < 2 )) || break
    if (( SECONDS - t0 >= TIMEOUT )); then
        say "timed out after ${TIMEOUT}s (still running: ${!qpid[*]})"; exit 124
    fi
    if [[ -n $first ]] && (( SECONDS >= grace_end )); then
        g=${peer[$first]}
        say "guest $g killed ${GRACE}s after guest $first ended with status ${rc[$first]}"
        kill -9 "${qpid[$g]}" 2>/dev/null || true; wait "${qpid[$g]}" "${spid[$g]}" 2>/dev/null || true
        unset 'qpid[$g]' 'spid[$g]'; rc[$g]=killed; took[$g]=$((SECONDS - t0))
    fi
    sleep 0.5
done
say "guest A: status ${rc[A]} after ${took[A]}s; guest B: status ${rc[B]} after ${took[B]}s"
if [[ -n $first ]]; then say "guest $first failed first (status ${rc[$first]})"; exit "${rc[$first]}"; fi
exit 0
