//! The float kernels around the matrix products — attention's softmax numerator and weighted sum
//! of f16 value rows, SwiGLU's gate — of every tier against their scalar twins, on awkward lengths
//! (every vector-width remainder, the 128-column pass boundary), with guard values after the
//! output in the same allocation; and the weighted sums over a quantized value cache's rows.

use half::f16;
use oxibonsai_formats::kernels::{
    attention_scores_scalar, attention_values_blocks_scalar, attention_values_scalar,
    silu_mul_scalar, softmax_scalar, weighted_sum_scalar, Isa,
};
use oxibonsai_formats::{format, FormatKind};

mod common;
use common::Rng;

#[test]
fn weighted_sum_matches_the_scalar_twin() {
    let mut rng = Rng(42);
    let mut tested = 0;
    for kernels in common::tiers() {
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

/// The softmax numerator (scale, maximum, exponentials, their sum) of every tier against the
/// scalar twin (`f32::exp`): lengths around every vector width, scores spread wide enough that
/// some exponentials underflow; each value within 2 ulp-scale of the twin's, the sum within 1e-6.
#[test]
fn softmax_matches_the_scalar_twin() {
    let mut rng = Rng(7);
    let mut tested = 0;
    for kernels in common::tiers() {
        for len in [
            1, 2, 3, 7, 8, 9, 15, 16, 17, 31, 33, 64, 100, 129, 255, 511, 1000,
        ] {
            for spread in [0.01f32, 1.0, 30.0, 300.0] {
                let scores: Vec<f32> = (0..len).map(|_| (rng.unit() - 0.5) * spread).collect();
                let scale = 0.125;
                let mut want = scores.clone();
                let want_sum = softmax_scalar(&mut want, scale);
                let guard = f32::from_bits(0x7fc0_dead);
                let mut got = scores.clone();
                got.extend([guard; 3]);
                let got_sum = kernels.softmax(&mut got[..len], scale);
                for g in &got[len..] {
                    assert_eq!(g.to_bits(), guard.to_bits(), "wrote past the scores");
                }
                let name = kernels.isa().name();
                for i in 0..len {
                    let error = (got[i] - want[i]).abs();
                    assert!(
                        error <= 2.5e-7 * want[i] + 1e-30,
                        "{name} len {len} spread {spread} [{i}]: {} vs {}",
                        got[i],
                        want[i]
                    );
                }
                // The maximum's own term is exactly 1.
                assert!(want.contains(&1.0) && got[..len].contains(&1.0));
                assert!(
                    (got_sum - want_sum).abs() <= 1e-6 * want_sum,
                    "{name} len {len} spread {spread}: sum {got_sum} vs {want_sum}"
                );
            }
        }
        tested += 1;
    }
    assert!(tested >= 1);
}

/// SwiGLU's gate (`silu(g) · u`) of every tier against the scalar twin, on lengths around every
/// vector width and gates from −120 to 120 (where `exp(−g)` overflows f32 in the twin): each
/// value within a few ulp of the twin's, nothing written past the gate.
#[test]
fn silu_mul_matches_the_scalar_twin() {
    let mut rng = Rng(11);
    let mut tested = 0;
    for kernels in common::tiers() {
        for len in [1, 2, 7, 8, 9, 15, 16, 17, 31, 33, 100, 1000] {
            for spread in [0.1f32, 8.0, 240.0] {
                let gate: Vec<f32> = (0..len).map(|_| (rng.unit() - 0.5) * spread).collect();
                let up: Vec<f32> = (0..len).map(|_| rng.unit() * 4.0 - 2.0).collect();
                let mut want = gate.clone();
                silu_mul_scalar(&mut want, &up);
                let guard = f32::from_bits(0x7fc0_dead);
                let mut got = gate.clone();
                got.extend([guard; 3]);
                kernels.silu_mul(&mut got[..len], &up);
                for g in &got[len..] {
                    assert_eq!(g.to_bits(), guard.to_bits(), "wrote past the gate");
                }
                for i in 0..len {
                    let error = (got[i] - want[i]).abs();
                    assert!(
                        error <= 6e-7 * want[i].abs() + 1e-30,
                        "{} len {len} gate {} up {}: {} vs {}",
                        kernels.isa().name(),
                        gate[i],
                        up[i],
                        got[i],
                        want[i]
                    );
                }
            }
        }
        tested += 1;
    }
    assert!(tested >= 1);
}

/// Query lengths for `n_q` queries over up to `n_keys` keys: zero, one, around the 16-key blocks,
/// all of them, and random ones.
fn query_lens(rng: &mut Rng, n_q: usize, n_keys: usize) -> Vec<usize> {
    let fixed = [0, 1, 15, 16, 17, n_keys];
    (0..n_q)
        .map(|i| match fixed.get(i) {
            Some(&l) => l.min(n_keys),
            None => (rng.next() as usize) % (n_keys + 1),
        })
        .collect()
}

/// Several queries' scores over f16 keys on every tier against the scalar twin (f64 sums),
/// within the f32 rounding of a chain of ⌈dim / 16⌉ fused products and a 16-lane tree; nothing
/// written past a query's length (guards fill the rest of each output row); and each query alone
/// gives bit for bit what it gets among the others (a token's attention does not depend on the
/// batch).
#[test]
fn attention_scores_match_the_scalar_twin_and_do_not_depend_on_the_batch() {
    let mut rng = Rng(11);
    let mut tested = 0;
    for kernels in common::tiers() {
        let name = kernels.isa().name();
        for dim in [1, 7, 16, 17, 64, 100, 128, 129, 256, 300, 1024, 2049] {
            for n_q in [1, 2, 3, 8, 9, 13] {
                let n_keys = 40;
                let lens = query_lens(&mut rng, n_q, n_keys);
                let keys: Vec<f16> = (0..n_keys * dim)
                    .map(|_| f16::from_f32(rng.unit() * 4.0 - 2.0))
                    .collect();
                let queries: Vec<f16> = (0..n_q * dim)
                    .map(|_| f16::from_f32(rng.unit() * 4.0 - 2.0))
                    .collect();
                let stride = n_keys + 3;
                let guard = f32::from_bits(0x7fc0_dead);
                let mut want = vec![guard; n_q * stride];
                attention_scores_scalar(&keys, &queries, dim, &lens, &mut want, stride);
                let mut got = vec![guard; n_q * stride];
                kernels.attention_scores(&keys, &queries, dim, &lens, &mut got, stride);
                for (i, &len) in lens.iter().enumerate() {
                    for j in 0..stride {
                        let (g, w) = (got[i * stride + j], want[i * stride + j]);
                        if j >= len {
                            assert_eq!(
                                g.to_bits(),
                                guard.to_bits(),
                                "{name}: wrote past query {i}"
                            );
                            continue;
                        }
                        let magnitude: f32 = (0..dim)
                            .map(|d| {
                                (queries[i * dim + d].to_f32() * keys[j * dim + d].to_f32()).abs()
                            })
                            .sum();
                        let bound = (dim as f32 / 16.0 + 8.0) * f32::EPSILON * magnitude + 1e-6;
                        assert!(
                            (g - w).abs() <= bound,
                            "{name} dim {dim} query {i} of {n_q} key {j}: {g} vs {w}"
                        );
                    }
                    let mut alone = vec![guard; stride];
                    kernels.attention_scores(
                        &keys,
                        &queries[i * dim..(i + 1) * dim],
                        dim,
                        &[len],
                        &mut alone,
                        stride,
                    );
                    for j in 0..len {
                        assert_eq!(
                            alone[j].to_bits(),
                            got[i * stride + j].to_bits(),
                            "{name} dim {dim}: query {i} alone vs among {n_q}, key {j}"
                        );
                    }
                }
            }
        }
        tested += 1;
    }
    assert!(tested >= 1);
}

/// Several queries' weighted sums of f16 value rows on every tier: against the scalar twin
/// within the bound of `weighted_sum`'s test, and bit for bit equal to `weighted_sum` on each
/// query alone (the one-query kernel, so batching changes nothing).
#[test]
fn attention_values_match_the_scalar_twin_and_each_weighted_sum() {
    let mut rng = Rng(12);
    let mut tested = 0;
    for kernels in common::tiers() {
        let name = kernels.isa().name();
        for dim in [1, 7, 16, 17, 33, 64, 100, 128, 129, 200, 256, 257] {
            for n_q in [1, 2, 3, 4, 5, 9, 17] {
                let n_keys = 37;
                let lens = query_lens(&mut rng, n_q, n_keys);
                let w_stride = n_keys + 2;
                let weights: Vec<f32> = (0..n_q * w_stride).map(|_| rng.unit()).collect();
                let rows: Vec<f16> = (0..n_keys * dim)
                    .map(|_| f16::from_f32(rng.unit() * 8.0 - 4.0))
                    .collect();
                let mut want = vec![0.0f32; n_q * dim];
                attention_values_scalar(&weights, w_stride, &lens, &rows, &mut want);
                let guard = f32::from_bits(0x7fc0_dead);
                let mut got = vec![guard; n_q * dim + 3];
                kernels.attention_values(&weights, w_stride, &lens, &rows, &mut got[..n_q * dim]);
                for g in &got[n_q * dim..] {
                    assert_eq!(g.to_bits(), guard.to_bits(), "{name}: wrote past out");
                }
                for (i, &len) in lens.iter().enumerate() {
                    let w = &weights[i * w_stride..i * w_stride + len];
                    let mut alone = vec![0.0f32; dim];
                    kernels.weighted_sum(w, &rows, &mut alone);
                    for c in 0..dim {
                        let g = got[i * dim + c];
                        assert_eq!(
                            g.to_bits(),
                            alone[c].to_bits(),
                            "{name} dim {dim}: query {i} of {n_q} column {c} vs weighted_sum"
                        );
                        let magnitude: f32 = (0..len)
                            .map(|j| (w[j] * rows[j * dim + c].to_f32()).abs())
                            .sum();
                        assert!(
                            (g - want[i * dim + c]).abs() <= 1e-5 * magnitude + 1e-6,
                            "{name} dim {dim} query {i} column {c}: {g} vs {}",
                            want[i * dim + c]
                        );
                    }
                }
            }
        }
        tested += 1;
    }
    assert!(tested >= 1);
}

/// The value-cache types whose rows the vector tiers read in place.
const BLOCK_VALUE_TYPES: [FormatKind; 6] = [
    FormatKind::Q8_0,
    FormatKind::Q4_0,
    FormatKind::Q4_1,
    FormatKind::Q5_0,
    FormatKind::Q5_1,
    FormatKind::IQ4_NL,
];

/// Weighted sums over value rows of each block cache type, on every tier, against the scalar
/// twin (each row dequantized by the registry, then summed): random codes with scales of every
/// class (zero, subnormal, large, negative), key counts around the 64-key tile, query counts
/// around the two-query pass, heads of one to eight blocks. Within the f32 rounding of the sums
/// (their magnitude counts a minimum's terms apart, as the kernels sum them apart); each query
/// alone equals itself among the others bit for bit; nothing written past the output. Every
/// vector tier must have a kernel of each type (a missing one would silently be the scalar twin).
#[test]
fn attention_values_blocks_match_the_scalar_twin() {
    let mut rng = Rng(13);
    let mut tested = 0;
    for kernels in common::tiers() {
        let name = kernels.isa().name();
        for kind in BLOCK_VALUE_TYPES {
            let f = format(kind);
            assert!(
                kernels.isa() == Isa::Scalar || kernels.has_fast_block_values(kind),
                "{name} has no value-row kernel of {}",
                f.name
            );
            let mut worst = 0.0f32;
            for dim in [32, 64, 96, 128, 160, 256] {
                let row_bytes = dim / 32 * f.block_bytes;
                for n_keys in [1, 5, 63, 64, 65, 130] {
                    let rows = common::random_weights(f, n_keys * dim / 32, &mut rng);
                    let mut values = vec![0f32; n_keys * dim];
                    (f.dequantize)(&rows, &mut values);
                    let min = |j: usize, c: usize| -> f32 {
                        let at = j * row_bytes + c / 32 * f.block_bytes + 2;
                        match kind {
                            FormatKind::Q4_1 | FormatKind::Q5_1 => {
                                f16::from_le_bytes([rows[at], rows[at + 1]]).to_f32().abs()
                            }
                            _ => 0.0,
                        }
                    };
                    for n_q in [1, 2, 3, 5] {
                        let lens = query_lens(&mut rng, n_q, n_keys);
                        let w_stride = n_keys + 2;
                        let weights: Vec<f32> = (0..n_q * w_stride).map(|_| rng.unit()).collect();
                        let n_out = n_q * dim;
                        let mut want = vec![0f32; n_out];
                        attention_values_blocks_scalar(
                            f, &weights, w_stride, &lens, &rows, row_bytes, &mut want,
                        );
                        let guard = f32::from_bits(0x7fc0_dead);
                        let mut got = vec![guard; n_out + 3];
                        kernels.attention_values_blocks(
                            f,
                            &weights,
                            w_stride,
                            &lens,
                            &rows,
                            row_bytes,
                            &mut got[..n_out],
                        );
                        for g in &got[n_out..] {
                            assert_eq!(g.to_bits(), guard.to_bits(), "{name}: wrote past out");
                        }
                        for (i, &len) in lens.iter().enumerate() {
                            let w = &weights[i * w_stride..(i + 1) * w_stride];
                            let mut alone = vec![0f32; dim];
                            kernels.attention_values_blocks(
                                f,
                                w,
                                w_stride,
                                &[len],
                                &rows,
                                row_bytes,
                                &mut alone,
                            );
                            for c in 0..dim {
                                let g = got[i * dim + c];
                                assert_eq!(
                                    g.to_bits(),
                                    alone[c].to_bits(),
                                    "{name} {} dim {dim}: query {i} of {n_q} alone, column {c}",
                                    f.name
                                );
                                let magnitude: f32 = (0..len)
                                    .map(|j| w[j] * (values[j * dim + c].abs() + 2.0 * min(j, c)))
                                    .sum();
                                let error = (g - want[i * dim + c]).abs();
                                assert!(
                                    error <= 1e-5 * magnitude + 1e-6,
                                    "{name} {} dim {dim} keys {n_keys} query {i} column {c}: \
                                     {g} vs {}",
                                    f.name,
                                    want[i * dim + c]
                                );
                                worst = worst.max(error / (magnitude + 1e-30));
                            }
                        }
                    }
                }
            }
            eprintln!(
                "{} {name}: worst error {worst:.2e} of the sums' magnitude",
                f.name
            );
        }
        tested += 1;
    }
    assert!(tested >= 1);
}
