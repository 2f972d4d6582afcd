//! The fast 1-bit and ternary kernels (Q1_0, the Q2_0 family, TQ1_0, TQ2_0) of every tier this
//! CPU runs, against the scalar `dot` of the registry row by row: random blocks (random codes,
//! f16 scales that are zero, negative, tiny or large), activations through the partner's scalar
//! `quantize_activation`, awkward shapes (every unroll remainder), data at the very end of an
//! exactly sized allocation and at odd addresses, and guard values around `out`.

use oxibonsai_formats::kernels::{Isa, Kernels};
use oxibonsai_formats::{format, FormatKind};
use proptest::prelude::*;

mod common;
use common::{check_gemv, random_activation, random_weights, tiers, Rng};

const LOWBIT: [FormatKind; 6] = [
    FormatKind::Q1_0,
    FormatKind::Q2_0,
    FormatKind::Q2_0G128Legacy,
    FormatKind::PQ2_0,
    FormatKind::TQ2_0,
    FormatKind::TQ1_0,
];

/// One GEMV case of `n_blocks` blocks a row (the shared check counts values).
fn check(
    kernels: &Kernels,
    kind: FormatKind,
    n_blocks: usize,
    rows: usize,
    offset: usize,
    seed: u64,
) -> f64 {
    check_gemv(
        kernels,
        kind,
        n_blocks * format(kind).block_elems,
        rows,
        offset,
        seed,
    )
}

#[test]
fn every_tier_registers_a_fast_kernel_for_every_lowbit_format() {
    for kernels in tiers().iter().filter(|k| k.isa() != Isa::Scalar) {
        for kind in LOWBIT {
            assert!(
                kernels.has_fast_gemv(kind),
                "{kind:?} has no {} kernel",
                kernels.isa().name()
            );
        }
    }
}

#[test]
fn awkward_shapes_match_the_scalar_dot() {
    for kernels in tiers() {
        for kind in LOWBIT {
            let f = format(kind);
            let mut shapes: Vec<usize> = vec![1, 2, 3, 5, 7, 33];
            shapes.extend([2048, 4096, 6144].iter().map(|n| n / f.block_elems));
            let mut worst = 0f64;
            let mut seed = 1;
            for &n_blocks in &shapes {
                for rows in (1..=13).chain([37]) {
                    // The large shapes only need the unroll remainders once each.
                    if n_blocks > 40 && rows > 5 && rows != 37 {
                        continue;
                    }
                    seed += 1;
                    worst = worst.max(check(&kernels, kind, n_blocks, rows, 0, seed));
                }
            }
            eprintln!(
                "{kind:?} {}: worst error / tolerance {worst:.3e}",
                kernels.isa().name()
            );
        }
    }
}

#[test]
fn unaligned_data_at_the_end_of_its_allocation() {
    for kernels in tiers() {
        for kind in LOWBIT {
            for offset in [1, 3, 7] {
                for rows in [1, 4, 5, 9] {
                    check(
                        &kernels,
                        kind,
                        3,
                        rows,
                        offset,
                        1000 + offset as u64 * 31 + rows as u64,
                    );
                }
            }
        }
    }
}

#[test]
fn rows_past_the_band_are_not_read_into_the_result() {
    // `weights` may hold more rows than asked for: only the first `out.len()` count.
    for kernels in tiers() {
        for kind in LOWBIT {
            let f = format(kind);
            let partner = format(f.partner);
            let mut rng = Rng(77);
            let n_blocks = 2;
            let row_bytes = n_blocks * f.block_bytes;
            let weights = random_weights(f, n_blocks * 7, &mut rng);
            let activation = random_activation(partner, n_blocks * f.block_elems, &mut rng);
            let mut all = vec![0f32; 7];
            let mut first = vec![0f32; 5];
            kernels.gemv(f, &weights, row_bytes, &activation, &mut all);
            kernels.gemv(f, &weights, row_bytes, &activation, &mut first);
            assert_eq!(all[..5], first[..], "{kind:?} {}", kernels.isa().name());
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn random_shapes_match_the_scalar_dot(
        which in 0..LOWBIT.len(),
        n_blocks in 1usize..48,
        rows in 1usize..20,
        offset in 0usize..8,
        seed in any::<u64>(),
    ) {
        for kernels in tiers() {
            check(&kernels, LOWBIT[which], n_blocks, rows, offset, seed);
        }
    }
}
