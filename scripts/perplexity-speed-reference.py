"""The reference engine's perplexity throughput, evaluated as llama-perplexity evaluates (its
defaults: -b 2048, so 2048 / n_ctx chunks side by side in one batch, each its own sequence from an
empty cache, BOS first when the vocabulary adds one, logits only for the second half of each chunk;
f16 KV cache, flash attention chosen automatically). Only the evaluation is timed (tokenizing,
loading and scoring are not). Prints one JSON line: tokens evaluated, seconds, tokens/s.

usage: PY scripts/perplexity-speed-reference.py MODEL.gguf TEXT N_CTX CHUNKS THREADS
PY: the Python that ../shared/peer/build-llama-cpp.sh prints. CHUNKS 0: every whole chunk.
"""
import json, os, sys, time
import llama_cpp as L
from llama_reference import load, tokenize

model_path, text_path = sys.argv[1:3]
n_ctx, n_chunks, threads = (int(v) for v in sys.argv[3:6])
raw = open(text_path, "rb").read()

model = load(model_path)
vocab = L.llama_model_get_vocab(model)
add_bos = L.llama_vocab_get_add_bos(vocab)
bos = L.llama_vocab_bos(vocab)
tokens = tokenize(vocab, raw)
n_chunk = len(tokens) // n_ctx if n_chunks == 0 else min(n_chunks, len(tokens) // n_ctx)

# llama-perplexity's main(): n_parallel = n_batch / n_ctx, the context holds them all.
n_batch = int(os.environ.get("N_BATCH", "2048"))  # llama-perplexity's -b
n_seq = max(1, n_batch // n_ctx)
cp = L.llama_context_default_params()
cp.n_ctx = n_seq * n_ctx
cp.n_batch = min(n_batch, cp.n_ctx)
cp.n_seq_max = n_seq
cp.n_threads = cp.n_threads_batch = threads
ctx = L.llama_init_from_model(model, cp)
first = n_ctx // 2
batch = L.llama_batch_init(n_seq * n_ctx, 0, n_seq)
seconds = 0.0
for i in range(0, n_chunk, n_seq):
    n_seq_batch = min(n_seq, n_chunk - i)
    batch.n_tokens = n_seq_batch * n_ctx
    for s in range(n_seq_batch):
        chunk = tokens[(i + s) * n_ctx:(i + s + 1) * n_ctx]
        if add_bos:
            chunk[0] = bos
        for j, t in enumerate(chunk):
            b = s * n_ctx + j
            batch.token[b] = t; batch.pos[b] = j; batch.n_seq_id[b] = 1; batch.seq_id[b][0] = s
            batch.logits[b] = 1 if j >= first else 0
    started = time.perf_counter()
    L.llama_memory_clear(L.llama_get_memory(ctx), True)
    assert L.llama_decode(ctx, batch) == 0
    L.llama_synchronize(ctx)
    seconds += time.perf_counter() - started
L.llama_batch_free(batch)
L.llama_free(ctx)
n = n_chunk * n_ctx
print(json.dumps({"tokens_evaluated": n, "seconds": seconds, "tokens_per_s": n / seconds,
                  "chunks": n_chunk, "n_seq": n_seq}))
