#!/usr/bin/env python3
"""Writes the fuzz target's seed corpus: small GGUF v3 files with every metadata value type,
arrays, and tensors of a few formats, so that mutations start from files the reader accepts.
Generated, never committed: scripts/fuzz.sh and the gguf crate's tests/fuzz_seeds.rs run it.

    python3 make_seeds.py OUT_DIR
"""
import os
import struct
import sys


def string(s):
    b = s.encode()
    return struct.pack("<Q", len(b)) + b


def kv(key, kind, value):
    return string(key) + struct.pack("<I", kind) + value


def gguf(kvs, tensors, alignment=32):
    """tensors: (name, dims, ggml type id, data bytes)."""
    out = b"GGUF" + struct.pack("<IQQ", 3, len(tensors), len(kvs)) + b"".join(kvs)
    offset, blobs = 0, b""
    for name, dims, kind, data in tensors:
        out += string(name) + struct.pack("<I", len(dims))
        out += b"".join(struct.pack("<Q", d) for d in dims) + struct.pack("<IQ", kind, offset)
        pad = -len(data) % alignment
        blobs += data + b"\0" * pad
        offset += len(data) + pad
    out += b"\0" * (-len(out) % alignment)
    return out + blobs


every_type = [
    kv("general.architecture", 8, string("llama")),
    kv("a.u8", 0, struct.pack("<B", 7)),
    kv("a.i8", 1, struct.pack("<b", -7)),
    kv("a.u16", 2, struct.pack("<H", 700)),
    kv("a.i16", 3, struct.pack("<h", -700)),
    kv("a.u32", 4, struct.pack("<I", 70000)),
    kv("a.i32", 5, struct.pack("<i", -70000)),
    kv("a.f32", 6, struct.pack("<f", 1.5)),
    kv("a.bool", 7, struct.pack("<B", 1)),
    kv("a.u64", 10, struct.pack("<Q", 1 << 40)),
    kv("a.i64", 11, struct.pack("<q", -(1 << 40))),
    kv("a.f64", 12, struct.pack("<d", 2.5)),
    kv("a.strings", 9, struct.pack("<IQ", 8, 3) + string("x") + string("") + string("<|im_end|>")),
    kv("a.ints", 9, struct.pack("<IQ", 5, 4) + struct.pack("<4i", 1, -2, 3, -4)),
]
f32_rows = struct.pack("<8f", *[0.5 * i for i in range(8)])
q8_0 = struct.pack("<e", 0.25) + bytes(range(32))  # one block: f16 scale, 32 int8
q4_0 = struct.pack("<e", 0.5) + bytes(range(16))  # one block: f16 scale, 32 nibbles

seeds = {
    "empty": gguf([], []),
    "metadata": gguf(every_type, []),
    "tensors": gguf(
        every_type[:1] + [kv("general.alignment", 4, struct.pack("<I", 32))],
        [("f32", [4, 2], 0, f32_rows), ("q8_0", [32], 8, q8_0), ("q4_0", [32, 1], 2, q4_0)],
    ),
}
out = sys.argv[1] if len(sys.argv) == 2 else sys.exit("usage: make_seeds.py OUT_DIR")
os.makedirs(out, exist_ok=True)
for name, data in seeds.items():
    with open(os.path.join(out, f"{name}.gguf"), "wb") as f:
        f.write(data)
