#!/usr/bin/env bash
# The PyTorch example against its single-process reference:
#
#   scripts/ctr-torch.sh [ROUNDS] [-- EXAMPLE OPTIONS…]
#
# Each round runs, one after another on this machine: examples/python/ctr_torch.py
# --reference (one process, nn.EmbeddingBag(sparse=True) and Adagrad), then the same model on
# pslite S1W1 with prefetch, S1W1 without prefetch, and S2W2 with prefetch
# (pslite-launch local --table … --worker-cmd …). Prints every run, then medians over the
# rounds: test AUC (pslite's minus the reference's, the bar is |Δ| ≤ 0.005), samples/s of S1W1
# as a ratio to the reference (the bar is ≥ 0.7), what prefetch adds, and S2W2's samples/s
# summed over its workers. Needs a release build (pslite-launch) and a Python with pslite and
# torch ($PYTHON, default target/pyenv/bin/python, which scripts/python-tests.sh makes).
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/bench-lib.sh
rounds=3
if [[ ${1:-} =~ ^[0-9]+$ ]]; then rounds=$1; shift; fi
[[ ${1:-} == -- ]] && shift
(( rounds >= 1 )) || { echo "ctr-torch.sh: ROUNDS must be at least 1" >&2; exit 1; }
PYTHON=${PYTHON:-target/pyenv/bin/python}
L=target/release/pslite-launch
[[ -x $L ]] || { echo "ctr-torch.sh: $L is missing: cargo build --release --bins" >&2; exit 1; }
"$PYTHON" -c 'import pslite.torch' || {
    echo "ctr-torch.sh: $PYTHON has no pslite.torch: scripts/python-tests.sh" >&2; exit 1; }
# Absolute, links kept (a venv's python is a link out of it); a bare name from PATH.
if [[ $PYTHON == */* ]]; then py=$(cd "$(dirname "$PYTHON")" && pwd)/$(basename "$PYTHON")
else py=$(command -v "$PYTHON"); fi
ex=(examples/python/ctr_torch.py "$@")
spec=$("$py" "${ex[@]}" --print-table)
log=$(mktemp)
trap 'rm -f "$log"' EXIT

fail() { echo "ctr-torch.sh: $1; its output:" >&2; cat "$log" >&2; exit 1; }

# One pslite run: sets auc (worker 0's last epoch) and rate (samples/s summed over workers).
pslite_run() {
    local servers=$1 workers=$2; shift 2
    "$L" local --no-metrics --servers "$servers" --workers "$workers" --table "$spec" \
        --worker-cmd "$py ${ex[*]} $*" >"$log" 2>&1 || fail "S${servers}W${workers} $* failed"
    auc=$(grep -oP '\[worker 0\] epoch \d+: test AUC \K[0-9.]+' "$log" | tail -1 || true)
    rate=$(grep -oP '\] worker \d+ of \d+: \K[0-9]+(?= samples/s)' "$log" |
        awk '{s += $1; n++} END {if (n) print s}')
    [[ -n $auc && -n $rate ]] || fail "S${servers}W${workers} $* printed no AUC or samples/s"
}

declare -a ref_auc ref_rate on_auc on_rate off_rate s2_auc s2_rate
for ((r = 1; r <= rounds; r++)); do
    "$py" "${ex[@]}" --reference >"$log" 2>&1 || fail "the reference failed"
    auc=$(grep -oP 'final test AUC \K[0-9.]+' "$log" || true)
    rate=$(grep -oP 'final test AUC [0-9.]+, \K[0-9]+(?= samples/s)' "$log" || true)
    [[ -n $auc && -n $rate ]] || fail "the reference printed no AUC or samples/s"
    ref_auc+=("$auc"); ref_rate+=("$rate")
    pslite_run 1 1; on_auc+=("$auc"); on_rate+=("$rate")
    pslite_run 1 1 --no-prefetch; off_rate+=("$rate")
    # Two workers on this machine: one torch thread each.
    pslite_run 2 2 --threads 1; s2_auc+=("$auc"); s2_rate+=("$rate")
    echo "round $r/$rounds: reference AUC ${ref_auc[-1]} ${ref_rate[-1]} samples/s;" \
        "S1W1 AUC ${on_auc[-1]} ${on_rate[-1]} samples/s (prefetch off ${off_rate[-1]});" \
        "S2W2 AUC ${s2_auc[-1]} ${s2_rate[-1]} samples/s summed"
done

# bench-lib.sh's median: AUCs with 4 decimals, rates with none (of an even count of rounds).
ra=$(median_of "${ref_auc[*]}" 4); rr=$(median_of "${ref_rate[*]}" 0)
oa=$(median_of "${on_auc[*]}" 4); orr=$(median_of "${on_rate[*]}" 0)
fr=$(median_of "${off_rate[*]}" 0)
sa=$(median_of "${s2_auc[*]}" 4); sr=$(median_of "${s2_rate[*]}" 0)
echo "median of $rounds rounds (ctr_torch.py ${*:-with its defaults}):"
printf '  reference, one process      : test AUC %s, %8.0f samples/s\n' "$ra" "$rr"
printf '  pslite S1W1, prefetch on    : test AUC %s, %8.0f samples/s\n' "$oa" "$orr"
printf '  pslite S1W1, prefetch off   :                  %8.0f samples/s\n' "$fr"
printf '  pslite S2W2, prefetch on    : test AUC %s, %8.0f samples/s, both workers\n' "$sa" "$sr"
awk -v oa="$oa" -v ra="$ra" -v o="$orr" -v r="$rr" -v f="$fr" 'BEGIN {
    d = oa - ra; printf "  S1W1 AUC - reference AUC: %+.4f (bar |d| <= 0.005: %s)\n", d, (d <= 0.005 && d >= -0.005) ? "met" : "NOT met"
    printf "  S1W1 / reference samples/s: %.3f (bar >= 0.7: %s)\n", o / r, (o / r >= 0.7) ? "met" : "NOT met"
    printf "  prefetch on / off (S1W1): %.3f\n", o / f }'
