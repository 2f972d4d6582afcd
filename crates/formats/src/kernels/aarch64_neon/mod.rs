//! aarch64 Advanced SIMD (NEON) kernels, one file per format. Every kernel here is `unsafe` with
//! `#[target_feature]`; the safe wrappers registered in the tables are only reachable through
//! `Kernels::new(Isa::Neon, Isa::Dotprod or Isa::I8mm)`, which checks the CPU first.
//!
//! What the tier provides so far: the Q1_0 × Q8_0 matrix-vector kernel (plain NEON, and a
//! `dotprod` variant with SDOT) and the f32 → Q8_0 activation conversion (its partner); the
//! matrix-matrix kernels (`gemm.rs`, on the shared prepared layout) of Q1_0, Q2_0, PQ2_0 /
//! Q2_0G128Legacy, TQ2_0, Q8_0, Q4_0, Q4_1, Q5_0 and Q5_1 on `dotprod` (SDOT) and `i8mm`
//! (SMMLA; `neon` has none), and on `dotprod` (inherited by `i8mm`) the kernels on packed
//! weights (`packed.rs`) of Q1_0, Q2_0, PQ2_0 / Q2_0G128Legacy, Q4_0, Q4_1 and Q8_0. Everything
//! else comes from the scalar tier.

mod gemm;
mod packed;
mod q1_0;
mod q8_act;

use crate::kernels::entries::{check_lengths, safe_gemv};
use crate::kernels::tier::TierTable;
use crate::kernels::{GemvFn, Isa};
use crate::{FormatKind, QuantizeFn};

/// What the `neon` tier provides (`Kernels::new` folds it over the scalar tier).
pub(crate) const TABLE: TierTable = TierTable {
    gemv,
    quantize_activation,
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
        _ => None,
    }
}

fn gemv_dotprod(kind: FormatKind) -> Option<GemvFn> {
    match kind {
        FormatKind::Q1_0 => Some(safe_gemv!(check_lengths, q1_0::gemv_dotprod, Q1_0)),
        _ => None,
    }
}

fn quantize_activation(kind: FormatKind) -> Option<QuantizeFn> {
    fn quantize_q8_0(src: &[f32], dst: &mut [u8]) {
        // SAFETY: only reachable through `Kernels::new(Isa::Neon or Isa::Dotprod)`, which checked
        // NEON; the kernel checks the lengths itself.
        unsafe { q8_act::quantize_q8_0(src, dst) }
    }
    match kind {
        FormatKind::Q8_0 => Some(quantize_q8_0),
        _ => None,
    }
}
