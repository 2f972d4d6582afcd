//! Registration of the 1-bit and ternary kernels of this tier (Q1_0, the Q2_0 family, TQ1_0, TQ2_0, PTQ1_0).
//! The VNNI variants are chosen here, once, when the CPU has `avx512vnni`.

use super::{ptq1_0, q1_0, q2_0, tq1_0, tq2_0};
use crate::kernels::entries::{lowbit_variants, pick, Variants};
use crate::kernels::GemvFn;
use crate::FormatKind;

/// Every kernel of this file with its plain and VNNI variants.
const VARIANTS: [Variants<GemvFn>; 7] = lowbit_variants!();

pub(super) fn gemv(kind: FormatKind) -> Option<GemvFn> {
    pick(
        &VARIANTS,
        kind,
        std::arch::is_x86_feature_detected!("avx512vnni"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::test_data::{assert_lowbit_matches_scalar, assert_variants};
    use crate::kernels::Isa;

    #[test]
    fn plain_and_vnni_variants_match_the_scalar_dot() {
        let vnni = std::arch::is_x86_feature_detected!("avx512vnni");
        assert_variants(
            Isa::Avx512,
            ("avx512vnni", vnni),
            &VARIANTS,
            assert_lowbit_matches_scalar,
        );
    }
}
