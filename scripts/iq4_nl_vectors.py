#!/usr/bin/env python3
"""Known-answer vectors for IQ4_NL (GGUF type 20) from the reference engine's own C functions.

golden/quant/ has no iq4_nl.json, so this writes tests/fixtures/quant/iq4_nl.json (repository root) in the same
schema (see golden/README.md), on the inputs and activations of golden/quant/q4_0.json's cases,
through llama-cpp-python 0.3.36's ggml libraries (ctypes):
  quantized        ggml_quantize_chunk(IQ4_NL, …, no imatrix): quantize_iq4_nl, 7 scale tries
  from_float       quantize_row_iq4_nl_ref per row: the CPU backend's `from_float`, which is what
                   a llama.cpp KV cache of type iq4_nl stores (no scale search)
  dequantized_f32  dequantize_row_iq4_nl
  dot              the activation through the CPU backend's quantize_row_q8_0, then
                   ggml_vec_dot_iq4_nl_q8_0 over all values; abs_sum over dequantized values
Run: ~/.cache/oxibonsai-peer/venv/bin/python scripts/iq4_nl_vectors.py  (deterministic)
"""
import ctypes as C
import json
import os
import struct
import sys

import llama_cpp

LIB = os.path.join(os.path.dirname(llama_cpp.__file__), "lib")
base = C.CDLL(os.path.join(LIB, "libggml-base.so"), mode=C.RTLD_GLOBAL)
cpu = C.CDLL(os.path.join(LIB, "libggml-cpu.so"), mode=C.RTLD_GLOBAL)
cpu.ggml_cpu_init()

IQ4_NL, QK, BLOCK = 20, 32, 18
Q8_0_BLOCK = 34
base.ggml_quantize_chunk.restype = C.c_size_t
base.ggml_quantize_chunk.argtypes = [C.c_int, C.c_void_p, C.c_void_p, C.c_int64, C.c_int64, C.c_int64, C.c_void_p]
base.quantize_row_iq4_nl_ref.argtypes = [C.c_void_p, C.c_void_p, C.c_int64]
base.dequantize_row_iq4_nl.argtypes = [C.c_void_p, C.c_void_p, C.c_int64]
cpu.quantize_row_q8_0.argtypes = [C.c_void_p, C.c_void_p, C.c_int64]
cpu.ggml_vec_dot_iq4_nl_q8_0.argtypes = [C.c_int, C.c_void_p, C.c_size_t, C.c_void_p, C.c_size_t, C.c_void_p, C.c_size_t, C.c_int]

root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
golden = os.environ.get("OXIBONSAI_GOLDEN", os.path.join(root, "..", "shared", "golden"))
source = json.load(open(os.path.join(golden, "quant", "q4_0.json")))


def floats(hex_text):
    raw = bytes.fromhex(hex_text)
    return (C.c_float * (len(raw) // 4)).from_buffer_copy(raw)


cases = []
for case in source["cases"]:
    rows, n = case["rows"], case["n_per_row"]
    x = floats(case["input_f32"])
    q = (C.c_uint8 * (rows * n // QK * BLOCK))()
    base.ggml_quantize_chunk(IQ4_NL, x, q, 0, rows, n, None)
    ff = (C.c_uint8 * len(q))()
    row_bytes = n // QK * BLOCK
    for r in range(rows):
        base.quantize_row_iq4_nl_ref(C.byref(x, 4 * r * n), C.byref(ff, r * row_bytes), n)
    dq = (C.c_float * (rows * n))()
    base.dequantize_row_iq4_nl(q, dq, rows * n)
    out = {
        "name": case["name"], "rows": rows, "n_per_row": n,
        "input_f32": case["input_f32"],
        "quantized": bytes(q).hex(),
        "from_float": bytes(ff).hex(),
        "dequantized_f32": bytes(dq).hex(),
    }
    if case.get("dot"):
        a = floats(case["dot"]["activation_f32"])
        aq = (C.c_uint8 * (len(a) // QK * Q8_0_BLOCK))()
        cpu.quantize_row_q8_0(a, aq, len(a))
        s = C.c_float()
        cpu.ggml_vec_dot_iq4_nl_q8_0(len(a), C.byref(s), 0, q, 0, aq, 0, 1)
        out["dot"] = {
            "activation_f32": case["dot"]["activation_f32"],
            "activation_quantized": bytes(aq).hex(),
            "result": float(s.value),
            "abs_sum": float(sum(abs(float(w) * float(v)) for w, v in zip(dq, a))),
        }
    cases.append(out)

doc = {"format": "iq4_nl", "ggml_type_id": IQ4_NL, "block_elems": QK, "block_bytes": BLOCK,
       "vec_dot_type": "q8_0", "reference": "llama-cpp-python 0.3.36 (ggml C functions via ctypes)",
       "cases": cases}
path = os.path.join(root, "tests", "fixtures", "quant", "iq4_nl.json")
json.dump(doc, open(path, "w"), indent=1)
print(f"wrote {path}: {len(cases)} cases", file=sys.stderr)
