//! TQ2_0 × Q8_K on NEON, four rows a pass (`lowbit_util::gemv_q8_k`). Byte m of 32-byte half h
//! holds the codes of values 128h + 32l + m at bits 2l. The crumbs are masked in place (0x03,
//! 0x0C, 0x30; the top one shifted down, since 0x80 would read as a negative byte) and dotted
//! with the activation run of their position into an accumulator per position: crumb position
//! l's sum is exactly 4ˡ times the codes' (every lane of it, product by product), so exact
//! shifts bring the positions together once per block instead of a shift per vector. Exact
//! integer sums and the scalar `dot`'s float arithmetic: bit-identical to it.

use core::arch::aarch64::*;
use core::mem::{offset_of, size_of};

use super::lowbit_util::{dot_bytes, gemv_q8_k, totals, Q8KWeights, BAND};
use crate::tq2_0::BlockTQ2_0;

struct TQ2_0;

impl Q8KWeights for TQ2_0 {
    const BLOCK_BYTES: usize = size_of::<BlockTQ2_0>();
    const SCALE_OFFSET: usize = offset_of!(BlockTQ2_0, d);

    #[inline(always)]
    unsafe fn band_dot<const DOT: bool>(blocks: [*const u8; BAND], codes: *const u8) -> int32x4_t {
        // Per row r: acc[0][r] takes crumb positions 0 and 3 (unscaled), acc[1][r] position 1
        // (scaled by 4), acc[2][r] position 2 (by 16). At most 32 products of 48 · 128 a lane:
        // far inside i32, and a pair of them inside i16 (`dot_bytes`). The steps are written
        // out so that every address is a constant offset.
        let mut acc = [[vdupq_n_s32(0); BAND]; 3];
        crumb_step::<DOT, 0>(&mut acc, blocks, codes);
        crumb_step::<DOT, 1>(&mut acc, blocks, codes);
        crumb_step::<DOT, 2>(&mut acc, blocks, codes);
        crumb_step::<DOT, 3>(&mut acc, blocks, codes);
        // Exact divisions: each lane of acc[1] / acc[2] is a sum of multiples of 4 / 16.
        let [acc03, acc1, acc2] = acc;
        totals(core::array::from_fn(|r| {
            vsraq_n_s32::<4>(vsraq_n_s32::<2>(acc03[r], acc1[r]), acc2[r])
        }))
    }
}

/// The band's 16-byte slice `J` of the codes (bytes 16J.., half J / 2): its four crumb
/// positions dotted with their activation runs. Whole arrays updated (no indexing by a loop
/// counter) keep the accumulators in registers.
///
/// # Safety
/// As `band_dot`.
#[inline(always)]
unsafe fn crumb_step<const DOT: bool, const J: usize>(
    acc: &mut [[int32x4_t; BAND]; 3],
    blocks: [*const u8; BAND],
    codes: *const u8,
) {
    let s8 = vreinterpretq_s8_u8;
    let x: [uint8x16_t; BAND] = core::array::from_fn(|r| vld1q_u8(blocks[r].add(16 * J)));
    let act = |l: usize| vld1q_s8(codes.add(16 * (8 * (J / 2) + 2 * l + J % 2)).cast());
    let (a0, a1, a2, a3) = (act(0), act(1), act(2), act(3));
    let (m0, m1, m2) = (vdupq_n_u8(0x03), vdupq_n_u8(0x0C), vdupq_n_u8(0x30));
    let [acc03, acc1, acc2] = acc;
    *acc03 = core::array::from_fn(|r| {
        let sum = dot_bytes::<DOT>(acc03[r], s8(vandq_u8(x[r], m0)), a0);
        dot_bytes::<DOT>(sum, s8(vshrq_n_u8::<6>(x[r])), a3)
    });
    *acc1 = core::array::from_fn(|r| dot_bytes::<DOT>(acc1[r], s8(vandq_u8(x[r], m1)), a1));
    *acc2 = core::array::from_fn(|r| dot_bytes::<DOT>(acc2[r], s8(vandq_u8(x[r], m2)), a2));
}

/// # Safety
/// NEON present; buffers checked against the `GemvFn` contract (`check_lengths`).
#[target_feature(enable = "neon")]
pub(super) unsafe fn gemv(weights: &[u8], row_bytes: usize, activation: &[u8], out: &mut [f32]) {
    // SAFETY: the caller's contract; NEON was checked.
    unsafe { gemv_q8_k::<TQ2_0, false>(weights, row_bytes, activation, out) }
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
    unsafe { gemv_q8_k::<TQ2_0, true>(weights, row_bytes, activation, out) }
}
