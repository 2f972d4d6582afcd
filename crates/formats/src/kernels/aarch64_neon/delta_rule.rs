//! The gated delta rule's step (`kernels/delta_rule.rs`) on NEON: 4 lanes a pass over each state
//! row, by the shared driver.

use core::arch::aarch64::*;

use super::fwht::Neon;
use crate::kernels::delta_rule::{delta_rule_rows, DeltaLanes};

impl DeltaLanes for Neon {
    #[inline(always)]
    unsafe fn fmadd(a: float32x4_t, b: float32x4_t, c: float32x4_t) -> float32x4_t {
        vfmaq_f32(c, a, b)
    }
    #[inline(always)]
    unsafe fn hsum(v: float32x4_t) -> f32 {
        vaddvq_f32(v)
    }
}

/// # Safety
/// NEON present; the lengths checked by `check_delta_rule`.
#[target_feature(enable = "neon")]
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
    unsafe { delta_rule_rows::<Neon>(state, k, v, q, decay, beta, out) }
}
