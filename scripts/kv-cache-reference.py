"""The reference engine's teacher-forced logits with its KV cache in each cache type (llama.cpp's
`type_k` = `type_v`), for the KV-cache parity test (crates/engine/tests/kv_cache_types.rs, which runs
this into its cache directory: the files are ~100 MB per type on SmolLM2, never committed).

The tokens are the first N of TEXT as the model's vocabulary tokenizes it (BOS first when the
vocabulary adds one). Flash attention is on (llama.cpp needs it for a quantized V) except for f32,
which it would cast to f16 with flash attention on. Each type is run twice: the whole sequence in
one micro-batch (TYPE.f32) and in micro-batches of 64 tokens (TYPE-ub64.f32): their difference is
the reference's variation against itself, from which the test derives its bounds.

usage: PY scripts/kv-cache-reference.py MODEL.gguf TEXT N OUT_DIR TYPE [TYPE ...]
  writes OUT_DIR/tokens.json, OUT_DIR/TYPE.f32 and OUT_DIR/TYPE-ub64.f32 ([N][n_vocab] f32 LE)
PY: ~/.cache/oxibonsai-peer/venv/bin/python (llama-cpp-python 0.3.36).
"""
import json, os, sys
import numpy as np
import llama_cpp as L
from llama_reference import load, tokenize

GGML_TYPES = {"f32": 0, "f16": 1, "q4_0": 2, "q4_1": 3, "q5_0": 6, "q5_1": 7, "q8_0": 8, "iq4_nl": 20, "bf16": 30}

model_path, text_path, n_tokens, out_dir = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
types = sys.argv[5:]
os.makedirs(out_dir, exist_ok=True)

model = load(model_path)
vocab = L.llama_model_get_vocab(model)
n_vocab = L.llama_vocab_n_tokens(vocab)
raw = open(text_path, "rb").read()
tokens = tokenize(vocab, raw)
assert len(tokens) >= n_tokens, f"the text has {len(tokens)} tokens, {n_tokens} asked"
tokens = tokens[:n_tokens]
json.dump({"tokens": tokens, "n_vocab": n_vocab}, open(os.path.join(out_dir, "tokens.json"), "w"))


def logits(ggml_type, flash, n_ubatch):
    cp = L.llama_context_default_params()
    cp.n_ctx = n_tokens; cp.n_batch = n_tokens; cp.n_ubatch = n_ubatch
    cp.n_threads = 2; cp.n_threads_batch = 2
    cp.type_k = cp.type_v = ggml_type
    cp.flash_attn_type = flash
    ctx = L.llama_init_from_model(model, cp)
    assert ctx, f"cannot make a context of cache type {ggml_type}"
    batch = L.llama_batch_init(n_tokens, 0, 1); batch.n_tokens = n_tokens
    for j, t in enumerate(tokens):
        batch.token[j] = t; batch.pos[j] = j; batch.n_seq_id[j] = 1; batch.seq_id[j][0] = 0
        batch.logits[j] = 1
    assert L.llama_decode(ctx, batch) == 0
    out = np.ctypeslib.as_array(L.llama_get_logits(ctx), shape=(n_tokens * n_vocab,)).astype("<f4").copy()
    L.llama_batch_free(batch)
    L.llama_free(ctx)
    return out


for name in types:
    flash = 0 if name == "f32" else 1
    for suffix, ub in (("", n_tokens), ("-ub64", 64)):
        tmp = os.path.join(out_dir, f"{name}{suffix}.f32.tmp")
        logits(GGML_TYPES[name], flash, ub).tofile(tmp)
        os.replace(tmp, os.path.join(out_dir, f"{name}{suffix}.f32"))
    print(f"{name} done", file=sys.stderr)
