# bench-lib.sh — sourced by the bench-*.sh scripts (never run on its own):
#
#   . scripts/bench-lib.sh
#   printf '%s\n' 3 1 2 | median        # 2; of an even count, the mean of the middle two (%.3f)
#   printf '%s\n' 3 1 2 4 | median 2    # 2.50: that mean with 2 decimals
#   echo '{"goodput_gbps":11.9}' | field goodput_gbps    # 11.9: a number from bench --json
#   median_of "3 1 2"                   # 2: the median of the words of one string
#   median_of "3 1 2 4" 0               # 2 (2.5 with 0 decimals): DECIMALS as median's
#   pct 10 9                            # -10.0 %: the change from the first to the second
#   t0=$(now); …; elapsed "$t0"         # seconds since t0, 3 decimals
#   dir=$(bins COMMIT)                  # release binaries of COMMIT, built once into target/ab/
#
# Interleaved rounds (A against B, or more variants), medians and their Markdown table:
#
#   variant() { if [ "$1" = none ]; then export PS_AUTH=none; else unset PS_AUTH; fi; }
#   interleave "token none" "$RUNS" "goodput=measure_goodput_1mb $SECS" "p50=measure_p50_4b"
#   COLS="none token"                   # the table's columns (default: the variants, in order)
#   table_head figure PS_AUTH=none token change
#   row "push-pull goodput, 1 MB values" Gbit/s goodput
#   runs_line goodput p50               # runs: goodput none …/ token …; p50 none …/ token …
#
# interleave VARIANTS RUNS MEASURE…
#   VARIANTS: names ("A B"); round i runs them rotated by i - 1 (two variants: A B, B A, A B,
#     …). Orders of one's own instead: "off A B/B off A/…", one per round, cycling.
#   MEASURE: "KEY[,KEY…]=COMMAND [ARG…]" (or just COMMAND, its own key; split on blanks, nothing
#     expanded): in each round, for each variant, COMMAND runs in a subshell and prints one
#     number per KEY (words); they are appended
#     to R[KEY VARIANT]. Before each measurement `variant NAME` runs in this shell, if the script
#     defines it (it sets LAUNCH and the environment of that variant, clears files); VARIANT holds
#     the name. After each round `round_done I` runs, if defined. A measure that fails or prints
#     too few numbers ends the script.
# LAUNCH: the pslite-launch command the named measures run (an array, "local" and its options
#   included), target/release/pslite-launch local unless set.
# Named measures (S=1 W=1 on "${LAUNCH[@]}", each bounded by timeout, exit 1 on a failed run):
#   measure_goodput LEN SECS [WARM]     push-pull goodput of LEN-byte values, Gbit/s (%.2f);
#                                       with WARM: the first WARM s' goodput, then the SECS after
#   measure_goodput_1mb SECS [WARM]     the same, 1 MB (1024000 B) values
#   measure_p50_4b [DECIMALS]           push-pull p50 of one 4-byte key, 2 s, ms (%.4f)
#   measure_kv_app_1m [phases]          kv-app --keys 1000000: job wall time, s (sums checked
#                                       exact); with "phases" also its push and push-pull phases
#   measure_keys_100k                   push-pull of 100K 4-byte keys per request, 5 rounds: keys/s
#   measure_kv_app_10m                  kv-app --keys 10000000 --repeat 1 --outstanding 1: wall,
#                                       push, pull and push-pull phases (s), MB sent by the worker
#   measure_pp100_1m                    100 push-pulls of 1M keys per request: s, MB sent
#   measure_keys_1m MODE                MODE (push, pull) of 1M keys per request, 3 s: M keys/s,
#                                       keys/s ÷ memcpy of the same bytes, p50 ms
#   measure_kv_app_s2w2                 kv-app as shipped, S=2 W=2: job wall time, s
#   KEYS_MEASURES, KEYS_ROWS            bench-keys.sh's figures: its MEASUREs, its rows' LABEL=KEY
# Tables of R (over COLS, default the variants):
#   table_head CELL…                    a header row and its "| --- |" row
#   row LABEL UNIT KEY                  "| LABEL | median UNIT | …": with two columns a last cell,
#                                       the change (pct); with more, each cell after the first
#                                       carries its change from the first, "(pct)"
#   runs_line [LABEL=]KEY…              "runs: LABEL v1 runs/ v2 runs; …"
#   med KEY VARIANT [DECIMALS]          one median
#
# A server SIGKILLed, KILLS times, seconds until the others notice (or it is replaced):
#   kill_trials KILLS TRIAL [DECIMALS]  runs TRIAL KILLS times; it starts a cluster, kills a server
#                                       with `sigkill PID` and prints lines "T1/T2[ NOTE]": seconds
#                                       after the kill (`since_kill` gives them). Sets KILL_T1 and
#                                       KILL_T2 (each sorted), KILL_MED1, KILL_MED2 (medians) and
#                                       KILL_RUNS (every line, "; "-separated)
#   sigkill PID                         SIGKILL, the moment in KILLED_AT
#   since_kill WHEN                     seconds from KILLED_AT to WHEN (epoch seconds or a log
#                                       line's ISO-8601 time), 2 decimals
#   log_time                            the epoch seconds of the first ISO-8601 time on stdin

median() { sort -g | awk -v d="${1:-3}" '{a[NR]=$1} END {if (NR%2) print a[(NR+1)/2]; else printf "%.*f\n", d, (a[NR/2]+a[NR/2+1])/2}'; }
field() { grep -o "\"$1\":[0-9.e+-]*" | head -1 | cut -d: -f2; }
median_of() { printf '%s\n' $1 | median "${2:-3}"; }
pct() { awk -v a="$1" -v b="$2" 'BEGIN {printf "%+.1f %%", (b-a)/a*100}'; }
now() { date +%s.%N; }
elapsed() { awk -v a="$1" -v b="$(now)" 'BEGIN {printf "%.3f", b-a}'; }

# The directory of the release binaries of $1 (a directory, or a commit built here).
bins() {
    if [ -x "$1/pslite-launch" ]; then
        echo "$1"
        return
    fi
    local rev dir src
    rev=$(git rev-parse --short "$1^{commit}")
    dir=$PWD/target/ab/bin-$rev src=$PWD/target/ab/src-$rev
    if [ ! -x "$dir/pslite-launch" ]; then
        echo "building $rev" >&2
        git worktree add -f --detach "$src" "$rev" >/dev/null 2>&1
        # One target directory for both commits: the second builds incrementally.
        (cd "$src" && CARGO_TARGET_DIR=$PWD/../target cargo build --release --quiet --bins) >&2
        mkdir -p "$dir"
        cp "$PWD/target/ab/target/release/pslite-launch" "$dir/"
        git worktree remove --force "$src"
    fi
    echo "$dir"
}

# ---- interleaved rounds ----
declare -A R
VARIANTS="" VARIANT=""
interleave() {
    local orders=() runs=$2 i v spec keys cmd out nums k n order said
    IFS=/ read -ra orders <<<"$1"
    VARIANTS=${orders[0]}
    shift 2
    for i in $(seq "$runs"); do
        if [ "${#orders[@]}" -gt 1 ]; then
            order=${orders[$(((i - 1) % ${#orders[@]}))]}
        else
            local vs=($VARIANTS) r=$(((i - 1) % $(wc -w <<<"$VARIANTS")))
            order="${vs[*]:r} ${vs[*]:0:r}"
        fi
        for v in $order; do
            said=""
            for spec in "$@"; do
                keys=${spec%%=*} cmd=${spec#*=}
                [ "$spec" != "$cmd" ] || keys=${spec%% *}
                VARIANT=$v
                ! declare -F variant >/dev/null || variant "$v"
                out=$($cmd) || { echo "$cmd ($v) failed" >&2; exit 1; }
                read -ra nums <<<"$out"
                n=0
                for k in ${keys//,/ }; do
                    [ -n "${nums[n]:-}" ] || { echo "$cmd ($v) printed no $k: $out" >&2; exit 1; }
                    R[$k $v]+="${nums[n]} "
                    said+=" $k ${nums[n]}"
                    n=$((n + 1))
                done
            done
            echo "round $i of $runs, $v:$said" >&2
        done
        ! declare -F round_done >/dev/null || round_done "$i"
    done
}

med() { median_of "${R[$1 $2]:-}" "${3:-3}"; }
table_head() {
    local c line="|" sep="|"
    for c in "$@"; do line+=" $c |"; sep+=" --- |"; done
    printf '%s\n%s\n' "$line" "$sep"
}
row() {
    local label=$1 unit=$2 key=$3 cols=(${COLS:-$VARIANTS}) c first="" m line
    line="| $label |"
    for c in "${cols[@]}"; do
        m=$(med "$key" "$c")
        m+=${unit:+ $unit}
        if [ -z "$first" ]; then first=${m%% *}; line+=" $m |"
        elif [ ${#cols[@]} -eq 2 ]; then line+=" $m | $(pct "$first" "${m%% *}") |"
        else line+=" $m ($(pct "$first" "${m%% *}")) |"; fi
    done
    echo "$line"
}
runs_line() {
    local spec label key c parts=() cells
    for spec in "$@"; do
        label=${spec%%=*} key=${spec#*=}
        cells=()
        for c in ${COLS:-$VARIANTS}; do cells+=("$c ${R[$key $c]}"); done
        parts+=("$label $(printf '%s/ ' "${cells[@]}" | sed 's|/ $||')")
    done
    echo "runs: $(printf '%s; ' "${parts[@]}" | sed 's/; $//')"
}

# ---- named measures ----
[ -n "${LAUNCH+set}" ] || LAUNCH=(target/release/pslite-launch local)
# bench_json LIMIT_S BENCH_ARGS…: the JSON line of one S=1 W=1 bench run, or exit 1.
bench_json() {
    local limit=$1 err out
    shift
    err=$(mktemp)
    out=$(timeout "$limit" "${LAUNCH[@]}" --servers 1 --workers 1 -- bench "$@" --json 2>"$err") &&
        out=$(grep goodput_gbps <<<"$out") ||
        { echo "bench $* failed:" >&2; tail -5 "$err" >&2; rm -f "$err"; exit 1; }
    rm -f "$err"
    echo "$out"
}
measure_goodput() {
    local j
    j=$(bench_json $((${3:-0} + $2 + 60)) --mode push-pull --len "$1" --seconds "$2" ${3:+--warmup "$3"}) || exit 1
    [ -z "${3:-}" ] || printf '%.2f ' "$(field warmup_gbps <<<"$j")"
    printf '%.2f\n' "$(field goodput_gbps <<<"$j")"
}
measure_goodput_1mb() { measure_goodput 1024000 "$@"; }
measure_p50_4b() {
    local j
    j=$(bench_json 60 --mode push-pull --len 4 --keys-per-server 1 --seconds 2) || exit 1
    printf "%.${1:-4}f\n" "$(field p50_ms <<<"$j")"
}
measure_keys_100k() {
    local j
    j=$(bench_json 120 --mode push-pull --keys-per-request 100000 --len 4 --repeat 5) || exit 1
    printf '%.0f\n' "$(field keys_per_s <<<"$j")"
}
# kv_app LIMIT_S N ARGS…: kv-app S=N W=N; prints its output and last its job wall time (s), or
# exits 1 if it failed or a worker's sums are not exact.
kv_app() {
    local t0 out n=$2 rc=0 wall
    t0=$(now)
    out=$(timeout "$1" "${LAUNCH[@]}" --servers "$n" --workers "$n" -- kv-app "${@:3}" 2>&1) || rc=$?
    wall=$(elapsed "$t0")
    [ $rc -eq 0 ] && [ "$(grep -c "error: 0, 0" <<<"$out")" -eq "$n" ] ||
        { echo "kv-app ${*:3} failed or not exact:" >&2; tail -5 <<<"$out" >&2; exit 1; }
    echo "$out"
    echo "$wall"
}
# phase NAME: the seconds of kv-app's phase NAME (push, pull, push-pull) in its output on stdin.
phase() { grep -o " $1 [0-9.]* s" | head -1 | awk '{print $2}'; }
measure_kv_app_1m() {
    local out
    out=$(kv_app 300 1 --keys 1000000) || exit 1
    echo "$(tail -1 <<<"$out")" ${1:+$(phase push <<<"$out") $(phase push-pull <<<"$out")}
}
measure_kv_app_10m() {
    local out
    out=$(kv_app 120 1 --keys 10000000 --repeat 1 --outstanding 1) || exit 1
    echo "$(tail -1 <<<"$out") $(phase push <<<"$out") $(phase pull <<<"$out")" \
        "$(phase push-pull <<<"$out") $(grep -o 'sent [0-9.]* MB' <<<"$out" | awk '{print $2}')"
}
measure_pp100_1m() {
    local j
    j=$(bench_json 120 --mode push-pull --keys-per-request 1000000 --len 4 --repeat 100) || exit 1
    echo "$(field seconds <<<"$j") $(field sent_bytes <<<"$j" | awk '{printf "%.1f", $1 / 1e6}')"
}
measure_keys_1m() {
    local j
    j=$(bench_json 60 --mode "$1" --keys-per-request 1000000 --len 4 --seconds 3) || exit 1
    echo "$(field keys_per_s <<<"$j" | awk '{printf "%.1f", $1 / 1e6}')" \
        "$(awk -F'"keys_per_s":|,"memcpy_keys_per_s":|,"sent_bytes"' '{printf "%.3f", $2 / $3}' <<<"$j")" \
        "$(field p50_ms <<<"$j")"
}
measure_kv_app_s2w2() { kv_app 60 2 | tail -1; }

# The key-heavy figures of bench-keys.sh (and bench-ab.sh): the measures for interleave, and
# each table row's "LABEL=KEY".
KEYS_MEASURES=("kv10m-wall,kv10m-push,kv10m-pull,kv10m-push-pull,kv10m-sent=measure_kv_app_10m"
    "pp100-s,pp100-sent=measure_pp100_1m"
    "push-mkeys,push-ratio,push-p50=measure_keys_1m push"
    "pull-mkeys,pull-ratio,pull-p50=measure_keys_1m pull")
KEYS_ROWS=("kv-app 10M keys S1W1: job wall time, s=kv10m-wall"
    "kv-app 10M keys: push phase, s=kv10m-push"
    "kv-app 10M keys: pull phase, s=kv10m-pull"
    "kv-app 10M keys: push-pull phase, s=kv10m-push-pull"
    "kv-app 10M keys: payload sent by the worker, MB=kv10m-sent"
    "100 push-pulls of 1M keys (one request each): seconds=pp100-s"
    "100 push-pulls of 1M keys: payload sent by the worker, MB=pp100-sent"
    "push of 1M keys per request: M keys/s=push-mkeys"
    "push of 1M keys: keys/s ÷ memcpy of the same bytes=push-ratio"
    "push of 1M keys: p50 latency, ms=push-p50"
    "pull of 1M keys per request: M keys/s=pull-mkeys"
    "pull of 1M keys: keys/s ÷ memcpy of the same bytes=pull-ratio"
    "pull of 1M keys: p50 latency, ms=pull-p50")

# ---- a server SIGKILLed ----
sigkill() { KILLED_AT=$(now); kill -9 "$1"; }
# The pid pslite-launch printed for NODE ("scheduler", "server 0") in its output FILE (its
# first start).
launched_pid() { grep -o "started $1 (pid [0-9]*" "$2" | head -1 | grep -o "[0-9]*$"; }
# Waits until FILE has a line containing TEXT, at most 30 s: await_line TEXT FILE.
await_line() {
    local n=0
    until grep -q "$1" "$2"; do
        n=$((n + 1)); [ $n -lt 3000 ] || { echo "no line with '$1' in $2 within 30 s" >&2; return 1; }
        sleep 0.01
    done
}
log_time() { date -d "$(grep -o "20[0-9-]*T[0-9:.]*Z" | head -1)" +%s.%N; }
since_kill() {
    local t=$1
    [ -n "$t" ] || { echo -; return; }
    [[ $t != *T* ]] || t=$(log_time <<<"$t")
    awk -v a="$KILLED_AT" -v b="$t" 'BEGIN {printf "%.2f", b-a}'
}
kill_trials() {
    local kills=$1 trial=$2 d=${3:-3} i out lines=()
    KILL_RUNS=""
    for i in $(seq "$kills"); do
        out=$($trial) || exit 1
        echo "kill $i: $(tr '\n' ' ' <<<"$out")" >&2
        while read -r l; do lines+=("$l"); KILL_RUNS+="$l; "; done <<<"$out"
    done
    local t
    t=$(printf '%s\n' "${lines[@]}" | cut -d' ' -f1)
    KILL_T1=$(cut -d/ -f1 <<<"$t" | sort -g | tr '\n' ' ')
    KILL_T2=$(cut -d/ -f2 <<<"$t" | sort -g | tr '\n' ' ')
    KILL_MED1=$(cut -d/ -f1 <<<"$t" | median "$d")
    KILL_MED2=$(cut -d/ -f2 <<<"$t" | median "$d")
}
