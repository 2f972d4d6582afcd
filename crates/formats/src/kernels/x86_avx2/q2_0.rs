//! The Q2_0 codec × Q8_0 on AVX2, for every layout (64-value Q2_0, 128-value PQ2_0 and legacy
//! Q2_0): 16 code bytes broadcast to both lanes and shifted by two bit pairs per group give the
//! order the activation was permuted into (see `lowbit_util::permute_for_2bit`).

use core::arch::x86_64::*;

use super::lowbit_util::{dot4, gemv_q8_0, Q8_0Weights};

/// `UNITS` units of 64 values a block (two groups each).
struct Q2<const UNITS: usize>;

impl<const UNITS: usize> Q8_0Weights for Q2<UNITS> {
    const BLOCK_BYTES: usize = 2 + 16 * UNITS;
    const GROUPS_PER_BLOCK: usize = 2 * UNITS;
    const FACTOR: f32 = 1.0;
    const PERMUTED: bool = true;

    #[inline(always)]
    unsafe fn group_dot<const VNNI: bool>(block: *const u8, g: usize, act: __m256i) -> __m256i {
        let bytes = _mm_loadu_si128(block.add(2 + 16 * (g / 2)).cast());
        let shifts = if g.is_multiple_of(2) {
            _mm256_setr_epi32(0, 0, 0, 0, 2, 2, 2, 2)
        } else {
            _mm256_setr_epi32(4, 4, 4, 4, 6, 6, 6, 6)
        };
        let codes = _mm256_and_si256(
            _mm256_srlv_epi32(_mm256_broadcastsi128_si256(bytes), shifts),
            _mm256_set1_epi8(3),
        );
        dot4::<VNNI>(_mm256_setzero_si256(), codes, act)
    }
}

macro_rules! kernels {
    ($plain:ident, $vnni:ident, $units:literal) => {
        /// # Safety
        /// AVX2/FMA/F16C present; buffers checked against the `GemvFn` contract.
        #[target_feature(enable = "avx2,fma,f16c")]
        pub(super) unsafe fn $plain(
            weights: &[u8],
            row_bytes: usize,
            activation: &[u8],
            out: &mut [f32],
        ) {
            gemv_q8_0::<Q2<$units>, false>(weights, row_bytes, activation, out)
        }

        /// # Safety
        /// As the plain kernel, plus AVX-VNNI.
        #[target_feature(enable = "avx2,fma,f16c,avxvnni")]
        pub(super) unsafe fn $vnni(
            weights: &[u8],
            row_bytes: usize,
            activation: &[u8],
            out: &mut [f32],
        ) {
            gemv_q8_0::<Q2<$units>, true>(weights, row_bytes, activation, out)
        }
    };
}

kernels!(gemv_g64, gemv_g64_vnni, 1);
kernels!(gemv_g128, gemv_g128_vnni, 2);
