//! TQ1_0 × Q8_K on NEON, four rows a pass (`lowbit_util::gemv_q8_k`). A byte holds five trits
//! as a base-3 fraction: multiplying it by 3ⁿ (mod 256, a byte multiply) brings trit n to the
//! top, where it reads as ⌊3q / 256⌋ = ((q + q/2) / 2) / 64 (a halving add and two shifts).
//! Each activation vector serves the band's four rows, their dot products interleaved.
//! The 32 wide bytes give values 32n + m, the 16 narrow ones 160 + 16n + m, and the 4 high
//! bytes, repeated across the vector and multiplied per lane, values 240 + 4n + j. Exact integer
//! sums and the scalar `dot`'s float arithmetic: bit-identical to it.

use core::arch::aarch64::*;
use core::arch::asm;
use core::mem::{offset_of, size_of};

use super::lowbit_util::{dot_bytes, gemv_q8_k, totals, Q8KWeights, BAND};
use crate::tq1_0::BlockTQ1_0;

/// The trit at the top of each byte, 0..=2: ⌊3q / 256⌋ = ⌊(q + ⌊q / 2⌋) / 2⌋ / 64.
///
/// # Safety
/// NEON present.
#[inline(always)]
pub(super) unsafe fn top_trit(q: uint8x16_t) -> int8x16_t {
    vreinterpretq_s8_u8(vshrq_n_u8::<6>(vhaddq_u8(q, vshrq_n_u8::<1>(q))))
}

/// [`top_trit`] with ⌊q / 2⌋ as a halving add of zero rather than a shift, for the SDOT loop of
/// the dot-product CPUs: on Neoverse-N1 / Cortex-A76 shifts issue on only one of the two
/// vector pipes, halving adds on both, and that loop is bound by its vector operations (the
/// plain NEON loop, for in-order cores, keeps the shift). Inline assembly, since LLVM would
/// turn the halving add back into the shift.
///
/// # Safety
/// NEON present.
#[inline(always)]
unsafe fn top_trit_two_pipes(q: uint8x16_t) -> int8x16_t {
    let half: uint8x16_t;
    // SAFETY: a register-only base NEON instruction; NEON is the caller's guarantee.
    unsafe {
        asm!(
            "uhadd {h:v}.16b, {q:v}.16b, {z:v}.16b",
            h = lateout(vreg) half,
            q = in(vreg) q,
            z = in(vreg) vdupq_n_u8(0),
            options(pure, nomem, nostack, preserves_flags),
        );
    }
    vreinterpretq_s8_u8(vshrq_n_u8::<6>(vhaddq_u8(q, half)))
}

struct TQ1_0;

impl Q8KWeights for TQ1_0 {
    const BLOCK_BYTES: usize = size_of::<BlockTQ1_0>();
    const SCALE_OFFSET: usize = offset_of!(BlockTQ1_0, d);

    #[inline(always)]
    unsafe fn band_dot<const DOT: bool>(blocks: [*const u8; BAND], codes: *const u8) -> int32x4_t {
        const POW3: [u8; 5] = [1, 3, 9, 27, 81];
        const HIGH_POW3: [u8; 16] = [1, 1, 1, 1, 3, 3, 3, 3, 9, 9, 9, 9, 27, 27, 27, 27];
        let act = |k: usize| vld1q_s8(codes.add(16 * k).cast());
        // Per row: the two wide vectors and the narrow one, kept for the five trits. Whole
        // arrays updated per step (no indexing by a loop counter) keep them in registers, and
        // the four rows' dot products interleave, none waiting on another's.
        let x: [[uint8x16_t; BAND]; 3] =
            core::array::from_fn(|v| core::array::from_fn(|r| vld1q_u8(blocks[r].add(16 * v))));
        let mut acc = [vdupq_n_s32(0); BAND];
        for (n, &p) in POW3.iter().enumerate() {
            let p = vdupq_n_u8(p);
            let (a0, a1, a2) = (act(2 * n), act(2 * n + 1), act(10 + n));
            acc = core::array::from_fn(|r| {
                let t = |v: uint8x16_t| {
                    let q = vmulq_u8(v, p);
                    if DOT {
                        top_trit_two_pipes(q)
                    } else {
                        top_trit(q)
                    }
                };
                let acc = dot_bytes::<DOT>(acc[r], t(x[0][r]), a0);
                let acc = dot_bytes::<DOT>(acc, t(x[1][r]), a1);
                dot_bytes::<DOT>(acc, t(x[2][r]), a2)
            });
        }
        let a = act(15);
        let high_pow3 = vld1q_u8(HIGH_POW3.as_ptr());
        totals(core::array::from_fn(|r| {
            let high = u32::from_le_bytes(blocks[r].add(48).cast::<[u8; 4]>().read_unaligned());
            let h = vmulq_u8(vreinterpretq_u8_u32(vdupq_n_u32(high)), high_pow3);
            dot_bytes::<DOT>(acc[r], top_trit(h), a)
        }))
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
