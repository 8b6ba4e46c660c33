#!/usr/bin/env bash
# What a change costs or saves when checkpointing, A against B, runs interleaved (on this
# shared, noisy machine the spread between script runs is larger than most changes, so two
# builds are compared within one run): S=1 W=1, checkpoints on this disk without fsync, and a
# reference without checkpoints (B's build).
#   - kv-app --keys 1000000: job wall time, and its push and push-pull phases;
#   - bench push-pull, 1 MB values, --warmup 3 --seconds 4: goodput over a new server's first
#     3 s and the 4 s after them;
#   - reference: dd into fresh page-cache pages and over them again (what a new server's
#     first logs pay against reused ones, on this machine that day).
# Medians of RUNS rounds; the order within a round changes from round to round.
# Usage: scripts/bench-checkpoint-ab.sh A B [RUNS]      (RUNS defaults to 6)
#   A and B: commits (built with cargo into target/ab/, once each), or directories holding a
#   release build's pslite-launch.
# Bounded: every process is time-limited, all traffic is on 127.0.0.1; checkpoints go to a
# temporary directory under target/ that is removed.
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -ge 2 ] || { sed -n 2,15p "$0" >&2; exit 2; }
RUNS=${3:-6}
. scripts/bench-lib.sh

A=$(bins "$1")
B=$(bins "$2")
mkdir -p target
CP=$(mktemp -d -p target)
trap 'rm -rf "$CP"' EXIT

# Before each run the previous run's files are removed and written back.
variant() {
    rm -rf "$CP/run"
    sync
    case $1 in
        off) LAUNCH=("$B/pslite-launch" local); unset PS_CHECKPOINT_DIR ;;
        A) LAUNCH=("$A/pslite-launch" local); export PS_CHECKPOINT_DIR=$CP/run PS_CHECKPOINT_SYNC=0 ;;
        B) LAUNCH=("$B/pslite-launch" local); export PS_CHECKPOINT_DIR=$CP/run PS_CHECKPOINT_SYNC=0 ;;
    esac
}
# Reference, once a round: how fast this machine fills fresh page-cache pages (a new file, as
# a new server's first logs) and pages it already has (the same file written over, as reused
# logs), in GB/s: dd of 256 MiB, no fsync.
fill() { dd if=/dev/zero of="$CP/dd" bs=1M count=256 "$@" 2>&1 | grep -o '[0-9.]* [GM]B/s' | awk '{print ($2 == "MB/s") ? $1 / 1000 : $1}'; }
fresh="" reused=""
round_done() {
    rm -f "$CP/dd"
    sync
    fresh+="$(fill) "
    reused+="$(fill conv=notrunc) "
    rm -f "$CP/dd"
}
# The order within a round goes through all six, so no build always runs first or after the
# same one (a run after another's checkpoint files were removed gets recently freed pages).
orders=("off A B" "B off A" "A B off" "off B A" "A off B" "B A off")
interleave "$(IFS=/; echo "${orders[*]}")" "$RUNS" \
    "wall,pushes,push-pulls=measure_kv_app_1m phases" "warm,after=measure_goodput_1mb 4 3"
unset PS_CHECKPOINT_DIR

echo "A = $1, B = $2; S=1 W=1, checkpoints on disk without fsync; medians of $RUNS interleaved rounds (orders: ${orders[*]:0:RUNS})"
echo
table_head figure "no checkpoint (B)" A B
row "kv-app --keys 1000000, job wall time" s wall
row "kv-app, its 50 pushes" s pushes
row "kv-app, its 50 push-pulls" s push-pulls
row "bench push-pull 1 MB, a new server's first 3 s" Gbit/s warm
row "bench push-pull 1 MB, the 4 s after them" Gbit/s after
echo "| reference: dd 256 MiB into fresh page-cache pages / over them again | | $(median_of "$fresh") GB/s | $(median_of "$reused") GB/s |"
echo
echo "$(runs_line wall pushes push-pulls "first 3 s=warm" after); dd fresh ${fresh}/ over ${reused}"
