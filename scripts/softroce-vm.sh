#!/usr/bin/env bash
# softroce-vm.sh — run a command inside a throw-away qemu guest with a real verbs stack:
# the Debian kernel's Soft-RoCE driver (rdma_rxe) on a veth, and this host's rdma-core userspace.
#
#   scripts/softroce-vm.sh [--prepare] [--] 'COMMAND'
#
# The guest sees this host's / read-only (virtio-9p) under a tmpfs overlay, so host-built
# binaries run at their host paths; its writes vanish, except under $PSLITE_VM_OUT (shared
# read-write at the same path). COMMAND runs as root in the current directory with the current
# environment plus RDMA_DEVICE=rxe0, RDMA_GID_INDEX=<RoCE v2 IPv4 GID> and SOFTROCE_IP.
# Exit status: COMMAND's; 124 on timeout; 125 if the guest could not be set up.
#
# Facts this relies on (from the team's Soft-RoCE notes; nothing here reads them): this host's
# KVM only runs PVM guests, so qemu emulates (TCG, ~10-50x slower); rxe works on one device
# shared by many processes, not across network namespaces; busybox insmod needs plain .ko files;
# the kernel's request_module runs in PID 1's root, so PID 1 gets a modprobe that chroots into
# the real root.
#
# Knobs: PSLITE_VM_TIMEOUT (s, default 1500), PSLITE_VM_MEM (MiB, 2048), PSLITE_VM_SMP (≤ 4),
# PSLITE_VM_CACHE (/var/cache/pslite-softroce), PSLITE_VM_OUT (shared dir), PSLITE_VM_VERBOSE=1.
set -euo pipefail

MEM=${PSLITE_VM_MEM:-2048}
SMP=${PSLITE_VM_SMP:-$(( $(nproc) > 4 ? 4 : $(nproc) ))}
. "$(dirname "$0")/softroce-lib.sh"   # the kernel, the initramfs, the guest's common parts

prepare_only=0
[[ ${1:-} == --prepare ]] && { prepare_only=1; shift; }
[[ ${1:-} == -- ]] && shift
[[ $prepare_only == 1 || $# -gt 0 ]] || { sed -n '2,11p' "$0" >&2; exit 2; }

softroce_prepare
[[ $prepare_only == 1 ]] && { say "ready: $kver"; exit 0; }

# Inside the guest's real root: bring up rxe0 on a veth, find its RoCE v2 GID, run the job.
run_sh() {
softroce_run_common
cat <<'RUN'
ME="softroce-vm guest"
quiet modprobe -a veth rdma_rxe ib_uverbs || setup_fail "modprobe failed"
ip link set lo up
ip link add sr0 type veth peer name sr1
ip addr add 10.77.0.1/24 dev sr0; ip link set sr0 mtu 9000 up; ip link set sr1 mtu 9000 up
rxe_up sr0
run_job RDMA_DEVICE=rxe0 RDMA_GID_INDEX="$gid" SOFTROCE_IP=10.77.0.1
RUN
}

# --- the job -------------------------------------------------------------------------------------
job=$(mktemp -d /tmp/pslite-vm.XXXXXX)
qemu_pid=
trap '[[ -n $qemu_pid ]] && kill -9 $qemu_pid 2>/dev/null; rm -rf "$job"' EXIT
trap 'exit 130' INT TERM
softroce_job_dir "$job" "$*"
run_sh > "$job/run.sh"

softroce_qemu_args
timeout -k 5 "$TIMEOUT" qemu-system-x86_64 "${qemu_args[@]}" -nic none \
    -virtfs "local,path=$job,mount_tag=job,security_model=none,multidevs=remap" </dev/null &
qemu_pid=$!
set +e; wait $qemu_pid; qrc=$?; set -e
qemu_pid=
[[ $qrc == 124 || $qrc == 137 ]] && { say "timed out after ${TIMEOUT}s"; exit 124; }
[[ -f $job/status ]] || fail "the guest ended without a status (qemu exit $qrc)"
exit "$(cat "$job/status")"
