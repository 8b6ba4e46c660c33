#!/usr/bin/env bash
# Logistic regression on a8a for (S,W) = (1,1), (2,2), (2,4): accuracy, log-loss and examples/s
# per epoch, as a markdown table (issue 5's report). Usage: scripts/lr-report.sh [EPOCHS] [DATA_DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
EPOCHS=${1:-5}
DATA=${2:-data/a8a}
. scripts/need-debs.sh
need_debs jq
cargo build --release --quiet --bin pslite-launch
echo "| S,W | epoch | test accuracy | log-loss | examples/s |"
echo "| --- | --- | --- | --- | --- |"
for sw in "1 1" "2 2" "2 4"; do
    set -- $sw
    timeout 300 target/release/pslite-launch local --servers "$1" --workers "$2" -- \
        lr --train "$DATA/a8a.train" --test "$DATA/a8a.test" --epochs "$EPOCHS" --json |
        sed -n 's/^\[worker 0\] //p' |
        jq -r '[.servers, .workers, .epoch, .accuracy, .logloss, .examples_per_s] | @tsv' |
        awk -F'\t' '{printf "| %d,%d | %d | %.4f | %.4f | %.0f |\n", $1, $2, $3, $4, $5, $6}'
done
