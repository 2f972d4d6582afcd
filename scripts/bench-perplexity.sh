#!/usr/bin/env bash
# Perplexity throughput, ours against the reference engine, interleaved round by round on the same
# file, text, chunk length, chunk count and threads (this host's speed moves from minute to minute).
# Ours: `oxibonsai perplexity --json`'s tokens/s (evaluation and scoring); theirs:
# scripts/perplexity-speed-reference.py (llama-perplexity's batching, evaluation only timed).
#
# usage: scripts/bench-perplexity.sh MODEL TEXT N_CTX CHUNKS ROUNDS BIN...
#   PY (default ~/.cache/oxibonsai-peer/venv/bin/python) runs the reference; 2 threads.
set -euo pipefail
if [ $# -lt 6 ]; then
  sed -n '2,8p' "$0"
  exit 1
fi
M=$1; T=$2; C=$3; N=$4; R=$5; shift 5
PY=${PY:-$HOME/.cache/oxibonsai-peer/venv/bin/python}
here=$(dirname "$0")
for _ in $(seq "$R"); do
  for b in "$@"; do
    echo "$b $("$b" perplexity -m "$M" -f "$T" -c "$C" --chunks "$N" -t 2 --json 2>/dev/null |
      python3 -c "import json,sys; print(json.load(sys.stdin)['tokens_per_s'])")"
  done
  echo "llama.cpp $("$PY" "$here/perplexity-speed-reference.py" "$M" "$T" "$C" "$N" 2 |
    python3 -c "import json,sys; print(json.load(sys.stdin)['tokens_per_s'])")"
done | tee /dev/stderr | awk '{s[$1]+=$2; q[$1]+=$2*$2; n[$1]++}
  END {for (k in s) {m=s[k]/n[k]; v=n[k]>1?(q[k]-n[k]*m*m)/(n[k]-1):0; printf "%s: %.1f ± %.1f tokens/s (%d rounds)\n", k, m, sqrt(v>0?v:0), n[k]}}'
