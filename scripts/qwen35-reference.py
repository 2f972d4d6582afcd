"""Reference logits for the qwen35 (Gated DeltaNet hybrid) parity fixtures, from llama.cpp.

usage: PY scripts/qwen35-reference.py OXIBONSAI_BINARY [OUT_DIR (default tests/fixtures/qwen35)]
PY: the reference engine's Python (llama-cpp-python 0.3.36, $HOME/.cache/oxibonsai-peer/venv/bin/python).

For each model of MODELS: `oxibonsai synth --arch qwen35 ARGS` writes it (deterministic), then the reference
runs TOKENS teacher-forced in one batch (the prompt path) and again one token per llama_decode call (the
decode path; llama.cpp keeps the recurrent state between calls). Writes OUT_DIR/<name>.f32 — f32
[2][len(TOKENS)][n_vocab], prefill rows then decode rows — and OUT_DIR/manifest.json with the synth
arguments, the file's SHA-256 (the engine test re-synthesises and checks it, so model and logits agree),
the tokens, the shapes, and the reference's variation against itself in σ (parity criterion of
golden/README.md: prefill vs decode, and an f32 KV cache vs the default f16), from which the test's
bounds are derived.
"""
import sys
from pathlib import Path

import numpy as np
import llama_cpp as L

import qwen35_fixtures

BIN = sys.argv[1]
OUT = Path(sys.argv[2] if len(sys.argv) > 2 else "tests/fixtures/qwen35")
TOKENS = [17, 230, 5, 499, 64, 3, 311, 128, 77, 402, 9, 256, 141, 33, 488, 2, 190, 365, 71, 12, 444, 98, 205, 350]

# name -> (synth arguments, what the model exercises)
MODELS = {
    "f32-interval4-gqa": (["--format", "f32"], "spec §6's layout: GDN×3 + attention, H_k 2 ≠ H_v 4, GQA 4/2, untied"),
    "f16-tied-interval2": (["--format", "f16", "--tied", "--interval", "2", "--seed", "2"], "tied head, alternating layers"),
    "q8_0-pattern": (["--format", "q8_0", "--layers", "5", "--recurrent-layers", "1,0,1,1,0", "--k-heads", "1",
                      "--v-heads", "3", "--seed", "3"], "recurrent_layers array, H_k 1 / H_v 3"),
    "q1_0-default": (["--format", "q1_0", "--seed", "4"], "Q1_0 matrices"),
    "q2_0-equal-heads": (["--format", "q2_0", "--state", "64", "--k-heads", "2", "--v-heads", "2", "--layers", "3",
                          "--interval", "3", "--tied", "--seed", "5"], "Q2_0, H_k = H_v, S 64, tied"),
    "f32-scales-sections": (["--format", "f32", "--tensor-scales", "--head-dim", "32", "--rot", "32", "--heads", "8",
                             "--kv-heads", "2", "--sections", "2,1,1,2", "--seed", "6"],
                            "per-tensor .scale tensors; sections whose 'e' part leaves pairs at position 0; full rotary"),
    "f16-wide-v": (["--format", "f16", "--state", "16", "--k-heads", "2", "--v-heads", "8", "--conv", "3",
                    "--layers", "3", "--interval", "3", "--seed", "7"], "H_v/H_k = 4, S 16, conv kernel 3"),
}

def context(model, kv):
    cp = L.llama_context_default_params()
    cp.n_ctx = 64; cp.n_batch = 64; cp.n_ubatch = 64; cp.n_threads = 2; cp.n_threads_batch = 2
    cp.type_k = cp.type_v = {"f16": 1, "f32": 0}[kv]
    return L.llama_init_from_model(model, cp)


def run(model, n_vocab, tokens, one_by_one, kv="f16"):
    ctx = context(model, kv)
    rows = []
    chunks = [[t] for t in tokens] if one_by_one else [tokens]
    pos = 0
    for chunk in chunks:
        batch = L.llama_batch_init(len(chunk), 0, 1); batch.n_tokens = len(chunk)
        for i, t in enumerate(chunk):
            batch.token[i] = t; batch.pos[i] = pos + i; batch.n_seq_id[i] = 1; batch.seq_id[i][0] = 0; batch.logits[i] = 1
        assert L.llama_decode(ctx, batch) == 0
        rows += [np.ctypeslib.as_array(L.llama_get_logits_ith(ctx, i), shape=(n_vocab,)).copy() for i in range(len(chunk))]
        L.llama_batch_free(batch)
        pos += len(chunk)
    L.llama_free(ctx)
    return np.stack(rows).astype(np.float32)


def logits(model):
    n_vocab = L.llama_vocab_n_tokens(L.llama_model_get_vocab(model))
    return (run(model, n_vocab, TOKENS, False), run(model, n_vocab, TOKENS, True),
            run(model, n_vocab, TOKENS, False, "f32"))


qwen35_fixtures.write(BIN, OUT, TOKENS, MODELS,
                      "f32 [2][tokens][n_vocab]: prefill rows, then one-token-at-a-time rows", logits)
