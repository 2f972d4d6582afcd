//! The Q1_0 × Q8_0 matrix-vector shader against the CPU's scalar kernel, on awkward shapes, on
//! the adapter `Gpu::new` picks (`OXIBONSAI_GPU_ADAPTER` to choose; CI: Mesa's lavapipe). No
//! adapter is a failure, never a skip.

mod common;

use common::{cpu_product, random_q1_0, Rng};
use std::sync::Arc;

use oxibonsai_formats::q1_0::QK1_0;
use oxibonsai_formats::q8_0::{self, QK8_0};
use oxibonsai_gpu::{
    GemmTile, Gpu, GpuError, Q1Kernel, Q1Matrix, Q1Reduce, Q8Activation, Q8Tensor, GEMM_TILE,
};

fn gpu() -> Gpu {
    match Gpu::new() {
        Ok(g) => {
            eprintln!("GPU adapter: {}", g.report());
            g
        }
        Err(e) => panic!("the GPU tests need an adapter: {e}"),
    }
}

fn check(gpu: &Gpu, kernel: Option<&Arc<Q1Kernel>>, rng: &mut Rng, n_rows: usize, n_in: usize) {
    let rows = random_q1_0(rng, n_rows, n_in);
    let x: Vec<f32> = (0..n_in).map(|_| rng.unit() * 4.0).collect();
    let (want, scale) = cpu_product(&rows, n_in, &x);
    let m = Q1Matrix::upload(gpu, &rows, n_rows, n_in).unwrap();
    let act = Q8Activation::quantize(&x).unwrap();
    let p = match kernel {
        Some(k) => m.product_with(gpu, k, &act).unwrap(),
        None => m.product(gpu, &act).unwrap(),
    };
    let (got, _) = gpu.run_q1_0(&p, 1).unwrap();
    assert_eq!(got.len(), n_rows);
    for (r, ((g, w), s)) in got.iter().zip(&want).zip(&scale).enumerate() {
        // Both sum exact integer parts; only the float sums' order differs.
        let bound = 4e-6 * s + f32::MIN_POSITIVE;
        assert!(
            (g - w).abs() <= bound,
            "{n_rows}x{n_in} row {r}: GPU {g} CPU {w} (bound {bound})"
        );
    }
}

#[test]
fn q1_0_gemv_matches_the_scalar_kernel_on_awkward_shapes() {
    let gpu = gpu();
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    // The default split, then others: one row per invocation, rows not dividing the workgroup,
    // one lane per row set.
    let mut kernels = vec![None];
    for (lanes, rows) in [(32, 1), (4, 3), (16, 2), (1, 4), (8, 8), (64, 5)] {
        kernels.push(Some(gpu.q1_0_kernel(lanes, rows).unwrap()));
        kernels.push(Some(
            gpu.q1_0_kernel_with(lanes, rows, Q1Reduce::Subgroup)
                .unwrap(),
        ));
    }
    for kernel in &kernels {
        for &(n_rows, n_in) in &[
            (1, 128),
            (7, 256),
            (8, 384),
            (9, 128 * 33),
            (257, 2048),
            (1000, 4096 + 128),
            (31, 17408),
        ] {
            check(&gpu, kernel.as_ref(), &mut rng, n_rows, n_in);
        }
    }
    assert!(gpu.q1_0_kernel(3, 1).is_err() && gpu.q1_0_kernel(8, 9).is_err());
}

/// The gemv-exact Q1_0 gemm (`Gpu::set_gemm_tile(None)`: T tokens, token-major) and its `+=`
/// variant against each token's gemv / gemv_add — the same bits, as `Recorder::q1_0_gemm`
/// promises — and against the CPU's scalar kernel, for T = 1 … 19 and 33 (tiles of 8 and a partial one), rows not a multiple of the
/// workgroup's 16 and rows of 128 and odd multiples of it; both loop orders, alternately.
#[test]
fn q1_0_gemm_matches_each_tokens_gemv_bit_for_bit_and_the_scalar_kernel() {
    assert_eq!(
        GEMM_TILE, 8,
        "the token counts below straddle 8-token tiles"
    );
    let gpu = gpu();
    // The gemv-exact kernel (the register tile's sums are not the gemv's bits: the test below).
    gpu.set_gemm_tile(None);
    let mut rng = Rng(0x28);
    // Both loop orders (`Gpu::set_gemm_tokens_outer`), each count of tokens once.
    for (i, n_tok) in (1..=19).chain([33]).enumerate() {
        gpu.set_gemm_tokens_outer(i % 2 == 1);
        let n_rows = [1, 15, 17, 45][i % 4];
        let n_in = 128 * [1, 3, 5, 33][(i % 4) ^ ((i / 4) % 4)];
        let rows = random_q1_0(&mut rng, n_rows, n_in);
        let x: Vec<f32> = (0..n_tok * n_in).map(|_| rng.unit() * 4.0).collect();
        let residual: Vec<f32> = (0..n_tok * n_rows).map(|_| rng.unit()).collect();
        let m = Q1Matrix::upload(&gpu, &rows, n_rows, n_in).unwrap();
        let xt = gpu.upload("x", &x).unwrap();
        let q = Q8Tensor::new(&gpu, n_tok * n_in).unwrap();
        let out = gpu.tensor("gemm out", n_tok * n_rows).unwrap();
        let sum = gpu.upload("gemm residual", &residual).unwrap();
        let singles: Vec<_> = (0..n_tok)
            .map(|t| {
                let x1 = gpu.upload("x token", &x[t * n_in..(t + 1) * n_in]).unwrap();
                let q1 = Q8Tensor::new(&gpu, n_in).unwrap();
                let o1 = gpu.tensor("gemv out", n_rows).unwrap();
                let r1 = &residual[t * n_rows..(t + 1) * n_rows];
                let s1 = gpu.upload("gemv residual", r1).unwrap();
                (x1, q1, o1, s1)
            })
            .collect();
        let mut rec = gpu.recorder();
        rec.quantize(&xt, &q).unwrap();
        rec.q1_0_gemm(&m, &q, &out, n_tok).unwrap();
        rec.q1_0_gemm_add(&m, &q, &sum, n_tok).unwrap();
        for (x1, q1, o1, s1) in &singles {
            rec.quantize(x1, q1).unwrap();
            rec.q1_0_gemv(&m, q1, o1).unwrap();
            rec.q1_0_gemv_add(&m, q1, s1).unwrap();
        }
        rec.submit().unwrap();
        let got: Vec<f32> = gpu.read(&out).unwrap();
        let got_sum: Vec<f32> = gpu.read(&sum).unwrap();
        for (t, (_, _, o1, s1)) in singles.iter().enumerate() {
            let one: Vec<f32> = gpu.read(o1).unwrap();
            let one_sum: Vec<f32> = gpu.read(s1).unwrap();
            let span = t * n_rows..(t + 1) * n_rows;
            for (what, batch, single) in [
                ("gemm", &got[span.clone()], &one),
                ("gemm_add", &got_sum[span.clone()], &one_sum),
            ] {
                for (r, (g, s)) in batch.iter().zip(single.iter()).enumerate() {
                    assert_eq!(
                        g.to_bits(),
                        s.to_bits(),
                        "{n_tok} tokens of {n_rows}x{n_in}: {what} token {t} row {r}: {g} vs {s}"
                    );
                }
            }
            let (want, scale) = cpu_product(&rows, n_in, &x[t * n_in..(t + 1) * n_in]);
            for (r, ((g, w), s)) in got[span].iter().zip(&want).zip(&scale).enumerate() {
                let bound = 4e-6 * s + f32::MIN_POSITIVE;
                assert!(
                    (g - w).abs() <= bound,
                    "{n_tok} tokens of {n_rows}x{n_in} token {t} row {r}: GPU {g} CPU {w}"
                );
            }
        }
    }
    // Refused by name: no tokens, an activation of another length.
    let m = Q1Matrix::upload(&gpu, &random_q1_0(&mut rng, 3, 128), 3, 128).unwrap();
    let q = Q8Tensor::new(&gpu, 256).unwrap();
    let out = gpu.tensor("out", 9).unwrap();
    let mut rec = gpu.recorder();
    let e = rec.q1_0_gemm(&m, &q, &out, 3).err().unwrap();
    assert!(e.to_string().contains("Q1_0 gemm"), "{e}");
    let e = rec.q1_0_gemm(&m, &q, &out, 0).err().unwrap();
    assert!(e.to_string().contains("at least one token"), "{e}");
}

/// Each token's Q1_0 × Q8_0 product in f64 from the CPU's quantization of `x` (the device's,
/// bit for bit: the gemv test above), and the sum of its terms' magnitudes: per row, Σ_blocks
/// |d_w| · Σ_k |d_k| · |Σ ±q| — what the f32 roundings scale with.
fn f64_product(rows: &[u8], n_rows: usize, n_in: usize, x: &[f32]) -> (Vec<f64>, Vec<f64>) {
    let n_blocks = n_in / QK1_0;
    let mut act = vec![0u8; n_in / QK8_0 * 34];
    q8_0::quantize_activation(x, &mut act);
    let codes: Vec<(f64, Vec<f64>)> = act
        .chunks_exact(34)
        .map(|b| {
            let d = half::f16::from_le_bytes([b[0], b[1]]).to_f64();
            (d, b[2..].iter().map(|&q| f64::from(q as i8)).collect())
        })
        .collect();
    let mut want = Vec::with_capacity(n_rows);
    let mut scale = Vec::with_capacity(n_rows);
    for row in rows.chunks_exact(n_blocks * 18) {
        let (mut sum, mut magnitude) = (0.0f64, 0.0f64);
        for (b, block) in row.chunks_exact(18).enumerate() {
            let dw = half::f16::from_le_bytes([block[0], block[1]]).to_f64();
            for k in 0..QK1_0 / QK8_0 {
                let (d, q) = &codes[b * (QK1_0 / QK8_0) + k];
                let signed: f64 = (0..QK8_0)
                    .map(|i| {
                        let bit = k * QK8_0 + i;
                        let on = block[2 + bit / 8] >> (bit % 8) & 1 == 1;
                        if on {
                            q[i]
                        } else {
                            -q[i]
                        }
                    })
                    .sum();
                sum += dw * d * signed;
                magnitude += (dw * d * signed).abs();
            }
        }
        want.push(sum);
        scale.push(magnitude);
    }
    (want, scale)
}

/// The register-tile Q1_0 gemm (`Gpu::set_gemm_tile`) and its `+=` variant against an f64
/// reference within the f32 roundings' bound: each (token, row) adds its blocks' terms in order
/// (4 sub-block terms, a product, an add a block: n_blocks + 6 roundings of at most the terms'
/// magnitudes, one more for the residual). T = 1, 3, 8, 17, 33, 64, rows not a multiple of any
/// tile, rows of 128, 4096 and 12288 values, more than 65,535 workgroups; every tile shape, each
/// (T, shape) once.
#[test]
fn q1_0_gemm_tile_matches_an_f64_reference_on_awkward_shapes() {
    let gpu = gpu();
    // No tile unless one is set (the gemv-exact kernel, the engine's default).
    assert_eq!(gpu.gemm_tile(), None);
    let tiles = [
        GemmTile::DEFAULT,
        GemmTile::new(64, 32).unwrap(),
        GemmTile::new(128, 16).unwrap(),
        GemmTile::new(32, 64).unwrap(),
        GemmTile::new(256, 8).unwrap(),
        GemmTile::new(64, 64).unwrap(),
        GemmTile::DEFAULT.with_direct(true),
        GemmTile::new(128, 16).unwrap().with_direct(true),
    ];
    let mut rng = Rng(0x7113);
    let cases = [
        (1, 1, 128),
        (3, 45, 4096),
        (8, 100, 12288),
        (17, 33, 128),
        (33, 70, 4096),
        (64, 129, 12288),
        (64, 31, 128),
        (17, 257, 4096),
        // More than 65,535 workgroups (32-row tiles): the tiles continue in the second dimension.
        (2, 65_535 * 32 + 13, 128),
    ];
    for (i, &(n_tok, n_rows, n_in)) in cases.iter().enumerate() {
        let tile = if n_rows > 65_535 {
            GemmTile::DEFAULT
        } else {
            tiles[i % tiles.len()]
        };
        gpu.set_gemm_tile(Some(tile));
        let rows = random_q1_0(&mut rng, n_rows, n_in);
        let x: Vec<f32> = (0..n_tok * n_in).map(|_| rng.unit() * 4.0).collect();
        let residual: Vec<f32> = (0..n_tok * n_rows).map(|_| rng.unit()).collect();
        let m = Q1Matrix::upload(&gpu, &rows, n_rows, n_in).unwrap();
        let xt = gpu.upload("x", &x).unwrap();
        let q = Q8Tensor::new(&gpu, n_tok * n_in).unwrap();
        let out = gpu.tensor("gemm out", n_tok * n_rows).unwrap();
        let sum = gpu.upload("gemm residual", &residual).unwrap();
        let mut rec = gpu.recorder();
        rec.quantize(&xt, &q).unwrap();
        rec.q1_0_gemm(&m, &q, &out, n_tok).unwrap();
        rec.q1_0_gemm_add(&m, &q, &sum, n_tok).unwrap();
        rec.submit().unwrap();
        let got: Vec<f32> = gpu.read(&out).unwrap();
        let got_sum: Vec<f32> = gpu.read(&sum).unwrap();
        let roundings = (n_in / QK1_0 + 6) as f64 * f64::from(f32::EPSILON) / 2.0;
        for t in 0..n_tok {
            let (want, scale) = f64_product(&rows, n_rows, n_in, &x[t * n_in..(t + 1) * n_in]);
            for r in 0..n_rows {
                let at = t * n_rows + r;
                let bound = roundings * scale[r] + f64::from(f32::MIN_POSITIVE);
                let with = want[r] + f64::from(residual[at]);
                let bound_sum = bound + roundings * (scale[r] + f64::from(residual[at].abs()));
                for (what, g, w, b) in [
                    ("gemm", got[at], want[r], bound),
                    ("gemm_add", got_sum[at], with, bound_sum),
                ] {
                    assert!(
                        (f64::from(g) - w).abs() <= b,
                        "{tile:?}, {n_tok} tokens of {n_rows}x{n_in}: {what} token {t} row {r}: \
                         GPU {g} f64 {w} (bound {b})"
                    );
                }
            }
        }
    }
    // Tiles it does not have are refused by name; the spelling of OXIBONSAI_GPU_GEMM_TILE.
    for (rows, tokens) in [(16, 32), (32, 4), (32, 48), (256, 32), (96, 32)] {
        let e = GemmTile::new(rows, tokens).err().unwrap();
        assert!(e.to_string().contains("not a tile it has"), "{e}");
    }
    assert_eq!(
        GemmTile::parse("64x16").unwrap(),
        GemmTile::new(64, 16).unwrap()
    );
    let direct = GemmTile::parse("32x64d").unwrap();
    assert_eq!(direct, GemmTile::new(32, 64).unwrap().with_direct(true));
    gpu.set_gemm_tile(Some(direct));
    assert_eq!(gpu.gemm_tile(), Some(direct));
    assert!(GemmTile::parse("64").is_err() && GemmTile::parse("ax8").is_err());
    let late = GemmTile::parse(" 128x16d @ 255 ").unwrap();
    assert_eq!(
        late,
        GemmTile::new(128, 16)
            .unwrap()
            .with_direct(true)
            .with_from_tokens(255)
            .unwrap()
    );
    gpu.set_gemm_tile(Some(late));
    assert_eq!(gpu.gemm_tile(), Some(late));
    for bad in ["128x16@256", "128x16@", "128x16@x", "@8"] {
        let e = GemmTile::parse(bad).err().unwrap().to_string();
        assert!(e.contains("gemm tile"), "{bad:?}: {e}");
    }
    gpu.set_gemm_tile(None);
    assert_eq!(gpu.gemm_tile(), None);
}

/// A tile set to run from N tokens (`ROWSxTOKENS@N`): a gemm of fewer tokens is the gemv-exact
/// kernel's to the bit, one of N or more the tile's without the threshold to the bit.
#[test]
fn a_gemm_tile_from_n_tokens_leaves_shorter_gemms_to_the_exact_kernel() {
    let gpu = gpu();
    let mut rng = Rng(0x7114);
    let (n_rows, n_in) = (45, 4096);
    let rows = random_q1_0(&mut rng, n_rows, n_in);
    let m = Q1Matrix::upload(&gpu, &rows, n_rows, n_in).unwrap();
    let tile = GemmTile::new(128, 16).unwrap();
    let run = |n_tok: usize, x: &[f32]| -> Vec<f32> {
        let xt = gpu.upload("x", x).unwrap();
        let q = Q8Tensor::new(&gpu, n_tok * n_in).unwrap();
        let out = gpu.tensor("gemm out", n_tok * n_rows).unwrap();
        let mut rec = gpu.recorder();
        rec.quantize(&xt, &q).unwrap();
        rec.q1_0_gemm(&m, &q, &out, n_tok).unwrap();
        rec.submit().unwrap();
        gpu.read(&out).unwrap()
    };
    for n_tok in [7, 8, 9, 17] {
        let x: Vec<f32> = (0..n_tok * n_in).map(|_| rng.unit() * 4.0).collect();
        gpu.set_gemm_tile(None);
        let exact = run(n_tok, &x);
        gpu.set_gemm_tile(Some(tile));
        let tiled = run(n_tok, &x);
        gpu.set_gemm_tile(Some(tile.with_from_tokens(8).unwrap()));
        let got = run(n_tok, &x);
        gpu.set_gemm_tile(None);
        let want = if n_tok >= 8 { &tiled } else { &exact };
        assert!(
            exact.iter().zip(&tiled).any(|(a, b)| a.to_bits() != b.to_bits()),
            "{n_tok} tokens: the tile and the exact kernel agree to the bit, so this test cannot tell them apart"
        );
        for (i, (g, w)) in got.iter().zip(want).enumerate() {
            assert_eq!(
                g.to_bits(),
                w.to_bits(),
                "{n_tok} tokens, value {i}: {g} vs {w}"
            );
        }
    }
}

#[test]
fn q1_0_gemv_spans_two_dispatch_dimensions() {
    // More than 65,535 workgroups: the rows continue in the second dimension.
    let gpu = gpu();
    let rows_per_group = 256 / Q1Kernel::DEFAULT_LANES * Q1Kernel::DEFAULT_ROWS;
    check(
        &gpu,
        None,
        &mut Rng(7),
        65_535 * rows_per_group as usize + 13,
        128,
    );
}

#[test]
fn bad_shapes_are_refused_by_name() {
    let gpu = gpu();
    let e = Q1Matrix::upload(&gpu, &[0u8; 18], 1, 100).err().unwrap();
    assert!(e.to_string().contains("row length 100"), "{e}");
    let e = Q1Matrix::upload(&gpu, &[0u8; 17], 1, 128).err().unwrap();
    assert!(e.to_string().contains("need 18 bytes, got 17"), "{e}");
    let m = Q1Matrix::upload(&gpu, &[0u8; 36], 1, 256).unwrap();
    let x = Q8Activation::quantize(&[0.5; 128]).unwrap();
    let e = m.product(&gpu, &x).err().unwrap();
    assert!(matches!(e, GpuError::Shape { .. }), "{e}");
    assert!(Q8Activation::quantize(&[1.0; 33]).is_err());
}

#[test]
fn an_unknown_adapter_name_lists_what_exists() {
    let e = Gpu::with_adapter(Some("no-such-gpu-anywhere"))
        .err()
        .unwrap();
    let text = e.to_string();
    assert!(
        text.contains("no-such-gpu-anywhere") && text.contains("found"),
        "{text}"
    );
}

/// Every split and lane sum the recorded products take (`Gpu::set_q1_0_lanes`, `_rows`,
/// `_reduce`), on rows 1 / 7 / 33 / 4097 of 1 / 3 / 32 / 96 blocks: the gemv against the CPU's
/// scalar kernel within the bound above; the subgroup lane sum bit for bit the tree's of the
/// same split (the same additions in the same order); the residual form bit for bit the gemv
/// plus the residual (one f32 addition) and the gemv-exact gemm (3 tokens) each token's gemv.
#[test]
fn every_recorded_split_and_lane_sum_matches_the_scalar_kernel_and_the_tree_bit_for_bit() {
    let gpu = gpu();
    let sizes = gpu.report().subgroup_sizes;
    eprintln!("subgroup sizes (smallest, largest): {sizes:?}");
    assert!(
        sizes.is_some(),
        "the adapter has no `subgroups`: the subgroup lane sum cannot be tested"
    );
    let mut rng = Rng(0x51);
    let mut shapes: Vec<(usize, usize)> = [1, 7, 33]
        .iter()
        .flat_map(|&r| [1, 3, 32, 96].map(|b| (r, b)))
        .collect();
    shapes.extend([(4097, 1), (4097, 32)]);
    let n_tok = 3;
    struct Case {
        rows: Vec<u8>,
        x: Vec<f32>,
        residual: Vec<f32>,
        m: Q1Matrix,
        q: Q8Tensor,
        n_rows: usize,
        n_in: usize,
    }
    let cases: Vec<Case> = shapes
        .iter()
        .map(|&(n_rows, blocks)| {
            let n_in = blocks * QK1_0;
            let rows = random_q1_0(&mut rng, n_rows, n_in);
            let x: Vec<f32> = (0..n_tok * n_in).map(|_| rng.unit() * 4.0).collect();
            let residual: Vec<f32> = (0..n_rows).map(|_| rng.unit()).collect();
            let m = Q1Matrix::upload(&gpu, &rows, n_rows, n_in).unwrap();
            let q = Q8Tensor::new(&gpu, n_tok * n_in).unwrap();
            let mut rec = gpu.recorder();
            rec.quantize(&gpu.upload("x", &x).unwrap(), &q).unwrap();
            rec.submit().unwrap();
            Case {
                rows,
                x,
                residual,
                m,
                q,
                n_rows,
                n_in,
            }
        })
        .collect();
    // The first token's quantized activation alone (the gemv's input).
    let singles: Vec<Q8Tensor> = cases
        .iter()
        .map(|c| {
            let q = Q8Tensor::new(&gpu, c.n_in).unwrap();
            let mut rec = gpu.recorder();
            rec.quantize(&gpu.upload("x0", &c.x[..c.n_in]).unwrap(), &q)
                .unwrap();
            rec.submit().unwrap();
            q
        })
        .collect();
    let wants: Vec<(Vec<f32>, Vec<f32>)> = cases
        .iter()
        .map(|c| cpu_product(&c.rows, c.n_in, &c.x[..c.n_in]))
        .collect();
    gpu.set_gemm_tile(None);
    for lanes in Q1Kernel::LANE_CHOICES {
        for r in [1, 2, 3, 4, 5, 8] {
            let mut tree_bits: Vec<Vec<u32>> = Vec::new();
            for reduce in [Q1Reduce::Tree, Q1Reduce::Subgroup] {
                gpu.set_q1_0_lanes(Some(lanes)).unwrap();
                gpu.set_q1_0_rows(Some(r)).unwrap();
                gpu.set_q1_0_reduce(reduce).unwrap();
                let split = format!("{lanes} lanes x {r} rows, {reduce:?}");
                let mut outs = Vec::new();
                let mut rec = gpu.recorder();
                for (c, q1) in cases.iter().zip(&singles) {
                    let out = gpu.tensor("gemv", c.n_rows).unwrap();
                    let sum = gpu.upload("residual", &c.residual).unwrap();
                    let gemm = gpu.tensor("gemm", n_tok * c.n_rows).unwrap();
                    rec.q1_0_gemv(&c.m, q1, &out).unwrap();
                    rec.q1_0_gemv_add(&c.m, q1, &sum).unwrap();
                    rec.q1_0_gemm(&c.m, &c.q, &gemm, n_tok).unwrap();
                    outs.push((out, sum, gemm));
                }
                rec.submit().unwrap();
                for (i, (c, (out, sum, gemm))) in cases.iter().zip(&outs).enumerate() {
                    let what = format!("{split}: {}x{}", c.n_rows, c.n_in);
                    let got: Vec<f32> = gpu.read(out).unwrap();
                    let got_sum: Vec<f32> = gpu.read(sum).unwrap();
                    let got_gemm: Vec<f32> = gpu.read(gemm).unwrap();
                    let (want, scale) = &wants[i];
                    for (row, ((g, w), s)) in got.iter().zip(want).zip(scale).enumerate() {
                        let bound = 4e-6 * s + f32::MIN_POSITIVE;
                        assert!(
                            (g - w).abs() <= bound,
                            "{what} row {row}: GPU {g} CPU {w} (bound {bound})"
                        );
                        let plus = c.residual[row] + g;
                        assert_eq!(
                            got_sum[row].to_bits(),
                            plus.to_bits(),
                            "{what} row {row}: residual"
                        );
                        assert_eq!(
                            got_gemm[row].to_bits(),
                            g.to_bits(),
                            "{what} row {row}: gemm token 0"
                        );
                    }
                    // The gemm's other tokens against the CPU (token 0 is the gemv's bits).
                    for t in 1..n_tok {
                        let (w, s) =
                            cpu_product(&c.rows, c.n_in, &c.x[t * c.n_in..(t + 1) * c.n_in]);
                        for (row, g) in got_gemm[t * c.n_rows..(t + 1) * c.n_rows]
                            .iter()
                            .enumerate()
                        {
                            let bound = 4e-6 * s[row] + f32::MIN_POSITIVE;
                            assert!(
                                (g - w[row]).abs() <= bound,
                                "{what} gemm token {t} row {row}: GPU {g} CPU {}",
                                w[row]
                            );
                        }
                    }
                    let bits: Vec<u32> = got.iter().map(|v| v.to_bits()).collect();
                    match reduce {
                        Q1Reduce::Tree => tree_bits.push(bits),
                        Q1Reduce::Subgroup => {
                            assert_eq!(
                                bits, tree_bits[i],
                                "{what}: the subgroup sum is not the tree's"
                            )
                        }
                    }
                }
            }
        }
    }
    // What the settings do not take is refused by name.
    assert!(gpu.set_q1_0_lanes(Some(4)).is_err() && gpu.set_q1_0_lanes(Some(256)).is_err());
    let e = gpu.set_q1_0_rows(Some(9)).err().unwrap();
    assert!(e.to_string().contains("9 rows"), "{e}");
    assert!(gpu.set_q1_0_rows(Some(0)).is_err());
    let e = oxibonsai_gpu::Q1Reduce::parse("shuffle").err().unwrap();
    assert!(e.to_string().contains("OXIBONSAI_GPU_Q1_REDUCE"), "{e}");
    gpu.set_q1_0_lanes(None).unwrap();
    gpu.set_q1_0_rows(None).unwrap();
    gpu.set_q1_0_reduce(Q1Reduce::Tree).unwrap();
}
