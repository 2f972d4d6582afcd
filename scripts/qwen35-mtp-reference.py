"""Reference logits of qwen35's multi-token-prediction head, from llama.cpp's MTP context.

usage: PY scripts/qwen35-mtp-reference.py OXIBONSAI_BINARY [OUT_DIR (default tests/fixtures/qwen35-mtp)]
PY: the reference engine's Python (llama-cpp-python 0.3.36, $HOME/.cache/oxibonsai-peer/venv/bin/python).

For each model of MODELS: `oxibonsai synth --arch qwen35 ARGS` writes it (deterministic, with
`--nextn 1`); llama.cpp loads it with `load_mtp`, runs TOKENS through the trunk with the hidden states
the head reads turned on (`llama_set_embeddings_nextn`, the staging API of src/llama-ext.h, exported
with C++ names) and takes h_p = `llama_get_embeddings_nextn_ith` at each position; then an MTP context
(`ctx_type = LLAMA_CONTEXT_TYPE_MTP`) runs token x_p paired with h_{p-1} (zeros at p = 0) at
position p, as common/speculative.cpp's draft-mtp does — once as one batch (prefill) and once one
position per call (decode). Writes OUT_DIR/<name>.f32 — f32 [2][len(TOKENS)][n_vocab], head logits
of the prefill then the decode path — and OUT_DIR/manifest.json with the synth arguments, the
file's SHA-256, the tokens, and the reference's variation against itself in σ (decode vs prefill,
and an f32 KV cache vs f16; golden/README.md's criterion), from which the test's bounds are derived.
"""
import ctypes, sys
from pathlib import Path

import numpy as np
import llama_cpp as L

import llama_reference
import qwen35_fixtures

BIN = sys.argv[1]
OUT = Path(sys.argv[2] if len(sys.argv) > 2 else "tests/fixtures/qwen35-mtp")
TOKENS = [17, 230, 5, 499, 64, 3, 311, 128, 77, 402, 9, 256, 141, 33, 488, 2]

MODELS = {
    "f32-gqa": (["--format", "f32", "--nextn", "1", "--seed", "31"],
                "spec §6's layout + one MTP layer; the head uses output.weight and its shared_head_norm"),
    "f32-own-head-scales": (["--format", "f32", "--nextn", "1", "--nextn-own-head", "--tensor-scales", "--tied",
                             "--recurrent-layers", "1,0,1,1", "--seed", "32"],
                            "nextn.embed_tokens / shared_head_head and .scale tensors (eh_proj, head), tied trunk"),
    "q8_0-sections": (["--format", "q8_0", "--nextn", "1", "--head-dim", "32", "--rot", "32", "--heads", "8",
                       "--kv-heads", "2", "--sections", "2,1,1,2", "--seed", "33"],
                      "Q8_0 matrices, full rotary with an 'e' section, GQA 8/2"),
}

lib = ctypes.CDLL(str(Path(L.__file__).parent / "lib" / "libllama.so"))
set_nextn = lib._Z26llama_set_embeddings_nextnP13llama_contextbb
set_nextn.argtypes = [ctypes.c_void_p, ctypes.c_bool, ctypes.c_bool]
set_nextn.restype = None
nextn_ith = lib._Z30llama_get_embeddings_nextn_ithP13llama_contexti
nextn_ith.argtypes = [ctypes.c_void_p, ctypes.c_int32]
nextn_ith.restype = ctypes.POINTER(ctypes.c_float)


class Embd(ctypes.Structure):
    _fields_ = [("data", ctypes.POINTER(ctypes.c_float)), ("n_rows", ctypes.c_size_t), ("n_embd", ctypes.c_size_t)]


lib.llama_batch_ext_init.argtypes = [ctypes.c_void_p]
lib.llama_batch_ext_init.restype = ctypes.c_void_p
lib.llama_batch_ext_free.argtypes = [ctypes.c_void_p]
lib.llama_batch_ext_add_token.argtypes = [ctypes.c_void_p, ctypes.c_int32, ctypes.c_int32]
lib.llama_batch_ext_add_token.restype = ctypes.c_int32
lib.llama_batch_ext_set_pos.argtypes = [ctypes.c_void_p, ctypes.c_int32, ctypes.POINTER(ctypes.c_int32)]
lib.llama_batch_ext_set_pos.restype = ctypes.c_bool
lib.llama_batch_ext_set_embd_token.argtypes = [ctypes.c_void_p, ctypes.c_int32, Embd]
lib.llama_batch_ext_set_embd_token.restype = ctypes.c_bool
lib.llama_batch_ext_set_output_logits.argtypes = [ctypes.c_void_p, ctypes.c_int32, ctypes.c_bool]
lib.llama_batch_ext_set_output_logits.restype = ctypes.c_bool
lib.llama_process.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p]
lib.llama_process.restype = ctypes.c_int32
lib.llama_get_logits_ith.argtypes = [ctypes.c_void_p, ctypes.c_int32]
lib.llama_get_logits_ith.restype = ctypes.POINTER(ctypes.c_float)

llama_reference.MODEL_PARAMS.load_mtp = True


def context(model, kv, mtp):
    cp = L.llama_context_default_params()
    cp.n_ctx = 64; cp.n_batch = 64; cp.n_ubatch = 64; cp.n_threads = 2; cp.n_threads_batch = 2
    cp.type_k = cp.type_v = {"f16": 1, "f32": 0}[kv]
    cp.ctx_type = 1 if mtp else 0  # LLAMA_CONTEXT_TYPE_MTP
    ctx = L.llama_init_from_model(model, cp)
    assert ctx, "no context"
    return ctx


def trunk_hidden(model, n_embd, kv):
    """h_p (the trunk's output-normed hidden state) at every position of TOKENS."""
    ctx = context(model, kv, False)
    set_nextn(ctx, True, False)
    batch = L.llama_batch_init(len(TOKENS), 0, 1); batch.n_tokens = len(TOKENS)
    for i, t in enumerate(TOKENS):
        batch.token[i] = t; batch.pos[i] = i; batch.n_seq_id[i] = 1; batch.seq_id[i][0] = 0; batch.logits[i] = 1
    assert L.llama_decode(ctx, batch) == 0
    h = np.stack([np.ctypeslib.as_array(nextn_ith(ctx, i), shape=(n_embd,)).copy() for i in range(len(TOKENS))])
    L.llama_batch_free(batch)
    L.llama_free(ctx)
    return h.astype(np.float32)


def head(model, n_vocab, h, one_by_one, kv):
    """The MTP head's logits at every position: token x_p with h_{p-1}."""
    ctx = context(model, kv, True)
    set_nextn(ctx, True, True)  # as common/speculative.cpp sets up its draft context
    fed = np.ascontiguousarray(np.concatenate([np.zeros((1, h.shape[1]), np.float32), h[:-1]]))
    chunks = [[p] for p in range(len(TOKENS))] if one_by_one else [list(range(len(TOKENS)))]
    rows = []
    for chunk in chunks:
        batch = lib.llama_batch_ext_init(ctx)
        for p in chunk:
            idx = lib.llama_batch_ext_add_token(batch, 0, TOKENS[p])
            assert idx >= 0, idx
            pos = (ctypes.c_int32 * 4)(p, 0, 0, 0)
            assert lib.llama_batch_ext_set_pos(batch, idx, pos)
            row = fed[p].ctypes.data_as(ctypes.POINTER(ctypes.c_float))
            assert lib.llama_batch_ext_set_embd_token(batch, idx, Embd(row, 1, h.shape[1]))
            assert lib.llama_batch_ext_set_output_logits(batch, idx, True)
        assert lib.llama_process(ctx, 1, batch) == 0  # LLAMA_PROCESS_TYPE_DECODE
        rows += [np.ctypeslib.as_array(lib.llama_get_logits_ith(ctx, i), shape=(n_vocab,)).copy()
                 for i in range(len(chunk))]
        lib.llama_batch_ext_free(batch)
    L.llama_free(ctx)
    return np.stack(rows).astype(np.float32)


def logits(model):
    assert L.llama_model_n_layer_nextn(model) == 1
    n_vocab = L.llama_vocab_n_tokens(L.llama_model_get_vocab(model))
    n_embd = L.llama_model_n_embd(model)
    h = trunk_hidden(model, n_embd, "f16")
    h32 = trunk_hidden(model, n_embd, "f32")
    return (head(model, n_vocab, h, False, "f16"), head(model, n_vocab, h, True, "f16"),
            head(model, n_vocab, h32, False, "f32"))


qwen35_fixtures.write(BIN, OUT, TOKENS, MODELS,
                      "f32 [2][tokens][n_vocab]: MTP-head logits, one batch, then one position per call", logits)
