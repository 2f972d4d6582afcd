#!/usr/bin/env bash
# Speed without ARM hardware, statically (issue 21, item 6): the reciprocal throughput of each
# matrix-vector inner loop and of each packed decode kernel, in cycles per 128 weights, from
# llvm-mca for -mcpu=apple-m1, neoverse-n1 and cortex-a76, ours side by side with llama.cpp's
# NEON loop for the same format,
# and what that means in tokens/s against each CPU's published memory bandwidth. Prints a
# Markdown table on stdout (for BENCHMARKS.md); progress goes to stderr. Writes nothing into the
# repository: its build goes to $CARGO_TARGET_DIR (default target/), its downloads and
# objects to $ARM_MCA_WORK (default $TMPDIR/arm-mca).
#
# NOT run by .ci/run: it downloads llama.cpp's source (llama-cpp-python's sdist from PyPI) and
# its figures are benchmarks, not tests. Run it by hand:  bash scripts/arm-mca.sh
#
# Tools: Debian's llvm-19 / clang-19 (llvm-mca 19 has a Neoverse-N1 scheduling model; 14 does
# not), else the newest llvm-mca-NN / clang-NN present; installed with apt when missing (as root);
# the Rust target aarch64-unknown-linux-gnu (rustup); pip. A missing tool stops the script, named.
#
# The K-quants (Q2_K … Q6_K) come after, in their own tables, cycles per 256-weight super-block
# per row — and per token for the matrix-matrix kernels against llama.cpp's nrc = 2 SMMLA path,
# on neoverse-v1 too (scripts/arm_mca_kq.py): their work per block is a nest of loops, so the instructions
# one block executes are taken from a qemu-aarch64 execution trace of each kernel in a small
# harness (scripts/arm-mca-kq/: ours through `Kernels::gemv`, llama.cpp's ggml_vec_dot_*_q8_K
# linked with the quants.c object below) and run through llvm-mca as straight-line code. That
# needs qemu-user and gcc-aarch64-linux-gnu (with libc6-dev-arm64-cross), as
# scripts/test-aarch64.sh does.
#
# Which loop is measured (see scripts/arm_mca.py): ours is found by name from the aarch64_neon
# tier tables (mod.rs: FormatKind::X => safe_gemv!(…, module::fn, …)) and located in the release
# rlib through its DWARF line tables (the kernel is inlined into its safe wrapper); llama.cpp's is
# the symbol ggml_vec_dot_<fmt>_<act>. Where packed.rs registers a packed kernel for the format
# (what decode runs on dotprod / i8mm with packing on), its one-token tile is measured as well
# and the ratio column compares that. A format without a NEON kernel of ours prints "no NEON
# kernel yet". Static figures: llvm-mca ignores memory (every load hits L1), prefetch, branch
# mispredicts, calls' callees and the loops around the hot one.
set -euo pipefail

LLAMA_CPP_PYTHON_VERSION=${LLAMA_CPP_PYTHON_VERSION:-0.3.36}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
WORK=${ARM_MCA_WORK:-${TMPDIR:-/tmp}/arm-mca}
TARGET=aarch64-unknown-linux-gnu
mkdir -p "$WORK"

say() { echo "arm-mca: $*" >&2; }
fail() { echo "arm-mca: error: $*" >&2; exit 1; }

apt_install() {
  [ "$(id -u)" = 0 ] || fail "missing $*: install it (apt-get install $*), or run as root"
  say "installing $* with apt"
  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@") >&2 \
    || fail "apt-get install $* failed"
}

# The newest LLVM that has llvm-mca, llvm-objdump, llvm-dwarfdump and clang side by side.
pick_llvm() {
  for v in 21 20 19 18 17 16 15 14; do
    if command -v "llvm-mca-$v" >/dev/null && command -v "clang-$v" >/dev/null \
      && command -v "llvm-objdump-$v" >/dev/null && command -v "llvm-dwarfdump-$v" >/dev/null; then
      echo "-$v"; return 0
    fi
  done
  return 1
}
SUFFIX=$(pick_llvm) || true
if { [ -z "$SUFFIX" ] || [ "${SUFFIX#-}" -lt 19 ]; } && [ "$(id -u)" = 0 ]; then
  apt-get update -qq >&2 || true
  if apt-cache show llvm-19 clang-19 >/dev/null 2>&1; then
    apt_install llvm-19 clang-19
  elif [ -z "$SUFFIX" ]; then
    apt_install llvm clang
  fi
  SUFFIX=$(pick_llvm) || true
fi
[ -n "$SUFFIX" ] || fail "missing llvm-mca, llvm-objdump, llvm-dwarfdump and clang of one LLVM version (Debian: apt-get install llvm-19 clang-19)"
[ "${SUFFIX#-}" -ge 19 ] || say "warning: LLVM ${SUFFIX#-} has fewer aarch64 scheduling models than 19 (neoverse-n1 falls back to Cortex-A57)"
CLANG=clang$SUFFIX
for t in cargo rustc python3 ar nm pip tar; do
  command -v "$t" >/dev/null || fail "missing tool: $t"
done
say "using llvm-mca$SUFFIX and $CLANG ($("$CLANG" --version | head -1))"
# apple-m1 is an alias (of apple-a14) that -mcpu=help does not list: ask for each CPU instead.
for cpu in apple-m1 neoverse-n1 neoverse-v1 cortex-a76; do
  if printf 'add x0, x0, #1\n' | "llvm-mca$SUFFIX" -mtriple=aarch64 -mcpu="$cpu" 2>&1 >/dev/null \
    | grep -q 'not a recognized processor'; then
    fail "llvm-mca$SUFFIX knows no -mcpu=$cpu for aarch64"
  fi
done
# Ours: the release rlib of the formats crate for aarch64 (no linking, so no cross linker), with
# its line tables (release debug = 1, as the workspace profile has it): they locate the kernels.
rustup target list --installed 2>/dev/null | grep -qx "$TARGET" || {
  command -v rustup >/dev/null || fail "missing Rust target $TARGET and no rustup to add it"
  say "adding the Rust target $TARGET"; rustup target add "$TARGET" >&2
}
say "building oxibonsai-formats for $TARGET (release)"
(cd "$ROOT" && CARGO_PROFILE_RELEASE_DEBUG=${CARGO_PROFILE_RELEASE_DEBUG:-1} cargo build --release --locked --target "$TARGET" -p oxibonsai-formats --lib >&2) \
  || fail "cargo build for $TARGET failed"
TDIR=${CARGO_TARGET_DIR:-$ROOT/target}
RLIB=$(ls -t "$TDIR/$TARGET/release/deps/"liboxibonsai_formats-*.rlib 2>/dev/null | head -1)
[ -n "$RLIB" ] || fail "no liboxibonsai_formats-*.rlib under $TDIR/$TARGET/release/deps"

# llama.cpp: its ARM quants.c from llama-cpp-python's source distribution. Only that package is
# built from source (`--no-binary llama-cpp-python`): with `:all:` pip would also compile its
# build requirements (cmake) from source just to read the metadata.
SDIST=$WORK/llama_cpp_python-$LLAMA_CPP_PYTHON_VERSION.tar.gz
if [ ! -f "$SDIST" ]; then
  say "downloading llama-cpp-python==$LLAMA_CPP_PYTHON_VERSION (sdist)"
  pip download --quiet --no-deps --no-binary llama-cpp-python \
    "llama-cpp-python==$LLAMA_CPP_PYTHON_VERSION" -d "$WORK" >&2 || fail "pip download failed"
fi
SRC=$WORK/llama_cpp_python-$LLAMA_CPP_PYTHON_VERSION
GGML=$SRC/vendor/llama.cpp/ggml
[ -f "$GGML/src/ggml-cpu/arch/arm/quants.c" ] \
  || tar xzf "$SDIST" -C "$WORK" --wildcards '*/vendor/llama.cpp/ggml/*' \
  || fail "cannot unpack $SDIST"
LLAMA_OBJ=$WORK/quants-arm.o
say "compiling llama.cpp's ggml-cpu/arch/arm/quants.c with $CLANG for aarch64"
"$CLANG" --target=aarch64-linux-gnu -O3 -march=armv8.2-a+dotprod -DNDEBUG \
  -I"$GGML/include" -I"$GGML/src" -I"$GGML/src/ggml-cpu" \
  -c "$GGML/src/ggml-cpu/arch/arm/quants.c" -o "$LLAMA_OBJ" || fail "compiling quants.c failed"

python3 "$ROOT/scripts/arm_mca.py" \
  --rlib "$RLIB" \
  --neon-mod "$ROOT/crates/formats/src/kernels/aarch64_neon/mod.rs" \
  --llama-obj "$LLAMA_OBJ" \
  --llvm-suffix "$SUFFIX" \
  --llama-version "$LLAMA_CPP_PYTHON_VERSION" \
  --rustc "$(rustc --version)" \
  --clang "$("$CLANG" --version | head -1)"

# ---- the K-quant rows: harnesses traced under qemu (scripts/arm_mca_kq.py).
for t in qemu-aarch64 aarch64-linux-gnu-gcc; do
  command -v "$t" >/dev/null || fail "missing tool: $t (Debian: qemu-user, gcc-aarch64-linux-gnu)"
done
[ -e /usr/aarch64-linux-gnu/lib/libc.so.6 ] || fail "missing /usr/aarch64-linux-gnu/lib/libc.so.6 (Debian: libc6-dev-arm64-cross)"
KQ=$WORK/kq-harness
mkdir -p "$KQ"
sed -e "s|@DIR@|$ROOT/scripts/arm-mca-kq|" -e "s|@ROOT@|$ROOT|" "$ROOT/scripts/arm-mca-kq/Cargo.toml.in" >"$KQ/Cargo.toml"
# The workspace's lock pins the formats crate's dependencies to the versions the workspace
# builds (cargo drops the entries the harness does not need, so not --locked).
cp "$ROOT/Cargo.lock" "$KQ/Cargo.lock"
say "building the K-quant harness for $TARGET (release)"
# Its own target dir: its liboxibonsai_formats rlib must not become the newest one in $TDIR,
# which the search for $RLIB above would take on the next run.
KQ_TDIR=$TDIR/arm-mca-kq
(cd "$KQ" && CARGO_TARGET_DIR=$KQ_TDIR CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_LINKER=aarch64-linux-gnu-gcc \
  cargo build --offline --release --target "$TARGET" >&2) || fail "building the K-quant harness failed"
OURS_KQ=$KQ_TDIR/$TARGET/release/harness
[ -x "$OURS_KQ" ] || fail "no harness binary at $OURS_KQ"
LLAMA_KQ=$WORK/llama-kq-harness
"$CLANG" --target=aarch64-linux-gnu -O3 -march=armv8.2-a+dotprod -DNDEBUG \
  -c "$ROOT/scripts/arm-mca-kq/harness.c" -o "$WORK/llama-kq-harness.o" || fail "compiling harness.c failed"
aarch64-linux-gnu-gcc -static -no-pie "$WORK/llama-kq-harness.o" "$LLAMA_OBJ" -lm -o "$LLAMA_KQ" \
  || fail "linking llama.cpp's K-quant harness failed"
# The matrix-matrix table's llama.cpp side: quants.c with the int8 matrix-multiply extension,
# whose ggml_vec_dot_q4_K_q8_K / q6_K take two rows × two tokens a call (nrc = 2) by SMMLA.
LLAMA_I8MM_OBJ=$WORK/quants-arm-i8mm.o
"$CLANG" --target=aarch64-linux-gnu -O3 -march=armv8.2-a+dotprod+i8mm -DNDEBUG \
  -I"$GGML/include" -I"$GGML/src" -I"$GGML/src/ggml-cpu" \
  -c "$GGML/src/ggml-cpu/arch/arm/quants.c" -o "$LLAMA_I8MM_OBJ" || fail "compiling quants.c with i8mm failed"
LLAMA_KQ_I8MM=$WORK/llama-kq-harness-i8mm
aarch64-linux-gnu-gcc -static -no-pie "$WORK/llama-kq-harness.o" "$LLAMA_I8MM_OBJ" -lm -o "$LLAMA_KQ_I8MM" \
  || fail "linking llama.cpp's K-quant harness (i8mm) failed"
echo
# ARM_MCA_KQ_TABLES: gemv, gemm or both (default), the K-quant tables to print.
python3 "$ROOT/scripts/arm_mca_kq.py" --ours "$OURS_KQ" --llama "$LLAMA_KQ" \
  --llama-i8mm "$LLAMA_KQ_I8MM" --tables "${ARM_MCA_KQ_TABLES:-gemv,gemm}" --llvm-suffix "$SUFFIX"
