//! The weighted sum of f16 value rows (attention's second half) of every tier against the scalar
//! twin, on awkward row lengths (every vector-width remainder, the 128-column pass boundary) and
//! row counts, with guard values after `out` in the same allocation.

use half::f16;
use oxibonsai_formats::kernels::{weighted_sum_scalar, Isa, Kernels};

mod common;
use common::Rng;

#[test]
fn weighted_sum_matches_the_scalar_twin() {
    let mut rng = Rng(42);
    let mut tested = 0;
    for kernels in Isa::ALL.into_iter().filter_map(Kernels::new) {
        for dim in [
            1, 3, 7, 8, 9, 15, 16, 17, 33, 64, 100, 127, 128, 129, 200, 256, 257,
        ] {
            for n_rows in [0, 1, 2, 5, 31, 300] {
                let weights: Vec<f32> = (0..n_rows).map(|_| rng.unit()).collect();
                let rows: Vec<f16> = (0..n_rows * dim)
                    .map(|_| f16::from_f32(rng.unit() * 8.0 - 4.0))
                    .collect();
                let mut want = vec![0.0f32; dim];
                weighted_sum_scalar(&weights, &rows, &mut want);
                let guard = f32::from_bits(0x7fc0_dead);
                let mut got = vec![guard; dim + 3];
                kernels.weighted_sum(&weights, &rows, &mut got[..dim]);
                for g in &got[dim..] {
                    assert_eq!(g.to_bits(), guard.to_bits(), "wrote past out");
                }
                for c in 0..dim {
                    let magnitude: f32 = (0..n_rows)
                        .map(|j| (weights[j] * rows[j * dim + c].to_f32()).abs())
                        .sum();
                    let error = (got[c] - want[c]).abs();
                    assert!(
                        error <= 1e-5 * magnitude + 1e-6,
                        "{} dim {dim} rows {n_rows} column {c}: {} vs {}",
                        kernels.isa().name(),
                        got[c],
                        want[c]
                    );
                }
            }
        }
        tested += 1;
    }
    assert!(tested >= 1);
}
