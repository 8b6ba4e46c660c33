#!/usr/bin/env bash
# Bounded staleness (SSP) against a straggler: ctr S2W4 on this machine, worker 3 slowed by
# FACTOR (PS_SLOW_WORKER=3:FACTOR: it sleeps FACTOR - 1 times each step's own time), for each τ
# of TAUS (--staleness: 0 is lock step, a barrier of the workers per minibatch; inf is
# asynchronous; "2c" and "8c" are τ = 2 and 8 with each worker's row cache, --cache-rows CACHE), RUNS rounds
# with the τ interleaved. Worker 0 evaluates the test set every EVERY of its steps and after
# every worker's last step.
#
#   scripts/bench-staleness.sh [RUNS] [TARGET_AUC]     (3; 0.78)
#
# Figures, medians of RUNS: the time from the start of training to the first evaluation with
# test AUC >= TARGET_AUC (worker 0's clock), the final test AUC after every worker's last
# step, the time to that final evaluation, and each worker's idle time: the share of its
# training time spent waiting at its clocks for slower workers; with the cache, the share of
# worker 0's rows served from it. Knobs: TAUS ("0 2 8 inf 2c 8c"), FACTOR (2), EVERY (25), TRAIN
# (1000000), TEST (20000), CACHE (100000), PSLITE_LAUNCH (a pslite-launch to use instead of
# building target/release's). Bounded: each run is time-limited, all traffic on
# 127.0.0.1.
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS=${1:-3}
TARGET=${2:-0.78}
TAUS=${TAUS:-0 2 8 inf 2c 8c}
CACHE=${CACHE:-100000}
FACTOR=${FACTOR:-2}
EVERY=${EVERY:-25}
TRAIN=${TRAIN:-1000000}
TEST=${TEST:-20000}
. scripts/bench-lib.sh
[[ -n ${PSLITE_LAUNCH:-} ]] || cargo build --release --quiet --bins
L=${PSLITE_LAUNCH:-target/release/pslite-launch}
opt="opt=adagrad:lr=0.05:init_acc=0.001"
declare -A R

run() { # run TAU: one job; appends its figures to R[... TAU]
    local tau=$1 out cache=()
    [[ $tau == *c ]] && cache=(--cache-rows "$CACHE")
    out=$(PS_SLOW_WORKER=3:$FACTOR timeout 600 $L local --servers 2 --workers 4 --no-metrics \
        --table "app=10,dim=1,init=zeros,$opt" --table "app=11,dim=8,init=normal:0:0.01,$opt" \
        -- ctr --train "$TRAIN" --test "$TEST" --staleness "${tau%c}" --eval-every "$EVERY" \
        ${cache[@]+"${cache[@]}"} 2>&1) || { echo "ctr --staleness $tau failed: $out" >&2; exit 1; }
    R[hits $tau]+="$(echo "$out" | sed -n 's/.*\] worker 0: .*row cache .*(\([0-9.]*\) % hits).*/\1/p') "
    # "progress: clock C at S s: test AUC A, ..." and "final: clock C at S s: test AUC A, ..."
    R[reach $tau]+="$(echo "$out" | sed -n 's/.*\(progress\|final\): clock [0-9]* at \([0-9.]*\) s: test AUC \([0-9.]*\).*/\2 \3/p' \
        | awk -v t="$TARGET" '!f && $2 >= t {print $1; f=1} END {if (!f) print "never"}') "
    R[final $tau]+="$(echo "$out" | sed -n 's/.*final: clock [0-9]* at [0-9.]* s: test AUC \([0-9.]*\).*/\1/p') "
    R[end $tau]+="$(echo "$out" | sed -n 's/.*final: clock [0-9]* at \([0-9.]*\) s.*/\1/p') "
    for w in 0 1 2 3; do
        R[idle$w $tau]+="$(echo "$out" | sed -n "s/.*\] worker $w: .*waited [0-9.]* s at clocks (\([0-9.]*\) %).*/\1/p") "
    done
}

for i in $(seq "$RUNS"); do
    for tau in $TAUS; do run "$tau"; done
    echo "round $i/$RUNS done" >&2
done

med() { local v=${R[$1]}; [[ $v == *never* ]] && { echo "not reached in ≥1 run"; return; }; median_of "$v" "${2:-2}"; }
echo "ctr S2W4, worker 3 slowed ${FACTOR}x, --train $TRAIN --test $TEST --eval-every $EVERY; medians of $RUNS"
echo "| τ | time to test AUC ≥ $TARGET (s) | final test AUC | time to the final evaluation (s) | idle time, workers 0 / 1 / 2 / 3 (slow) | rows from the cache |"
echo "| --- | --- | --- | --- | --- | --- |"
for tau in $TAUS; do
    hits=— label=${tau%c}
    [[ $tau == *c ]] && hits="$(med "hits $tau" 1) %" label+=" + cache"
    echo "| $label | $(med "reach $tau") | $(med "final $tau" 4) | $(med "end $tau") | $(med "idle0 $tau" 1) / $(med "idle1 $tau" 1) / $(med "idle2 $tau" 1) / $(med "idle3 $tau" 1) % | $hits |"
done
echo "runs: $(for tau in $TAUS; do printf 'τ=%s reach %s final %s; ' "$tau" "${R[reach $tau]}" "${R[final $tau]}"; done)"
