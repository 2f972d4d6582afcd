//! TQ1_0 × Q8_K on NEON, four rows a pass (`lowbit_util::gemv_q8_k`). A byte holds five trits
//! as a base-3 fraction: multiplying it by 3ⁿ (mod 256, a byte multiply) brings trit n to the
//! top, where it reads as ⌊3q / 256⌋ = ((q + q/2) / 2) / 64 (a halving add and two shifts).
//! The 32 wide bytes give values 32n + m, the 16 narrow ones 160 + 16n + m, and the 4 high
//! bytes, repeated across the vector and multiplied per lane, values 240 + 4n + j. Exact integer
//! sums and the scalar `dot`'s float arithmetic: bit-identical to it.

use core::arch::aarch64::*;
use core::mem::{offset_of, size_of};

use super::lowbit_util::{dot_bytes, gemv_q8_k, Q8KWeights};
use crate::tq1_0::BlockTQ1_0;

/// The trit at the top of each byte, 0..=2.
///
/// # Safety
/// NEON present.
#[inline(always)]
pub(super) unsafe fn top_trit(q: uint8x16_t) -> int8x16_t {
    vreinterpretq_s8_u8(vshrq_n_u8::<6>(vhaddq_u8(q, vshrq_n_u8::<1>(q))))
}

struct TQ1_0;

impl Q8KWeights for TQ1_0 {
    const BLOCK_BYTES: usize = size_of::<BlockTQ1_0>();
    const SCALE_OFFSET: usize = offset_of!(BlockTQ1_0, d);

    #[inline(always)]
    unsafe fn block_dot<const DOT: bool>(block: *const u8, act: &[int8x16_t; 16]) -> int32x4_t {
        const POW3: [u8; 5] = [1, 3, 9, 27, 81];
        const HIGH_POW3: [u8; 16] = [1, 1, 1, 1, 3, 3, 3, 3, 9, 9, 9, 9, 27, 27, 27, 27];
        let wide = [vld1q_u8(block), vld1q_u8(block.add(16))];
        let narrow = vld1q_u8(block.add(32));
        let high = u32::from_le_bytes(block.add(48).cast::<[u8; 4]>().read_unaligned());
        let mut acc = vdupq_n_s32(0);
        for (n, &p) in POW3.iter().enumerate() {
            let p = vdupq_n_u8(p);
            for (half, &w) in wide.iter().enumerate() {
                let t = top_trit(vmulq_u8(w, p));
                acc = dot_bytes::<DOT>(acc, t, act[2 * n + half]);
            }
            acc = dot_bytes::<DOT>(acc, top_trit(vmulq_u8(narrow, p)), act[10 + n]);
        }
        let h = vmulq_u8(
            vreinterpretq_u8_u32(vdupq_n_u32(high)),
            vld1q_u8(HIGH_POW3.as_ptr()),
        );
        dot_bytes::<DOT>(acc, top_trit(h), act[15])
    }
}

/// # Safety
/// NEON present; buffers checked against the `GemvFn` contract (`check_lengths`).
#[target_feature(enable = "neon")]
pub(super) unsafe fn gemv(weights: &[u8], row_bytes: usize, activation: &[u8], out: &mut [f32]) {
    // SAFETY: the caller's contract; NEON was checked.
    unsafe { gemv_q8_k::<TQ1_0, false>(weights, row_bytes, activation, out) }
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
    unsafe { gemv_q8_k::<TQ1_0, true>(weights, row_bytes, activation, out) }
}
