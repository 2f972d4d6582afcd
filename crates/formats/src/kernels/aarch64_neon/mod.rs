//! aarch64 Advanced SIMD (NEON) kernels, one file per format. Every kernel here is `unsafe` with
//! `#[target_feature]`; the safe wrappers registered in the tables are only reachable through
//! `Kernels::new(Isa::Neon or Isa::Dotprod)`, which checks the CPU first.
//!
//! What the tier provides so far: the matrix-vector kernels of the 1-bit, 2-bit and ternary
//! formats — Q1_0, Q2_0 (group 64), the group-128 layout of PQ2_0 and legacy Q2_0 (all × Q8_0),
//! TQ2_0 and TQ1_0 (× Q8_K) — each plain NEON and, in the `dotprod` table, with SDOT, four rows
//! a pass and bit-identical to the scalar `dot` (`lowbit_util`); and the f32 → Q8_0 and Q8_K
//! activation conversions (their partners), byte-identical to the scalar ones. Everything else
//! comes from the scalar tier.

mod lowbit_util;
mod q1_0;
mod q2_0;
mod q8_act;
mod tq1_0;
mod tq2_0;

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

/// What the `dotprod` tier provides over `neon`'s (folded after it): only the SDOT variants.
pub(crate) const DOTPROD_TABLE: TierTable = TierTable {
    gemv: gemv_dotprod,
    ..TierTable::nothing(Isa::Dotprod)
};

fn gemv(kind: FormatKind) -> Option<GemvFn> {
    match kind {
        FormatKind::Q1_0 => Some(safe_gemv!(check_lengths, q1_0::gemv, Q1_0)),
        FormatKind::Q2_0 => Some(safe_gemv!(check_lengths, q2_0::gemv_g64, Q2_0)),
        FormatKind::PQ2_0 => Some(safe_gemv!(check_lengths, q2_0::gemv_g128, PQ2_0)),
        FormatKind::Q2_0G128Legacy => {
            Some(safe_gemv!(check_lengths, q2_0::gemv_g128, Q2_0G128Legacy))
        }
        FormatKind::TQ2_0 => Some(safe_gemv!(check_lengths, tq2_0::gemv, TQ2_0)),
        FormatKind::TQ1_0 => Some(safe_gemv!(check_lengths, tq1_0::gemv, TQ1_0)),
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
        _ => None,
    }
}

fn quantize_activation(kind: FormatKind) -> Option<QuantizeFn> {
    fn quantize_q8_0(src: &[f32], dst: &mut [u8]) {
        // SAFETY: only reachable through `Kernels::new(Isa::Neon or Isa::Dotprod)`, which checked
        // NEON; the kernel checks the lengths itself.
        unsafe { q8_act::quantize_q8_0(src, dst) }
    }
    fn quantize_q8_k(src: &[f32], dst: &mut [u8]) {
        // SAFETY: as `quantize_q8_0`.
        unsafe { q8_act::quantize_q8_k(src, dst) }
    }
    match kind {
        FormatKind::Q8_0 => Some(quantize_q8_0),
        FormatKind::Q8_K => Some(quantize_q8_k),
        _ => None,
    }
}
