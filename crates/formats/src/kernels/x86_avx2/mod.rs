//! AVX2 (+FMA, F16C) kernels, one file per format. Every function here is `unsafe` with
//! `#[target_feature]`; the safe wrappers registered in the tables are only reachable through
//! `Kernels::new(Isa::Avx2 or higher)`, which checks the CPU first.

mod float;
mod gemm;
mod gemm_formats;
mod gemm_kquants;
pub(super) mod kquants;
mod lowbit;
pub(super) mod lowbit_util;
mod packed;
mod q1_0;
mod q2_0;
mod q4;
mod q8_act;
mod standard;
mod std_util;
mod tq1_0;
mod tq2_0;

pub(crate) use packed::packed;

use crate::kernels::GemvFn;
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

crate::kernels::float_entries!(float);

/// The fast matrix-matrix kernel of a weight format, if this tier has one.
pub(crate) fn gemm(kind: FormatKind) -> Option<crate::kernels::GemmKernel> {
    gemm_formats::gemm_kernel(kind)
}
