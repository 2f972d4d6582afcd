//! PTQ1_0 × Q8_0 on AVX2. Each group of 32 values is assembled from its packed bytes in value
//! order — the 16 bytes of the first stage, or the 8 of the second (read from a load at offset
//! 12, which also holds the two `qh` bytes and stays inside the block) duplicated — multiplied
//! by 3ⁿ per byte to bring trit n to the top, and read as TQ1_0's kernel reads it.

use core::arch::x86_64::*;
use core::mem::{offset_of, size_of};

use super::lowbit_util::{dot4, gemv_q8_0, Q8_0Weights};
use super::tq1_0::{mul_bytes, top_trit};
use crate::ptq1_0::BlockPTQ1_0;

struct PTQ1_0;

/// Second-stage bytes (4..12 of the load at 12) twice, or once and then `qh` (12, 13) four times.
#[inline(always)]
unsafe fn second_stage(b: __m128i, with_qh: bool) -> __m128i {
    let idx = if with_qh {
        _mm_setr_epi8(4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 12, 13, 12, 13, 12, 13)
    } else {
        _mm_setr_epi8(4, 5, 6, 7, 8, 9, 10, 11, 4, 5, 6, 7, 8, 9, 10, 11)
    };
    _mm_shuffle_epi8(b, idx)
}

impl Q8_0Weights for PTQ1_0 {
    const BLOCK_BYTES: usize = size_of::<BlockPTQ1_0>();
    const GROUPS_PER_BLOCK: usize = 4;
    const FACTOR: f32 = 1.0;
    const PERMUTED: bool = false;
    const SCALE_OFFSET: usize = offset_of!(BlockPTQ1_0, d);

    #[inline(always)]
    unsafe fn group_dot<const VNNI: bool>(block: *const u8, g: usize, act: __m256i) -> __m256i {
        dot4::<VNNI>(_mm256_setzero_si256(), codes(block, g), act)
    }
}

/// The 32 codes (trit, 0..=2) of values 32g..32g+32 of the block at `block`, in value order.
///
/// # Safety
/// `block` points at a whole block; AVX2 enabled.
#[inline(always)]
pub(super) unsafe fn codes(block: *const u8, g: usize) -> __m256i {
    let a = _mm_loadu_si128(block.cast());
    let b = _mm_loadu_si128(block.add(12).cast());
    // Per 16-bit lane (both bytes alike), the power of 3 that brings each value's trit up.
    let (bytes, m) = match g {
        0 => (
            _mm256_broadcastsi128_si256(a),
            _mm256_setr_epi16(1, 1, 1, 1, 1, 1, 1, 1, 3, 3, 3, 3, 3, 3, 3, 3),
        ),
        1 => (
            _mm256_broadcastsi128_si256(a),
            _mm256_setr_epi16(9, 9, 9, 9, 9, 9, 9, 9, 27, 27, 27, 27, 27, 27, 27, 27),
        ),
        2 => (
            _mm256_set_m128i(second_stage(b, false), a),
            _mm256_setr_epi16(81, 81, 81, 81, 81, 81, 81, 81, 1, 1, 1, 1, 3, 3, 3, 3),
        ),
        _ => (
            _mm256_set_m128i(second_stage(b, true), second_stage(b, false)),
            _mm256_setr_epi16(9, 9, 9, 9, 27, 27, 27, 27, 81, 81, 81, 81, 1, 3, 9, 27),
        ),
    };
    top_trit(mul_bytes(bytes, m))
}

/// # Safety
/// AVX2/FMA/F16C present; buffers checked against the `GemvFn` contract.
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn gemv(weights: &[u8], row_bytes: usize, activation: &[u8], out: &mut [f32]) {
    gemv_q8_0::<PTQ1_0, false>(weights, row_bytes, activation, out)
}

/// # Safety
/// As [`gemv`], plus AVX-VNNI.
#[target_feature(enable = "avx2,fma,f16c,avxvnni")]
pub(super) unsafe fn gemv_vnni(
    weights: &[u8],
    row_bytes: usize,
    activation: &[u8],
    out: &mut [f32],
) {
    gemv_q8_0::<PTQ1_0, true>(weights, row_bytes, activation, out)
}
