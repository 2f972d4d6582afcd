//! Registration of the standard-format kernels of this tier (F32, F16, Q8_0, Q4_0, Q4_1,
//! IQ4_NL) and of the activation conversions (Q8_0, Q8_1, Q8_K, F16).

use super::{float, q4, q8_act};
use crate::kernels::entries::standard_gemv;
use crate::kernels::GemvFn;
use crate::{FormatKind, QuantizeFn};

pub(super) fn gemv(kind: FormatKind) -> Option<GemvFn> {
    standard_gemv!(kind, true)
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
