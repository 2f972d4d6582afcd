//! Helpers of the standard-format kernels (F32, F16, Q8_0, Q4_0, Q4_1 and the activation
//! conversions): horizontal reductions and the byte packing the conversions share.

use std::arch::x86_64::*;

/// Sum of the 8 lanes.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) fn hsum_ps(v: __m256) -> f32 {
    let s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps::<1>(v));
    let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    let s = _mm_add_ss(s, _mm_movehdup_ps(s));
    _mm_cvtss_f32(s)
}

/// Sum of the 8 lanes.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) fn hsum_epi32(v: __m256i) -> i32 {
    let s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256::<1>(v));
    let s = _mm_add_epi32(s, _mm_unpackhi_epi64(s, s));
    let s = _mm_add_epi32(s, _mm_shuffle_epi32::<0b01>(s));
    _mm_cvtsi128_si32(s)
}

/// Largest lane; callers pass values that hold no NaN.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) fn hmax_ps(v: __m256) -> f32 {
    let s = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps::<1>(v));
    let s = _mm_max_ps(s, _mm_movehl_ps(s, s));
    let s = _mm_max_ss(s, _mm_movehdup_ps(s));
    _mm_cvtss_f32(s)
}

/// `|v|` folded into `acc` so that a NaN lane of `v` is skipped, as `f32::max` and the scalar
/// `abs() > amax` comparisons skip it: `maxps` returns its second operand when either is NaN.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) fn fold_abs_max(acc: __m256, v: __m256) -> __m256 {
    _mm256_max_ps(_mm256_andnot_ps(_mm256_set1_ps(-0.0), v), acc)
}

/// Packs four vectors of int32 (each already in −128..=127, or wrapped to 0..=255 when
/// `unsigned`) into 32 bytes in lane order.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) fn pack_i32x32(i: [__m256i; 4], unsigned: bool) -> __m256i {
    // The packs interleave the two 128-bit halves; the final permute puts the 4-byte groups
    // back in source order.
    let packed = if unsigned {
        _mm256_packus_epi16(
            _mm256_packus_epi32(i[0], i[1]),
            _mm256_packus_epi32(i[2], i[3]),
        )
    } else {
        _mm256_packs_epi16(
            _mm256_packs_epi32(i[0], i[1]),
            _mm256_packs_epi32(i[2], i[3]),
        )
    };
    _mm256_permutevar8x32_epi32(packed, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7))
}

/// f32 → f16 bits, round to nearest even (what `F16Le::from_f32` does, NaN included).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) fn f16_bits(x: f32) -> u16 {
    let h = _mm_cvtps_ph::<_MM_FROUND_TO_NEAREST_INT>(_mm_set_ss(x));
    _mm_extract_epi16::<0>(h) as u16
}
