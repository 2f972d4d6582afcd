//! The fast 1-bit and ternary kernels (Q1_0, the Q2_0 family, TQ1_0, TQ2_0, PTQ1_0) of every tier this
//! CPU runs, against the scalar `dot` of the registry row by row: random blocks (random codes,
//! f16 scales that are zero, negative, tiny or large), activations through the partner's scalar
//! `quantize_activation`, awkward shapes (every unroll remainder), data at the very end of an
//! exactly sized allocation and at odd addresses, and guard values around `out`.

use oxibonsai_formats::{format, FormatKind};
use proptest::prelude::*;

mod common;
use common::{
    assert_fast_gemv_on_every_tier, assert_rows_past_the_band_are_ignored,
    check_awkward_gemv_shapes, check_gemv, check_unaligned_gemv, tiers,
};
#[cfg(target_arch = "aarch64")]
use common::{random_activation, random_weights, Rng};

const LOWBIT: [FormatKind; 7] = [
    FormatKind::Q1_0,
    FormatKind::Q2_0,
    FormatKind::Q2_0G128Legacy,
    FormatKind::PQ2_0,
    FormatKind::TQ2_0,
    FormatKind::TQ1_0,
    FormatKind::PTQ1_0,
];

#[test]
fn every_tier_registers_a_fast_kernel_for_every_lowbit_format() {
    assert_fast_gemv_on_every_tier(&LOWBIT);
}

#[test]
fn awkward_shapes_match_the_scalar_dot() {
    for kernels in tiers() {
        for kind in LOWBIT {
            let block = format(kind).block_elems;
            let mut n_blocks: Vec<usize> = vec![1, 2, 3, 5, 7, 33];
            n_blocks.extend([2048, 4096, 6144].iter().map(|n| n / block));
            let n_values: Vec<usize> = n_blocks.iter().map(|n| n * block).collect();
            check_awkward_gemv_shapes(&kernels, kind, &n_values, |n| n / block > 40);
        }
    }
}

#[test]
fn unaligned_data_at_the_end_of_its_allocation() {
    for kernels in tiers() {
        for kind in LOWBIT {
            check_unaligned_gemv(&kernels, kind, 3 * format(kind).block_elems);
        }
    }
}

#[test]
fn rows_past_the_band_are_not_read_into_the_result() {
    for kernels in tiers() {
        for kind in LOWBIT {
            assert_rows_past_the_band_are_ignored(&kernels, kind, 2 * format(kind).block_elems);
        }
    }
}

/// On ARM the 1-bit and ternary matrix-vector kernels sum exactly in integers and then do the
/// scalar `dot`'s float operations in its order (`aarch64_neon/lowbit_util.rs`), so every tier
/// gives the scalar's bits, not merely values within a tolerance: random blocks (codes 3 and
/// trit bytes past 242 included), band remainders, several blocks a row.
#[cfg(target_arch = "aarch64")]
#[test]
fn arm_lowbit_kernels_give_the_scalar_dots_bits() {
    for kernels in tiers() {
        for kind in [FormatKind::Q1_0, FormatKind::TQ2_0, FormatKind::TQ1_0] {
            let f = format(kind);
            let partner = format(f.partner);
            for (seed, n_blocks, rows) in [(1, 1, 1), (2, 3, 7), (3, 24, 9), (4, 5, 4)] {
                let mut rng = Rng(seed);
                let row_bytes = n_blocks * f.block_bytes;
                let weights = random_weights(f, n_blocks * rows, &mut rng);
                let activation = random_activation(partner, n_blocks * f.block_elems, &mut rng);
                let mut out = vec![0f32; rows];
                kernels.gemv(f, &weights, row_bytes, &activation, &mut out);
                for (r, &fast) in out.iter().enumerate() {
                    let row = &weights[r * row_bytes..(r + 1) * row_bytes];
                    let scalar = (f.dot)(row, &activation);
                    assert_eq!(
                        fast.to_bits(),
                        scalar.to_bits(),
                        "{kind:?} on {}: row {r} of {rows}, {n_blocks} blocks: {fast} vs {scalar}",
                        kernels.isa().name()
                    );
                }
            }
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
            let n_values = n_blocks * format(LOWBIT[which]).block_elems;
            check_gemv(&kernels, LOWBIT[which], n_values, rows, offset, seed);
        }
    }
}
