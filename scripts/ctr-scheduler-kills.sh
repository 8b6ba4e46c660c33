#!/usr/bin/env bash
# ctr with the scheduler killed: the test AUC of `ctr` S=2 W=2 (AdaGrad tables as in
# scripts/ctr-report.sh, --train 600000 --test 20000 --epochs 2) undisturbed, then in KILLS
# runs under `pslite-launch local --restart 1 --checkpoint-dir` with the scheduler SIGKILLed
# once at a random moment 0.5-2.9 s after the workers started (within a run of about 5 s
# here); each killed run's AUC against the undisturbed one, and the time from the kill to
# every node re-registered.
# Bounded: each run is time-limited, all traffic on 127.0.0.1.
# Usage: scripts/ctr-scheduler-kills.sh [KILLS]   (default 5)
set -euo pipefail
cd "$(dirname "$0")/.."
KILLS=${1:-5}
cargo build --release --quiet --bins
. scripts/bench-lib.sh
L=target/release/pslite-launch
opt="opt=adagrad:lr=0.05:init_acc=0.001"
tables=(--table "app=10,dim=1,init=zeros,$opt" --table "app=11,dim=8,init=normal:0:0.01,$opt")
ctr=(-- ctr --train 600000 --test 20000 --epochs 2)
auc() { grep -o '\[worker 0\] epoch 2: test AUC [0-9.]*' "$1" | awk '{print $NF}'; }

dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
timeout 300 $L local --servers 2 --workers 2 "${tables[@]}" "${ctr[@]}" >"$dir/base" 2>&1 ||
    { echo "the undisturbed run failed:" >&2; cat "$dir/base" >&2; exit 1; }
base=$(auc "$dir/base")
echo "undisturbed: test AUC $base"
echo "| kill | moment after the workers started | test AUC | − undisturbed | re-registered after |"
echo "| --- | --- | --- | --- | --- |"
for i in $(seq "$KILLS"); do
    out="$dir/run$i"
    : >"$out"
    rm -rf "$dir/ckpt"
    timeout 300 $L local --servers 2 --workers 2 --restart 1 --checkpoint-dir "$dir/ckpt" \
        "${tables[@]}" "${ctr[@]}" >>"$out" 2>&1 &
    launcher=$!
    await_line "started worker 1 (pid" "$out"
    at="$((RANDOM % 3)).$((5 + RANDOM % 5))"
    sleep "$at"
    sigkill "$(launched_pid scheduler "$out")"
    wait "$launcher" || { echo "run $i failed:" >&2; cat "$out" >&2; exit 1; }
    a=$(auc "$out")
    back=$(since_kill "$(grep -m1 -E "all 4 nodes (re-)?registered" "$out" || true)")
    echo "| $i | ${at} s | $a | $(awk -v a="$a" -v b="$base" 'BEGIN {printf "%+.4f", a-b}') | ${back} s |"
done
