#!/usr/bin/env bash
# A/B of two (or more) oxibonsai binaries on one model, interleaved round by round, because this
# host's speed moves by tens of per cent from minute to minute: only binaries measured in the same
# loop can be compared. Prints tg tokens/s mean ± sd per binary (S sequences decoded together).
#
# usage: scripts/ab-bench.sh MODEL SEQUENCES TOKENS ROUNDS BIN...
#   e.g. cp target/release/oxibonsai /tmp/ox-a; (change, rebuild) cp target/release/oxibonsai /tmp/ox-b
#        scripts/ab-bench.sh smollm2 8 64 4 /tmp/ox-a /tmp/ox-b
set -euo pipefail
if [ $# -lt 5 ]; then
  sed -n '2,8p' "$0"
  exit 1
fi
M=$1; S=$2; N=$3; R=$4; shift 4
for _ in $(seq "$R"); do
  for b in "$@"; do
    t=$("$b" bench -m "$M" -p 0 -n "$N" -t 2 -s "$S" -r 2 --json 2>/dev/null |
      python3 -c "import json,sys; print(json.load(sys.stdin)['tg_tokens_per_s'])")
    echo "$b $t"
  done
done | awk '{s[$1]+=$2; q[$1]+=$2*$2; n[$1]++}
  END {for (k in s) {m=s[k]/n[k]; v=q[k]/n[k]-m*m; printf "%s: %.1f ± %.1f tokens/s (S = '"$S"', %d rounds)\n", k, m, sqrt(v>0?v:0), n[k]}}'
