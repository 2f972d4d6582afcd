//! Tier tables: what each ISA provides, and the order `Kernels::new` folds them in.
//!
//! Each ISA folder exports one [`TierTable`] (`x86_avx2::TABLE`, …) naming the kernels it has:
//! a lookup per format for the matrix kernels and activation conversions, an entry (or `None`)
//! for each float kernel. `Kernels::new(isa)` starts from the scalar table and folds in every
//! better tier up to `isa`, each overriding what it provides, so a tier lists only its own
//! kernels and inherits the rest (AVX-512 takes AVX2's activation conversions, for instance).

use super::attention::{BlockValuesFn, ScoresFn, ValuesFn};
use super::delta_rule::{delta_rule_scalar, DeltaRuleFn};
use super::float::{silu_mul_scalar, softmax_scalar, weighted_sum_scalar};
use super::float::{SiluMulFn, SoftmaxFn, WeightedSumFn};
use super::fwht::{fwht_scalar, FwhtFn};
use super::isa::Isa;
use super::{GemmKernel, GemvFn, PackedKernel};
use crate::{FormatKind, QuantizeFn};

/// The kernels one tier provides; what it leaves out comes from the tiers below it.
pub(crate) struct TierTable {
    pub isa: Isa,
    pub gemv: fn(FormatKind) -> Option<GemvFn>,
    pub quantize_activation: fn(FormatKind) -> Option<QuantizeFn>,
    pub gemm: fn(FormatKind) -> Option<GemmKernel>,
    pub packed: fn(FormatKind) -> Option<PackedKernel>,
    pub weighted_sum: Option<WeightedSumFn>,
    pub softmax: Option<SoftmaxFn>,
    pub silu_mul: Option<SiluMulFn>,
    pub attention_scores: Option<ScoresFn>,
    pub attention_values: Option<ValuesFn>,
    /// Weighted sums over value rows of a block format, per format (a quantized value cache).
    pub block_values: fn(FormatKind) -> Option<BlockValuesFn>,
    pub fwht: Option<FwhtFn>,
    pub delta_rule: Option<DeltaRuleFn>,
}

impl TierTable {
    /// A tier that provides nothing: tables name what they have and take the rest from here
    /// (`TierTable { gemv, ..TierTable::nothing(isa) }`).
    pub(crate) const fn nothing(isa: Isa) -> TierTable {
        TierTable {
            isa,
            gemv: none,
            quantize_activation: none,
            gemm: none,
            packed: none,
            weighted_sum: None,
            softmax: None,
            silu_mul: None,
            attention_scores: None,
            attention_values: None,
            block_values: none,
            fwht: None,
            delta_rule: None,
        }
    }
}

/// The lookup of a tier without kernels of that kind.
pub(crate) fn none<K>(_kind: FormatKind) -> Option<K> {
    None
}

/// The scalar tier: the float kernels' scalar twins. Its matrix-vector products and activation
/// conversions are the registry's (`Kernels` calls them for an empty slot), and it has no
/// matrix-matrix or packed kernels and no several-query attention.
pub(crate) const SCALAR: TierTable = TierTable {
    weighted_sum: Some(weighted_sum_scalar),
    softmax: Some(softmax_scalar),
    silu_mul: Some(silu_mul_scalar),
    fwht: Some(fwht_scalar),
    delta_rule: Some(delta_rule_scalar),
    ..TierTable::nothing(Isa::Scalar)
};

/// Every tier's table, lowest first: the fold order of `Kernels::new`.
pub(crate) const TIERS: &[TierTable] = &[
    SCALAR,
    #[cfg(target_arch = "x86_64")]
    super::x86_avx2::TABLE,
    #[cfg(target_arch = "x86_64")]
    super::x86_avx512::TABLE,
    #[cfg(target_arch = "aarch64")]
    super::aarch64_neon::TABLE,
    #[cfg(target_arch = "aarch64")]
    super::aarch64_neon::DOTPROD_TABLE,
    #[cfg(target_arch = "aarch64")]
    super::aarch64_neon::I8MM_TABLE,
];
