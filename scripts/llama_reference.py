"""The reference engine (llama-cpp-python's low-level API) as the reference scripts open it: logging
off, the plain CPU path, a model loaded or a clear exit, text tokenized as llama.cpp's tools do."""
import sys

import llama_cpp as L

_quiet = L.llama_log_callback(lambda level, t, data: None)
L.llama_log_set(_quiet, None)
L.llama_backend_init()
MODEL_PARAMS = L.llama_model_default_params()
# This build's repacked CPU weights ("extra buffer types", AVX-512) crash on some files (SmolLM2
# Q4_1) with a segmentation fault in llama_decode; the plain CPU path computes the same products.
MODEL_PARAMS.use_extra_bufts = False


def load(path):
    m = L.llama_model_load_from_file(path.encode(), MODEL_PARAMS)
    if not m:
        sys.exit(f"cannot load {path}")
    return m


def tokenize(vocab, raw):
    """common_tokenize(ctx, text, add_special=true, parse_special=false)."""
    buf = (L.llama_token * (len(raw) + 16))()
    k = L.llama_tokenize(vocab, raw, len(raw), buf, len(raw) + 16, True, False)
    assert k > 0, k
    return list(buf[:k])
