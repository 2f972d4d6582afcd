//! PTQ1_0 × Q8_0 on AVX-512, two groups of 64 values a block. Group 0 is the first stage's 16
//! bytes in every lane times 1, 3, 9, 27; group 1 is those bytes times 81 in lane 0, then the
//! second stage's 8 bytes (from a load at offset 12, inside the block) twice a lane times 1 … 81,
//! and the two `qh` bytes four times — each byte times 3ⁿ brings trit n to the top (see TQ1_0).

use core::arch::x86_64::*;
use core::mem::{offset_of, size_of};

use super::lowbit_util::{constant, dot4, gemv_q8_0, Q8_0Weights};
use super::tq1_0::{mul_bytes, multipliers, top_trit};
use crate::ptq1_0::BlockPTQ1_0;

const M0: [u8; 64] = multipliers(&[(1, 16), (3, 16), (9, 16), (27, 16)]);
const M1: [u8; 64] = multipliers(&[
    (81, 16),
    (1, 8),
    (3, 8),
    (9, 8),
    (27, 8),
    (81, 8),
    (1, 2),
    (3, 2),
    (9, 2),
    (27, 2),
]);
/// Per lane of the load at 12: lane 0 unused (overwritten), lanes 1–2 the second stage twice,
/// lane 3 the second stage then `qh` four times.
const SECOND: [u8; 64] = {
    let mut t = [0u8; 64];
    let mut i = 16;
    while i < 64 {
        let j = i % 16;
        t[i] = if i >= 56 {
            12 + (j % 2) as u8
        } else {
            4 + (j % 8) as u8
        };
        i += 1;
    }
    t
};

struct PTQ1_0;

impl Q8_0Weights for PTQ1_0 {
    const BLOCK_BYTES: usize = size_of::<BlockPTQ1_0>();
    const GROUPS_PER_BLOCK: usize = 2;
    const FACTOR: f32 = 1.0;
    const PERMUTED: bool = false;
    const SCALE_OFFSET: usize = offset_of!(BlockPTQ1_0, d);

    #[inline(always)]
    unsafe fn group_dot<const VNNI: bool>(block: *const u8, g: usize, act: __m512i) -> __m512i {
        dot4::<VNNI>(_mm512_setzero_si512(), codes(block, g), act)
    }
}

/// The 64 codes (trit, 0..=2) of values 64g..64g+64 of the block at `block`, in value order.
///
/// # Safety
/// `block` points at a whole block; AVX-512 F/BW enabled.
#[inline(always)]
pub(super) unsafe fn codes(block: *const u8, g: usize) -> __m512i {
    let a = _mm_loadu_si128(block.cast());
    let (bytes, m) = if g == 0 {
        (_mm512_broadcast_i32x4(a), &M0)
    } else {
        let b = _mm512_broadcast_i32x4(_mm_loadu_si128(block.add(12).cast()));
        let second = _mm512_shuffle_epi8(b, constant(&SECOND));
        (_mm512_inserti32x4::<0>(second, a), &M1)
    };
    top_trit(mul_bytes(bytes, constant(m)))
}

/// # Safety
/// AVX-512 F/BW/VL/DQ present; buffers checked against the `GemvFn` contract.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq")]
pub(super) unsafe fn gemv(weights: &[u8], row_bytes: usize, activation: &[u8], out: &mut [f32]) {
    gemv_q8_0::<PTQ1_0, false>(weights, row_bytes, activation, out)
}

/// # Safety
/// As [`gemv`], plus AVX-512 VNNI.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq,avx512vnni")]
pub(super) unsafe fn gemv_vnni(
    weights: &[u8],
    row_bytes: usize,
    activation: &[u8],
    out: &mut [f32],
) {
    gemv_q8_0::<PTQ1_0, true>(weights, row_bytes, activation, out)
}
