//! Registration of the standard-format kernels of this tier (F32, F16, Q8_0, Q4_0, Q4_1). The
//! activation conversions are the AVX2 tier's (`Kernels::new` falls back to them), and so are the
//! integer kernels on a CPU without VNNI or VBMI.

use super::{float, q4};
use crate::kernels::GemvFn;
use crate::{FormatKind, QuantizeFn};

/// Checks the `GemvFn` contract that the kernels rely on for their raw loads.
fn check(
    weights: &[u8],
    row_bytes: usize,
    activation: &[u8],
    out: &[f32],
    w_block: usize,
    a_block: usize,
    what: &str,
) {
    assert!(
        row_bytes.is_multiple_of(w_block) && weights.len() >= out.len() * row_bytes,
        "{what} gemv: {} weight bytes cannot hold {} rows of {row_bytes} bytes in {w_block}-byte blocks",
        weights.len(),
        out.len()
    );
    assert!(
        activation.len() == row_bytes / w_block * a_block,
        "{what} gemv: activation has {} bytes, a row of {row_bytes} weight bytes needs {}",
        activation.len(),
        row_bytes / w_block * a_block
    );
}

macro_rules! wrapper {
    ($name:ident, $kernel:path, $w_block:expr, $a_block:expr, $what:literal) => {
        fn $name(weights: &[u8], row_bytes: usize, activation: &[u8], out: &mut [f32]) {
            check(
                weights, row_bytes, activation, out, $w_block, $a_block, $what,
            );
            // SAFETY: only reachable through `Kernels::new(Isa::Avx512)`, which checked
            // AVX-512 F/BW/VL/DQ and AVX2/FMA/F16C, and registered only where `gemv` below
            // found the extra features this kernel needs; `check` established the lengths.
            unsafe { $kernel(weights, row_bytes, activation, out) }
        }
    };
}

wrapper!(gemv_q4_0, q4::gemv_q4_0, 18, 34, "q4_0");
wrapper!(gemv_q4_1, q4::gemv_q4_1, 20, 36, "q4_1");
wrapper!(gemv_q8_0, q4::gemv_q8_0, 34, 34, "q8_0");
wrapper!(gemv_f32, float::gemv_f32, 4, 4, "f32");
wrapper!(gemv_f16, float::gemv_f16, 2, 2, "f16");

pub(super) fn gemv(kind: FormatKind) -> Option<GemvFn> {
    let vnni = std::arch::is_x86_feature_detected!("avx512vnni")
        && std::arch::is_x86_feature_detected!("avx512vbmi");
    match kind {
        FormatKind::Q4_0 if vnni => Some(gemv_q4_0),
        FormatKind::Q4_1 if vnni => Some(gemv_q4_1),
        FormatKind::Q8_0 if vnni => Some(gemv_q8_0),
        FormatKind::F32 => Some(gemv_f32),
        FormatKind::F16 => Some(gemv_f16),
        _ => None,
    }
}

pub(super) fn quantize_activation(_kind: FormatKind) -> Option<QuantizeFn> {
    None
}
