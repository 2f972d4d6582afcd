"""The reference engine's KV cache bytes after a teacher-forced pass (llama.cpp's `type_k` =
`type_v` = TYPE, flash attention on, one micro-batch), as `llama_state_seq_get_data` gives them,
decoded from llama-context.cpp's `state_seq_get_data` (magic u32, seq id i32) and llama-kv-cache.cpp's
`state_write` layout: n_stream (u32); per stream cell_count (u32),
per cell pos (i32), n_seq_id (u32), seq ids (i32 each); v_trans (u32), n_layer (u32); per layer
k type (i32), k row bytes (u64), cell_count rows; then per layer the same for v (v_trans 0: rows).
A row is one position's keys (values) of every KV head, head after head.

usage: PY scripts/kv-cache-bytes.py MODEL.gguf TEXT N TYPE OUT_DIR
  writes OUT_DIR/tokens.json, OUT_DIR/kL.bin and OUT_DIR/vL.bin for each layer L ([N][row] bytes)
PY: ~/.cache/oxibonsai-peer/venv/bin/python (llama-cpp-python 0.3.36).
"""
import ctypes, json, os, struct, sys

import llama_cpp as L
from llama_reference import load, tokenize

GGML_TYPES = {"f16": 1, "q4_0": 2, "q4_1": 3, "q5_0": 6, "q5_1": 7, "q8_0": 8, "iq4_nl": 20, "bf16": 30}

model_path, text_path, n_tokens, name, out_dir = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4], sys.argv[5]
os.makedirs(out_dir, exist_ok=True)
model = load(model_path)
vocab = L.llama_model_get_vocab(model)
tokens = tokenize(vocab, open(text_path, "rb").read())[:n_tokens]
assert len(tokens) == n_tokens, f"the text has {len(tokens)} tokens, {n_tokens} asked"
json.dump({"tokens": tokens}, open(os.path.join(out_dir, "tokens.json"), "w"))

cp = L.llama_context_default_params()
cp.n_ctx = n_tokens; cp.n_batch = n_tokens; cp.n_ubatch = n_tokens
cp.n_threads = 2; cp.n_threads_batch = 2
cp.type_k = cp.type_v = GGML_TYPES[name]
cp.flash_attn_type = 1
ctx = L.llama_init_from_model(model, cp)
assert ctx, f"cannot make a context of cache type {name}"
batch = L.llama_batch_init(n_tokens, 0, 1); batch.n_tokens = n_tokens
for j, t in enumerate(tokens):
    batch.token[j] = t; batch.pos[j] = j; batch.n_seq_id[j] = 1; batch.seq_id[j][0] = 0
    batch.logits[j] = int(j == n_tokens - 1)
assert L.llama_decode(ctx, batch) == 0

size = L.llama_state_seq_get_size(ctx, 0)
buf = (ctypes.c_uint8 * size)()
assert L.llama_state_seq_get_data(ctx, buf, size, 0) == size
data = bytes(buf)
at = 0


def take(fmt):
    global at
    v = struct.unpack_from("<" + fmt, data, at)
    at += struct.calcsize("<" + fmt)
    return v if len(v) > 1 else v[0]


take("I")  # llama_context's io_magic
assert take("i") == 0, "sequence 0"
assert take("I") == 1, "one stream"
cells = take("I")
assert cells == n_tokens, (cells, n_tokens)
for i in range(cells):
    pos, n_seq = take("iI")
    assert pos == i and n_seq == 1, (i, pos, n_seq)
    take("i")
v_trans, n_layer = take("II")
assert v_trans == 0, "flash attention stores values as rows"
for side in "kv":
    for layer in range(n_layer):
        kind, row = take("iQ")
        assert kind == GGML_TYPES[name], (side, layer, kind)
        with open(os.path.join(out_dir, f"{side}{layer}.bin"), "wb") as f:
            f.write(data[at:at + cells * row])
        at += cells * row
assert at == size, (at, size)
print(f"{name}: {n_layer} layers, {cells} cells", file=sys.stderr)
