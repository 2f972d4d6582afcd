//! TQ2_0 × Q8_K on NEON, four rows a pass (`lowbit_util::gemv_q8_k`): each 32-byte half of the
//! codes, shifted by 0, 2, 4, 6 bits, yields four runs of 32 codes in value order, dotted with
//! the activation as it lies. Exact integer sums and the scalar `dot`'s float arithmetic:
//! bit-identical to it.

use core::arch::aarch64::*;
use core::mem::{offset_of, size_of};

use super::lowbit_util::{dot_bytes, gemv_q8_k, Q8KWeights};
use crate::tq2_0::BlockTQ2_0;

struct TQ2_0;

impl Q8KWeights for TQ2_0 {
    const BLOCK_BYTES: usize = size_of::<BlockTQ2_0>();
    const SCALE_OFFSET: usize = offset_of!(BlockTQ2_0, d);

    #[inline(always)]
    unsafe fn block_dot<const DOT: bool>(block: *const u8, act: &[int8x16_t; 16]) -> int32x4_t {
        let three = vdupq_n_u8(3);
        let x: [uint8x16_t; 4] = core::array::from_fn(|j| vld1q_u8(block.add(16 * j)));
        let mut acc = vdupq_n_s32(0);
        for (j, &x) in x.iter().enumerate() {
            // Byte m of half h = j / 2 holds values 128h + 32l + m at bits 2l.
            let runs = [
                vandq_u8(x, three),
                vandq_u8(vshrq_n_u8::<2>(x), three),
                vandq_u8(vshrq_n_u8::<4>(x), three),
                vshrq_n_u8::<6>(x),
            ];
            for (l, c) in runs.into_iter().enumerate() {
                let a = act[8 * (j / 2) + 2 * l + j % 2];
                acc = dot_bytes::<DOT>(acc, vreinterpretq_s8_u8(c), a);
            }
        }
        acc
    }
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
