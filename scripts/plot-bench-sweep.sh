#!/usr/bin/env bash
# plot-bench-sweep.sh — the bench runs behind plots/: for every value size and mode, RUNS runs of
# `bench` over VAN with 1 server, 1 worker and 8 keys, each appending its JSON record to OUT.jsonl:
#
#   scripts/plot-bench-sweep.sh VAN RUNS SECS OUT.jsonl
#
# VAN: zmq (on this host) or rdma (inside the Soft-RoCE guest, which scripts/plot-bench --rdma
# starts through scripts/softroce-vm.sh; OUT must then lie under $PSLITE_VM_OUT, or the guest's
# writes vanish). SECS: whole seconds per run. Needs target/release/pslite-launch, built with
# --features rdma for VAN=rdma (scripts/plot-bench builds it).
# Knobs: PLOT_BENCH_LENS (bytes per value, default "1000 4096 65536 1024000 4096000"),
# PLOT_BENCH_MODES (default "push-pull pull"), PLOT_BENCH_ZERO_COPY=1 (also pull --zero-copy,
# the RDMA van's rendezvous), PLOT_BENCH_WHERE (where the runs run, e.g. "loopback" or
# "Soft-RoCE guest": added to each record this sweep appends as "where":"…", which
# tools/plot-bench puts in its legends and never pools across; no `"`, `\` or control
# characters). Each run's bench writes into a temporary file that is then appended to OUT.
# Every run is bounded by `timeout SECS+120`; a failed run (non-zero exit, timeout, or no record
# appended) is reported and the sweep goes on; the exit status is then 1, with the list of them.
# Time: runs x sizes x modes x (SECS + a few s of start-up): 3 x 5 x 2 x ~8 s = ~4 min at SECS=5
# on a host; several times that in the emulated (TCG) guest.
set -uo pipefail

usage() { sed -n '2,5p' "$0" >&2; exit 2; }
[[ $# == 4 ]] || usage
VAN=$1 RUNS=$2 SECS=$3 OUT=$4
[[ $VAN == zmq || $VAN == rdma ]] || { echo "plot-bench-sweep: VAN must be zmq or rdma, not '$VAN'" >&2; exit 2; }
[[ $RUNS =~ ^[1-9][0-9]*$ ]] || { echo "plot-bench-sweep: RUNS must be a positive integer, not '$RUNS'" >&2; exit 2; }
[[ $SECS =~ ^[1-9][0-9]*$ ]] || { echo "plot-bench-sweep: SECS must be a positive integer, not '$SECS'" >&2; exit 2; }
WHERE=${PLOT_BENCH_WHERE:-}
if [[ $WHERE =~ [\"\\[:cntrl:]] ]]; then
    echo "plot-bench-sweep: PLOT_BENCH_WHERE must not hold '\"', '\\' or control characters: '$WHERE'" >&2
    exit 2
fi
# The sed that prefixes each record (a line starting with `{`) with "where"; `&` and `|` escaped
# for sed's replacement. Without PLOT_BENCH_WHERE the records go through unchanged.
tag='s/^//'
if [[ -n $WHERE ]]; then
    w=$(printf '%s' "$WHERE" | sed 's/[&|]/\\&/g')
    tag="s|^{|{\"where\":\"$w\",|"
fi
OUT=$(realpath -m -- "$OUT")   # before the cd: a relative OUT means the caller's directory
cd "$(dirname "$0")/.."

# Registering the pool pins its pages: keep it modest in the 2 GiB guest (as bench-rdma.sh).
[[ $VAN == rdma ]] && export PS_POOL_BYTES=${PS_POOL_BYTES:-67108864}

L=target/release/pslite-launch
[[ -x $L ]] || { echo "plot-bench-sweep: $L is missing (cargo build --release --bins)" >&2; exit 2; }
mkdir -p "$(dirname "$OUT")" && touch "$OUT" || { echo "plot-bench-sweep: cannot write $OUT" >&2; exit 2; }

read -r -a lens <<< "${PLOT_BENCH_LENS:-1000 4096 65536 1024000 4096000}"
read -r -a modes <<< "${PLOT_BENCH_MODES:-push-pull pull}"
# One variant per line: a mode, then its extra options.
variants=()
for mode in "${modes[@]}"; do variants+=("$mode"); done
if [[ ${PLOT_BENCH_ZERO_COPY:-0} == 1 ]]; then variants+=("pull --zero-copy"); fi

total=$(( ${#lens[@]} * ${#variants[@]} * RUNS ))
log=$(mktemp /tmp/plot-bench-sweep.XXXXXX)
rec=$(mktemp /tmp/plot-bench-sweep-rec.XXXXXX)
trap 'rm -f "$log" "$rec"' EXIT
n=0 failed=()
t0=$SECONDS
echo "plot-bench-sweep: $VAN${WHERE:+ ($WHERE)}, $total runs of ${SECS}s into $OUT"
for len in "${lens[@]}"; do
    for variant in "${variants[@]}"; do
        read -r -a v <<< "$variant"
        for run in $(seq "$RUNS"); do
            n=$((n + 1))
            what="$VAN ${v[*]} len=$len run $run/$RUNS"
            : > "$rec"
            t=$SECONDS
            timeout -k 10 $((SECS + 120)) "$L" local --van "$VAN" --servers 1 --workers 1 -- \
                bench --mode "${v[0]}" "${v[@]:1}" --len "$len" --keys-per-server 8 \
                --seconds "$SECS" --json "$rec" > "$log" 2>&1
            rc=$?
            # Whatever the run wrote goes to OUT (as when bench appended to OUT itself).
            new=$(wc -l < "$rec")
            sed "$tag" "$rec" >> "$OUT" || { echo "plot-bench-sweep: cannot append to $OUT" >&2; exit 2; }
            if [[ $rc == 0 && $new -gt 0 ]]; then
                g=$(tail -n 1 "$rec" | grep -o '"goodput_gbps":[0-9.e+-]*' | cut -d: -f2)
                echo "[$n/$total] $what: ok, ${g:-?} Gbit/s ($((SECONDS - t)) s)"
            else
                why="exit $rc"
                [[ $rc == 124 || $rc == 137 ]] && why="timed out after $((SECS + 120)) s"
                [[ $rc == 0 ]] && why="exit 0 but no record appended"
                echo "[$n/$total] $what: FAILED ($why); its last output:"
                tail -n 15 "$log" | sed 's/^/    /'
                failed+=("$what ($why)")
            fi
        done
    done
done
echo "plot-bench-sweep: $((n - ${#failed[@]}))/$total runs ok in $((SECONDS - t0)) s; $(wc -l < "$OUT") records in $OUT"
if (( ${#failed[@]} )); then
    printf 'plot-bench-sweep: failed: %s\n' "${failed[@]}" >&2
    exit 1
fi
