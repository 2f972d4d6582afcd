//! aarch64 Advanced SIMD (NEON) kernels, one file per format. Every kernel here is `unsafe` with
//! `#[target_feature]`; the safe wrappers registered in the tables are only reachable through
//! `Kernels::new(Isa::Neon, Isa::Dotprod or Isa::I8mm)`, which checks the CPU first.
//!
//! What the tiers provide so far:
//! - matrix-vector kernels, plain NEON and, in the `dotprod` table, with SDOT; four rows a pass,
//!   each activation load serving the four:
//!   - the 1-bit, 2-bit and ternary formats — Q1_0, Q2_0 (group 64), the group-128 layout of
//!     PQ2_0 and legacy Q2_0, PTQ1_0 (all × Q8_0), TQ2_0 and TQ1_0 (× Q8_K) — bit-identical to the
//!     scalar `dot` (`lowbit_util` holds their row drivers);
//!   - the standard formats Q8_0, Q4_0, Q5_0 × Q8_0 and Q4_1, Q5_1 × Q8_1 (`standard.rs`) and
//!     the K-quants Q2_K, Q3_K, Q4_K, Q5_K, Q6_K × Q8_K (`kquants.rs`): plain NEON bit-identical
//!     to the scalar `dot`, SDOT the same for the 32-value formats and Q2_K, within the last bits
//!     for the other K-quants (their lanes split differently);
//!   - F32, F16 and BF16 (`float.rs`);
//! - matrix-matrix kernels (`gemm.rs`, on the shared prepared layout of `gemm_layout`) of Q1_0,
//!   Q2_0, PQ2_0 / Q2_0G128Legacy, TQ2_0, PTQ1_0, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1 and the K-quants
//!   Q2_K … Q6_K × Q8_K (their sub-block scales and minimums: `gemm_kquants.rs`) on `dotprod`
//!   (SDOT) and `i8mm` (SMMLA); `neon` has none (its matrix-matrix products are row by row);
//! - kernels on packed weights (`packed.rs`, 8-row groups) of Q1_0, Q2_0, PQ2_0 / Q2_0G128Legacy,
//!   TQ2_0 (TQ1_0 converted to it at packing), PTQ1_0 (trits decoded to 2-bit codes at packing),
//!   Q4_0, Q4_1 and Q8_0 on `dotprod` (inherited by `i8mm`): with packing on (the default) they
//!   also serve single-token decode of those formats;
//! - the f32 → Q8_0, Q8_1, Q8_K, F16 and BF16 activation conversions, byte-identical to the
//!   scalar ones (`q8_act.rs`, `float.rs`), every f16 conversion through `f16.rs`;
//! - the float kernels of attention and SwiGLU — weighted sum, softmax numerator, SiLU gate —
//!   and several-query attention scores and values (`attention.rs`), and the weighted sums over
//!   value rows of the 32-value block formats (a quantized value cache, `block_values.rs`);
//! - the Walsh–Hadamard transform of the `prism.hadamard` rotation (`fwht.rs`).
//! - the gated delta rule's step of Gated DeltaNet layers (`delta_rule.rs`).
//!
//! Each tier inherits what it does not replace (`dotprod` over `neon`, `i8mm` over `dotprod`).

mod attention;
mod block_values;
mod delta_rule;
mod f16;
mod float;
mod fwht;
mod gemm;
mod gemm_kquants;
mod kquants;
mod kquants_sdot;
mod lowbit_util;
mod packed;
mod ptq1_0;
mod q1_0;
mod q2_0;
mod q8_act;
mod standard;
mod tq1_0;
mod tq2_0;

use crate::kernels::entries::{check_blocks, check_lengths, safe_gemv};
use crate::kernels::tier::TierTable;
use crate::kernels::{GemvFn, Isa};
use crate::{FormatKind, QuantizeFn};

/// What the `neon` tier provides (`Kernels::new` folds it over the scalar tier).
pub(crate) const TABLE: TierTable = TierTable {
    gemv,
    quantize_activation,
    weighted_sum: Some(weighted_sum),
    softmax: Some(softmax),
    silu_mul: Some(silu_mul),
    delta_rule: Some(delta_rule),
    attention_scores: Some(attention_scores),
    attention_values: Some(attention_values),
    block_values: block_values::block_values,
    fwht: Some(fwht),
    ..TierTable::nothing(Isa::Neon)
};

/// What the `dotprod` tier provides over `neon`'s (folded after it): the SDOT variants.
pub(crate) const DOTPROD_TABLE: TierTable = TierTable {
    gemv: gemv_dotprod,
    gemm: gemm::gemm_dotprod,
    packed: packed::packed_dotprod,
    ..TierTable::nothing(Isa::Dotprod)
};

/// What the `i8mm` tier provides over `dotprod`'s (folded after it): the SMMLA matrix-matrix
/// kernels.
pub(crate) const I8MM_TABLE: TierTable = TierTable {
    gemm: gemm::gemm_i8mm,
    ..TierTable::nothing(Isa::I8mm)
};

fn gemv(kind: FormatKind) -> Option<GemvFn> {
    match kind {
        FormatKind::Q1_0 => Some(safe_gemv!(check_lengths, q1_0::gemv, Q1_0)),
        FormatKind::F32 => Some(safe_gemv!(check_blocks, float::gemv_f32, F32)),
        FormatKind::F16 => Some(safe_gemv!(check_blocks, float::gemv_f16, F16)),
        FormatKind::BF16 => Some(safe_gemv!(check_blocks, float::gemv_bf16, BF16)),
        FormatKind::Q2_0 => Some(safe_gemv!(check_lengths, q2_0::gemv_g64, Q2_0)),
        FormatKind::PQ2_0 => Some(safe_gemv!(check_lengths, q2_0::gemv_g128, PQ2_0)),
        FormatKind::Q2_0G128Legacy => {
            Some(safe_gemv!(check_lengths, q2_0::gemv_g128, Q2_0G128Legacy))
        }
        FormatKind::TQ2_0 => Some(safe_gemv!(check_lengths, tq2_0::gemv, TQ2_0)),
        FormatKind::TQ1_0 => Some(safe_gemv!(check_lengths, tq1_0::gemv, TQ1_0)),
        FormatKind::PTQ1_0 => Some(safe_gemv!(check_lengths, ptq1_0::gemv, PTQ1_0)),
        FormatKind::Q8_0 => Some(safe_gemv!(check_blocks, standard::gemv_q8_0, Q8_0)),
        FormatKind::Q4_0 => Some(safe_gemv!(check_blocks, standard::gemv_q4_0, Q4_0)),
        FormatKind::Q4_1 => Some(safe_gemv!(check_blocks, standard::gemv_q4_1, Q4_1)),
        FormatKind::Q5_0 => Some(safe_gemv!(check_blocks, standard::gemv_q5_0, Q5_0)),
        FormatKind::Q5_1 => Some(safe_gemv!(check_blocks, standard::gemv_q5_1, Q5_1)),
        FormatKind::IQ4_NL => Some(safe_gemv!(check_blocks, standard::gemv_iq4_nl, IQ4_NL)),
        FormatKind::Q2_K => Some(safe_gemv!(check_lengths, kquants::gemv_q2_k, Q2_K)),
        FormatKind::Q3_K => Some(safe_gemv!(check_lengths, kquants::gemv_q3_k, Q3_K)),
        FormatKind::Q4_K => Some(safe_gemv!(check_lengths, kquants::gemv_q4_k, Q4_K)),
        FormatKind::Q5_K => Some(safe_gemv!(check_lengths, kquants::gemv_q5_k, Q5_K)),
        FormatKind::Q6_K => Some(safe_gemv!(check_lengths, kquants::gemv_q6_k, Q6_K)),
        _ => None,
    }
}

fn gemv_dotprod(kind: FormatKind) -> Option<GemvFn> {
    match kind {
        FormatKind::Q1_0 => Some(safe_gemv!(check_lengths, q1_0::gemv_dotprod, Q1_0)),
        FormatKind::Q2_0 => Some(safe_gemv!(check_lengths, q2_0::gemv_g64_dotprod, Q2_0)),
        FormatKind::PQ2_0 => Some(safe_gemv!(check_lengths, q2_0::gemv_g128_dotprod, PQ2_0)),
        FormatKind::Q2_0G128Legacy => Some(safe_gemv!(
            check_lengths,
            q2_0::gemv_g128_dotprod,
            Q2_0G128Legacy
        )),
        FormatKind::TQ2_0 => Some(safe_gemv!(check_lengths, tq2_0::gemv_dotprod, TQ2_0)),
        FormatKind::TQ1_0 => Some(safe_gemv!(check_lengths, tq1_0::gemv_dotprod, TQ1_0)),
        FormatKind::PTQ1_0 => Some(safe_gemv!(check_lengths, ptq1_0::gemv_dotprod, PTQ1_0)),
        FormatKind::Q8_0 => Some(safe_gemv!(check_blocks, standard::gemv_q8_0_dotprod, Q8_0)),
        FormatKind::Q4_0 => Some(safe_gemv!(check_blocks, standard::gemv_q4_0_dotprod, Q4_0)),
        FormatKind::Q4_1 => Some(safe_gemv!(check_blocks, standard::gemv_q4_1_dotprod, Q4_1)),
        FormatKind::Q5_0 => Some(safe_gemv!(check_blocks, standard::gemv_q5_0_dotprod, Q5_0)),
        FormatKind::Q5_1 => Some(safe_gemv!(check_blocks, standard::gemv_q5_1_dotprod, Q5_1)),
        FormatKind::IQ4_NL => Some(safe_gemv!(
            check_blocks,
            standard::gemv_iq4_nl_dotprod,
            IQ4_NL
        )),
        FormatKind::Q2_K => Some(safe_gemv!(check_lengths, kquants::gemv_q2_k_dotprod, Q2_K)),
        FormatKind::Q3_K => Some(safe_gemv!(check_lengths, kquants::gemv_q3_k_dotprod, Q3_K)),
        FormatKind::Q4_K => Some(safe_gemv!(check_lengths, kquants::gemv_q4_k_dotprod, Q4_K)),
        FormatKind::Q5_K => Some(safe_gemv!(check_lengths, kquants::gemv_q5_k_dotprod, Q5_K)),
        FormatKind::Q6_K => Some(safe_gemv!(check_lengths, kquants::gemv_q6_k_dotprod, Q6_K)),
        _ => None,
    }
}

/// A safe activation conversion around the `unsafe` NEON kernel `$kernel`.
macro_rules! conversion {
    ($name:ident, $kernel:path) => {
        fn $name(src: &[f32], dst: &mut [u8]) {
            // SAFETY: only reachable through `Kernels::new(Isa::Neon or Isa::Dotprod)`, which
            // checked NEON; the kernel checks the lengths itself.
            unsafe { $kernel(src, dst) }
        }
    };
}

conversion!(quantize_q8_0, q8_act::quantize_q8_0);
conversion!(quantize_q8_1, q8_act::quantize_q8_1);
conversion!(quantize_q8_k, q8_act::quantize_q8_k);
conversion!(quantize_f16, float::quantize_f16);
conversion!(quantize_bf16, float::quantize_bf16);

fn quantize_activation(kind: FormatKind) -> Option<QuantizeFn> {
    match kind {
        FormatKind::Q8_0 => Some(quantize_q8_0),
        FormatKind::Q8_1 => Some(quantize_q8_1),
        FormatKind::Q8_K => Some(quantize_q8_k),
        FormatKind::F16 => Some(quantize_f16),
        FormatKind::BF16 => Some(quantize_bf16),
        _ => None,
    }
}

crate::kernels::float_entries!(float);

crate::kernels::fwht_entry!(fwht);
crate::kernels::delta_rule_entry!(delta_rule);

crate::kernels::attention_entries!(attention);

#[cfg(test)]
mod tests {
    use super::*;

    /// The public tests compare every tier's float kernels with the scalar twins, but cannot see
    /// whether a tier has its own: this demands them of `neon` (and `dotprod` inherits them).
    #[test]
    fn the_neon_tier_provides_the_float_kernels() {
        assert!(TABLE.weighted_sum.is_some());
        assert!(TABLE.softmax.is_some());
        assert!(TABLE.silu_mul.is_some());
        assert!(TABLE.attention_scores.is_some());
        assert!(TABLE.attention_values.is_some());
        assert!(TABLE.fwht.is_some());
        for kind in [FormatKind::F16, FormatKind::BF16] {
            assert!(quantize_activation(kind).is_some(), "{kind:?} conversion");
        }
    }
}
