"""The reference engine's embeddings (llama-cpp-python's low-level API: context `embeddings = True`,
`pooling_type`; `llama_get_embeddings_seq` per sequence, `llama_get_embeddings_ith` per token for
pooling none), raw — before any normalization — for the parity test crates/cli/tests/embed_parity.rs.

Each case is run four ways: all inputs in one batch with the KV cache in f16 and flash attention
as llama.cpp chooses (its default: `embeddings`), each input alone, batched with an f32 cache
(`embeddings_f32_kv`, flash attention off) and with an f16 cache, flash attention off
(`embeddings_f16_kv_flash_off`). The
largest difference between those runs (`spread`) is the reference's own noise, from which the test
derives its bound. Writes tests/fixtures/embedding/reference.json.

usage: PY scripts/embedding-reference.py OUT.json NAME=MODEL.gguf:POOLING[:TEXT|TEXT…] ...
  POOLING: file (the model's own <arch>.pooling_type) or none|mean|cls|last|rank (the context's).
  Inputs: the texts separated by '|' (tokenized as llama-embedding does: special tokens added and
  parsed); without texts, three fixed pseudo-random id lists (lengths 7, 1, 13) below the vocabulary.
PY: $HOME/.cache/oxibonsai-peer/venv/bin/python
"""
import json, sys
import numpy as np
import llama_cpp as L

POOLING = {"file": -1, "none": 0, "mean": 1, "cls": 2, "last": 3, "rank": 4}
out_path, specs = sys.argv[1], sys.argv[2:]

_quiet = L.llama_log_callback(lambda level, t, data: None)
L.llama_log_set(_quiet, None)
L.llama_backend_init()


def tokenize(vocab, text):
    raw = text.encode()
    buf = (L.llama_token * (len(raw) + 16))()
    k = L.llama_tokenize(vocab, raw, len(raw), buf, len(raw) + 16, True, True)
    assert k > 0, k
    return list(buf[:k])


def run(model, inputs, pooling, kv_type, flash=-1):
    """Embeddings of `inputs` decoded together (one sequence each): per input a vector (or, for
    pooling none, its tokens' vectors), and the pooling the context used."""
    n = sum(len(i) for i in inputs)
    cp = L.llama_context_default_params()
    # Whole inputs in one micro-batch (llama-embedding's requirement), of a size the sequences
    # divide (else reserving mean pooling's graph trips an assertion in ggml_mul_mat).
    k = len(inputs)
    cp.n_ctx = -(-max(n, 16) // k) * k; cp.n_batch = cp.n_ctx; cp.n_ubatch = cp.n_ctx
    cp.n_seq_max = len(inputs); cp.n_threads = 2; cp.n_threads_batch = 2
    cp.type_k = cp.type_v = kv_type
    # With flash attention (auto: on, on CPU) this build keeps the keys in f16 whatever the cache
    # type: the f32 run turns it off.
    cp.flash_attn_type = flash if kv_type == 1 else 0
    cp.embeddings = True
    # llama-embedding's setting: with a cache per sequence, llama.cpp splits the batch into equal
    # per-sequence pieces and pools each sequence over its last piece only.
    cp.kv_unified = True
    cp.pooling_type = pooling
    ctx = L.llama_init_from_model(model, cp)
    assert ctx, "cannot create the context"
    used = L.llama_pooling_type(ctx)
    n_out = L.llama_model_n_cls_out(model) if used == 4 else L.llama_model_n_embd(model)
    batch = L.llama_batch_init(n, 0, len(inputs)); batch.n_tokens = n
    j = 0
    for s, ids in enumerate(inputs):
        for p, t in enumerate(ids):
            batch.token[j] = t; batch.pos[j] = p; batch.n_seq_id[j] = 1; batch.seq_id[j][0] = s
            batch.logits[j] = 1
            j += 1
    assert L.llama_decode(ctx, batch) == 0
    result, j = [], 0
    for s, ids in enumerate(inputs):
        if used == 0:
            rows = [np.ctypeslib.as_array(L.llama_get_embeddings_ith(ctx, j + p), shape=(n_out,)).copy()
                    for p in range(len(ids))]
            result.append(np.stack(rows))
        else:
            result.append(np.ctypeslib.as_array(L.llama_get_embeddings_seq(ctx, s), shape=(n_out,)).copy()[None, :])
        j += len(ids)
    L.llama_batch_free(batch)
    L.llama_free(ctx)
    return result, used


def compare(a, b):
    diff = max(float(np.abs(x - y).max()) for x, y in zip(a, b))
    cos = min(float((x * y).sum() / (np.linalg.norm(x) * np.linalg.norm(y)))
              for u, v in zip(a, b) for x, y in zip(u, v))
    return diff, cos


def rounded(embeddings):
    return [[[float(f"{v:.7g}") for v in row] for row in e] for e in embeddings]


cases = []
for spec in specs:
    name, rest = spec.split("=", 1)
    parts = rest.split(":", 2)
    path, pooling = parts[0], POOLING[parts[1]]
    mp = L.llama_model_default_params()
    mp.use_extra_bufts = False  # this build's repacked CPU weights crash on some files
    model = L.llama_model_load_from_file(path.encode(), mp)
    if not model:
        sys.exit(f"cannot load {path}")
    vocab = L.llama_model_get_vocab(model)
    if len(parts) == 3:
        texts = parts[2].split("|")
        inputs = [tokenize(vocab, t) for t in texts]
    else:
        texts = None
        rng = np.random.default_rng(27)
        n_vocab = L.llama_vocab_n_tokens(vocab)
        inputs = [[int(t) for t in rng.integers(0, n_vocab, size=k)] for k in (7, 1, 13)]
    batched, used = run(model, inputs, pooling, 1)
    single = [run(model, [ids], pooling, 1)[0][0] for ids in inputs]
    f32_kv, _ = run(model, inputs, pooling, 0)
    no_flash, _ = run(model, inputs, pooling, 1, 0)
    d1, c1 = compare(batched, single)
    d2, c2 = compare(batched, f32_kv)
    d3, c3 = compare(batched, no_flash)
    name_of = {v: k for k, v in POOLING.items()}
    cases.append({
        "name": name, "model": path.rsplit("/", 1)[-1], "pooling": name_of[used],
        "pooling_from_file": pooling == -1, "texts": texts, "inputs": inputs,
        # [input][row][value]: one row per input, or per token for pooling none.
        "embeddings": rounded(batched),
        "embeddings_f32_kv": rounded(f32_kv),
        "embeddings_f16_kv_flash_off": rounded(no_flash),
        "spread": {"batch_vs_single_max_abs": d1, "batch_vs_single_min_cos": c1,
                   "f16_vs_f32_kv_max_abs": d2, "f16_vs_f32_kv_min_cos": c2,
                   "flash_on_vs_off_max_abs": d3, "flash_on_vs_off_min_cos": c3},
    })
    print(name, name_of[used], cases[-1]["spread"], file=sys.stderr)
    L.llama_model_free(model)
json.dump({"reference": f"llama-cpp-python {L.__version__}", "cases": cases}, open(out_path, "w"))
