//! aarch64 Advanced SIMD (NEON) kernels, one file per format. Every kernel here is `unsafe` with
//! `#[target_feature]`; the safe wrappers registered in the tables are only reachable through
//! `Kernels::new(Isa::Neon or Isa::Dotprod)`, which checks the CPU first.
//!
//! What the tier provides so far: the Q1_0 × Q8_0 matrix-vector kernel (plain NEON, and a
//! `dotprod` variant with SDOT). Everything else comes from the scalar tier.

mod q1_0;

use crate::kernels::entries::{check_lengths, safe_gemv};
use crate::kernels::tier::{none, TierTable};
use crate::kernels::{GemvFn, Isa};
use crate::FormatKind;

/// What the `neon` tier provides (`Kernels::new` folds it over the scalar tier).
pub(crate) const TABLE: TierTable = TierTable {
    isa: Isa::Neon,
    gemv,
    quantize_activation: none,
    gemm: none,
    packed: none,
    weighted_sum: None,
    softmax: None,
    silu_mul: None,
    attention_scores: None,
    attention_values: None,
};

/// What the `dotprod` tier provides over `neon`'s (folded after it).
pub(crate) const DOTPROD_TABLE: TierTable = TierTable {
    isa: Isa::Dotprod,
    gemv: gemv_dotprod,
    ..TABLE
};

fn gemv(kind: FormatKind) -> Option<GemvFn> {
    match kind {
        FormatKind::Q1_0 => Some(safe_gemv!(check_lengths, q1_0::gemv, Q1_0)),
        _ => None,
    }
}

fn gemv_dotprod(kind: FormatKind) -> Option<GemvFn> {
    match kind {
        FormatKind::Q1_0 => Some(safe_gemv!(check_lengths, q1_0::gemv_dotprod, Q1_0)),
        _ => None,
    }
}
