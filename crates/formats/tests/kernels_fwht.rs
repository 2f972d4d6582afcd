//! The Walsh–Hadamard transform of the `prism.hadamard` rotation: the scalar twin against the
//! definition (a dense product with the Sylvester matrix `S[r][c] = (−1)^popcount(r & c)`, in
//! f64), a worked example, and every tier against the scalar twin bit for bit on every block
//! size from 2 to 4096 (and 65,536), 1 to 7 rows, with and without signs, at unaligned addresses,
//! with guard values around the rows.

use oxibonsai_formats::kernels::{fwht_scalar, Kernels};

mod common;
use common::Rng;

/// `(1/√n)·S_n·(x ⊙ signs)` per n-chunk, by the dense matrix product in f64.
fn by_definition(x: &[f32], n: usize, signs: Option<&[f32]>) -> Vec<f64> {
    let scale = 1.0 / (n as f64).sqrt();
    let signed: Vec<f64> = match signs {
        Some(s) => x.iter().zip(s).map(|(&v, &s)| f64::from(v * s)).collect(),
        None => x.iter().map(|&v| f64::from(v)).collect(),
    };
    let mut out = vec![0.0; x.len()];
    for (chunk, o) in signed.chunks_exact(n).zip(out.chunks_exact_mut(n)) {
        for (r, o) in o.iter_mut().enumerate() {
            let sum: f64 = chunk
                .iter()
                .enumerate()
                .map(|(c, &v)| {
                    if (r & c).count_ones().is_multiple_of(2) {
                        v
                    } else {
                        -v
                    }
                })
                .sum();
            *o = sum * scale;
        }
    }
    out
}

fn random_row(rng: &mut Rng, len: usize) -> Vec<f32> {
    let magnitude = [1e-3f32, 1.0, 300.0][(rng.next() % 3) as usize];
    (0..len).map(|_| (rng.unit() - 0.5) * magnitude).collect()
}

fn random_signs(rng: &mut Rng, len: usize) -> Vec<f32> {
    (0..len)
        .map(|_| {
            if rng.next().is_multiple_of(2) {
                1.0
            } else {
                -1.0
            }
        })
        .collect()
}

#[test]
fn a_worked_example() {
    // S_4 = [[1,1,1,1],[1,-1,1,-1],[1,1,-1,-1],[1,-1,-1,1]], scaled by 1/2.
    let mut x = [1.0f32, 2.0, 3.0, 4.0];
    fwht_scalar(&mut x, 4, None);
    assert_eq!(x, [5.0, -1.0, -2.0, 0.0]);
    // Signs first: S_4·(1, −2, 3, −4) = (−2, 10, 0, −4), halved.
    let mut x = [1.0f32, 2.0, 3.0, 4.0];
    fwht_scalar(&mut x, 4, Some(&[1.0, -1.0, 1.0, -1.0]));
    assert_eq!(x, [-1.0, 5.0, 0.0, -2.0]);
    // Two blocks of 2: each (a, b) → (a + b, a − b)/√2.
    let mut x = [3.0f32, 1.0, -2.0, 2.0];
    fwht_scalar(&mut x, 2, None);
    let r = std::f32::consts::FRAC_1_SQRT_2;
    assert_eq!(x, [4.0 * r, 2.0 * r, 0.0, -4.0 * r]);
}

/// The scalar twin against the dense product: within a few f32 roundings per stage of the
/// output's scale (a wrong order or sign is off by the size of the values themselves).
#[test]
fn the_scalar_twin_is_the_sylvester_matrix_product() {
    let mut rng = Rng(5);
    let mut worst = 0f64;
    for log in 1..=12 {
        let n = 1usize << log;
        for blocks in [1, 3] {
            let x = random_row(&mut rng, n * blocks);
            let signs = random_signs(&mut rng, n * blocks);
            for signs in [None, Some(&signs[..])] {
                let want = by_definition(&x, n, signs);
                let mut got = x.clone();
                fwht_scalar(&mut got, n, signs);
                for (chunk, (g, w)) in x
                    .chunks_exact(n)
                    .zip(got.chunks_exact(n).zip(want.chunks_exact(n)))
                {
                    let l1: f64 = chunk.iter().map(|&v| f64::from(v).abs()).sum();
                    let tolerance = f64::from(log) * 1.2e-7 * l1 / (n as f64).sqrt() + 1e-30;
                    for (i, (&g, &w)) in g.iter().zip(w).enumerate() {
                        let error = (f64::from(g) - w).abs();
                        assert!(
                            error <= tolerance,
                            "block {n} value {i}: {g} vs {w} (tolerance {tolerance:e})"
                        );
                        worst = worst.max(error / tolerance);
                    }
                }
            }
        }
    }
    eprintln!("fwht scalar vs the dense product: worst error {worst:.3} of the tolerance");
}

/// The transform is its own inverse (S·S = n·I): twice gives the row back, also at the largest
/// block the kernels take.
#[test]
fn twice_is_the_identity() {
    let mut rng = Rng(9);
    for n in [2, 64, 1024, 65_536] {
        let x = random_row(&mut rng, n);
        let mut y = x.clone();
        fwht_scalar(&mut y, n, None);
        fwht_scalar(&mut y, n, None);
        let max = x.iter().fold(0f32, |m, v| m.max(v.abs()));
        for (a, b) in x.iter().zip(&y) {
            assert!((a - b).abs() <= 1e-5 * max, "block {n}: {a} vs {b}");
        }
    }
}

/// Every tier against the scalar twin, bit for bit: each block size 2..=4096 and 65,536, 1 to
/// 7 rows, signs or none, rows starting 0 to 3 values past an aligned address, guards around.
#[test]
fn every_tier_matches_the_scalar_twin_bit_for_bit() {
    let mut rng = Rng(17);
    let guard = f32::from_bits(0x7fc0_dead);
    let mut tested = 0;
    for kernels in common::tiers() {
        let name = kernels.isa().name();
        let mut cases = 0;
        let sizes = (1..=12).map(|log| 1usize << log).chain([65_536]);
        for n in sizes {
            let (rows_range, widths) = if n == 65_536 {
                (1..=2, vec![n])
            } else {
                (1..=7, vec![n, 3 * n])
            };
            for rows in rows_range {
                for &width in &widths {
                    let offset = (rows + n) % 4;
                    let x = random_row(&mut rng, rows * width);
                    let signs = random_signs(&mut rng, width);
                    for signs in [None, Some(&signs[..])] {
                        let mut want = x.clone();
                        for row in want.chunks_exact_mut(width) {
                            fwht_scalar(row, n, signs);
                        }
                        let mut buf = vec![guard; offset + x.len() + 3];
                        buf[offset..offset + x.len()].copy_from_slice(&x);
                        kernels.fwht(&mut buf[offset..offset + x.len()], width, n, signs);
                        for g in buf[..offset].iter().chain(&buf[offset + x.len()..]) {
                            assert_eq!(g.to_bits(), guard.to_bits(), "{name}: wrote outside");
                        }
                        for (i, (g, w)) in buf[offset..].iter().zip(&want).enumerate() {
                            assert_eq!(
                                g.to_bits(),
                                w.to_bits(),
                                "{name} block {n} width {width} rows {rows} signs {} [{i}]: \
                                 {g} vs {w}",
                                signs.is_some()
                            );
                        }
                        cases += 1;
                    }
                }
            }
        }
        eprintln!("fwht {name}: {cases} cases bit-identical to the scalar twin");
        tested += 1;
    }
    assert!(tested >= 1);
}

fn best() -> Kernels {
    common::tiers().pop().expect("the scalar tier at least")
}

#[test]
#[should_panic(expected = "not a power of two")]
fn a_block_that_is_no_power_of_two_is_refused() {
    best().fwht(&mut [0.0; 12], 12, 3, None);
}

#[test]
#[should_panic(expected = "not a power of two in 2..=65536")]
fn a_block_of_one_is_refused() {
    best().fwht(&mut [0.0; 4], 4, 1, None);
}

#[test]
#[should_panic(expected = "not whole blocks")]
fn a_width_that_is_not_whole_blocks_is_refused() {
    best().fwht(&mut [0.0; 12], 12, 8, None);
}

#[test]
#[should_panic(expected = "not whole rows")]
fn rows_that_are_not_whole_are_refused() {
    best().fwht(&mut [0.0; 12], 8, 8, None);
}

#[test]
#[should_panic(expected = "signs and row lengths")]
fn signs_of_another_width_are_refused() {
    best().fwht(&mut [0.0; 16], 16, 8, Some(&[1.0; 8]));
}
