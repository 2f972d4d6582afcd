//! Registration of the standard-format kernels of this tier (F32, F16, Q8_0, Q4_0, Q4_1) and of
//! the activation conversions (Q8_0, Q8_1, Q8_K).

use crate::kernels::GemvFn;
use crate::{FormatKind, QuantizeFn};

pub(super) fn gemv(_kind: FormatKind) -> Option<GemvFn> {
    None
}

pub(super) fn quantize_activation(_kind: FormatKind) -> Option<QuantizeFn> {
    None
}
