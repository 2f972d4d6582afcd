#!/usr/bin/env bash
# Batched decode side by side: S sequences advancing together, one forward pass per step (what a
# server with continuous batching does at S concurrent streams), for oxibonsai (`bench -s S`), the
# reference engine (llama.cpp, ../shared/peer) and ik_llama.cpp (its prebuilt wheel), each through
# scripts/peer_batched.py. 2 threads; the engines interleaved round by round. Writes JSON lines to
# $BENCH_DIR/batched-d$D.jsonl and prints a Markdown table: aggregate tokens/s at each S and S_max ÷ 1.
#
# usage: scripts/bench-batched.sh [ROUNDS]     env: BENCH_FILES (files of $BENCH_DIR, as in
#        bench-side-by-side.sh, which writes them), S (1,8), N (generated tokens a sequence, 64),
#        D (tokens of context every sequence starts with, 0; the peers prefill each sequence's),
#        R (repetitions per round, 2), BIN (a built binary: no build), IK (0: skip ik_llama.cpp)
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${1:-1}
S=${S:-1,8}; N=${N:-64}; D=${D:-0}; R=${R:-2}; T=2
DIR=${BENCH_DIR:-$HOME/.cache/oxibonsai/bench}
FILES=${BENCH_FILES:-"smollm2-q4_1 smollm2-q4_0 smollm2-q8_0 bonsai-1.7b-q1_0 bonsai-1.7b-q2_0"}
PY=$(../shared/peer/build-llama-cpp.sh)
IK_VENV=$HOME/.cache/oxibonsai-ik
if [ "${IK:-1}" != 0 ] && [ ! -x "$IK_VENV/bin/python" ]; then
  python3 -m venv "$IK_VENV"
  "$IK_VENV/bin/pip" install -q ik-llama-cpp-python==0.1.5 numpy
fi
if [ -z "${BIN:-}" ]; then
  cargo build --release -q -p oxibonsai
  BIN=${CARGO_TARGET_DIR:-target}/release/oxibonsai
fi
for f in $FILES; do
  [ -f "$DIR/$f.gguf" ] || { echo "missing $DIR/$f.gguf (scripts/bench-side-by-side.sh writes it)" >&2; exit 1; }
done

OUT="$DIR/batched-d$D.jsonl"
: > "$OUT"
tag() { sed "s/^{/{\"file\": \"$1\", \"round\": $2, /" >> "$OUT"; }
for round in $(seq "$ROUNDS"); do
  for f in $FILES; do
    file="$DIR/$f.gguf"
    for s in ${S//,/ }; do
      "$BIN" bench -m "$file" -p 0 -n "$N" -d "$D" -t $T -s "$s" -r "$R" --json 2>/dev/null | tag "$f" "$round"
    done
    # The reference's plain Q2_0 path is scalar (≈ 2.5 tokens/s on Bonsai-1.7B): not run.
    [[ "$f" == *-q2_0 ]] && continue
    "$PY" scripts/peer_batched.py "$file" -s "$S" -n "$N" -d "$D" -t $T -r "$R" --json | tag "$f" "$round"
    if [ "${IK:-1}" != 0 ]; then
      "$IK_VENV/bin/python" scripts/peer_batched.py "$file" --ik -s "$S" -n "$N" -d "$D" -t $T -r "$R" --json 2>/dev/null |
        grep '^{' | tag "$f" "$round"
    fi
  done
done

python3 - "$OUT" "$S" <<'EOF'
import collections, json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
sizes = [int(s) for s in sys.argv[2].split(",")]
runs = collections.defaultdict(list)   # (file, engine, S) -> tokens/s
for r in rows:
    engine = r["engine"].split(" ")[0]
    runs[(r["file"], engine, r.get("sequences", 1))].append(r["tg_tokens_per_s"])
fmt = lambda v: f"{statistics.mean(v):.1f} ± {statistics.stdev(v) if len(v) > 1 else 0:.1f}" if v else "—"
print("| file | engine | " + " | ".join(f"S = {s} (t/s)" for s in sizes) + f" | {sizes[-1]} ÷ {sizes[0]} |")
print("|---|---|" + "---|" * (len(sizes) + 1))
for f in dict.fromkeys(r["file"] for r in rows):
    for e in ("oxibonsai", "llama.cpp", "ik_llama.cpp"):
        v = [runs[(f, e, s)] for s in sizes]
        if not any(v):
            continue
        ratio = statistics.mean(v[-1]) / statistics.mean(v[0]) if v[0] and v[-1] else float("nan")
        print(f"| {f} | {e} | " + " | ".join(fmt(x) for x in v) + f" | {ratio:.2f}× |")
EOF
