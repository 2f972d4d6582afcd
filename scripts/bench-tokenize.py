#!/usr/bin/env python3
"""The reference side of crates/tokenizer/examples/tokenize_bench.rs: llama.cpp's llama_tokenize
(llama-cpp-python, vocab_only) on the same text and vocabularies, best of 5, in MB/s.

    python bench-tokenize.py VOCAB_DIR TEXT_FILE   # TEXT_FILE written by the example
"""
import sys
import time

import llama_cpp as L

VOCABS = ["qwen35", "llama-bpe", "gpt-2", "deepseek-llm", "falcon", "gemma-4", "llama-spm",
          "bert-bge", "nomic-bert-moe"]


def main():
    folder, text_file = sys.argv[1], sys.argv[2]
    data = open(text_file, "rb").read()
    L.llama_backend_init()
    print("| vocabulary | tokens | MB/s (best of 5) |")
    print("|---|---:|---:|")
    for name in VOCABS:
        params = L.llama_model_default_params()
        params.vocab_only = True
        model = L.llama_model_load_from_file(f"{folder}/ggml-vocab-{name}.gguf".encode(), params)
        vocab = L.llama_model_get_vocab(model)
        cap = len(data) + 16
        buf = (L.llama_token * cap)()
        best, n = float("inf"), 0
        for _ in range(5):
            start = time.perf_counter()
            n = L.llama_tokenize(vocab, data, len(data), buf, cap, False, False)
            best = min(best, time.perf_counter() - start)
        print(f"| {name} | {n} | {len(data) / 1e6 / best:.1f} |", flush=True)


main()
