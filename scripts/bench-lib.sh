# bench-lib.sh — sourced by the bench-*.sh scripts (never run on its own):
#
#   . scripts/bench-lib.sh
#   printf '%s\n' 3 1 2 | median        # 2; of an even count, the mean of the middle two (%.3f)
#   printf '%s\n' 3 1 2 4 | median 2    # 2.50: that mean with 2 decimals
#   echo '{"goodput_gbps":11.9}' | field goodput_gbps    # 11.9: a number from bench --json

median() { sort -g | awk -v d="${1:-3}" '{a[NR]=$1} END {if (NR%2) print a[(NR+1)/2]; else printf "%.*f\n", d, (a[NR/2]+a[NR/2+1])/2}'; }
field() { grep -o "\"$1\":[0-9.e+-]*" | head -1 | cut -d: -f2; }
