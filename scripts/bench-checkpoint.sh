#!/usr/bin/env bash
# Issue 13's figures, in one run:
#   1. What checkpointing costs (PS_CHECKPOINT_DIR on this disk, without and with
#      PS_CHECKPOINT_SYNC=1, and on /dev/shm, a tmpfs, to tell the code's cost from the disk's)
#      against none, runs of the four interleaved: bench push-pull goodput, S=1 W=1, 1 MB values
#      (median of RUNS): the first WARM s (`--warmup`: a new server's checkpoint files are
#      fresh memory) and the SECS s after them (steady state: the files' pages are reused);
#      kv-app --keys 1000000, S=1 W=1, job wall time (median of RUNS). Reference, same run: dd's page-cache write speed of 512 MiB on each, and the share
#      of a push-pull's time that writing its pushed MB at that speed takes.
#   2. Recovery: kv-app S=2 W=2 under `pslite-launch local --restart 1`, server 0 SIGKILLed at a
#      random moment, KILLS times: seconds from the kill to the workers sending the unanswered
#      requests to the replacement (their log line "was replaced by a new server") and to the
#      replacement serving (its last "restored from" line), and whether the job still ended
#      with exact sums (every worker's "error: 0, 0").
# Usage: scripts/bench-checkpoint.sh [RUNS] [SECS] [KILLS] [WARM]      (defaults 5, 5, 5, 5)
# Bounded: every process is time-limited, all traffic is on 127.0.0.1; checkpoints go to a
# temporary directory that is removed after each run.
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS=${1:-5}
SECS=${2:-5}
KILLS=${3:-5}
WARM=${4:-5}
[ "$WARM" -ge 1 ] || { echo "WARM (seconds of warm-up) must be at least 1" >&2; exit 2; }

cargo build --release --quiet --bins
B=target/release
. scripts/bench-lib.sh
# Checkpoints on the repository's disk (target/ is on it), and on tmpfs.
mkdir -p target
CP=$(mktemp -d -p target)
SHM=$(mktemp -d -p /dev/shm)
trap 'rm -rf "$CP" "$SHM"' EXIT
ddspeed() { dd if=/dev/zero of="$1/dd" bs=1M count=512 2>&1 | grep -o "[0-9.]* [GM]B/s"; rm -f "$1/dd"; }

# ---- 1. checkpointing off / on / on with fsync / on tmpfs ----
# Before each run the previous run's files are removed and every dirty page written back, so
# that no run pays for the one before it (freeing, discarding and writing back its files).
variant() {
    rm -rf "$CP/run" "$SHM/run"
    sync
    case $1 in
        off) unset PS_CHECKPOINT_DIR PS_CHECKPOINT_SYNC ;;
        on) export PS_CHECKPOINT_DIR="$CP/run" PS_CHECKPOINT_SYNC=0 ;;
        sync) export PS_CHECKPOINT_DIR="$CP/run" PS_CHECKPOINT_SYNC=1 ;;
        shm) export PS_CHECKPOINT_DIR="$SHM/run" PS_CHECKPOINT_SYNC=0 ;;
    esac
}
interleave "off on sync shm" "$RUNS" "warm,good=measure_goodput_1mb $SECS $WARM" kv=measure_kv_app_1m
unset PS_CHECKPOINT_DIR PS_CHECKPOINT_SYNC
dd_disk=$(ddspeed "$CP"); dd_shm=$(ddspeed "$SHM")
# What the log adds to a 1 MB push-pull at least when it fills fresh pages: one write of the
# pushed MB into the page cache at dd's speed, as a share of a push-pull's time without
# checkpoints (2 MB moved).
floor() {
    awk -v g="$(med good off)" -v dd="$1" 'BEGIN {
        split(dd, f, " "); bps = f[1] * (f[2] == "GB/s" ? 1e9 : 1e6);
        printf "%.1f %%", 100 * (1024000 / bps) / (2 * 1024000 * 8 / (g * 1e9)) }'
}

# ---- 2. a server killed and replaced during kv-app ----
kill_once() {
    local out=$CP/launch.out back served exact n=0 rc=0
    rm -rf "$CP/run"
    PS_CHECKPOINT_DIR="$CP/run" PS_VERBOSE=1 timeout 120 $B/pslite-launch local --servers 2 \
        --workers 2 --restart 1 -- kv-app --keys 100000 --repeat 3000 >"$out" 2>&1 &
    local launcher=$!
    # Kill at a random moment 0.1–0.9 s after both workers started.
    until grep -q "worker rank 1 (id 11) started" "$out" && grep -q "worker rank 0 (id 9) started" "$out"; do
        n=$((n + 1)); [ $n -lt 3000 ] || { echo "the workers did not start" >&2; exit 1; }
        sleep 0.01
    done
    sleep "0.$((RANDOM % 9 + 1))"
    sigkill "$(launched_pid "server 0" "$out")"
    wait "$launcher" || rc=$?
    back=$(grep -m1 "was replaced by a new server" "$out" || true)
    [ -n "$back" ] || { echo "no replacement in:" >&2; tail -20 "$out" >&2; exit 1; }
    # The replacement serves once its last application is restored (or started empty).
    served=$(grep "^\[server 0\].*\(restored from\|starting empty\)" "$out" | tail -1)
    exact=$(grep -c "error: 0, 0" "$out" || true)
    echo "$(since_kill "$back")/$(since_kill "$served") exit=$rc exact=$exact/2"
}
kill_trials "$KILLS" kill_once 2

cat <<EOT
| figure (S=1 W=1) | no checkpoint | checkpoint on disk, no fsync | on disk, fsync | on tmpfs (/dev/shm), no fsync |
| --- | --- | --- | --- | --- |
$(row "push-pull goodput, 1 MB values, the first ${WARM} s, median of ${RUNS}" Gbit/s warm)
$(row "push-pull goodput, the ${SECS} s after them (steady state), median of ${RUNS}" Gbit/s good)
$(row "kv-app --keys 1000000, job wall time, median of ${RUNS}" s kv)
| reference: dd, 512 MiB into the page cache | | ${dd_disk} | | ${dd_shm} |
| reference: writing each pushed MB once at dd's speed, as a share of a push-pull's time without checkpoints | | $(floor "$dd_disk") | | $(floor "$dd_shm") |

$(runs_line "first ${WARM} s=warm" "steady goodput=good" kv-app=kv)

| server 0 SIGKILLed during kv-app (S=2 W=2, --restart 1), ${KILLS} kills | seconds |
| --- | --- |
| kill → workers send the unanswered requests to the replacement, sorted | ${KILL_T1}|
| kill → the replacement serves (its last application restored), sorted | ${KILL_T2}|
| medians: workers resend / replacement serves | ${KILL_MED1} / ${KILL_MED2} |
| each run: time, launcher exit status, workers with exact sums | ${KILL_RUNS} |
EOT
