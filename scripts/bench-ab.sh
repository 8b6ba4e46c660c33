#!/usr/bin/env bash
# A against B on the headline figures, runs interleaved within one script run (the order
# alternates from round to round), so that a change (a restructuring, say) can be shown to move
# no figure: the ZMQ van's of scripts/bench-zmq.sh and the key-heavy ones of
# scripts/bench-keys.sh (key caching on, pslite-launch's defaults):
#   - push-pull goodput, S=1 W=1, 1 MB (1024000 B) values, SECONDS s;
#   - push-pull p50 latency of one 4-byte key (one request in flight), 2 s;
#   - kv-app 10M keys S=1 W=1 (wall time, phases, bytes sent); 100 push-pulls of 1M keys per
#     request; push and pull of 1M keys per request (M keys/s, ratio to memcpy, p50);
#   - kv-app as shipped, S=2 W=2: wall time.
# Medians of ROUNDS rounds, with the change from A to B.
# Usage: scripts/bench-ab.sh REV_A REV_B [ROUNDS] [SECONDS]      (defaults 5 and 5)
#   REV_A and REV_B: commits (each checked out into a temporary worktree and built into
#   target/ab/, once), or directories holding a release build's pslite-launch.
# Bounded: every run is time-limited, all traffic is on 127.0.0.1.
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -ge 2 ] || { sed -n 2,15p "$0" >&2; exit 2; }
ROUNDS=${3:-5}
SECS=${4:-5}
. scripts/bench-lib.sh
declare -A dir
dir[A]=$(bins "$1") dir[B]=$(bins "$2")

variant() { LAUNCH=("${dir[$1]}/pslite-launch" local); }
interleave "A B" "$ROUNDS" "goodput=measure_goodput_1mb $SECS" "p50=measure_p50_4b 3" \
    "${KEYS_MEASURES[@]}" s2w2=measure_kv_app_s2w2

echo "A = $1, B = $2; ZMQ van, medians of $ROUNDS interleaved rounds"
echo
table_head figure A B change
row "push-pull goodput, 1 MB values, S=1 W=1, ${SECS} s" Gbit/s goodput
row "push-pull p50 latency, one 4-byte key" ms p50
keys=(goodput p50)
for r in "${KEYS_ROWS[@]}"; do row "${r%=*}" "" "${r##*=}"; keys+=("${r##*=}"); done
row "test_kv_app as shipped (10K keys, 50 rounds) S2W2: job wall time, s" "" s2w2
echo
runs_line "${keys[@]}" s2w2
