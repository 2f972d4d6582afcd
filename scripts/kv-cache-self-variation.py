"""The reference engine's variation against itself with its KV cache in each cache type, from which
the KV-cache parity test on SmolLM2 (crates/engine/tests/kv_cache_types.rs) takes its bounds.

Why not the micro-batch split as for the synthetic model: on SmolLM2 the reference is bit-identical
against itself under micro-batch and thread changes, so that gives no bound, while any other correct
engine differs from it by float-order noise (a sum's order moves a result by an ulp or so) that
Q4_1's Q8_1 activations and the cache's requantization amplify layer by layer: a rounding that
flips one int8 code or one cache code moves everything downstream of it. So the reference is given
an input that differs from the tokens' own by that noise — each value of the token embeddings (Q8_0,
dequantized here bit for bit as ggml's get_rows does: an f16 scale times an int8) moved one f32 ulp
up or down at random, fed as `llama_batch.embd` — and its logits with each seed are compared with
its logits from the tokens under golden/README.md's criterion (centred logits, σ of the reference's
own logits at each position; the same top token wherever its top-2 gap exceeds 0.5 σ). The
unperturbed embeddings give the tokens' logits bit for bit (checked on the first type of a run): the
input path is the same computation. The worst over the seeds, per cache type, is the
reference's self-variation; the test's bounds are max(floor, 1.5 × it), the golden files' rule.

OUT.json is updated in place: types not run keep their entries.

usage: PY scripts/kv-cache-self-variation.py MODEL.gguf TEXT N SEEDS OUT.json TYPE [TYPE ...]
  SEEDS: N (seeds 0..N) or FROM:TO (seeds FROM..TO appended to each type's recorded 0..FROM)
PY: ~/.cache/oxibonsai-peer/venv/bin/python (llama-cpp-python 0.3.36, gguf-py).
"""
import ctypes, json, sys, time

import numpy as np
import gguf
import llama_cpp as L
from llama_reference import load, tokenize

GGML_TYPES = {"f32": 0, "f16": 1, "q4_0": 2, "q4_1": 3, "q5_0": 6, "q5_1": 7, "q8_0": 8, "iq4_nl": 20, "bf16": 30}

model_path, text_path, n_tokens, out_path = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[5]
# SEEDS: N (seeds 0..N) or FROM:TO (seeds FROM..TO added to a type's recorded ones).
first_seed, n_seeds = (int(x) for x in sys.argv[4].split(":")) if ":" in sys.argv[4] else (0, int(sys.argv[4]))
types = sys.argv[6:]

model = load(model_path)
vocab = L.llama_model_get_vocab(model)
n_vocab = L.llama_vocab_n_tokens(vocab)
n_embd = L.llama_model_n_embd(model)
tokens = tokenize(vocab, open(text_path, "rb").read())[:n_tokens]
assert len(tokens) == n_tokens, f"the text has {len(tokens)} tokens, {n_tokens} asked"

reader = gguf.GGUFReader(model_path)
embd_tensor = next(t for t in reader.tensors if t.name == "token_embd.weight")
table = gguf.quants.dequantize(embd_tensor.data, embd_tensor.tensor_type).reshape(-1, n_embd).astype(np.float32)
embeddings = np.ascontiguousarray(table[tokens])


def logits(ggml_type, embd=None):
    """Teacher-forced logits, one micro-batch, flash attention on except for f32 (as
    kv-cache-reference.py runs them); from the tokens, or from `embd` ([N][n_embd] f32)."""
    cp = L.llama_context_default_params()
    cp.n_ctx = n_tokens; cp.n_batch = n_tokens; cp.n_ubatch = n_tokens
    cp.n_threads = 2; cp.n_threads_batch = 2
    cp.type_k = cp.type_v = ggml_type
    cp.flash_attn_type = 0 if ggml_type == 0 else 1
    ctx = L.llama_init_from_model(model, cp)
    assert ctx, f"cannot make a context of cache type {ggml_type}"
    batch = L.llama_batch_init(n_tokens, 0 if embd is None else n_embd, 1); batch.n_tokens = n_tokens
    if embd is not None:
        ctypes.memmove(batch.embd, embd.ctypes.data, embd.nbytes)
    for j, t in enumerate(tokens):
        if embd is None:
            batch.token[j] = t
        batch.pos[j] = j; batch.n_seq_id[j] = 1; batch.seq_id[j][0] = 0
        batch.logits[j] = 1
    assert L.llama_decode(ctx, batch) == 0
    out = np.ctypeslib.as_array(L.llama_get_logits(ctx), shape=(n_tokens, n_vocab)).astype(np.float64)
    L.llama_batch_free(batch)
    L.llama_free(ctx)
    return out


def compare(ours, ref):
    """golden/README.md's criterion, as oxibonsai_testkit::parity::compare: (worst max σ, worst
    mean σ, positions whose top token differs where the reference's top-2 gap exceeds 0.5 σ)."""
    a = ours - ours.mean(axis=1, keepdims=True)
    r = ref - ref.mean(axis=1, keepdims=True)
    sigma = np.sqrt((r * r).mean(axis=1))
    d = np.abs(a - r) / sigma[:, None]
    top2 = np.sort(ref, axis=1)[:, -2:]
    gap = (top2[:, 1] - top2[:, 0]) / sigma
    flips = np.nonzero((gap > 0.5) & (ours.argmax(axis=1) != ref.argmax(axis=1)))[0]
    return float(d.max(axis=1).max()), float(d.mean(axis=1).max()), [int(p) for p in flips]


def perturbed(seed):
    rng = np.random.default_rng(seed)
    up = rng.integers(0, 2, size=embeddings.shape).astype(bool)
    return np.where(up, np.nextafter(embeddings, np.float32(np.inf)),
                    np.nextafter(embeddings, np.float32(-np.inf))).astype(np.float32)


try:
    result = json.load(open(out_path))["types"]
except FileNotFoundError:
    result = {}
for i, name in enumerate(types):
    t0 = time.time()
    ref = logits(GGML_TYPES[name])
    if i == 0:
        same = logits(GGML_TYPES[name], embeddings)
        assert np.array_equal(ref, same), f"{name}: the embeddings' logits differ from the tokens' by {compare(same, ref)}"
    seeds = [compare(logits(GGML_TYPES[name], perturbed(s)), ref) for s in range(first_seed, n_seeds)]
    seeds = [{"max_sigma": round(m, 4), "mean_sigma": round(a, 4), "top1_mismatches": f} for m, a, f in seeds]
    if first_seed > 0:
        assert len(result[name]["seeds"]) == first_seed, f"{name} has not seeds 0..{first_seed} recorded"
        seeds = result[name]["seeds"] + seeds
    result[name] = {
        "seeds": seeds,
        "max_sigma": max(s["max_sigma"] for s in seeds),
        "mean_sigma": max(s["mean_sigma"] for s in seeds),
    }
    print(f"{name}: {result[name]} ({time.time() - t0:.0f} s)", file=sys.stderr, flush=True)
    json.dump({
        "model": model_path.rsplit("/", 1)[-1],
        "text": text_path,
        "positions": n_tokens,
        "seeds": "per type: len(types.T.seeds)",
        "perturbation": "every token-embedding value one f32 ulp up or down at random (numpy default_rng(seed), seeds 0..SEEDS-1), fed as llama_batch.embd",
        "reference": "llama-cpp-python 0.3.36, one micro-batch, 2 threads, flash attention on (off for f32), use_extra_bufts off",
        "made_by": "scripts/kv-cache-self-variation.py MODEL TEXT N SEEDS OUT TYPE...",
        "types": result,
    }, open(out_path, "w"), indent=1)
