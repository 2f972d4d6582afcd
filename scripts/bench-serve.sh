#!/usr/bin/env bash
# Aggregate generation speed of `oxibonsai serve` (continuous batching) at 1, 4, 8 and 16 concurrent
# streams: SmolLM2-135M-Instruct Q4_1 from PyPI, 16 slots, 2 threads, each stream exactly MAX_TOKENS
# tokens. Prints the Markdown table of BENCHMARKS.md ("Server") and appends JSON lines to
# $BENCH_DIR/serve.jsonl. A benchmark, not a test: the host's speed moves from minute to minute.
#
# usage: scripts/bench-serve.sh [ROUNDS]      env: MODEL (smollm2; any model spec or file, or a Bonsai shape
#        and format such as bonsai-1.7b-q1_0: random weights written by `synth` with the real Qwen3
#        vocabulary and chat template from ../shared/golden, so prompts tokenize), MAX_TOKENS (128),
#        STREAMS (1,4,8,16), BENCH_DIR, PY, BIN (a built binary: no build)
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${1:-5}
MAX_TOKENS=${MAX_TOKENS:-128}
MODEL=${MODEL:-smollm2}
STREAMS=${STREAMS:-1,4,8,16}
DIR=${BENCH_DIR:-$HOME/.cache/oxibonsai/bench}
PY=${PY:-${OXIBONSAI_TEST_PYTHON:-$HOME/.cache/oxibonsai/clients-venv/bin/python}}   # needs httpx (.ci/run)
mkdir -p "$DIR"
if [ -z "${BIN:-}" ]; then
  cargo build --release -q -p oxibonsai
  BIN=${CARGO_TARGET_DIR:-target}/release/oxibonsai
fi

case $MODEL in
  bonsai-*-*)
    f="$DIR/$MODEL-vocab.gguf"
    [ -f "$f" ] || "$BIN" synth --shape "${MODEL%-*}" --format "${MODEL##*-}" \
      --vocab ../shared/golden/tokenizer/qwen3/qwen3-vocab.gguf -o "$f"
    MODEL=$f;;
esac

LOG=$(mktemp)
"$BIN" serve -m "$MODEL" --port 0 -t 2 --parallel 16 --ctx 512 2>"$LOG" &
SERVER=$!
trap 'kill $SERVER 2>/dev/null; rm -f "$LOG"' EXIT
for _ in $(seq 600); do
  grep -q 'http://' "$LOG" && break
  kill -0 $SERVER 2>/dev/null || { cat "$LOG"; exit 1; }
  sleep 0.1
done
BASE=$(grep -o 'http://[^ ]*' "$LOG" | head -1)
until curl -sf "$BASE/health" >/dev/null; do sleep 0.2; done

# CPU time (clock ticks) of the whole machine and of the server, to tell how much of the CPUs
# other work took during the run (the client, and anything else running on the host).
busy() { awk '/^cpu /{print $2+$3+$4+$7+$8}' /proc/stat; }
server_ticks() { awk '{print $14+$15}' "/proc/$SERVER/stat"; }
echo "$(date -u +%FT%TZ) $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2-), $(nproc) CPUs, load average $(cut -d' ' -f1-3 /proc/loadavg)"
B0=$(busy); S0=$(server_ticks); T0=$(date +%s.%N)
"$PY" scripts/bench_serve.py "$BASE" --streams "$STREAMS" --rounds "$ROUNDS" --max-tokens "$MAX_TOKENS" \
  --json "$DIR/serve.jsonl"
B1=$(busy); S1=$(server_ticks); T1=$(date +%s.%N)
awk -v b="$((B1 - B0))" -v s="$((S1 - S0))" -v t0="$T0" -v t1="$T1" -v n="$(nproc)" -v hz="$(getconf CLK_TCK)" \
  'BEGIN { printf "CPU over the run (%d CPUs = 100 %%): server %.0f %%, everything else (client included) %.0f %%\n", n, 100*s/hz/(t1-t0)/n, 100*(b-s)/hz/(t1-t0)/n }'
