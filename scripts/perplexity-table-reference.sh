#!/usr/bin/env bash
# The quantization table's reference numbers: SmolLM2-135M's f16 (an upcast of the Q4_1 file, the
# only one published here) and the files `oxibonsai quantize` makes from it, each through
# scripts/perplexity-reference.py with its KL divergence against the reference's own f16 run —
# merged into tests/fixtures/perplexity/smollm2-quant-gpl3.json (the parity test's fixture).
#
# usage: scripts/perplexity-table-reference.sh OXIBONSAI Q4_1.gguf DIR CTX:CHUNKS
#   DIR: where the model files go (e.g. ~/.cache/oxibonsai/ppl-table; never the repository).
#   PY (default ~/.cache/oxibonsai-peer/venv/bin/python) runs the reference.
set -euo pipefail
if [ $# -ne 4 ]; then
  sed -n '2,10p' "$0"
  exit 1
fi
OX=$1; Q41=$2; D=$3; RUN=$4
PY=${PY:-$HOME/.cache/oxibonsai-peer/venv/bin/python}
TEXT=/usr/share/common-licenses/GPL-3
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$D"
"$OX" quantize --allow-requantize "$Q41" "$D/smollm2-f16.gguf" f16
ln -sf "$Q41" "$D/smollm2-q4_1.gguf"
for t in q8_0 q4_k_m q2_k tq2_0; do "$OX" quantize "$D/smollm2-f16.gguf" "$D/smollm2-$t.gguf" $t; done
# SmolLM2's rows of 576 values do not divide into q1_0's 128-value blocks: q2_0 there.
"$OX" quantize --fallback "$D/smollm2-f16.gguf" "$D/smollm2-q1_0.gguf" q1_0
for t in f16 q8_0 q4_k_m q4_1 q2_k tq2_0 q1_0; do
  "$PY" "$here/perplexity-reference.py" --kld-base "$D/smollm2-f16.gguf" \
    --settings default,f32,f16-noflash "$D/smollm2-$t.gguf" "$TEXT" "$D/ref-$t.json" "$RUN"
done
"$PY" - "$D" "$here/../tests/fixtures/perplexity/smollm2-quant-gpl3.json" <<'PY'
import json, sys
d, out = sys.argv[1:]
files = {}
for t in ["f16", "q8_0", "q4_k_m", "q4_1", "q2_k", "tq2_0", "q1_0"]:
    files[t] = json.load(open(f"{d}/ref-{t}.json"))
first = files["f16"]
json.dump({"text_sha256": first["text_sha256"], "reference": first["reference"],
           "kld_base": "smollm2-f16.gguf (upcast of SmolLM2-135M-Instruct.Q4_1.gguf)",
           "files": {t: f["runs"] for t, f in files.items()}}, open(out, "w"), indent=1)
PY
