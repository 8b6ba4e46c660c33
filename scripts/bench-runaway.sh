#!/usr/bin/env bash
# What a runaway member costs everyone else (issue 36, item 4): kv-app S=2 W=2 on the ZMQ van,
# alone, and with a member (examples/runaway_client.rs, holding the token) sending COUNT tiny
# requests for an application no server serves to server 0 as soon as server 0 has started —
# each is parked there for 5 s, then refused. Figure: the whole job's wall time (pslite-launch
# start to exit, both workers' sums exact), medians of RUNS rounds, the order alternating.
# Usage: scripts/bench-runaway.sh [RUNS] [COUNT] [REPEAT] [BASE]   (defaults 5, 200000, 10000)
#   REPEAT: kv-app's --repeat (the job's length).
#   BASE: a commit measured the same way in the same rounds (its binaries built into target/ab/).
# Bounded: every run is time-limited, all traffic is on 127.0.0.1.
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS=${1:-5}
COUNT=${2:-200000}
REPEAT=${3:-10000}
BASE=${4:-}
cargo build --release --quiet --bin pslite-launch --example runaway_client
. scripts/bench-lib.sh
declare -A launch=([head]=target/release/pslite-launch)
builds=head
if [ -n "$BASE" ]; then
    launch[base]="$(bins "$BASE")/pslite-launch"
    builds="base head"
fi
PS_AUTH_TOKEN=$(head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n')
export PS_AUTH_TOKEN PS_VERBOSE=1
log=$(mktemp)
trap 'rm -f "$log"' EXIT

# One job of build $2; with "with", the runaway client too. Prints the job's wall time in
# seconds.
job() {
    local t0 pid port="" client=""
    t0=$(now)
    timeout 300 "${launch[$2]}" local --servers 2 --workers 2 -- \
        kv-app --repeat "$REPEAT" >"$log" 2>&1 &
    pid=$!
    if [ "$1" = with ]; then
        for _ in $(seq 600); do
            port=$(grep -o 'server rank 0 (id 8) started: [^ ]*' "$log" | head -1 | sed 's/.*://')
            [ -n "$port" ] && break
            sleep 0.05
        done
        [ -n "$port" ] || { echo "server 0 did not start:" >&2; cat "$log" >&2; exit 1; }
        timeout 120 target/release/examples/runaway_client "$port" "$COUNT" >&2 &
        client=$!
    fi
    wait "$pid" || { echo "the job failed:" >&2; grep -v ' INFO ' "$log" >&2; exit 1; }
    elapsed "$t0"
    [ -z "$client" ] || wait "$client" || true
    for w in 0 1; do
        grep -q "worker $w: error: 0, 0" "$log" || { echo "worker $w not exact:" >&2; cat "$log" >&2; exit 1; }
    done
}

declare -A secs
for i in $(seq "$RUNS"); do
    order=""
    for b in $builds; do order+="alone:$b with:$b "; done
    [ $((i % 2)) -eq 0 ] && order=$(printf '%s\n' $order | tac | tr '\n' ' ')
    for v in $order; do
        secs[$v]+="$(job "${v%%:*}" "${v##*:}") "
    done
    echo "round $i of $RUNS done" >&2
done
cat <<EOT
kv-app S=2 W=2 --repeat $REPEAT, ZMQ van with a token, medians of $RUNS interleaved rounds

| build | alone | with $COUNT runaway requests | change |
| --- | --- | --- | --- |
EOT
for b in $builds; do
    name=$(git rev-parse --short HEAD)
    [ "$b" = base ] && name=$(git rev-parse --short "$BASE")
    a=$(median_of "${secs[alone:$b]}") w=$(median_of "${secs[with:$b]}")
    echo "| $name | $a s | $w s | $(pct "$a" "$w") |"
done
echo
for b in $builds; do
    echo "runs ($b): alone ${secs[alone:$b]}/ with ${secs[with:$b]}"
done
