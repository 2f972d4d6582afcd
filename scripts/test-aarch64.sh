#!/usr/bin/env bash
# Cross-builds the kernels (oxibonsai-formats) and the engine for aarch64-unknown-linux-gnu and
# runs their tests under qemu-user (issue 21: no ARM machine here, so ARM is proven under
# emulation). Called by .ci/run; runs alone as well. Installs what it needs when missing (the
# Debian packages only when run as root) and fails naming any tool it cannot get: it never skips.
#
# What runs, each step bounded by AARCH64_TEST_TIMEOUT:
#   -cpu max (every ARM extension qemu has): every formats test (each kernel of each ARM tier
#     against its scalar twin), then the engine's parity suites against the reference logits on
#     every tier (golden Q1_0 / Q2_0 / PQ2_0 / TQ1_0 / TQ2_0 / mixed / F16 models; SmolLM2 Q4_1);
#   -cpu cortex-a53 (ARMv8.0, no dot product): detection must choose neon, the low-bit kernels
#     and the golden parity suite on what it chose.
# Then `cargo check --target aarch64-apple-darwin` of every library crate (macOS on Apple
# Silicon) so the Apple build never breaks. The hub, the server (its `/cors-proxy` client) and the
# binary are left out: they reach HTTPS through ureq + rustls, whose ring C code needs Apple's SDK
# headers, which no Debian package provides.
#
# Environment:
#   CARGO_TARGET_DIR      build products (default as .ci/run's; cargo keeps each target triple
#                         apart under it, so the x86 build is untouched)
#   OXIBONSAI_GOLDEN      golden reference data (default ../shared/golden, as .ci/run)
#   AARCH64_TEST_TIMEOUT  seconds each emulated step may take (default 900): a hung or runaway
#                         emulated run fails, never stalls CI
#   AARCH64_FULL=1        also the engine's batch and prefix-cache suites on every tier (about
#                         five more minutes on a 2-core host)
#   OXIBONSAI_REQUIRE_ISA the tiers the -cpu max run must find (default: every ARM tier); the
#                         cortex-a53 run requires neon
set -euo pipefail
cd "$(dirname "$0")/.."

TARGET=aarch64-unknown-linux-gnu
LINKER=aarch64-linux-gnu-gcc
QEMU=qemu-aarch64
SYSROOT=/usr/aarch64-linux-gnu
APT_PACKAGES=(qemu-user gcc-aarch64-linux-gnu libc6-dev-arm64-cross)

export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/oxibonsai/target}"
export CARGO_TERM_COLOR=never
export OXIBONSAI_GOLDEN="${OXIBONSAI_GOLDEN:-$(cd .. && pwd)/shared/golden}"
TIMEOUT="${AARCH64_TEST_TIMEOUT:-900}"

fail() {
  echo "test-aarch64: $*" >&2
  exit 1
}

# The cross linker, the target's C library and the emulator.
have_tools() {
  command -v "$LINKER" >/dev/null && command -v "$QEMU" >/dev/null && [ -e "$SYSROOT/lib/libc.so.6" ]
}
if ! have_tools; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "== apt-get install ${APT_PACKAGES[*]}"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${APT_PACKAGES[@]}" >/dev/null
  fi
  command -v "$LINKER" >/dev/null || fail "$LINKER missing (Debian: gcc-aarch64-linux-gnu; install as root)"
  command -v "$QEMU" >/dev/null || fail "$QEMU missing (Debian: qemu-user; install as root)"
  [ -e "$SYSROOT/lib/libc.so.6" ] || fail "$SYSROOT/lib/libc.so.6 missing (Debian: libc6-dev-arm64-cross; install as root)"
fi
MACOS=aarch64-apple-darwin
for triple in "$TARGET" "$MACOS"; do
  if ! rustup target list --installed | grep -qx "$triple"; then
    echo "== rustup target add $triple"
    rustup target add "$triple" || fail "rustup target add $triple failed"
  fi
done
command -v timeout >/dev/null || fail "timeout missing (coreutils)"

# Set here rather than in .cargo/config.toml so the x86 builds never see them.
export CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_LINKER="$LINKER"
export CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_RUNNER="$QEMU -L $SYSROOT"
ARM_TIERS=neon,dotprod,i8mm
REQUIRE_MAX="${OXIBONSAI_REQUIRE_ISA:-$ARM_TIERS}"
ENGINE_TESTS=(--test parity --test smollm2)
[ "${AARCH64_FULL:-0}" = 1 ] && ENGINE_TESTS+=(--test batch --test prefix)

# emulated CPU REQUIRED EXPECTED_BEST LOG cargo-test-args...: one bounded cargo test under qemu.
emulated() {
  local cpu=$1 require=$2 best=$3 log=$4 status
  shift 4
  echo "== aarch64 tests: $* (qemu -cpu $cpu, tiers required: $require, at most ${TIMEOUT}s)"
  set +o errexit
  QEMU_CPU=$cpu OXIBONSAI_REQUIRE_ISA=$require OXIBONSAI_EXPECT_BEST_ISA=$best \
    timeout "$TIMEOUT" cargo test --target "$TARGET" --locked "$@" 2>&1 | tee "$log"
  status=${PIPESTATUS[0]}
  set -o errexit
  [ "$status" = 124 ] && fail "the emulated tests ran past AARCH64_TEST_TIMEOUT=${TIMEOUT}s: $*"
  [ "$status" = 0 ] || exit "$status"
}

# Each tier must show its Q1_0 kernel compared with the scalar twin in LOG.
tiers_shown() {
  local log=$1 tier
  for tier in ${2//,/ }; do
    grep -q "Q1_0 $tier:" "$log" || fail "no Q1_0 kernel of the $tier tier was compared with its scalar twin"
  done
}

echo "== aarch64 clippy"
cargo clippy --target "$TARGET" -p oxibonsai-formats -p oxibonsai-engine --all-targets --locked -- -D warnings
# --tests: the crates have no doc-tests, and an empty doc-test run would close the log on "0 passed".
echo "== aarch64 build"
cargo test --target "$TARGET" -p oxibonsai-formats --tests --locked --no-run
cargo test --target "$TARGET" -p oxibonsai-engine "${ENGINE_TESTS[@]}" --locked --no-run
LOGS="${TMPDIR:-/tmp}"
best_max=${ARM_TIERS##*,}
emulated max "$REQUIRE_MAX" "$best_max" "$LOGS/aarch64-formats.log" -p oxibonsai-formats --tests
# The ARM kernels against their scalar twins, shown in the log: one line per tier and format.
emulated max "$REQUIRE_MAX" "$best_max" "$LOGS/aarch64-tiers.log" -p oxibonsai-formats \
  --test kernels_lowbit -- --exact awkward_shapes_match_the_scalar_dot --nocapture
tiers_shown "$LOGS/aarch64-tiers.log" "$REQUIRE_MAX"
emulated max "$REQUIRE_MAX" "$best_max" "$LOGS/aarch64-engine.log" -p oxibonsai-engine \
  "${ENGINE_TESTS[@]}" -- --nocapture
emulated cortex-a53 neon neon "$LOGS/aarch64-a53.log" -p oxibonsai-formats \
  --test detection --test kernels_lowbit -- --nocapture
tiers_shown "$LOGS/aarch64-a53.log" neon
emulated cortex-a53 neon neon "$LOGS/aarch64-a53-engine.log" -p oxibonsai-engine --test parity

echo "== $MACOS check (every library crate; not the hub, the server or the binary, see above)"
cargo check --target "$MACOS" --workspace --exclude oxibonsai --exclude oxibonsai-hub \
  --exclude oxibonsai-server --locked
# The engine's GPU backend (Metal there) is behind a feature the workspace check leaves off.
cargo check --target "$MACOS" -p oxibonsai-engine --features gpu --locked
