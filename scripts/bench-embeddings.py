"""Embeddings per second, oxibonsai vs llama-cpp-python, on the same model and inputs, same run:
N inputs of about L tokens each (mean pooling), all in one batched pass each (llama-embedding's way:
a unified KV cache, one sequence per input), T threads, runs alternating between the engines.
Only the embedding is timed (the model is loaded outside the timing on both sides).

usage: PY scripts/bench-embeddings.py OXIBONSAI_BIN MODEL.gguf [--inputs 64] [--tokens 32]
       [--threads 2] [--reps 5]
PY: $HOME/.cache/oxibonsai-peer/venv/bin/python
"""
import argparse, re, statistics, subprocess, time
import numpy as np
import llama_cpp as L

ap = argparse.ArgumentParser()
ap.add_argument("bin"); ap.add_argument("model")
ap.add_argument("--inputs", type=int, default=64); ap.add_argument("--tokens", type=int, default=32)
ap.add_argument("--threads", type=int, default=2); ap.add_argument("--reps", type=int, default=5)
a = ap.parse_args()

_quiet = L.llama_log_callback(lambda level, t, data: None)
L.llama_log_set(_quiet, None)
L.llama_backend_init()
mp = L.llama_model_default_params(); mp.use_extra_bufts = False
model = L.llama_model_load_from_file(a.model.encode(), mp)
vocab = L.llama_model_get_vocab(model)
n_vocab = L.llama_vocab_n_tokens(vocab)
rng = np.random.default_rng(27)
# Ordinary token ids (skip the first thousand: specials and bytes), a fixed length each.
inputs = [[int(t) for t in rng.integers(1000, n_vocab, size=a.tokens)] for _ in range(a.inputs)]
n = sum(map(len, inputs))

n_embd = L.llama_model_n_embd(model)
k = len(inputs)


def context(unified):
    cp = L.llama_context_default_params()
    cp.n_ctx = -(-n // k) * k; cp.n_batch = cp.n_ctx; cp.n_ubatch = cp.n_ctx; cp.n_seq_max = k
    cp.n_threads = a.threads; cp.n_threads_batch = a.threads
    cp.embeddings = True; cp.pooling_type = 1; cp.kv_unified = unified
    return L.llama_init_from_model(model, cp)


# llama-embedding's setting (a unified cache: every token attends over the whole batch, masked),
# and a cache per sequence (right here because every input has the same length).
contexts = {"llama-cpp-python (unified KV)": context(True), "llama-cpp-python (KV per sequence)": context(False)}
batch = L.llama_batch_init(n, 0, k); batch.n_tokens = n
j = 0
for s, ids in enumerate(inputs):
    for p, t in enumerate(ids):
        batch.token[j] = t; batch.pos[j] = p; batch.n_seq_id[j] = 1; batch.seq_id[j][0] = s
        batch.logits[j] = 1; j += 1


def reference(ctx):
    L.llama_memory_clear(L.llama_get_memory(ctx), True)
    t = time.perf_counter()
    assert L.llama_decode(ctx, batch) == 0
    out = [np.ctypeslib.as_array(L.llama_get_embeddings_seq(ctx, s), shape=(n_embd,)).copy() for s in range(k)]
    return time.perf_counter() - t, out


def ours():
    args = [a.bin, "embed", "-m", a.model, "--pooling", "mean", "-t", str(a.threads), "-b", str(n)]
    for ids in inputs:
        args += ["--tokens", ",".join(map(str, ids))]
    r = subprocess.run(args, capture_output=True, text=True, check=True)
    m = re.search(r"in ([0-9.]+) s", r.stderr)
    return float(m.group(1))


for ctx in contexts.values():
    reference(ctx)
ours()  # warm-up
rates = {"oxibonsai": []} | {name: [] for name in contexts}
for _ in range(a.reps):
    rates["oxibonsai"].append(k / ours())
    for name, ctx in contexts.items():
        rates[name].append(k / reference(ctx)[0])
print(f"{k} inputs x {a.tokens} tokens, mean pooling, {a.threads} threads, {a.reps} alternating runs")
print("| engine | embeddings/s | sd |")
print("|---|---|---|")
for name, r in rates.items():
    print(f"| {name} | {statistics.mean(r):.1f} | {statistics.stdev(r):.1f} |")
best = max(statistics.mean(r) for name, r in rates.items() if name != "oxibonsai")
print(f"ratio to the faster reference setting: {statistics.mean(rates['oxibonsai']) / best:.2f}x")
