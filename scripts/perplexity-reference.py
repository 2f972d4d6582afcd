"""The reference engine's perplexity, computed as llama-perplexity does (chunks of n_ctx tokens from
an empty cache, BOS first when the vocabulary adds one, the second half of each chunk scored) from
llama-cpp-python's teacher-forced logits — with the KV cache in f16 (llama.cpp's default) and in f32,
whose difference is the reference's own spread. (Flash attention off and on are
run too: with it on, this build keeps the keys in f16 whatever the cache type.) Writes the fixture tests/fixtures/perplexity/*.json.

usage: PY scripts/perplexity-reference.py MODEL.gguf TEXT OUT.json CTX:CHUNKS [CTX:CHUNKS ...]
PY: the Python that ../shared/peer/build-llama-cpp.sh prints.
"""
import ctypes, hashlib, json, sys
import numpy as np
import llama_cpp as L

model_path, text_path, out_path = sys.argv[1:4]
runs = [tuple(int(v) for v in a.split(":")) for a in sys.argv[4:]]
raw = open(text_path, "rb").read()
text = raw.decode("utf-8")

_quiet = L.llama_log_callback(lambda level, t, data: None)
L.llama_log_set(_quiet, None)
L.llama_backend_init()
mp = L.llama_model_default_params()
# This build's repacked CPU weights (AVX-512, "extra buffer types") crash on SmolLM2 Q4_1 with a
# segmentation fault in llama_decode; the plain CPU path computes the same products.
mp.use_extra_bufts = False
model = L.llama_model_load_from_file(model_path.encode(), mp)
if not model:
    sys.exit(f"cannot load {model_path}")
vocab = L.llama_model_get_vocab(model)
n_vocab = L.llama_vocab_n_tokens(vocab)
add_bos = L.llama_vocab_get_add_bos(vocab)
bos = L.llama_vocab_bos(vocab)
# common_tokenize(ctx, text, add_special=true, parse_special=false)
buf = (L.llama_token * (len(raw) + 16))()
k = L.llama_tokenize(vocab, raw, len(raw), buf, len(raw) + 16, True, False)
assert k > 0, k
tokens = list(buf[:k])


def nll(row, tok):
    m = np.float32(row.max())
    sum_exp = float(np.exp(row - m, dtype=np.float32).astype(np.float64).sum())
    return -(float(np.float32(row[tok] - m)) - np.log(sum_exp))


results = []
for n_ctx, n_chunks in runs:
    for cache, ggml_type, flash in (("f16", 1, -1), ("f32", 0, 0), ("f16", 1, 0)):
        cp = L.llama_context_default_params()
        cp.n_ctx = n_ctx; cp.n_batch = n_ctx; cp.n_ubatch = n_ctx; cp.n_threads = 2; cp.n_threads_batch = 2
        cp.type_k = cp.type_v = ggml_type
        cp.flash_attn_type = flash
        ctx = L.llama_init_from_model(model, cp)
        n_chunk = min(n_chunks, len(tokens) // n_ctx)
        first = n_ctx // 2
        s = s2 = 0.0
        count = 0
        for i in range(n_chunk):
            own = tokens[i * n_ctx:(i + 1) * n_ctx]
            chunk = list(own)
            if add_bos:
                chunk[0] = bos
            L.llama_memory_clear(L.llama_get_memory(ctx), True)
            batch = L.llama_batch_init(n_ctx, 0, 1); batch.n_tokens = n_ctx
            for j, t in enumerate(chunk):
                batch.token[j] = t; batch.pos[j] = j; batch.n_seq_id[j] = 1; batch.seq_id[j][0] = 0
                batch.logits[j] = 1 if j >= first else 0
            assert L.llama_decode(ctx, batch) == 0
            for j in range(first, n_ctx - 1):
                row = np.ctypeslib.as_array(L.llama_get_logits_ith(ctx, j), shape=(n_vocab,)).astype(np.float32)
                v = nll(row, own[j + 1])
                s += v
                s2 += v * v
                count += 1
            L.llama_batch_free(batch)
        L.llama_free(ctx)
        mean = s / count
        ppl = float(np.exp(mean))
        var = s2 / count - mean * mean
        err = float(np.sqrt(var / (count - 1)) * ppl)
        results.append({"n_ctx": n_ctx, "chunks": n_chunk, "kv_cache": cache,
                        "flash_attn": {-1: "auto", 0: "off", 1: "on"}[flash], "ppl": ppl,
                        "ppl_error": err, "tokens_scored": count, "n_tokens": len(tokens)})
        print(results[-1], file=sys.stderr)
json.dump({"model": model_path.rsplit("/", 1)[-1], "text_sha256": hashlib.sha256(raw).hexdigest(),
           "text_bytes": len(raw), "reference": f"llama-cpp-python {L.__version__}",
           "runs": results}, open(out_path, "w"), indent=1)
