#!/usr/bin/env bash
# The fuzz targets for a bounded time each (.ci/run runs this): the GGUF reader (crates/gguf/fuzz,
# `read`) and the request parsers (crates/server/fuzz, `request`: chat / completion body -> the
# engine's job). OXIBONSAI_FUZZ_SECONDS per target (default 60). Fails, naming the cause, if
# cargo-fuzz cannot be built, a target does not build, or a run finds a crash (its input is kept
# under $CARGO_TARGET_DIR/fuzz-artifacts/TARGET/: add it to the unit tests, then fix it).
#
# Stable Rust: cargo-fuzz passes nightly-only flags (-Zsanitizer=address and the sancov passes);
# RUSTC_BOOTSTRAP=1 lets the stable compiler accept them (the x86_64 Linux toolchain ships the
# ASan runtime), so no nightly toolchain is needed.
set -euo pipefail
cd "$(dirname "$0")/.."

SECONDS_EACH="${OXIBONSAI_FUZZ_SECONDS:-60}"
CARGO_FUZZ_VERSION=0.13.2
FUZZ_ROOT="$HOME/.cache/oxibonsai/cargo-fuzz"
export PATH="$FUZZ_ROOT/bin:$PATH"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/oxibonsai/target}"
export OXIBONSAI_GOLDEN="${OXIBONSAI_GOLDEN:-$(cd .. && pwd)/shared/golden}"
export RUSTC_BOOTSTRAP=1
# The fuzz builds' own folder: their flags differ from the tests', so they would rebuild each other.
FUZZ_TARGET_DIR="$CARGO_TARGET_DIR/fuzz"

if [ "$(cargo-fuzz --version 2>/dev/null)" != "cargo-fuzz $CARGO_FUZZ_VERSION" ]; then
  echo "== cargo install cargo-fuzz $CARGO_FUZZ_VERSION"
  CARGO_TARGET_DIR="$CARGO_TARGET_DIR/cargo-fuzz-install" \
    cargo install cargo-fuzz --version "$CARGO_FUZZ_VERSION" --locked --root "$FUZZ_ROOT" ||
    { echo "fuzz: cargo-fuzz $CARGO_FUZZ_VERSION could not be built" >&2; exit 1; }
fi

HOST=$(rustc -vV | sed -n 's/^host: //p')

run() {
  local dir=$1 target=$2 seeds=$3
  local corpus="$CARGO_TARGET_DIR/fuzz-corpus/$target" artifacts="$CARGO_TARGET_DIR/fuzz-artifacts/$target"
  local log="$CARGO_TARGET_DIR/fuzz-$target.log"
  rm -rf "$artifacts"
  mkdir -p "$corpus" "$artifacts"
  echo "== fuzz $target (${SECONDS_EACH} s)"
  (cd "$dir" && CARGO_TARGET_DIR="$FUZZ_TARGET_DIR" cargo fuzz build "$target") ||
    { echo "fuzz: the target '$target' ($dir) did not build" >&2; exit 1; }
  # New inputs go to the corpus kept in the target folder (later runs start from it); the
  # seeds are only read.
  local rc=0
  (cd "$dir" && "$FUZZ_TARGET_DIR/$HOST/release/$target" "$corpus" "$seeds" \
    -max_total_time="$SECONDS_EACH" -timeout=120 -print_final_stats=1 -artifact_prefix="$artifacts/") \
    >"$log" 2>&1 || rc=$?
  grep -E '^#[0-9]+[[:space:]]+(INITED|DONE)|^stat::(number_of_executed_units|peak_rss_mb)' "$log" || true
  # libFuzzer also keeps its slowest input (slow-unit-*, the first one pays for loading the
  # vocabularies): only these name a failure.
  local failed
  failed=$(find "$artifacts" -type f \( -name 'crash-*' -o -name 'leak-*' -o -name 'timeout-*' -o -name 'oom-*' \) | head -1)
  if [ "$rc" != 0 ] || [ -n "$failed" ]; then
    tail -n 40 "$log" >&2
    echo "fuzz: '$target' failed (exit $rc); the input: ${failed:-see $log}" >&2
    exit 1
  fi
}

# The GGUF seeds are generated (no model file is committed); the request seeds are JSON bodies.
GGUF_SEEDS="$CARGO_TARGET_DIR/fuzz-seeds/read"
python3 crates/gguf/fuzz/make_seeds.py "$GGUF_SEEDS" ||
  { echo "fuzz: crates/gguf/fuzz/make_seeds.py could not write the seeds" >&2; exit 1; }
run crates/gguf/fuzz read "$GGUF_SEEDS"
run crates/server/fuzz request "$(pwd)/crates/server/fuzz/seeds/request"
