//! AVX-512 (F, BW, VL, DQ; VNNI where present) kernels, one file per format. Every function here is `unsafe` with
//! `#[target_feature]`; the safe wrappers registered in the tables are only reachable through
//! `Kernels::new(Isa::Avx512)`, which checks the CPU first.

mod attention;
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

crate::kernels::float_entries!(float);

/// Several queries' attention scores (`Kernels::attention_scores`).
pub(crate) fn attention_scores(
    keys: &[half::f16],
    queries: &[half::f16],
    dim: usize,
    lens: &[usize],
    out: &mut [f32],
    out_stride: usize,
) {
    crate::kernels::check_attention_scores(keys, queries, dim, lens, out, out_stride);
    if dim == 0 {
        for (i, &len) in lens.iter().enumerate() {
            out[i * out_stride..i * out_stride + len].fill(0.0);
        }
        return;
    }
    assert!(
        dim <= crate::kernels::ATTENTION_WIDE_DIM,
        "attention_scores: heads of {dim} values are wider than the kernel takes"
    );
    // SAFETY: registered only through `Kernels::new(Isa::Avx512)`, which checked the CPU; the
    // lengths were just checked.
    unsafe { attention::attention_scores(keys, queries, dim, lens, out, out_stride) }
}

/// Several queries' weighted sums of value rows (`Kernels::attention_values`).
pub(crate) fn attention_values(
    weights: &[f32],
    w_stride: usize,
    lens: &[usize],
    rows: &[half::f16],
    out: &mut [f32],
) {
    crate::kernels::check_attention_values(weights, w_stride, lens, rows, out);
    // SAFETY: as above.
    unsafe { attention::attention_values(weights, w_stride, lens, rows, out) }
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
