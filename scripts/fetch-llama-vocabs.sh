#!/usr/bin/env bash
# llama.cpp's tokenizer test set: the 15 `models/ggml-vocab-*.gguf` vocabularies with their
# `.inp` / `.out` pairs (694 strings, read by llama.cpp's tests/test-tokenizer-0.cpp), taken from the
# reference package's source distribution, llama-cpp-python==0.3.36 (scripts/llama-sdist.sh: fetched
# once, checked by SHA-256), and extracted once per machine. Prints the folder; the tokenizer test
# reads it from OXIBONSAI_LLAMA_VOCABS.
#   OXIBONSAI_LLAMA_VOCABS  where to put the files (default ~/.cache/oxibonsai/llama-vocabs)
#   OXIBONSAI_LLAMA_SDIST   an already downloaded llama_cpp_python-0.3.36.tar.gz (see llama-sdist.sh)
set -euo pipefail
VERSION=0.3.36   # the version llama-sdist.sh fetches, and its SHA-256 (names the extraction)
SHA256=832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e
DEST="${OXIBONSAI_LLAMA_VOCABS:-$HOME/.cache/oxibonsai/llama-vocabs}"
MARK="$DEST/.complete-$SHA256"
if [ -f "$MARK" ]; then
  echo "$DEST"
  exit 0
fi
mkdir -p "$DEST"
SDIST=$("$(dirname "$0")/llama-sdist.sh")
tar -xzf "$SDIST" -C "$DEST" --strip-components=4 --wildcards \
  "llama_cpp_python-$VERSION/vendor/llama.cpp/models/ggml-vocab-*"
count=$(ls "$DEST"/ggml-vocab-*.gguf.inp | wc -l)
if [ "$count" -ne 15 ]; then
  echo "fetch-llama-vocabs: expected 15 .inp files in $DEST, found $count" >&2
  exit 1
fi
touch "$MARK"
echo "$DEST"
