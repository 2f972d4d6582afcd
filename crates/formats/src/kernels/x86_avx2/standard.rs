//! Registration of the standard-format kernels of this tier (F32, F16, Q8_0, Q4_0, Q4_1) and of
//! the activation conversions (Q8_0, Q8_1, Q8_K, F16).

use super::{float, q4, q8_act};
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
            // SAFETY: only reachable through `Kernels::new(Isa::Avx2 or higher)`, which checked
            // AVX2/FMA/F16C; `check` established the lengths the kernel reads.
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
    match kind {
        FormatKind::Q4_0 => Some(gemv_q4_0),
        FormatKind::Q4_1 => Some(gemv_q4_1),
        FormatKind::Q8_0 => Some(gemv_q8_0),
        FormatKind::F32 => Some(gemv_f32),
        FormatKind::F16 => Some(gemv_f16),
        _ => None,
    }
}

macro_rules! conversion {
    ($name:ident, $kernel:path) => {
        fn $name(src: &[f32], dst: &mut [u8]) {
            // SAFETY: only reachable through `Kernels::new(Isa::Avx2 or higher)`, which checked
            // AVX2/FMA/F16C; the kernel checks the lengths itself.
            unsafe { $kernel(src, dst) }
        }
    };
}

conversion!(quantize_q8_0, q8_act::quantize_q8_0);
conversion!(quantize_q8_1, q8_act::quantize_q8_1);
conversion!(quantize_q8_k, q8_act::quantize_q8_k);
conversion!(quantize_f16, q8_act::quantize_f16);

pub(super) fn quantize_activation(kind: FormatKind) -> Option<QuantizeFn> {
    match kind {
        FormatKind::Q8_0 => Some(quantize_q8_0),
        FormatKind::Q8_1 => Some(quantize_q8_1),
        FormatKind::Q8_K => Some(quantize_q8_k),
        FormatKind::F16 => Some(quantize_f16),
        _ => None,
    }
}
