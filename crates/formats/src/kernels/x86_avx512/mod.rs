//! AVX-512 (F, BW, VL, DQ; VNNI where present) kernels, one file per format. Every function here is `unsafe` with
//! `#[target_feature]`; the safe wrappers registered in the tables are only reachable through
//! `Kernels::new(Isa::Avx512)`, which checks the CPU first.

mod attention;
mod delta_rule;
mod float;
mod fwht;
mod gemm;
mod gemm_formats;
mod gemm_kquants;
mod kquants;
mod lowbit;
mod lowbit_util;
mod packed;
mod ptq1_0;
mod q1_0;
mod q2_0;
mod q4;
mod standard;
mod tq1_0;
mod tq2_0;

pub(super) use packed::takes_base3;

use crate::kernels::tier::{none, TierTable};
use crate::kernels::{GemvFn, Isa};
use crate::FormatKind;

/// What this tier provides (`Kernels::new` folds it over the AVX2 tier's, whose activation
/// conversions and non-VNNI integer kernels it keeps).
pub(crate) const TABLE: TierTable = TierTable {
    isa: Isa::Avx512,
    gemv,
    quantize_activation: none,
    gemm: gemm_formats::gemm,
    packed: packed::packed,
    weighted_sum: Some(weighted_sum),
    softmax: Some(softmax),
    silu_mul: Some(silu_mul),
    attention_scores: Some(attention_scores),
    delta_rule: Some(delta_rule),
    attention_values: Some(attention_values),
    // The AVX2 tier's: the value rows' widening, not the arithmetic, bounds these.
    block_values: none,
    fwht: Some(fwht),
};

/// The fast matrix-vector kernel of a weight format, if this tier has one.
fn gemv(kind: FormatKind) -> Option<GemvFn> {
    lowbit::gemv(kind)
        .or_else(|| standard::gemv(kind))
        .or_else(|| kquants::gemv(kind))
}

crate::kernels::float_entries!(float);

crate::kernels::fwht_entry!(fwht);
crate::kernels::delta_rule_entry!(delta_rule);

crate::kernels::attention_entries!(attention);

#[inline(always)]
pub(super) fn lanes_left(left: usize) -> core::arch::x86_64::__mmask16 {
    if left >= 16 {
        u16::MAX
    } else {
        (1u16 << left) - 1
    }
}
