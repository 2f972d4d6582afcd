//! Q1_0 × Q8_0 on AVX2: the 32 sign bits of a group are spread to one byte each (shuffle, test
//! against the bit's position) and select the activation codes they cover.

use core::arch::x86_64::*;

use super::lowbit_util::{dot4, gemv_q8_0, Q8_0Weights};

struct Q1_0;

impl Q8_0Weights for Q1_0 {
    const BLOCK_BYTES: usize = 18;
    const GROUPS_PER_BLOCK: usize = 4;
    const FACTOR: f32 = 2.0;
    const PERMUTED: bool = false;

    #[inline(always)]
    unsafe fn group_dot<const VNNI: bool>(block: *const u8, g: usize, act: __m256i) -> __m256i {
        let bits = block.add(2 + 4 * g).cast::<i32>().read_unaligned();
        let spread = _mm256_shuffle_epi8(
            _mm256_set1_epi32(bits),
            _mm256_setr_epi8(
                0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3,
                3, 3, 3, 3,
            ),
        );
        let select = _mm256_set1_epi64x(0x8040_2010_0804_0201_u64 as i64);
        let set = _mm256_cmpeq_epi8(_mm256_and_si256(spread, select), select);
        dot4::<VNNI>(
            _mm256_setzero_si256(),
            _mm256_set1_epi8(1),
            _mm256_and_si256(set, act),
        )
    }
}

/// # Safety
/// AVX2/FMA/F16C present; buffers checked against the `GemvFn` contract.
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn gemv(weights: &[u8], row_bytes: usize, activation: &[u8], out: &mut [f32]) {
    gemv_q8_0::<Q1_0, false>(weights, row_bytes, activation, out)
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
    gemv_q8_0::<Q1_0, true>(weights, row_bytes, activation, out)
}
