# softroce-lib.sh — sourced by softroce-vm.sh and softroce-pair.sh (never run on its own): what
# their Soft-RoCE guests share.
#
#   softroce_prepare [DEB...]   host packages (+ DEB...), Debian's kernel and our initramfs, cached
#                               in $CACHE; sets kver, vmlinuz, moddir, initrd
#   softroce_job_dir DIR CMD    the job directory a guest mounts at /job: CMD, cwd, environment
#   softroce_run_common         the start of a guest's /job/run.sh: quiet, setup_fail, rxe_up, run_job
#   softroce_qemu_args          qemu_args: the emulator's options but the job share and any NIC
#
# The sourcing script sets MEM and SMP first; the other knobs (PSLITE_VM_CACHE, PSLITE_VM_TIMEOUT,
# PSLITE_VM_VERBOSE, PSLITE_VM_OUT) are read here.
CACHE=${PSLITE_VM_CACHE:-/var/cache/pslite-softroce}
TIMEOUT=${PSLITE_VM_TIMEOUT:-1500}
VERBOSE=${PSLITE_VM_VERBOSE:-0}
OUTDIR=${PSLITE_VM_OUT:-}
SOFTROCE_ME=$(basename "$0" .sh)

say() { echo "$SOFTROCE_ME: $*" >&2; }
fail() { say "$*"; exit 125; }

softroce_prepare() {
    # --- host packages: the emulator, the initramfs tools, rdma-core for the guest to use -----
    . "$(dirname "${BASH_SOURCE[0]}")/need-debs.sh"
    NEED_DEBS_STATUS=125   # "the guest could not be set up"
    need_debs qemu-system-x86 busybox-static kmod cpio gzip xz-utils zstd iproute2 \
              rdma-core ibverbs-providers ibverbs-utils libibverbs1 perftest "$@"

    mkdir -p "$CACHE"
    exec 8>"$CACHE/lock"
    flock 8

    # --- the guest kernel: Debian's, unpacked into the cache (never installed) ----------------
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
        local dl; dl=$(mktemp -d); chmod 777 "$dl"
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

    # --- the initramfs: busybox, the modules to mount 9p + overlay, and our init ---------------
    local stamp t a m ko name
    stamp=$({ softroce_guest_init; echo "$kver"; } | md5sum | cut -c1-10)
    initrd=$CACHE/initrd-$kver-$stamp.cpio.gz
    if [[ ! -f $initrd ]]; then
        say "building the initramfs"
        t=$(mktemp -d); mkdir -p "$t"/{bin,proc,sys,dev,ko}
        cp /bin/busybox "$t/bin/"
        for a in $("$t/bin/busybox" --list); do [[ $a == busybox ]] || ln -sf busybox "$t/bin/$a"; done
        softroce_guest_init > "$t/init"; chmod 755 "$t/init"
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
}

# PID 1 of every guest (its text names the cached initramfs: changing it rebuilds that).
softroce_guest_init() {
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

softroce_job_dir() {   # DIR CMD
    printf '%s\n' "$2" > "$1/cmd"
    pwd > "$1/cwd"
    echo "$VERBOSE" > "$1/verbose"
    env -0 -u SHLVL -u _ -u OLDPWD > "$1/env"
}

# The start of /job/run.sh, which runs inside the guest's real root. The rest sets ME (the name in
# its messages), loads its modules, makes a netdev, then calls `rxe_up NETDEV` and `run_job ENV...`.
softroce_run_common() {
cat <<'RUN'
#!/bin/bash
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
stty -F /dev/console -onlcr 2>/dev/null
quiet() { if [[ $(cat /job/verbose) == 1 ]]; then "$@"; else "$@" >/dev/null 2>&1; fi; }
setup_fail() { echo "$ME: $*"; echo 125 > /job/status; exit 125; }
rxe_up() {   # NETDEV: rxe0 on it; $gid: its RoCE v2 IPv4 GID index
    quiet rdma link add rxe0 type rxe netdev "$1" || setup_fail "rdma link add failed"
    gid=
    for _ in $(seq 200); do   # the GID appears a moment after the link; builtins only (forks are slow)
        for ((i = 0; i < 16; i++)); do
            read -r g < /sys/class/infiniband/rxe0/ports/1/gids/$i 2>/dev/null || continue
            read -r t < /sys/class/infiniband/rxe0/ports/1/gid_attrs/types/$i 2>/dev/null || continue
            if [[ $g == 0000:0000:0000:0000:0000:ffff:* && $t == "RoCE v2" ]]; then gid=$i; return; fi
        done
        sleep 0.1
    done
    setup_fail "rxe0 has no RoCE v2 IPv4 GID"
}
run_job() {   # ENV...: the job's command, with the host's environment plus ENV; its status to /job/status
    ulimit -l unlimited
    mapfile -d '' -t hostenv < /job/env
    cd "$(cat /job/cwd)" 2>/dev/null || cd /
    env -i "${hostenv[@]}" "$@" /bin/bash /job/cmd
    echo $? > /job/status
}
RUN
}

softroce_qemu_args() {
    local accel append share=()
    if [[ -w /dev/kvm && ! -d /sys/module/kvm_pvm ]]; then accel=(-accel kvm -cpu host)
    else accel=(-accel tcg,thread=multi,tb-size=256 -cpu max); fi
    append="console=ttyS0 panic=-1 rdinit=/init pslite.moddir=$moddir"
    [[ $VERBOSE == 1 ]] || append+=" quiet loglevel=1"
    if [[ -n $OUTDIR ]]; then
        mkdir -p "$OUTDIR"; OUTDIR=$(realpath "$OUTDIR")
        share=(-virtfs "local,path=$OUTDIR,mount_tag=out,security_model=none,multidevs=remap")
        append+=" pslite.out=$OUTDIR"
    fi
    qemu_args=(-nodefaults -no-user-config -machine q35 "${accel[@]}"
        -smp "$SMP" -m "$MEM" -display none -vga none -no-reboot
        -chardev stdio,id=c0,signal=off -serial chardev:c0
        -kernel "$vmlinuz" -initrd "$initrd" -append "$append"
        -virtfs "local,path=/,mount_tag=hostroot,security_model=none,readonly=on,multidevs=remap"
        "${share[@]}")
}
