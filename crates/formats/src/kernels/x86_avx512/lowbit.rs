//! Registration of the 1-bit and ternary kernels of this tier (Q1_0, the Q2_0 family, TQ1_0, TQ2_0).

use crate::kernels::GemvFn;
use crate::FormatKind;

pub(super) fn gemv(_kind: FormatKind) -> Option<GemvFn> {
    None
}
