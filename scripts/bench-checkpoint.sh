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

# Runs "$@" with the checkpoint mode $1 (off, on, sync, shm) and a fresh checkpoint directory.
with_mode() {
    local mode=$1; shift
    # The previous run's files removed and every dirty page written back first, so that no run
    # pays for the one before it (freeing, discarding and writing back a checkpoint's files).
    rm -rf "$CP/run" "$SHM/run"
    sync
    case $mode in
        off) env -u PS_CHECKPOINT_DIR "$@" ;;
        on) PS_CHECKPOINT_DIR="$CP/run" PS_CHECKPOINT_SYNC=0 "$@" ;;
        sync) PS_CHECKPOINT_DIR="$CP/run" PS_CHECKPOINT_SYNC=1 "$@" ;;
        shm) PS_CHECKPOINT_DIR="$SHM/run" PS_CHECKPOINT_SYNC=0 "$@" ;;
    esac
}

# ---- 1. checkpointing off / on / on with fsync ----
declare -A good warm kv
for i in $(seq "$RUNS"); do
    for mode in off on sync shm; do
        j=$(with_mode $mode timeout $((WARM + SECS + 60)) $B/pslite-launch local --servers 1 \
            --workers 1 -- bench --mode push-pull --len 1024000 --warmup "$WARM" \
            --seconds "$SECS" --json)
        g=$(echo "$j" | field goodput_gbps)
        w=$(echo "$j" | field warmup_gbps)
        t0=$(now)
        with_mode $mode timeout 300 $B/pslite-launch local --servers 1 --workers 1 -- \
            kv-app --keys 1000000 >/dev/null
        k=$(elapsed "$t0")
        good[$mode]+="$(printf '%.2f' "$g") "
        warm[$mode]+="$(printf '%.2f' "$w") "
        kv[$mode]+="$k "
        echo "run $i checkpoint $mode: goodput $g Gbit/s (first ${WARM} s: $w), kv-app 1M keys $k s" >&2
    done
done
g_off=$(median_of "${good[off]}"); g_on=$(median_of "${good[on]}"); g_sync=$(median_of "${good[sync]}")
k_off=$(median_of "${kv[off]}"); k_on=$(median_of "${kv[on]}"); k_sync=$(median_of "${kv[sync]}")
g_shm=$(median_of "${good[shm]}"); k_shm=$(median_of "${kv[shm]}")
w_off=$(median_of "${warm[off]}"); w_on=$(median_of "${warm[on]}")
w_sync=$(median_of "${warm[sync]}"); w_shm=$(median_of "${warm[shm]}")
dd_disk=$(ddspeed "$CP"); dd_shm=$(ddspeed "$SHM")
# What the log adds to a 1 MB push-pull at least when it fills fresh pages: one write of the
# pushed MB into the page cache at dd's speed, as a share of a push-pull's time without
# checkpoints (2 MB moved).
floor() {
    awk -v g="$g_off" -v dd="$1" 'BEGIN {
        split(dd, f, " "); bps = f[1] * (f[2] == "GB/s" ? 1e9 : 1e6);
        printf "%.1f %%", 100 * (1024000 / bps) / (2 * 1024000 * 8 / (g * 1e9)) }'
}

# ---- 2. a server killed and replaced during kv-app ----
kill_once() {
    local out=$CP/launch.out pid t_kill back exact n=0
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
    pid=$(grep -o "started server 0 (pid [0-9]*)" "$out" | grep -o "[0-9]*)" | tr -d ')' | head -1)
    t_kill=$(now)
    kill -9 "$pid"
    local rc=0
    wait "$launcher" || rc=$?
    back=$(grep -m1 "was replaced by a new server" "$out" | grep -o "20[0-9-]*T[0-9:.]*Z" | head -1)
    [ -n "$back" ] || { echo "no replacement in:" >&2; tail -20 "$out" >&2; exit 1; }
    back=$(date -d "$back" +%s.%N)
    # The replacement serves once its last application is restored (or started empty).
    served=$(grep "^\[server 0\].*\(restored from\|starting empty\)" "$out" | tail -1 |
        grep -o "20[0-9-]*T[0-9:.]*Z" | head -1)
    served=$(date -d "$served" +%s.%N)
    exact=$(grep -c "error: 0, 0" "$out" || true)
    awk -v a="$t_kill" -v b="$back" -v c="$served" 'BEGIN {printf "%.2f/%.2f", b-a, c-a}'
    echo " exit=$rc exact=$exact/2"
}
times=(); results=""
for i in $(seq "$KILLS"); do
    r=$(kill_once)
    echo "kill $i: $r" >&2
    times+=("$(echo "$r" | cut -d' ' -f1)")
    results+="$r; "
done
t_back=$(printf '%s\n' "${times[@]}" | cut -d/ -f1 | sort -g | tr '\n' ' ')
t_served=$(printf '%s\n' "${times[@]}" | cut -d/ -f2 | sort -g | tr '\n' ' ')
m_back=$(printf '%s\n' "${times[@]}" | cut -d/ -f1 | median 2)
m_served=$(printf '%s\n' "${times[@]}" | cut -d/ -f2 | median 2)

cat <<EOT
| figure (S=1 W=1) | no checkpoint | checkpoint on disk, no fsync | on disk, fsync | on tmpfs (/dev/shm), no fsync |
| --- | --- | --- | --- | --- |
| push-pull goodput, 1 MB values, the first ${WARM} s, median of ${RUNS} | ${w_off} Gbit/s | ${w_on} Gbit/s ($(pct "$w_off" "$w_on")) | ${w_sync} Gbit/s ($(pct "$w_off" "$w_sync")) | ${w_shm} Gbit/s ($(pct "$w_off" "$w_shm")) |
| push-pull goodput, the ${SECS} s after them (steady state), median of ${RUNS} | ${g_off} Gbit/s | ${g_on} Gbit/s ($(pct "$g_off" "$g_on")) | ${g_sync} Gbit/s ($(pct "$g_off" "$g_sync")) | ${g_shm} Gbit/s ($(pct "$g_off" "$g_shm")) |
| kv-app --keys 1000000, job wall time, median of ${RUNS} | ${k_off} s | ${k_on} s ($(pct "$k_off" "$k_on")) | ${k_sync} s ($(pct "$k_off" "$k_sync")) | ${k_shm} s ($(pct "$k_off" "$k_shm")) |
| reference: dd, 512 MiB into the page cache | | ${dd_disk} | | ${dd_shm} |
| reference: writing each pushed MB once at dd's speed, as a share of a push-pull's time without checkpoints | | $(floor "$dd_disk") | | $(floor "$dd_shm") |

runs: first ${WARM} s off ${warm[off]}/ on ${warm[on]}/ sync ${warm[sync]}/ shm ${warm[shm]}; steady goodput off ${good[off]}/ on ${good[on]}/ sync ${good[sync]}/ shm ${good[shm]}; kv-app off ${kv[off]}/ on ${kv[on]}/ sync ${kv[sync]}/ shm ${kv[shm]}

| server 0 SIGKILLed during kv-app (S=2 W=2, --restart 1), ${KILLS} kills | seconds |
| --- | --- |
| kill → workers send the unanswered requests to the replacement, sorted | ${t_back}|
| kill → the replacement serves (its last application restored), sorted | ${t_served}|
| medians: workers resend / replacement serves | ${m_back} / ${m_served} |
| each run: time, launcher exit status, workers with exact sums | ${results} |
EOT
