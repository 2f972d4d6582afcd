//! The gated delta rule's step (`kernels/delta_rule.rs`) on AVX2 + FMA: 8 lanes a pass over
//! each state row, by the shared driver.

use core::arch::x86_64::*;

use super::fwht::Avx2;
use crate::kernels::delta_rule::{delta_rule_rows, DeltaLanes};

impl DeltaLanes for Avx2 {
    #[inline(always)]
    unsafe fn fmadd(a: __m256, b: __m256, c: __m256) -> __m256 {
        _mm256_fmadd_ps(a, b, c)
    }
    #[inline(always)]
    unsafe fn hsum(v: __m256) -> f32 {
        let s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps::<1>(v));
        let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
        let s = _mm_add_ss(s, _mm_movehdup_ps(s));
        _mm_cvtss_f32(s)
    }
}

/// # Safety
/// AVX2 + FMA present; the lengths checked by `check_delta_rule`.
#[target_feature(enable = "avx2,fma")]
pub(crate) unsafe fn delta_rule(
    state: &mut [f32],
    k: &[f32],
    v: &[f32],
    q: &[f32],
    decay: f32,
    beta: f32,
    out: &mut [f32],
) {
    // SAFETY: the caller's contract is the driver's.
    unsafe { delta_rule_rows::<Avx2>(state, k, v, q, decay, beta, out) }
}
