"""The reference engine's perplexity, computed as llama-perplexity does (chunks of n_ctx tokens from
an empty cache, BOS first when the vocabulary adds one, the second half of each chunk scored) from
llama-cpp-python's teacher-forced logits — with the KV cache in f16 (llama.cpp's default) and in f32,
whose difference is the reference's own spread. (Flash attention off and on are
run too: with it on, this build keeps the keys in f16 whatever the cache type.) Writes the fixture tests/fixtures/perplexity/*.json.

With --kld-base BASE.gguf (SmolLM2's f16 for the quantization table), BASE is evaluated first with
the reference's defaults and its scored rows kept as llama-perplexity's --kl-divergence-base file
holds them (log-probabilities quantized to 16 bits); each run of MODEL then adds the KL divergence
against them and the same-top share, computed as llama-perplexity's --kl-divergence does. With
--settings default,f32 only those two runs (f16 cache with flash attention chosen automatically; f32
cache without) are made; --settings q8_0,q4_0 (any of bf16, q8_0, q4_0, q4_1, q5_0, q5_1, iq4_nl) runs those
cache types for keys and values with flash attention (with --kld-base MODEL itself: each type's KL
divergence from the reference's own f16 cache).

usage: PY scripts/perplexity-reference.py [--kld-base BASE.gguf] [--settings default,f32]
          MODEL.gguf TEXT OUT.json CTX:CHUNKS [CTX:CHUNKS ...]
PY: the Python that ../shared/peer/build-llama-cpp.sh prints.
"""
import ctypes, hashlib, json, sys
import numpy as np
import llama_cpp as L
from llama_reference import load, tokenize

args = sys.argv[1:]
kld_base_path = None
settings = [("f16", 1, -1), ("f32", 0, 0), ("f16", 1, 0)]
while args and args[0].startswith("--"):
    flag, value = args[0], args[1]
    args = args[2:]
    if flag == "--kld-base":
        kld_base_path = value
    elif flag == "--settings":
        named = {"default": settings[0], "f32": settings[1], "f16-noflash": settings[2]}
        # The quantized cache types (keys and values alike), with the flash attention a quantized
        # V needs: the reference's own KL divergence from its f16 cache for the KV-cache table.
        named.update({t: (t, i, 1) for t, i in (("bf16", 30), ("q8_0", 8), ("q4_0", 2),
                      ("q4_1", 3), ("q5_0", 6), ("q5_1", 7), ("iq4_nl", 20))})
        settings = [named[v] for v in value.split(",")]
    else:
        sys.exit(f"unknown option {flag}")
model_path, text_path, out_path = args[:3]
runs = [tuple(int(v) for v in a.split(":")) for a in args[3:]]
raw = open(text_path, "rb").read()
text = raw.decode("utf-8")

model = load(model_path)
vocab = L.llama_model_get_vocab(model)
n_vocab = L.llama_vocab_n_tokens(vocab)
add_bos = L.llama_vocab_get_add_bos(vocab)
bos = L.llama_vocab_bos(vocab)
tokens = tokenize(vocab, raw)


def nll(row, tok):
    m = np.float32(row.max())
    sum_exp = float(np.exp(row - m, dtype=np.float32).astype(np.float64).sum())
    return -(float(np.float32(row[tok] - m)) - np.log(sum_exp))


def scored_rows(model, n_ctx, n_chunk, cache_type, flash):
    """Yields (chunk, position, logits row, next token) for every scored position."""
    cp = L.llama_context_default_params()
    cp.n_ctx = n_ctx; cp.n_batch = n_ctx; cp.n_ubatch = n_ctx; cp.n_threads = 2; cp.n_threads_batch = 2
    cp.type_k = cp.type_v = cache_type
    cp.flash_attn_type = flash
    ctx = L.llama_init_from_model(model, cp)
    first = n_ctx // 2
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
            yield i, j, row, own[j + 1]
        L.llama_batch_free(batch)
    L.llama_free(ctx)


def encode_base(row):
    """llama-perplexity's log_softmax(.., uint16_t * log_prob, ..): (scale, min_log_prob, u16 row)."""
    mx = np.float32(row.max())
    mn = max(np.float32(row.min()), np.float32(mx - np.float32(16)))
    sum_exp = float(np.exp(row - mx, dtype=np.float32).astype(np.float64).sum())
    log_sum_exp = np.float32(np.log(sum_exp))
    min_log_prob = np.float32(mn - mx - log_sum_exp)
    scale = np.float32((mx - mn) / np.float32(65535.0))
    q = np.zeros(n_vocab, dtype=np.uint16)
    if scale != 0:
        inv = np.float32(1) / scale
        v = np.rint((inv * (row - mn)).astype(np.float32))  # nearest_int: round half to even
        q = np.where(row > mn, v, 0).astype(np.uint16)
    return scale, min_log_prob, q


def kld_row(row, base, tok):
    """llama-perplexity's log_softmax(.., const uint16_t * base_log_prob, ..): KL(base || row) and
    whether the top tokens agree."""
    scale, min_log_prob, q = base
    mx = np.float32(row.max())
    imax = int(row.argmax())
    sum_exp = float(np.exp(row - mx, dtype=np.float32).astype(np.float64).sum())
    max_logit = np.float32(mx + np.float32(np.log(sum_exp)))
    p_log_base = (scale * q.astype(np.float32) + min_log_prob).astype(np.float32)
    imax_base = int(p_log_base.argmax())
    keep = p_log_base > np.float32(-16)
    p_base = np.exp(p_log_base[keep], dtype=np.float32)
    terms = (p_base * (p_log_base[keep] - row[keep] + max_logit)).astype(np.float64)
    return float(terms.sum()), imax == imax_base


bases = {}
if kld_base_path:
    base_model = load(kld_base_path)
    for n_ctx, n_chunks in runs:
        n_chunk = min(n_chunks, len(tokens) // n_ctx)
        bases[n_ctx] = [encode_base(row) for _, _, row, _ in scored_rows(base_model, n_ctx, n_chunk, 1, -1)]
    L.llama_model_free(base_model)

results = []
for n_ctx, n_chunks in runs:
    for cache, ggml_type, flash in settings:
        n_chunk = min(n_chunks, len(tokens) // n_ctx)
        s = s2 = 0.0
        count = 0
        kld = kld2 = 0.0
        same_top = 0
        for i, j, row, nxt in scored_rows(model, n_ctx, n_chunk, ggml_type, flash):
            v = nll(row, nxt)
            s += v
            s2 += v * v
            if n_ctx in bases:
                d, same = kld_row(row, bases[n_ctx][count], nxt)
                kld += d; kld2 += d * d; same_top += same
            count += 1
        mean = s / count
        ppl = float(np.exp(mean))
        var = s2 / count - mean * mean
        err = float(np.sqrt(var / (count - 1)) * ppl)
        results.append({"n_ctx": n_ctx, "chunks": n_chunk, "kv_cache": cache,
                        "flash_attn": {-1: "auto", 0: "off", 1: "on"}[flash], "ppl": ppl,
                        "ppl_error": err, "tokens_scored": count, "n_tokens": len(tokens)})
        if n_ctx in bases:
            # llama-perplexity's mean KLD ± error and same-top share ± error.
            m = kld / count
            results[-1]["kld"] = m
            results[-1]["kld_error"] = float(np.sqrt(max(kld2 / count - m * m, 0) / (count - 1)))
            p = same_top / count
            results[-1]["same_top"] = p
            results[-1]["same_top_error"] = float(np.sqrt(p * (1 - p) / (count - 1)))
        print(results[-1], file=sys.stderr)
out = {"model": model_path.rsplit("/", 1)[-1], "text_sha256": hashlib.sha256(raw).hexdigest(),
       "text_bytes": len(raw), "reference": f"llama-cpp-python {L.__version__}", "runs": results}
if kld_base_path:
    out["kld_base"] = kld_base_path.rsplit("/", 1)[-1]
json.dump(out, open(out_path, "w"), indent=1)
