//! AVX2 (+FMA, F16C) kernels, one file per format. Every function here is `unsafe` with
//! `#[target_feature]`; the safe wrappers registered in the tables are only reachable through
//! `Kernels::new(Isa::Avx2 or higher)`, which checks the CPU first.

mod block_values;
mod delta_rule;
mod float;
mod fwht;
mod gemm;
mod gemm_formats;
mod gemm_kquants;
pub(super) mod kquants;
mod lowbit;
pub(super) mod lowbit_util;
mod packed;
mod ptq1_0;
mod q1_0;
mod q2_0;
mod q4;
mod q8_act;
mod standard;
mod std_util;
mod tq1_0;
mod tq2_0;

use crate::kernels::tier::TierTable;
use crate::kernels::{GemvFn, Isa};
use crate::FormatKind;

/// What this tier provides (`Kernels::new` folds it over the scalar tier).
pub(crate) const TABLE: TierTable = TierTable {
    isa: Isa::Avx2,
    gemv,
    quantize_activation: standard::quantize_activation,
    gemm: gemm_formats::gemm_kernel,
    packed: packed::packed,
    weighted_sum: Some(weighted_sum),
    softmax: Some(softmax),
    silu_mul: Some(silu_mul),
    attention_scores: None,
    delta_rule: Some(delta_rule),
    attention_values: None,
    block_values: block_values::block_values,
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
