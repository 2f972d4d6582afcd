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
