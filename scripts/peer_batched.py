"""The reference engine's batched decode, as `oxibonsai bench -s S` measures ours: S sequences
advance together, one llama_decode per step holding one token of each sequence (each with its
logits), N counted steps after one uncounted step at position 0. Through llama.cpp's C API as
packaged in llama-cpp-python 0.3.36 (the peer venv of ../shared/peer/build-llama-cpp.sh), or, with
--ik, ik_llama.cpp's prebuilt wheel (ik-llama-cpp-python==0.1.5, as ../shared/peer/bench_ik.py).
Reports aggregate tokens/s (S × N ÷ seconds), mean ± sd over repetitions, per S.

With -d D every sequence starts with the same D tokens of context (llama-bench's -d), prefilled
before each measurement and not counted (each sequence's own: the cache of this llama.cpp build
copies between sequences only in its unified layout).

usage: PEER_PY scripts/peer_batched.py MODEL.gguf [-s 1,8] [-n 128] [-d 0] [-t 2] [-r 3] [--ik] [--json]
"""
import argparse
import json
import statistics
import sys
import time

import numpy as np

ap = argparse.ArgumentParser()
ap.add_argument("model")
ap.add_argument("-s", default="1,8", help="sequences decoded together (comma-separated list)")
ap.add_argument("-n", type=int, default=128, help="counted steps")
ap.add_argument("-d", type=int, default=0, help="tokens of context before each measurement")
ap.add_argument("-t", type=int, default=2, help="threads")
ap.add_argument("-r", type=int, default=3, help="repetitions (the S values interleaved)")
ap.add_argument("--ik", action="store_true", help="ik_llama.cpp's wheel instead of llama-cpp-python")
ap.add_argument("--json", action="store_true")
a = ap.parse_args()
if a.ik:
    import ik_llama_cpp._ctypes_api as L
    ENGINE = "ik_llama.cpp (ik-llama-cpp-python 0.1.5)"
    clear = lambda: L.llama_kv_cache_clear(ctx)
else:
    import llama_cpp as L
    ENGINE = "llama.cpp (llama-cpp-python 0.3.36)"
    clear = lambda: L.llama_memory_clear(L.llama_get_memory(ctx), True)
sizes = [int(s) for s in a.s.split(",")]

if not a.ik:
    _quiet = L.llama_log_callback(lambda level, text, data: None)
    L.llama_log_set(_quiet, None)
L.llama_backend_init()
model = L.llama_model_load_from_file(a.model.encode(), L.llama_model_default_params())
if not model:
    sys.exit(f"cannot load {a.model}")
n_vocab = L.llama_vocab_n_tokens(L.llama_model_get_vocab(model))
s_max = max(sizes)
cp = L.llama_context_default_params()
# Every sequence gets the same room: the unified cache holds s_max × (n + 16) positions.
cp.n_ctx = s_max * (a.d + a.n + 16)
cp.n_seq_max = s_max
cp.n_batch = max(s_max, 512 if a.d else 32)
cp.n_ubatch = cp.n_batch
cp.n_threads = a.t
cp.n_threads_batch = a.t
if a.ik:
    # Its flash-attention kernel asserts on this batch shape (one token of each of S sequences).
    cp.flash_attn = False
ctx = L.llama_init_from_model(model, cp)
if not ctx:
    sys.exit("cannot create a context")
rng = np.random.default_rng(0)
batch = L.llama_batch_init(max(s_max, cp.n_batch), 0, s_max)


def decode(rows, what):
    """One llama_decode of `rows`: (token, position, sequence, wants logits) each."""
    batch.n_tokens = len(rows)
    for i, (t, pos, seq, logits) in enumerate(rows):
        batch.token[i] = int(t)
        batch.pos[i] = pos
        batch.n_seq_id[i] = 1
        batch.seq_id[i][0] = seq
        batch.logits[i] = logits
    rc = L.llama_decode(ctx, batch)
    if rc != 0:
        sys.exit(f"llama_decode returned {rc} ({what})")
    if not a.ik:  # ik's binding has no llama_synchronize; on the CPU its decode returns when done
        L.llama_synchronize(ctx)


def step(tokens, pos):
    """One step: token i of sequence i at position `pos`, logits for every row."""
    decode([(t, pos, i, True) for i, t in enumerate(tokens)], f"S = {len(tokens)}, position {pos}")


def prefill(seq, tokens):
    """The context of sequence `seq`, in batches of n_batch tokens, no logits."""
    for p0 in range(0, len(tokens), cp.n_batch):
        chunk = tokens[p0:p0 + cp.n_batch]
        decode([(t, p0 + i, seq, False) for i, t in enumerate(chunk)], f"prefill of sequence {seq}")


def context(s):
    """Every one of the s sequences holds a.d tokens of context."""
    if not a.d:
        return
    tokens = rng.integers(0, n_vocab, a.d)
    for i in range(s):
        prefill(i, tokens)


step(rng.integers(0, n_vocab, s_max), 0)  # warm-up: page in the weights
clear()
runs = {s: [] for s in sizes}
for _ in range(a.r):
    for s in sizes:
        context(s)
        step(rng.integers(0, n_vocab, s), a.d)
        t0 = time.perf_counter()
        for p in range(1, a.n + 1):
            step(rng.integers(0, n_vocab, s), a.d + p)
        runs[s].append(s * a.n / (time.perf_counter() - t0))
        clear()
L.llama_batch_free(batch)

sd = lambda x: statistics.stdev(x) if len(x) > 1 else 0.0
base = runs[sizes[0]]
for s in sizes:
    ratio = [x / b for x, b in zip(runs[s], base)]
    res = {"engine": ENGINE, "model": a.model, "threads": a.t,
           "sequences": s, "depth": a.d, "steps": a.n, "reps": a.r,
           "tg_tokens_per_s": statistics.mean(runs[s]), "tg_sd": sd(runs[s]),
           "ratio_to_first": statistics.mean(ratio), "ratio_sd": sd(ratio)}
    print(json.dumps(res) if a.json else
          f"S = {s:>2}: {res['tg_tokens_per_s']:8.2f} ± {res['tg_sd']:.2f} t/s   "
          f"× {res['ratio_to_first']:.2f} ± {res['ratio_sd']:.2f} of S = {sizes[0]}   ({a.t} threads)")
