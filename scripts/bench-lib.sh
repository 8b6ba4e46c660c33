# bench-lib.sh — sourced by the bench-*.sh scripts (never run on its own):
#
#   . scripts/bench-lib.sh
#   printf '%s\n' 3 1 2 | median        # 2; of an even count, the mean of the middle two (%.3f)
#   printf '%s\n' 3 1 2 4 | median 2    # 2.50: that mean with 2 decimals
#   echo '{"goodput_gbps":11.9}' | field goodput_gbps    # 11.9: a number from bench --json
#   median_of "3 1 2"                   # 2: the median of the words of one string
#   pct 10 9                            # -10.0 %: the change from the first to the second
#   t0=$(now); …; elapsed "$t0"         # seconds since t0, 3 decimals

median() { sort -g | awk -v d="${1:-3}" '{a[NR]=$1} END {if (NR%2) print a[(NR+1)/2]; else printf "%.*f\n", d, (a[NR/2]+a[NR/2+1])/2}'; }
field() { grep -o "\"$1\":[0-9.e+-]*" | head -1 | cut -d: -f2; }
median_of() { printf '%s\n' $1 | median; }
pct() { awk -v a="$1" -v b="$2" 'BEGIN {printf "%+.1f %%", (b-a)/a*100}'; }
now() { date +%s.%N; }
elapsed() { awk -v a="$1" -v b="$(now)" 'BEGIN {printf "%.3f", b-a}'; }
