#!/usr/bin/env bash
# The ctr app's figures: a factorization machine on two server tables (AdaGrad), 2 servers and
# 2 workers, on the default synthetic click log (1M training samples, 1 epoch):
#   - test AUC against the best possible (the generator's true probabilities) and against the
#     same model trained in one process on in-process tables (`--reference`);
#   - the same with each server's tables under budgets that hold a quarter of their rows
#     (33,374 wide rows in 1000 KiB, 32,716 embedding rows in 2770 KiB, of about 131k each):
#     rows evicted, and the AUC reached;
#   - samples/s over both workers.
# Medians of RUNS runs; all traffic on 127.0.0.1; each run bounded by `timeout`.
# Usage: scripts/ctr-report.sh [RUNS]   (default 3)
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS=${1:-3}
. scripts/bench-lib.sh
cargo build --release --quiet --bins
L=target/release/pslite-launch
opt="opt=adagrad:lr=0.05:init_acc=0.001"
declare -A R

run() { # run NAME BUDGET_WIDE BUDGET_EMB
    local wide="app=10,dim=1,init=zeros,$opt" emb="app=11,dim=8,init=normal:0:0.01,$opt" out
    [ -n "$2" ] && wide+=",budget=$2" && emb+=",budget=$3"
    out=$(timeout 300 $L local --servers 2 --workers 2 --no-metrics --table "$wide" --table "$emb" -- ctr --reference 2>&1) || { echo "ctr failed: $out" >&2; exit 1; }
    R[$1_auc]+="$(echo "$out" | grep -o 'epoch 1: test AUC [0-9.]*' | awk '{print $NF}') "
    R[$1_ref]+="$(echo "$out" | grep -o 'reference .*test AUC [0-9.]*' | awk '{print $NF}') "
    R[$1_sps]+="$(echo "$out" | grep -o '[0-9]* samples/s' | awk '{print $1}') "
    R[$1_bayes]="$(echo "$out" | grep -o 'best possible test AUC [0-9.]*' | awk '{print $NF}')"
    R[$1_rows]="$(echo "$out" | grep -E 'table app 11: [0-9]+ rows' | head -1 | sed 's/^\[[a-z 0-9]*\] pslite: //')"
}

for i in $(seq "$RUNS"); do
    run full "" ""
    run quarter 1000KiB 2770KiB
    echo "round $i/$RUNS done" >&2
done

med() { printf '%s\n' ${R[$1]} | median 4; }
echo "best possible test AUC (the generator's true probabilities): ${R[full_bayes]}"
echo "| S2W2, AdaGrad (median of $RUNS) | test AUC | reference (one process) | samples/s | runs (AUC) |"
echo "| --- | --- | --- | --- | --- |"
echo "| tables without a budget | $(med full_auc) | $(med full_ref) | $(printf '%s\n' ${R[full_sps]} | median 0) | ${R[full_auc]}|"
echo "| budgets holding a quarter of the rows | $(med quarter_auc) | $(med quarter_ref) | $(printf '%s\n' ${R[quarter_sps]} | median 0) | ${R[quarter_auc]}|"
echo "server 0's embedding table, unbounded: ${R[full_rows]}"
echo "server 0's embedding table, quarter budget: ${R[quarter_rows]}"
