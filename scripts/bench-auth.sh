#!/usr/bin/env bash
# What authentication costs (issue 14), with and without a token, runs interleaved in one
# script run (the order alternates from round to round), S=1 W=1 on the ZMQ van:
#   - push-pull goodput, 1 MB (1024000 B) values;
#   - push-pull p50 latency of one 4-byte key (one request in flight).
# "token": pslite-launch's default (a fresh PS_AUTH_TOKEN per run: every connection
# authenticates, every message's sender is checked); "none": PS_AUTH=none.
# Usage: scripts/bench-auth.sh [RUNS] [SECONDS_PER_RUN]      (defaults 6 and 4)
# Bounded: every run is time-limited, all traffic is on 127.0.0.1.
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS=${1:-6}
SECS=${2:-4}
cargo build --release --quiet --bin pslite-launch
. scripts/bench-lib.sh

variant() { if [ "$1" = none ]; then export PS_AUTH=none; else unset PS_AUTH; fi; }
interleave "token none" "$RUNS" "goodput=measure_goodput_1mb $SECS" p50=measure_p50_4b
unset PS_AUTH

COLS="none token"
echo "S=1 W=1, ZMQ van, medians of $RUNS interleaved rounds"
echo
table_head figure PS_AUTH=none token change
row "push-pull goodput, 1 MB values, ${SECS} s" Gbit/s goodput
row "push-pull p50 latency, one 4-byte key" ms p50
echo
runs_line goodput p50
