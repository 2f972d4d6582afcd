#!/usr/bin/env python3
"""Known-answer vectors for PTQ1_0 (GGUF type 143), written from the specification alone.

The reference engine (mainline llama.cpp) has no PTQ1_0; only PrismML's fork does. This is an
independent, pure-Python re-implementation of the fork's `quantize_row_ptq1_0_ref`,
`dequantize_row_ptq1_0` and `ggml_vec_dot_ptq1_0_q8_0` as ../shared/specs/bonsai2-formats.md §1.5
and §1.7 describe them (and ggml-quants.c @ 811dce5d of PrismML-Eng/llama.cpp shows them): it
keeps the C loop shape — stages {32, 16, 8} walked while they fit the 24 `qs` bytes, the input
pointer advanced by 5·c per stage, `uint8_t` arithmetic wrapping, the ceiling division — so that
it shares no code or structure with the Rust codec it checks.

Output: tests/fixtures/quant/ptq1_0.json, in the schema of golden/quant/<format>.json (see
golden/README.md) plus `decode_cases`: raw blocks (every byte value in every position, not only
the bytes the encoder writes) with the trit digit (0..=2) the decoder reads for each value.

Run: python3 scripts/ptq1_0_vectors.py   (no dependencies; deterministic)
"""

import json
import math
import os
import struct

QK = 128
QS_BYTES = (QK - 4 * QK // 64) // 5  # 24
QH_BYTES = QK // 64  # 2
BLOCK_BYTES = QS_BYTES + QH_BYTES + 2  # 28, scale last
STAGES = (32, 16, 8)
POW3 = (1, 3, 9, 27, 81, 243)


def f32(x):
    return struct.unpack("<f", struct.pack("<f", x))[0]


def f16_bits(x):
    """f32 value -> IEEE half bits, round to nearest even (GGML_FP32_TO_FP16)."""
    try:
        return struct.unpack("<H", struct.pack("<e", x))[0]
    except OverflowError:
        return 0x7C00 if x > 0 else 0xFC00


def f16_value(bits):
    return struct.unpack("<e", struct.pack("<H", bits))[0]


def lroundf(x):
    """C's lroundf: to nearest, halves away from zero."""
    return int(math.floor(abs(x) + 0.5)) * (1 if x >= 0 else -1)


def quantize_row(x):
    """quantize_row_ptq1_0_ref over one row (a multiple of 128 values)."""
    assert len(x) % QK == 0
    out = bytearray()
    p = 0  # the C code's `x` pointer
    for _ in range(len(x) // QK):
        amax = 0.0
        for j in range(QK):
            amax = max(amax, abs(x[p + j]))
        d = amax
        inv = f32(1.0 / d) if d else 0.0
        qs = [0] * QS_BYTES
        j = 0
        for c in STAGES:
            while j + c <= QS_BYTES:
                for m in range(c):
                    q = 0
                    for n in range(5):
                        xi = lroundf(f32(x[p + m + n * c] * inv)) + 1
                        q = (q * 3 + xi) & 0xFF
                    qs[j + m] = ((q * 256 + 242) // 243) & 0xFF
                p += 5 * c
                j += c
        qh = [0] * QH_BYTES
        for h in range(QH_BYTES):
            q = 0
            for m in range(4):
                xi = lroundf(f32(x[p + h + m * QH_BYTES] * inv)) + 1
                q = (q * 3 + xi) & 0xFF
            q = (q * 3) & 0xFF  # the first value to the most significant trit
            qh[h] = ((q * 256 + 242) // 243) & 0xFF
        p += 4 * QH_BYTES
        out += bytes(qs) + bytes(qh) + struct.pack("<H", f16_bits(d))
    return bytes(out)


def block_values(blk):
    """dequantize_row_ptq1_0's traversal of one block: (trit − 1) per value, in value order."""
    qs, qh = blk[:QS_BYTES], blk[QS_BYTES:QS_BYTES + QH_BYTES]
    v = []
    j = 0
    for c in STAGES:
        while j + c <= QS_BYTES:
            for n in range(5):
                for m in range(c):
                    q = (qs[j + m] * POW3[n]) & 0xFF
                    v.append(((q * 3) >> 8) - 1)
            j += c
    for n in range(4):
        for h in range(QH_BYTES):
            q = (qh[h] * POW3[n]) & 0xFF
            v.append(((q * 3) >> 8) - 1)
    return v


def block_scale(blk):
    return f16_value(struct.unpack("<H", blk[-2:])[0])


def blocks(data):
    assert len(data) % BLOCK_BYTES == 0
    return [data[b * BLOCK_BYTES:(b + 1) * BLOCK_BYTES] for b in range(len(data) // BLOCK_BYTES)]


def dequantize(data):
    """dequantize_row_ptq1_0: floats in value order."""
    return [f32(t * block_scale(blk)) for blk in blocks(data) for t in block_values(blk)]


def quantize_q8_0_activation(x):
    """The x86 CPU backend's quantize_row_q8_0: d = amax/127, codes round-half-even(x·127/amax)."""
    out = bytearray()
    for b in range(len(x) // 32):
        v = x[32 * b:32 * b + 32]
        amax = max(abs(t) for t in v)
        d = f32(amax / 127.0)
        inv = f32(127.0 / amax) if amax else 0.0
        codes = [max(-128, min(127, round(f32(t * inv)))) for t in v]  # round(): ties to even
        out += struct.pack("<H", f16_bits(d)) + struct.pack("<32b", *codes)
    return bytes(out)


def dot(weights, activation):
    """ggml_vec_dot_ptq1_0_q8_0: exact integer sums, per block d_x · Σ_k d_y[k] · sumi_k."""
    total = 0.0
    for b, blk in enumerate(blocks(weights)):
        values = block_values(blk)
        inner = 0.0
        for k in range(4):
            a = activation[(4 * b + k) * 34:(4 * b + k + 1) * 34]
            dy = f16_value(struct.unpack("<H", a[:2])[0])
            codes = struct.unpack("<32b", a[2:])
            inner += dy * sum(t * c for t, c in zip(values[32 * k:32 * k + 32], codes))
        total += block_scale(blk) * inner
    return total


def dequantize_q8_0(data):
    y = []
    for b in range(len(data) // 34):
        d = f16_value(struct.unpack("<H", data[34 * b:34 * b + 2])[0])
        y += [f32(c * d) for c in struct.unpack("<32b", data[34 * b + 2:34 * b + 34])]
    return y


class Rng:
    """xorshift64*, so the vectors do not depend on Python's random module."""

    def __init__(self, seed):
        self.s = seed

    def next(self):
        s = self.s
        s ^= (s >> 12)
        s ^= (s << 25) & 0xFFFFFFFFFFFFFFFF
        s ^= (s >> 27)
        self.s = s
        return (s * 0x2545F4914F6CDD1D) & 0xFFFFFFFFFFFFFFFF

    def unit(self):
        return (self.next() >> 11) / float(1 << 53)

    def gauss(self):
        u1 = max(self.unit(), 1e-12)
        return math.sqrt(-2.0 * math.log(u1)) * math.cos(2.0 * math.pi * self.unit())


def hex_f32(values):
    return struct.pack("<%df" % len(values), *values).hex()


def case(name, rows, n_per_row, x, rng):
    x = [f32(v) for v in x]
    q = b"".join(quantize_row(x[r * n_per_row:(r + 1) * n_per_row]) for r in range(rows))
    dq = dequantize(q)
    act = [f32(rng.gauss() * 2.0) for _ in range(len(x))]
    act_q = quantize_q8_0_activation(act)
    act_dq = dequantize_q8_0(act_q)
    return {
        "name": name,
        "rows": rows,
        "n_per_row": n_per_row,
        "input_f32": hex_f32(x),
        "quantized": q.hex(),
        "dequantized_f32": hex_f32(dq),
        "dot": {
            "activation_f32": hex_f32(act),
            "activation_quantized": act_q.hex(),
            "result": dot(q, act_q),
            "abs_sum": sum(abs(a * b) for a, b in zip(dq, act_dq)),
        },
    }


def main():
    rng = Rng(0x9E3779B97F4A7C15)
    cases = []

    cases.append(case("gaussian", 2, 256, [rng.gauss() for _ in range(512)], rng))

    x = [rng.gauss() * 0.01 for _ in range(512)]
    for i in list(range(0, 128)) + list(range(384, 512)):
        x[i] = 0.0
    cases.append(case("small_with_zero_blocks", 2, 256, x, rng))

    x = [rng.gauss() * 1e-6 for _ in range(384)]
    for i in (5, 131, 200, 300, 383):
        x[i] = (1 if i % 2 else -1) * 3.0e4
    cases.append(case("outliers_and_tiny", 1, 384, x, rng))

    # Already ternary at 128 values, f16-exact scales: the lossless case.
    x = []
    for b in range(4):
        d = f16_value(f16_bits(0.02 + 0.01 * b))
        trits = [int(rng.next() % 3) - 1 for _ in range(QK)]
        trits[int(rng.next() % QK)] = 1 if b % 2 else -1  # the scale is reached
        x += [t * d for t in trits]
    cases.append(case("exact_ternary", 2, 256, x, rng))

    # x/d exactly ±0.5 (lroundf rounds away from zero), −0.0 and ±d.
    x = []
    for j in range(256):
        k = j % 6
        x.append([0.5, -0.5, -0.0, 1.0, -1.0, 0.25][k] * 2.0)
    cases.append(case("halves_and_negative_zero", 1, 256, x, rng))

    cases.append(case("all_positive", 1, 256, [abs(rng.gauss()) + 0.1 for _ in range(256)], rng))

    # Decoder on bytes the encoder never writes: byte value v at every position of some block.
    decode_cases = []
    raw = bytearray()
    for v in range(256):
        blk = bytearray((v + 37 * i) & 0xFF for i in range(QS_BYTES + QH_BYTES))
        scale = f16_bits([0.5, -1.25, 3.0e-7, 1000.0][v % 4])
        raw += blk + struct.pack("<H", scale)
    decode_cases.append({
        "name": "every_byte_everywhere",
        "quantized": bytes(raw).hex(),
        # Per block, (trit − 1) + 1 of each value in value order; value = (digit − 1) · scale.
        "digits": ["".join(str(t + 1) for t in block_values(blk)) for blk in blocks(bytes(raw))],
    })

    out = {
        "format": "ptq1_0",
        "type_id": 143,
        "block_elems": QK,
        "block_bytes": BLOCK_BYTES,
        "vec_dot_type": "q8_0",
        "generator": "scripts/ptq1_0_vectors.py (independent of the Rust codec)",
        "cases": cases,
        "decode_cases": decode_cases,
    }
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    path = os.path.join(root, "tests", "fixtures", "quant", "ptq1_0.json")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        json.dump(out, f, indent=1)
        f.write("\n")
    print(path, os.path.getsize(path), "bytes")


if __name__ == "__main__":
    main()
