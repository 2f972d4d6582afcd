//! Registration of the 1-bit and ternary kernels of this tier (Q1_0, the Q2_0 family, TQ1_0, TQ2_0).
//! The VNNI variants are chosen here, once, when the CPU has `avx512vnni`.

use crate::kernels::x86_avx2::lowbit_util::check_lengths;
use crate::kernels::GemvFn;
use crate::FormatKind;

use super::{q1_0, q2_0, tq1_0, tq2_0};

/// A safe `GemvFn` around an AVX-512 kernel.
macro_rules! wrap {
    ($name:ident, $kernel:path, $kind:ident) => {
        fn $name(weights: &[u8], row_bytes: usize, activation: &[u8], out: &mut [f32]) {
            check_lengths(FormatKind::$kind, weights, row_bytes, activation, out.len());
            // SAFETY: registered only through `Kernels::new(Isa::Avx512)`, which checked the CPU
            // for AVX-512 F/BW/VL/DQ (and `gemv` below checked VNNI for the VNNI variants); the
            // lengths were just checked against the contract the kernel reads within.
            unsafe { $kernel(weights, row_bytes, activation, out) }
        }
    };
}

wrap!(q1_0_plain, q1_0::gemv, Q1_0);
wrap!(q1_0_vnni, q1_0::gemv_vnni, Q1_0);
wrap!(q2_0_plain, q2_0::gemv_g64, Q2_0);
wrap!(q2_0_vnni, q2_0::gemv_g64_vnni, Q2_0);
wrap!(pq2_0_plain, q2_0::gemv_g128, PQ2_0);
wrap!(pq2_0_vnni, q2_0::gemv_g128_vnni, PQ2_0);
wrap!(legacy_plain, q2_0::gemv_g128, Q2_0G128Legacy);
wrap!(legacy_vnni, q2_0::gemv_g128_vnni, Q2_0G128Legacy);
wrap!(tq2_0_plain, tq2_0::gemv, TQ2_0);
wrap!(tq2_0_vnni, tq2_0::gemv_vnni, TQ2_0);
wrap!(tq1_0_plain, tq1_0::gemv, TQ1_0);
wrap!(tq1_0_vnni, tq1_0::gemv_vnni, TQ1_0);

pub(super) fn gemv(kind: FormatKind) -> Option<GemvFn> {
    let vnni = std::arch::is_x86_feature_detected!("avx512vnni");
    let pick = |plain: GemvFn, with_vnni: GemvFn| Some(if vnni { with_vnni } else { plain });
    match kind {
        FormatKind::Q1_0 => pick(q1_0_plain, q1_0_vnni),
        FormatKind::Q2_0 => pick(q2_0_plain, q2_0_vnni),
        FormatKind::PQ2_0 => pick(pq2_0_plain, pq2_0_vnni),
        FormatKind::Q2_0G128Legacy => pick(legacy_plain, legacy_vnni),
        FormatKind::TQ2_0 => pick(tq2_0_plain, tq2_0_vnni),
        FormatKind::TQ1_0 => pick(tq1_0_plain, tq1_0_vnni),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::x86_avx2::lowbit_util::assert_matches_scalar;
    use crate::kernels::Isa;

    #[test]
    fn plain_and_vnni_variants_match_the_scalar_dot() {
        if !Isa::Avx512.available() {
            eprintln!(
                "{} not available on this CPU: variants not tested",
                Isa::Avx512.name()
            );
            return;
        }
        let variants: [(FormatKind, GemvFn, GemvFn); 6] = [
            (FormatKind::Q1_0, q1_0_plain, q1_0_vnni),
            (FormatKind::Q2_0, q2_0_plain, q2_0_vnni),
            (FormatKind::PQ2_0, pq2_0_plain, pq2_0_vnni),
            (FormatKind::Q2_0G128Legacy, legacy_plain, legacy_vnni),
            (FormatKind::TQ2_0, tq2_0_plain, tq2_0_vnni),
            (FormatKind::TQ1_0, tq1_0_plain, tq1_0_vnni),
        ];
        let vnni = std::arch::is_x86_feature_detected!("avx512vnni");
        for (kind, plain, with_vnni) in variants {
            assert_matches_scalar(kind, plain);
            if vnni {
                assert_matches_scalar(kind, with_vnni);
            } else {
                eprintln!("no avx512vnni: {kind:?} VNNI variant not tested");
            }
        }
    }
}
