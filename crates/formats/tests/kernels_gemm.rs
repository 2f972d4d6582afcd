//! The matrix-matrix kernels of every tier this CPU runs, against the scalar `dot` of the registry
//! for every (row, token): random blocks and activations, awkward numbers of rows (partial groups
//! of 16), of tokens (every tile remainder) and of values, with guard values between the output
//! rows of each token so a write outside the rows asked for is caught.

use oxibonsai_formats::kernels::Kernels;
use oxibonsai_formats::{format, FormatKind};

mod common;
use common::{
    abs_sum, check_matrix_kernels_on_awkward_shapes, random_activation, random_weights, Rng,
};

/// The formats with a matrix-matrix kernel in at least one tier.
const GEMM_FORMATS: [FormatKind; 16] = [
    FormatKind::Q1_0,
    FormatKind::Q2_0,
    FormatKind::PQ2_0,
    FormatKind::Q2_0G128Legacy,
    FormatKind::TQ2_0,
    FormatKind::PTQ1_0,
    FormatKind::Q8_0,
    FormatKind::Q4_0,
    FormatKind::Q4_1,
    FormatKind::Q5_0,
    FormatKind::Q5_1,
    FormatKind::Q2_K,
    FormatKind::Q3_K,
    FormatKind::Q4_K,
    FormatKind::Q5_K,
    FormatKind::Q6_K,
];

const SENTINEL: u32 = 0x7fc0_dead;

/// Runs one shape; returns the worst |fast − scalar| / tolerance.
fn check(
    kernels: &Kernels,
    kind: FormatKind,
    n_values: usize,
    rows: usize,
    tokens: usize,
    seed: u64,
) -> f64 {
    let f = format(kind);
    let partner = format(f.partner);
    let mut rng = Rng(seed);
    let n_blocks = n_values / f.block_elems;
    let row_bytes = n_blocks * f.block_bytes;
    let weights = random_weights(f, n_blocks * rows, &mut rng);
    let acts: Vec<Vec<u8>> = (0..tokens)
        .map(|_| random_activation(partner, n_values, &mut rng))
        .collect();
    let stride = kernels
        .gemm_prepared_bytes(f, n_values)
        .unwrap_or_else(|| panic!("{kind:?}: no gemm layout for {n_values} values"));
    let mut prepared = vec![0xA5u8; tokens * stride];
    for (a, dst) in acts.iter().zip(prepared.chunks_exact_mut(stride)) {
        kernels.gemm_prepare(f, n_values, a, dst);
    }
    let out_stride = rows + 3;
    let mut out = vec![f32::from_bits(SENTINEL); tokens * out_stride];
    kernels.gemm(
        f, n_values, &weights, rows, &prepared, tokens, &mut out, out_stride,
    );
    let mut worst = 0f64;
    for (t, a) in acts.iter().enumerate() {
        for r in 0..out_stride {
            let fast = out[t * out_stride + r];
            if r >= rows {
                assert_eq!(
                    fast.to_bits(),
                    SENTINEL,
                    "{kind:?}: wrote outside token {t}'s rows"
                );
                continue;
            }
            let row = &weights[r * row_bytes..(r + 1) * row_bytes];
            let scalar = (f.dot)(row, a);
            let tolerance = 1e-5 * abs_sum(f, partner, row, a) + 1e-6;
            let error = (f64::from(fast) - f64::from(scalar)).abs();
            assert!(
                error <= tolerance,
                "{kind:?} on {}: {n_values} values, row {r} of {rows}, token {t} of {tokens}, \
                 seed {seed}: fast {fast} vs scalar {scalar} (tolerance {tolerance:e})",
                kernels.isa().name()
            );
            worst = worst.max(error / tolerance);
        }
    }
    worst
}

fn tiers_with_gemm(kind: FormatKind) -> Vec<Kernels> {
    common::tiers()
        .into_iter()
        .filter(|k| k.gemm_prepared_bytes(format(kind), 2048).is_some())
        .collect()
}

#[test]
fn gemm_matches_the_scalar_dot_on_awkward_shapes() {
    check_matrix_kernels_on_awkward_shapes(&GEMM_FORMATS, tiers_with_gemm, 7, check, "gemm");
}

#[test]
fn row_lengths_the_kernel_does_not_take_have_no_layout() {
    for kind in GEMM_FORMATS {
        let f = format(kind);
        for kernels in tiers_with_gemm(kind) {
            // A row of an odd number of 32-value blocks (e.g. Q8_0 at 96) is not whole pairs.
            if f.block_elems == 32 {
                assert_eq!(kernels.gemm_prepared_bytes(f, 96), None, "{kind:?}");
            }
            assert_eq!(kernels.gemm_prepared_bytes(f, 0), None, "{kind:?}");
            assert_eq!(
                kernels.gemm_prepared_bytes(f, f.block_elems * 3 + 1),
                None,
                "{kind:?}"
            );
        }
    }
}
