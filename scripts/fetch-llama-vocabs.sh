#!/usr/bin/env bash
# llama.cpp's tokenizer test set: the 15 `models/ggml-vocab-*.gguf` vocabularies with their
# `.inp` / `.out` pairs (694 strings, read by llama.cpp's tests/test-tokenizer-0.cpp), taken from the
# reference package's source distribution, llama-cpp-python==0.3.36 (checked by SHA-256), and
# extracted once per machine. Prints the folder; the tokenizer test reads it from
# OXIBONSAI_LLAMA_VOCABS.
#   OXIBONSAI_LLAMA_VOCABS  where to put the files (default ~/.cache/oxibonsai/llama-vocabs)
#   OXIBONSAI_LLAMA_SDIST   an already downloaded llama_cpp_python-0.3.36.tar.gz to use instead
set -euo pipefail
VERSION=0.3.36
SHA256=832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e
DEST="${OXIBONSAI_LLAMA_VOCABS:-$HOME/.cache/oxibonsai/llama-vocabs}"
MARK="$DEST/.complete-$SHA256"
if [ -f "$MARK" ]; then
  echo "$DEST"
  exit 0
fi
mkdir -p "$DEST"
SDIST="${OXIBONSAI_LLAMA_SDIST:-}"
if [ -z "$SDIST" ]; then
  mkdir -p "$DEST/sdist"
  SDIST="$DEST/sdist/llama_cpp_python-$VERSION.tar.gz"
  if [ ! -f "$SDIST" ]; then
    python3 -m pip download -q --disable-pip-version-check --no-deps --no-build-isolation \
      --no-binary llama-cpp-python "llama-cpp-python==$VERSION" -d "$DEST/sdist" >&2 \
      || python3 -m pip download -q --disable-pip-version-check --no-deps \
        --no-binary llama-cpp-python "llama-cpp-python==$VERSION" -d "$DEST/sdist" >&2
  fi
fi
actual=$(sha256sum "$SDIST" | cut -d' ' -f1)
if [ "$actual" != "$SHA256" ]; then
  echo "fetch-llama-vocabs: $SDIST has SHA-256 $actual, expected $SHA256" >&2
  exit 1
fi
tar -xzf "$SDIST" -C "$DEST" --strip-components=4 --wildcards \
  "llama_cpp_python-$VERSION/vendor/llama.cpp/models/ggml-vocab-*"
count=$(ls "$DEST"/ggml-vocab-*.gguf.inp | wc -l)
if [ "$count" -ne 15 ]; then
  echo "fetch-llama-vocabs: expected 15 .inp files in $DEST, found $count" >&2
  exit 1
fi
rm -rf "$DEST/sdist"
touch "$MARK"
echo "$DEST"
