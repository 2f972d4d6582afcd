//! Q1_0 × Q8_0 on NEON, four rows a pass (`lowbit_util::gemv_q8_0`). Each Q1_0 block (128
//! signs, one f16 scale) spans four Q8_0 blocks (32 codes, one f16 scale each). Per Q8_0 block
//! the 32 sign bits of a row are spread to one byte each — two table lookups from the block's 16
//! bit bytes (loaded once per block), each tested against its bit's position — giving masks of
//! −1 where a bit is set; the masks multiply the codes (`Σ m·q = −Σ(selected)`, SDOT or widening
//! multiplies), and the block's integer sum is `−2·Σ m·q − Σ(all)` (= Σ ±q, exact), Σ(all)
//! taken once for the four rows. The float arithmetic is the scalar `dot`'s, so the result is
//! bit-identical to it.

use core::arch::aarch64::*;

use super::lowbit_util::{dot_bytes, gemv_q8_0, sum_bytes, Q8_0Weights};

/// The bytes of `bits` (two of them, lowest first) spread to 16 lanes, each 0xFF where its bit
/// is set: lane `i` holds bit `i % 8` of byte `i / 8`.
///
/// # Safety
/// NEON present.
#[inline(always)]
pub(super) unsafe fn masks(bits: u16) -> uint8x16_t {
    const SPREAD: [u8; 16] = [0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1];
    const SELECT: [u8; 16] = [1, 2, 4, 8, 16, 32, 64, 128, 1, 2, 4, 8, 16, 32, 64, 128];
    let bytes = vreinterpretq_u8_u16(vdupq_n_u16(bits));
    let spread = vqtbl1q_u8(bytes, vld1q_u8(SPREAD.as_ptr()));
    vtstq_u8(spread, vld1q_u8(SELECT.as_ptr()))
}

/// One Q8_0 block's codes and their sum.
struct Codes {
    q: [int8x16_t; 2],
    all: int32x4_t,
}

struct Q1_0;

impl Q8_0Weights for Q1_0 {
    const BLOCK_BYTES: usize = core::mem::size_of::<crate::q1_0::BlockQ1_0>();
    const SPAN: usize = crate::q1_0::QK1_0 / crate::q8_0::QK8_0;
    type Act = Codes;

    #[inline(always)]
    unsafe fn load_act<const DOT: bool>(codes: *const u8) -> Codes {
        let q = [vld1q_s8(codes.cast()), vld1q_s8(codes.add(16).cast())];
        Codes {
            q,
            all: vdupq_n_s32(vaddvq_s32(sum_bytes::<DOT>(q[0], q[1]))),
        }
    }

    #[inline(always)]
    unsafe fn group_dot<const DOT: bool>(block: *const u8, k: usize, act: &Codes) -> int32x4_t {
        // Lane i of the lookup for codes 16·h + i (h = 0, 1) takes bit byte 4k + 2h + i / 8.
        const SPREAD: [[u8; 16]; 2] = [
            [0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1],
            [2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3],
        ];
        const SELECT: [u8; 16] = [1, 2, 4, 8, 16, 32, 64, 128, 1, 2, 4, 8, 16, 32, 64, 128];
        // The block's 128 sign bits (16 bytes after its scale): one load, four groups.
        let bits = vld1q_u8(block.add(2));
        let offset = vdupq_n_u8(4 * k as u8);
        let select = vld1q_u8(SELECT.as_ptr());
        let mask = |h: usize| {
            let index = vaddq_u8(vld1q_u8(SPREAD[h].as_ptr()), offset);
            vreinterpretq_s8_u8(vtstq_u8(vqtbl1q_u8(bits, index), select))
        };
        dot_bytes::<DOT>(
            dot_bytes::<DOT>(vdupq_n_s32(0), act.q[0], mask(0)),
            act.q[1],
            mask(1),
        )
    }

    #[inline(always)]
    unsafe fn finish(totals: int32x4_t, act: &Codes) -> int32x4_t {
        // totals = Σ m·q = −Σ(selected): Σ ±q = 2·Σ(selected) − Σ(all).
        vsubq_s32(vnegq_s32(vshlq_n_s32::<1>(totals)), act.all)
    }
}

/// # Safety
/// NEON present; buffers checked against the `GemvFn` contract (`check_lengths`).
#[target_feature(enable = "neon")]
pub(super) unsafe fn gemv(weights: &[u8], row_bytes: usize, activation: &[u8], out: &mut [f32]) {
    // SAFETY: the caller's contract; NEON was checked.
    unsafe { gemv_q8_0::<Q1_0, false>(weights, row_bytes, activation, out) }
}

/// # Safety
/// As [`gemv`], plus the dot-product extension.
#[target_feature(enable = "neon,dotprod")]
pub(super) unsafe fn gemv_dotprod(
    weights: &[u8],
    row_bytes: usize,
    activation: &[u8],
    out: &mut [f32],
) {
    // SAFETY: the caller's contract; NEON and the dot-product extension were checked.
    unsafe { gemv_q8_0::<Q1_0, true>(weights, row_bytes, activation, out) }
}
