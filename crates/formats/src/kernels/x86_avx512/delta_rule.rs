//! The gated delta rule's step (`kernels/delta_rule.rs`) on AVX-512: 16 lanes a pass over each
//! state row, by the shared driver.

use core::arch::x86_64::*;

use super::fwht::Avx512;
use crate::kernels::delta_rule::{delta_rule_rows, DeltaLanes};

impl DeltaLanes for Avx512 {
    #[inline(always)]
    unsafe fn fmadd(a: __m512, b: __m512, c: __m512) -> __m512 {
        _mm512_fmadd_ps(a, b, c)
    }
    #[inline(always)]
    unsafe fn hsum(v: __m512) -> f32 {
        _mm512_reduce_add_ps(v)
    }
}

/// # Safety
/// AVX-512F present; the lengths checked by `check_delta_rule`.
#[target_feature(enable = "avx512f")]
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
    unsafe { delta_rule_rows::<Avx512>(state, k, v, q, decay, beta, out) }
}
