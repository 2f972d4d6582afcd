"""What the qwen35 fixture scripts (qwen35-reference.py, qwen35-mtp-reference.py) share: each model
synthesised by `oxibonsai synth --arch qwen35`, hashed, loaded by the reference engine, its logits
computed two ways plus once with an f32 KV cache, and written with a manifest the engine's tests read
(`crates/cli/tests/common/qwen35_fixture.rs`): the synth arguments, the file's SHA-256 (the tests
synthesise again and check it, so model and logits belong together), the tokens, and the reference's
variation against itself in σ (golden/README.md's criterion), from which the tests derive bounds."""
import hashlib, json, subprocess, tempfile
from pathlib import Path

import numpy as np
import llama_cpp as L

from llama_reference import load


def sigma_diff(a, r):
    """Worst max and mean |Δ|/σ over positions of centred logits (golden/README.md's criterion)."""
    worst_max = worst_mean = 0.0
    for x, y in zip(a.astype(np.float64), r.astype(np.float64)):
        d = np.abs((x - x.mean()) - (y - y.mean())); s = y.std()
        worst_max = max(worst_max, d.max() / s); worst_mean = max(worst_mean, d.mean() / s)
    return worst_max, worst_mean


def write(binary, out, tokens, models, layout, logits):
    """`models`: name -> (synth arguments, what the model exercises); `logits(model)` returns the
    reference's (prefill, decode, prefill with an f32 KV cache) rows, each [len(tokens)][n_vocab].
    Writes OUT/<name>.f32 — prefill rows then decode rows — and OUT/manifest.json."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    manifest = {"tokens": tokens, "layout": layout, "reference": f"llama-cpp-python {L.__version__}",
                "models": {}}
    with tempfile.TemporaryDirectory() as tmp:
        for name, (args, what) in models.items():
            path = Path(tmp) / f"{name}.gguf"
            subprocess.run([binary, "synth", "--arch", "qwen35", *args, "-o", str(path)], check=True)
            sha = hashlib.sha256(path.read_bytes()).hexdigest()
            model = load(str(path))
            n_vocab = L.llama_vocab_n_tokens(L.llama_model_get_vocab(model))
            prefill, decode, prefill_f32kv = logits(model)
            L.llama_model_free(model)
            variation = [sigma_diff(decode, prefill), sigma_diff(prefill_f32kv, prefill)]
            self_max = max(v[0] for v in variation); self_mean = max(v[1] for v in variation)
            np.concatenate([prefill, decode]).astype("<f4").tofile(out / f"{name}.f32")
            manifest["models"][name] = {"synth_args": args, "what": what, "sha256": sha, "n_vocab": n_vocab,
                                        "logits": f"{name}.f32", "self_max_sigma": self_max,
                                        "self_mean_sigma": self_mean}
            print(f"{name}: decode vs prefill {variation[0][0]:.2e}/{variation[0][1]:.2e} σ, "
                  f"f32 KV {variation[1][0]:.2e}/{variation[1][1]:.2e} σ (max/mean)")
    (out / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")
