//! Registration of the standard-format kernels of this tier (F32, F16, Q8_0, Q4_0, Q4_1,
//! IQ4_NL). The activation conversions are the AVX2 tier's (the tier table leaves them to it),
//! and so are the integer kernels on a CPU without VNNI or VBMI.

use super::{float, q4};
use crate::kernels::entries::standard_gemv;
use crate::kernels::GemvFn;
use crate::FormatKind;

pub(super) fn gemv(kind: FormatKind) -> Option<GemvFn> {
    let vnni = std::arch::is_x86_feature_detected!("avx512vnni")
        && std::arch::is_x86_feature_detected!("avx512vbmi");
    standard_gemv!(kind, vnni)
}
