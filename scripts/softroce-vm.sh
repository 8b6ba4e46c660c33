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

CACHE=${PSLITE_VM_CACHE:-/var/cache/pslite-softroce}
TIMEOUT=${PSLITE_VM_TIMEOUT:-1500}
MEM=${PSLITE_VM_MEM:-2048}
SMP=${PSLITE_VM_SMP:-$(( $(nproc) > 4 ? 4 : $(nproc) ))}
VERBOSE=${PSLITE_VM_VERBOSE:-0}
OUTDIR=${PSLITE_VM_OUT:-}

say() { echo "softroce-vm: $*" >&2; }
fail() { say "$*"; exit 125; }

prepare_only=0
[[ ${1:-} == --prepare ]] && { prepare_only=1; shift; }
[[ ${1:-} == -- ]] && shift
[[ $prepare_only == 1 || $# -gt 0 ]] || { sed -n '2,11p' "$0" >&2; exit 2; }

# --- host packages: the emulator, the initramfs tools, rdma-core for the guest to use ---------
. "$(dirname "$0")/need-debs.sh"
NEED_DEBS_STATUS=125   # "the guest could not be set up"
need_debs qemu-system-x86 busybox-static kmod cpio gzip xz-utils zstd iproute2 \
          rdma-core ibverbs-providers ibverbs-utils libibverbs1 perftest

mkdir -p "$CACHE"
exec 8>"$CACHE/lock"
flock 8

# --- the guest kernel: Debian's, unpacked into the cache (never installed) --------------------
kver=$(apt-cache depends linux-image-amd64 2>/dev/null | sed -n 's/.*Depends: linux-image-\(.*-amd64\)$/\1/p' | head -1)
if [[ -z $kver ]]; then
    kver=$(ls "$CACHE/kernels" 2>/dev/null | sort -V | tail -1)
fi
if [[ -z $kver ]]; then
    apt-get update -qq >&2
    kver=$(apt-cache depends linux-image-amd64 | sed -n 's/.*Depends: linux-image-\(.*-amd64\)$/\1/p' | head -1)
fi
[[ -n $kver ]] || fail "cannot tell which Debian kernel to use"
kroot=$CACHE/kernels/$kver
if [[ ! -f $kroot/ok ]]; then
    say "fetching linux-image-$kver"
    dl=$(mktemp -d); chmod 777 "$dl"
    (cd "$dl" && apt-get download -qq "linux-image-$kver" >&2) \
        || { apt-get update -qq >&2 && (cd "$dl" && apt-get download -qq "linux-image-$kver" >&2); } \
        || fail "cannot download linux-image-$kver"
    rm -rf "$kroot"; mkdir -p "$kroot"
    dpkg -x "$dl"/*.deb "$kroot"
    rm -rf "$dl"
    depmod -b "$kroot" "$kver"
    touch "$kroot/ok"
fi
vmlinuz=$kroot/boot/vmlinuz-$kver
moddir=$kroot/lib/modules/$kver

# --- the initramfs: busybox, the modules to mount 9p + overlay, and our init -------------------
guest_init() {
cat <<'INIT'
#!/bin/sh
# PID 1 of the guest: mount the host root, set up rxe0, run the job, report its status.
export PATH=/bin
mount -t proc p /proc; mount -t sysfs s /sys; mount -t devtmpfs d /dev
while read -r m; do insmod "/ko/$m.ko" 2>/dev/null; done < /ko/order
opt() { tr ' ' '\n' < /proc/cmdline | sed -n "s/^pslite\.$1=//p"; }
die() { echo "softroce-vm guest: $*"; echo 125 > /job/status 2>/dev/null; poweroff -f; }
mkdir -p /host /scratch /root2 /job
mount -t 9p -o trans=virtio,version=9p2000.L,ro,cache=loose,msize=512000 hostroot /host || die "no host root"
mount -t 9p -o trans=virtio,version=9p2000.L,msize=512000 job /job || die "no job dir"
mount -t tmpfs tmpfs /scratch; mkdir -p /scratch/u /scratch/w
mount -t overlay overlay -o lowerdir=/host,upperdir=/scratch/u,workdir=/scratch/w /root2 || die "no overlay"
R=/root2
for fs in proc:proc sysfs:sys devtmpfs:dev tmpfs:run; do mount -t "${fs%%:*}" x "$R/${fs#*:}"; done
mkdir -p "$R/dev/pts" "$R/dev/shm" "$R/job"; mount -t devpts x "$R/dev/pts"; mount -t tmpfs x "$R/dev/shm"
mount --bind /job "$R/job"
kv=$(uname -r); mkdir -p "$R/lib/modules/$kv"; mount --bind "$R$(opt moddir)" "$R/lib/modules/$kv"
out=$(opt out); [ -n "$out" ] && mount -t 9p -o trans=virtio,version=9p2000.L,msize=512000 out "$R$out"
printf '#!/bin/sh\nexec chroot /root2 /sbin/modprobe "$@"\n' > /bin/modprobe-in-root
chmod 755 /bin/modprobe-in-root; echo /bin/modprobe-in-root > /proc/sys/kernel/modprobe
chroot "$R" /bin/bash /job/run.sh
[ -f /job/status ] || echo 125 > /job/status
sync; poweroff -f
INIT
}

run_sh() {
cat <<'RUN'
#!/bin/bash
# Inside the guest's real root: bring up rxe0 on a veth, find its RoCE v2 GID, run the job.
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
stty -F /dev/console -onlcr 2>/dev/null
quiet() { if [[ $(cat /job/verbose) == 1 ]]; then "$@"; else "$@" >/dev/null 2>&1; fi; }
quiet modprobe -a veth rdma_rxe ib_uverbs || { echo "softroce-vm guest: modprobe failed"; exit 125; }
ip link set lo up
ip link add sr0 type veth peer name sr1
ip addr add 10.77.0.1/24 dev sr0; ip link set sr0 mtu 9000 up; ip link set sr1 mtu 9000 up
quiet rdma link add rxe0 type rxe netdev sr0 || { echo "softroce-vm guest: rdma link add failed"; echo 125 > /job/status; exit 125; }
gid=
for _ in $(seq 200); do   # the GID appears a moment after the link; builtins only (forks are slow)
    for ((i = 0; i < 16; i++)); do
        read -r g < /sys/class/infiniband/rxe0/ports/1/gids/$i 2>/dev/null || continue
        read -r t < /sys/class/infiniband/rxe0/ports/1/gid_attrs/types/$i 2>/dev/null || continue
        if [[ $g == 0000:0000:0000:0000:0000:ffff:* && $t == "RoCE v2" ]]; then gid=$i; break 2; fi
    done
    sleep 0.1
done
[[ -n $gid ]] || { echo "softroce-vm guest: rxe0 has no RoCE v2 IPv4 GID"; echo 125 > /job/status; exit 125; }
ulimit -l unlimited
mapfile -d '' -t hostenv < /job/env
cd "$(cat /job/cwd)" 2>/dev/null || cd /
env -i "${hostenv[@]}" RDMA_DEVICE=rxe0 RDMA_GID_INDEX="$gid" SOFTROCE_IP=10.77.0.1 /bin/bash /job/cmd
echo $? > /job/status
RUN
}

stamp=$({ guest_init; echo "$kver"; } | md5sum | cut -c1-10)
initrd=$CACHE/initrd-$kver-$stamp.cpio.gz
if [[ ! -f $initrd ]]; then
    say "building the initramfs"
    t=$(mktemp -d); mkdir -p "$t"/{bin,proc,sys,dev,ko}
    cp /bin/busybox "$t/bin/"
    for a in $("$t/bin/busybox" --list); do [[ $a == busybox ]] || ln -sf busybox "$t/bin/$a"; done
    guest_init > "$t/init"; chmod 755 "$t/init"
    for m in virtio_pci 9pnet_virtio 9p overlay; do
        modprobe -d "$kroot" -S "$kver" --show-depends "$m" | awk '$1 == "insmod" {print $2}'
    done | awk '!seen[$0]++' | while read -r ko; do
        name=$(basename "$ko"); name=${name%%.ko*}
        case $ko in
            *.xz) xz -dc "$ko" ;; *.zst) zstd -qdc "$ko" ;; *.gz) gzip -dc "$ko" ;; *) cat "$ko" ;;
        esac > "$t/ko/$name.ko"
        echo "$name" >> "$t/ko/order"
    done
    (cd "$t" && find . | cpio -o -H newc --quiet | gzip -1) > "$initrd.part"
    mv "$initrd.part" "$initrd"; rm -rf "$t"
fi
flock -u 8
[[ $prepare_only == 1 ]] && { say "ready: $kver"; exit 0; }

# --- the job -------------------------------------------------------------------------------------
job=$(mktemp -d /tmp/pslite-vm.XXXXXX)
qemu_pid=
trap '[[ -n $qemu_pid ]] && kill -9 $qemu_pid 2>/dev/null; rm -rf "$job"' EXIT
trap 'exit 130' INT TERM
printf '%s\n' "$*" > "$job/cmd"
pwd > "$job/cwd"
echo "$VERBOSE" > "$job/verbose"
env -0 -u SHLVL -u _ -u OLDPWD > "$job/env"
run_sh > "$job/run.sh"

if [[ -w /dev/kvm && ! -d /sys/module/kvm_pvm ]]; then accel=(-accel kvm -cpu host)
else accel=(-accel tcg,thread=multi,tb-size=256 -cpu max); fi
append="console=ttyS0 panic=-1 rdinit=/init pslite.moddir=$moddir"
[[ $VERBOSE == 1 ]] || append+=" quiet loglevel=1"
share=()
if [[ -n $OUTDIR ]]; then
    mkdir -p "$OUTDIR"; OUTDIR=$(realpath "$OUTDIR")
    share=(-virtfs "local,path=$OUTDIR,mount_tag=out,security_model=none,multidevs=remap")
    append+=" pslite.out=$OUTDIR"
fi
timeout -k 5 "$TIMEOUT" qemu-system-x86_64 -nodefaults -no-user-config -machine q35 "${accel[@]}" \
    -smp "$SMP" -m "$MEM" -display none -vga none -nic none -no-reboot \
    -chardev stdio,id=c0,signal=off -serial chardev:c0 \
    -kernel "$vmlinuz" -initrd "$initrd" -append "$append" \
    -virtfs "local,path=/,mount_tag=hostroot,security_model=none,readonly=on,multidevs=remap" \
    -virtfs "local,path=$job,mount_tag=job,security_model=none,multidevs=remap" \
    "${share[@]}" </dev/null &
qemu_pid=$!
set +e; wait $qemu_pid; qrc=$?; set -e
qemu_pid=
[[ $qrc == 124 || $qrc == 137 ]] && { say "timed out after ${TIMEOUT}s"; exit 124; }
[[ -f $job/status ]] || fail "the guest ended without a status (qemu exit $qrc)"
exit "$(cat "$job/status")"
