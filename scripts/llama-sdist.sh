#!/usr/bin/env bash
# The reference package's source distribution, llama-cpp-python==0.3.36 (llama.cpp vendored inside):
# downloaded once per machine with pip, checked by SHA-256, kept under ~/.cache/oxibonsai/sdist.
# Prints the tarball's path. Used by fetch-llama-vocabs.sh (tokenizer test set) and
# llama-server-suite.sh (llama.cpp's server tests).
#   OXIBONSAI_LLAMA_SDIST   an already downloaded llama_cpp_python-0.3.36.tar.gz to use instead
set -euo pipefail
VERSION=0.3.36
SHA256=832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e
SDIST="${OXIBONSAI_LLAMA_SDIST:-}"
if [ -z "$SDIST" ]; then
  DIR="$HOME/.cache/oxibonsai/sdist"
  SDIST="$DIR/llama_cpp_python-$VERSION.tar.gz"
  if [ ! -f "$SDIST" ]; then
    mkdir -p "$DIR"
    python3 -m pip download -q --disable-pip-version-check --no-deps --no-build-isolation \
      --no-binary llama-cpp-python "llama-cpp-python==$VERSION" -d "$DIR" >&2 \
      || python3 -m pip download -q --disable-pip-version-check --no-deps \
        --no-binary llama-cpp-python "llama-cpp-python==$VERSION" -d "$DIR" >&2
  fi
fi
actual=$(sha256sum "$SDIST" | cut -d' ' -f1)
if [ "$actual" != "$SHA256" ]; then
  echo "llama-sdist: $SDIST has SHA-256 $actual, expected $SHA256" >&2
  exit 1
fi
echo "$SDIST"
