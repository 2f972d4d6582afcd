//! AVX-512 (F, BW, VL, DQ; VNNI where present) kernels, one file per format. Every function here is `unsafe` with
//! `#[target_feature]`; the safe wrappers registered in the tables are only reachable through
//! `Kernels::new(Isa::Avx512)`, which checks the CPU first.

mod float;
mod gemm;
mod gemm_formats;
mod gemm_kquants;
mod kquants;
mod lowbit;
mod lowbit_util;
mod packed;
mod q1_0;
mod q2_0;
mod q4;
mod standard;
mod tq1_0;
mod tq2_0;

pub(crate) use packed::packed;

use crate::kernels::{GemmKernel, GemvFn};
use crate::{FormatKind, QuantizeFn};

/// The fast matrix-vector kernel of a weight format, if this tier has one.
pub(crate) fn gemv(kind: FormatKind) -> Option<GemvFn> {
    lowbit::gemv(kind)
        .or_else(|| standard::gemv(kind))
        .or_else(|| kquants::gemv(kind))
}

/// The fast activation conversion into a partner format, if this tier has one.
pub(crate) fn quantize_activation(kind: FormatKind) -> Option<QuantizeFn> {
    standard::quantize_activation(kind)
}

/// The fast matrix-matrix kernel of a weight format, if this tier has one.
pub(crate) fn gemm(kind: FormatKind) -> Option<GemmKernel> {
    gemm_formats::gemm(kind)
}

/// SwiGLU's gate in place (`Kernels::silu_mul`; equal lengths, as it passes them).
pub(crate) fn silu_mul(gate: &mut [f32], up: &[f32]) {
    assert_eq!(gate.len(), up.len(), "silu_mul: gate and up lengths");
    // SAFETY: registered only through `Kernels::new` for this tier, which checked the CPU; the
    // lengths were just checked.
    unsafe { float::silu_mul(gate, up) }
}

/// Attention's softmax numerator in place (`Kernels::softmax`).
pub(crate) fn softmax(scores: &mut [f32], scale: f32) -> f32 {
    // SAFETY: registered only through `Kernels::new` for this tier, which checked the CPU; the
    // kernel reads and writes `scores` only.
    unsafe { float::softmax(scores, scale) }
}

/// The value side of attention, `out[c] = Σ_j weights[j] · rows[j·out.len() + c]`.
pub(crate) fn weighted_sum(weights: &[f32], rows: &[half::f16], out: &mut [f32]) {
    assert!(
        rows.len() >= weights.len() * out.len(),
        "weighted_sum: {} rows of {} values asked from {} values",
        weights.len(),
        out.len(),
        rows.len()
    );
    // SAFETY: registered only through `Kernels::new` for this tier, which checked the CPU; the
    // lengths were just checked.
    unsafe { float::weighted_sum(weights, rows, out) }
}

/// The mask of the 16 lanes that still lie inside a run with `left` values to go (all of them
/// when 16 or more remain): the masked loads and stores at the ends of every kernel of this tier.
#[inline(always)]
pub(super) fn lanes_left(left: usize) -> core::arch::x86_64::__mmask16 {
    if left >= 16 {
        u16::MAX
    } else {
        (1u16 << left) - 1
    }
}
