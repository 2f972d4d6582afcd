//! The fast K-quant kernels (Q2_K … Q6_K × Q8_K) and Q5_0 × Q8_0, Q5_1 × Q8_1 of every tier this
//! CPU runs, against the scalar `dot` of the registry row by row: random blocks (every code and
//! scale byte random, f16 super-scales zero, negative, tiny or large), activations through the
//! partner's scalar conversion, rows of 256·{1, 2, 3, 9, 24} values, 1..=13 and 37 rows (every
//! unroll remainder), data at the very end of an exactly sized allocation and at odd addresses,
//! and guard values around `out`. Tolerance: |fast − scalar| ≤ 1e-5·Σ|w·a| + 1e-6. The reference
//! engine's own dot products (`golden/quant/<format>.json`) are checked on every tier too.

use oxibonsai_formats::{format, FormatKind};
use oxibonsai_testkit::{golden, hex_bytes};
use proptest::prelude::*;
use serde::Deserialize;

mod common;
use common::{
    abs_sum, assert_fast_gemv_on_every_tier, assert_rows_past_the_band_are_ignored,
    check_awkward_gemv_shapes, check_gemv as check, check_unaligned_gemv, tiers, Rng,
};

const FORMATS: [FormatKind; 7] = [
    FormatKind::Q4_K,
    FormatKind::Q5_K,
    FormatKind::Q6_K,
    FormatKind::Q5_0,
    FormatKind::Q5_1,
    FormatKind::Q2_K,
    FormatKind::Q3_K,
];

#[test]
fn every_tier_registers_a_fast_kernel_for_every_format() {
    assert_fast_gemv_on_every_tier(&FORMATS);
}

#[test]
fn awkward_shapes_match_the_scalar_dot() {
    for kernels in tiers() {
        for kind in FORMATS {
            check_awkward_gemv_shapes(&kernels, kind, &[256, 512, 768, 2304, 6144], |n| n > 768);
        }
    }
}

#[test]
fn single_small_blocks_match_the_scalar_dot() {
    // Q5_0 / Q5_1 blocks hold 32 values: rows of one block and of an odd count of them.
    for kernels in tiers() {
        for kind in [FormatKind::Q5_0, FormatKind::Q5_1] {
            for n_values in [32, 96, 1056] {
                for rows in [1, 3, 4, 6] {
                    check(
                        &kernels,
                        kind,
                        n_values,
                        rows,
                        0,
                        7 * n_values as u64 + rows as u64,
                    );
                }
            }
        }
    }
}

#[test]
fn unaligned_data_at_the_end_of_its_allocation() {
    for kernels in tiers() {
        for kind in FORMATS {
            check_unaligned_gemv(&kernels, kind, 768);
        }
    }
}

#[test]
fn rows_past_the_band_are_not_read_into_the_result() {
    for kernels in tiers() {
        for kind in FORMATS {
            assert_rows_past_the_band_are_ignored(&kernels, kind, 512);
        }
    }
}

#[derive(Deserialize)]
struct GoldenFile {
    cases: Vec<GoldenCase>,
}

#[derive(Deserialize)]
struct GoldenCase {
    name: String,
    quantized: String,
    dot: Option<GoldenDot>,
}

#[derive(Deserialize)]
struct GoldenDot {
    activation_quantized: String,
    result: f64,
    abs_sum: f64,
}

/// The reference engine's `vec_dot` over each case's quantized bytes (one long row), against
/// every tier's kernel.
#[test]
fn golden_dot_products_on_every_tier() {
    for kind in FORMATS {
        let f = format(kind);
        let path = golden(&format!("quant/{}.json", f.name.to_lowercase()));
        let text =
            std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let file: GoldenFile =
            serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let mut worst = 0f64;
        let mut checked = 0;
        for case in &file.cases {
            let Some(dot) = &case.dot else { continue };
            let weights = hex_bytes(&case.quantized);
            let activation = hex_bytes(&dot.activation_quantized);
            for kernels in tiers() {
                let mut out = [0f32];
                kernels.gemv(f, &weights, weights.len(), &activation, &mut out);
                let tolerance = 1e-5 * dot.abs_sum + 1e-6;
                let error = (f64::from(out[0]) - dot.result).abs();
                assert!(
                    error <= tolerance,
                    "{kind:?}/{} on {}: {} vs reference {} (tolerance {tolerance:e})",
                    case.name,
                    kernels.isa().name(),
                    out[0],
                    dot.result
                );
                worst = worst.max(error / tolerance);
                checked += 1;
            }
        }
        assert!(checked > 0, "{kind:?}: no golden dot products");
        eprintln!("{kind:?} golden: worst error / tolerance {worst:.3e} over {checked} runs");
    }
}

/// Real blocks from the quantizer (not random bytes): the scales and minimums the reference
/// produces, with activations of the same distribution.
#[test]
fn quantized_rows_match_the_scalar_dot() {
    for kernels in tiers() {
        for kind in FORMATS {
            let f = format(kind);
            let mut rng = Rng(4242 + kind as u64);
            let (rows, n) = (6, 1024);
            let values: Vec<f32> = (0..rows * n).map(|_| (rng.unit() - 0.5) * 3.0).collect();
            let weights = f.quantize_row(&values).expect("whole blocks");
            let x: Vec<f32> = (0..n).map(|_| rng.unit() - 0.5).collect();
            let activation = f
                .partner_format()
                .quantize_activation_row(&x)
                .expect("whole blocks");
            let row_bytes = weights.len() / rows;
            let mut out = vec![0f32; rows];
            kernels.gemv(f, &weights, row_bytes, &activation, &mut out);
            for (r, &fast) in out.iter().enumerate() {
                let row = &weights[r * row_bytes..(r + 1) * row_bytes];
                let scalar = (f.dot)(row, &activation);
                let tolerance = 1e-5 * abs_sum(f, f.partner_format(), row, &activation) + 1e-6;
                assert!(
                    (f64::from(fast) - f64::from(scalar)).abs() <= tolerance,
                    "{kind:?} on {}: row {r}: fast {fast} vs scalar {scalar}",
                    kernels.isa().name()
                );
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn random_shapes_match_the_scalar_dot(
        which in 0..FORMATS.len(),
        n_super in 1usize..12,
        rows in 1usize..20,
        offset in 0usize..8,
        seed in any::<u64>(),
    ) {
        for kernels in tiers() {
            check(&kernels, FORMATS[which], 256 * n_super, rows, offset, seed);
        }
    }
}
