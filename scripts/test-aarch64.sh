#!/usr/bin/env bash
# Cross-builds oxibonsai-formats for aarch64-unknown-linux-gnu and runs its tests under qemu-user
# (issue 21's foundation: no ARM machine here, so ARM is proven under emulation). Called by
# .ci/run; runs alone as well. Installs what it needs when missing (the Debian packages only when
# run as root) and fails naming any tool it cannot get: it never skips.
#
# Environment:
#   CARGO_TARGET_DIR      build products (default as .ci/run's; cargo keeps each target triple
#                         apart under it, so the x86 build is untouched)
#   OXIBONSAI_GOLDEN      golden reference data (default ../shared/golden, as .ci/run)
#   AARCH64_TEST_TIMEOUT  seconds the emulated test run may take (default 900; it takes about 15 s
#                         on a 2-core x86 host today): a hung or runaway emulated run fails, never
#                         stalls CI
#   QEMU_CPU              qemu's CPU model (default max: every ARM extension qemu emulates)
#   OXIBONSAI_REQUIRE_ISA the tiers the kernel tests must find (default neon,dotprod,i8mm under
#                         -cpu max, else neon): the emulated run fails rather than pass having
#                         tested no ARM tier
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
if ! rustup target list --installed | grep -qx "$TARGET"; then
  echo "== rustup target add $TARGET"
  rustup target add "$TARGET" || fail "rustup target add $TARGET failed"
fi
command -v timeout >/dev/null || fail "timeout missing (coreutils)"

# Set here rather than in .cargo/config.toml so the x86 builds never see them.
export CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_LINKER="$LINKER"
export CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_RUNNER="$QEMU -L $SYSROOT"
export QEMU_CPU="${QEMU_CPU:-max}"
if [ "$QEMU_CPU" = max ]; then
  export OXIBONSAI_REQUIRE_ISA="${OXIBONSAI_REQUIRE_ISA:-neon,dotprod,i8mm}"
else
  export OXIBONSAI_REQUIRE_ISA="${OXIBONSAI_REQUIRE_ISA:-neon}"
fi

echo "== aarch64 clippy"
cargo clippy --target "$TARGET" -p oxibonsai-formats --all-targets --locked -- -D warnings
# --tests: the crate has no doc-tests, and an empty doc-test run would close the log on "0 passed".
echo "== aarch64 build"
cargo test --target "$TARGET" -p oxibonsai-formats --tests --locked --no-run
echo "== aarch64 tests ($QEMU -cpu $QEMU_CPU, tiers required: $OXIBONSAI_REQUIRE_ISA, at most ${TIMEOUT}s)"
status=0
timeout "$TIMEOUT" cargo test --target "$TARGET" -p oxibonsai-formats --tests --locked || status=$?
[ "$status" = 124 ] && fail "the emulated tests ran past AARCH64_TEST_TIMEOUT=${TIMEOUT}s"
[ "$status" = 0 ] || exit "$status"
# The ARM kernels against their scalar twins, shown in the log: one line per tier and format.
echo "== aarch64 kernels vs scalar, per tier"
timeout "$TIMEOUT" cargo test --target "$TARGET" -p oxibonsai-formats --locked --test kernels_lowbit \
  -- --exact awkward_shapes_match_the_scalar_dot --nocapture 2>&1 | tee "${TMPDIR:-/tmp}/aarch64-tiers.log"
for tier in ${OXIBONSAI_REQUIRE_ISA//,/ }; do
  grep -q "Q1_0 $tier:" "${TMPDIR:-/tmp}/aarch64-tiers.log" ||
    fail "no Q1_0 kernel of the $tier tier was compared with its scalar twin"
done
