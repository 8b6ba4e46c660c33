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

declare -A wall push pp warm good
fresh="" reused=""
# Reference, once a round: how fast this machine fills fresh page-cache pages (a new file, as
# a new server's first logs) and pages it already has (the same file written over, as reused
# logs), in GB/s: dd of 256 MiB, no fsync.
fill() { dd if=/dev/zero of="$CP/dd" bs=1M count=256 "$@" 2>&1 | grep -o '[0-9.]* [GM]B/s' | awk '{print ($2 == "MB/s") ? $1 / 1000 : $1}'; }
# The order within a round goes through all six, so no build always runs first or after the
# same one (a run after another's checkpoint files were removed gets recently freed pages).
orders=("off A B" "B off A" "A B off" "off B A" "A off B" "B A off")
for i in $(seq "$RUNS"); do
    for v in ${orders[$(((i - 1) % 6))]}; do
        rm -rf "$CP/run"
        sync
        case $v in
            off) bin=$B; unset PS_CHECKPOINT_DIR ;;
            A) bin=$A; export PS_CHECKPOINT_DIR=$CP/run PS_CHECKPOINT_SYNC=0 ;;
            B) bin=$B; export PS_CHECKPOINT_DIR=$CP/run PS_CHECKPOINT_SYNC=0 ;;
        esac
        t0=$(now)
        out=$(timeout 300 "$bin/pslite-launch" local --servers 1 --workers 1 -- \
            kv-app --keys 1000000 2>&1)
        wall[$v]+="$(elapsed "$t0") "
        echo "$out" | grep -q "error: 0, 0" || { echo "kv-app ($v) not exact:" >&2; echo "$out" | tail -5 >&2; exit 1; }
        phases=$(echo "$out" | grep -o "push [0-9.]* s\|push-pull [0-9.]* s" | head -2 | grep -o "[0-9.]*")
        push[$v]+="$(echo "$phases" | sed -n 1p) "
        pp[$v]+="$(echo "$phases" | sed -n 2p) "
        rm -rf "$CP/run"
        sync
        j=$(timeout 60 "$bin/pslite-launch" local --servers 1 --workers 1 -- bench --mode \
            push-pull --len 1024000 --warmup 3 --seconds 4 --json 2>/dev/null)
        warm[$v]+="$(printf '%.2f' "$(echo "$j" | field warmup_gbps)") "
        good[$v]+="$(printf '%.2f' "$(echo "$j" | field goodput_gbps)") "
    done
    rm -f "$CP/dd"
    sync
    fresh+="$(fill) "
    reused+="$(fill conv=notrunc) "
    rm -f "$CP/dd"
    echo "round $i of $RUNS done" >&2
done
unset PS_CHECKPOINT_DIR

row() {
    local name=$1 unit=$2; local -n m=$3
    local o a b
    o=$(median_of "${m[off]}"); a=$(median_of "${m[A]}"); b=$(median_of "${m[B]}")
    echo "| $name | $o $unit | $a $unit ($(pct "$o" "$a")) | $b $unit ($(pct "$o" "$b")) |"
}
cat <<EOT
A = $1, B = $2; S=1 W=1, checkpoints on disk without fsync; medians of $RUNS interleaved rounds (orders: ${orders[*]:0:RUNS})

| figure | no checkpoint (B) | A | B |
| --- | --- | --- | --- |
$(row "kv-app --keys 1000000, job wall time" s wall)
$(row "kv-app, its 50 pushes" s push)
$(row "kv-app, its 50 push-pulls" s pp)
$(row "bench push-pull 1 MB, a new server's first 3 s" Gbit/s warm)
$(row "bench push-pull 1 MB, the 4 s after them" Gbit/s good)
| reference: dd 256 MiB into fresh page-cache pages / over them again | | $(median_of "$fresh") GB/s | $(median_of "$reused") GB/s |

runs: wall off ${wall[off]}/ A ${wall[A]}/ B ${wall[B]}; pushes off ${push[off]}/ A ${push[A]}/ B ${push[B]}; push-pulls off ${pp[off]}/ A ${pp[A]}/ B ${pp[B]}; first 3 s off ${warm[off]}/ A ${warm[A]}/ B ${warm[B]}; after off ${good[off]}/ A ${good[A]}/ B ${good[B]}; dd fresh ${fresh}/ over ${reused}
EOT
