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
