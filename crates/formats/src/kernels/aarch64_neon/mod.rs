//! aarch64 Advanced SIMD (NEON) kernels, one file per format. Every kernel here is `unsafe` with
//! `#[target_feature]`; the safe wrappers registered in the tables are only reachable through
//! `Kernels::new(Isa::Neon or Isa::Dotprod)`, which checks the CPU first.
//!
//! What the tier provides so far (each matrix-vector kernel plain NEON, and a `dotprod` variant
//! with SDOT):
//! - the Q1_0 × Q8_0 matrix-vector kernel;
//! - the standard formats Q8_0, Q4_0, Q5_0 × Q8_0 and Q4_1, Q5_1 × Q8_1 (`standard.rs`) and
//!   the K-quants Q2_K, Q3_K, Q4_K, Q5_K, Q6_K × Q8_K (`kquants.rs`), four rows a pass; plain
//!   NEON bit-identical to the scalar `dot`, SDOT the same for the 32-value formats and Q2_K,
//!   within the last bits for the other K-quants (their lanes split differently);
//! - the f32 → Q8_0, Q8_1 and Q8_K activation conversions (`q8_act.rs`).
//!
//! Everything else comes from the scalar tier.

mod kquants;
mod q1_0;
mod q8_act;
mod standard;

use crate::kernels::entries::{check_blocks, check_lengths, safe_gemv};
use crate::kernels::tier::TierTable;
use crate::kernels::{GemvFn, Isa};
use crate::{FormatKind, QuantizeFn};

/// What the `neon` tier provides (`Kernels::new` folds it over the scalar tier).
pub(crate) const TABLE: TierTable = TierTable {
    gemv,
    quantize_activation,
    ..TierTable::nothing(Isa::Neon)
};

/// What the `dotprod` tier provides over `neon`'s (folded after it): only the SDOT variants.
pub(crate) const DOTPROD_TABLE: TierTable = TierTable {
    gemv: gemv_dotprod,
    ..TierTable::nothing(Isa::Dotprod)
};

fn gemv(kind: FormatKind) -> Option<GemvFn> {
    match kind {
        FormatKind::Q1_0 => Some(safe_gemv!(check_lengths, q1_0::gemv, Q1_0)),
        FormatKind::Q8_0 => Some(safe_gemv!(check_blocks, standard::gemv_q8_0, Q8_0)),
        FormatKind::Q4_0 => Some(safe_gemv!(check_blocks, standard::gemv_q4_0, Q4_0)),
        FormatKind::Q4_1 => Some(safe_gemv!(check_blocks, standard::gemv_q4_1, Q4_1)),
        FormatKind::Q5_0 => Some(safe_gemv!(check_blocks, standard::gemv_q5_0, Q5_0)),
        FormatKind::Q5_1 => Some(safe_gemv!(check_blocks, standard::gemv_q5_1, Q5_1)),
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
        FormatKind::Q8_0 => Some(safe_gemv!(check_blocks, standard::gemv_q8_0_dotprod, Q8_0)),
        FormatKind::Q4_0 => Some(safe_gemv!(check_blocks, standard::gemv_q4_0_dotprod, Q4_0)),
        FormatKind::Q4_1 => Some(safe_gemv!(check_blocks, standard::gemv_q4_1_dotprod, Q4_1)),
        FormatKind::Q5_0 => Some(safe_gemv!(check_blocks, standard::gemv_q5_0_dotprod, Q5_0)),
        FormatKind::Q5_1 => Some(safe_gemv!(check_blocks, standard::gemv_q5_1_dotprod, Q5_1)),
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

fn quantize_activation(kind: FormatKind) -> Option<QuantizeFn> {
    match kind {
        FormatKind::Q8_0 => Some(quantize_q8_0),
        FormatKind::Q8_1 => Some(quantize_q8_1),
        FormatKind::Q8_K => Some(quantize_q8_k),
        _ => None,
    }
}
