//! RMS norm, RoPE, SwiGLU, add and the embedding lookup on the GPU against the CPU's scalar ops,
//! on awkward shapes. The CPU backend's element-wise ops are private to the engine (which this
//! crate does not depend on): RMS norm and RoPE are their formulas restated here (f64 sum of f32
//! squares; the engine's `rope_angles`), SwiGLU is the formats crate's `silu_mul_scalar` (the CPU
//! kernels' scalar twin), embeddings the formats crate's `dequantize`.

mod support;

use oxibonsai_formats::kernels::silu_mul_scalar;
use oxibonsai_formats::q1_0;
use oxibonsai_gpu::{EmbeddingTable, Q1Matrix, Rope, Tensor};
use support::{gpu, rope_angles, Rng, Worst, U};

#[test]
fn rms_norm_matches_the_cpu_formula() {
    let gpu = gpu();
    let mut rng = Rng(11);
    let mut worst = Worst::new("rms_norm");
    for &(rows, n) in &[(1, 1), (1, 7), (3, 255), (2, 257), (5, 4096), (1, 17408)] {
        let x = rng.vec(rows * n, 3.0);
        let w = rng.vec(n, 1.5);
        let eps = 1e-6f32;
        let (xt, wt, yt) = (
            gpu.upload("x", &x).unwrap(),
            gpu.upload("w", &w).unwrap(),
            gpu.tensor("y", rows * n).unwrap(),
        );
        let mut rec = gpu.recorder();
        rec.rms_norm(&xt, &wt, eps, rows, &yt).unwrap();
        rec.submit().unwrap();
        let y: Vec<f32> = gpu.read(&yt).unwrap();
        for (r, (row, got)) in x.chunks_exact(n).zip(y.chunks_exact(n)).enumerate() {
            let sum: f64 = row.iter().map(|&v| f64::from(v * v)).sum();
            let mean = (sum / n as f64) as f32;
            let scale = 1.0 / (mean + eps).sqrt();
            // The GPU's f32 sum: n/256 serial additions and an 8-level tree (relative, all terms
            // positive), halved by the square root; sqrt, the division and two products:
            // ~12 ulp more; the CPU's own f32 steps as many.
            let ulps = (n / 256) as f64 + 9.0 + 24.0;
            for (i, (&v, &g)) in row.iter().zip(got).enumerate() {
                let want = f64::from((v * scale) * w[i]);
                worst.check(
                    || format!("{rows}x{n} [{r}][{i}]"),
                    g,
                    want,
                    want.abs() * ulps * U,
                );
            }
        }
    }
    worst.report();
}

#[test]
fn add_and_swiglu_match_the_cpu() {
    let gpu = gpu();
    let mut rng = Rng(12);
    let mut worst = Worst::new("swiglu");
    // 65,535 × 256 + 5 values: the dispatch continues in its second dimension.
    for &n in &[1, 5, 256, 257, 1000, 65_535 * 256 + 5] {
        let a = rng.vec(n, 8.0);
        let b = rng.vec(n, 2.0);
        let (at, bt) = (gpu.upload("a", &a).unwrap(), gpu.upload("b", &b).unwrap());
        let gate = gpu.upload("gate", &a).unwrap();
        let mut rec = gpu.recorder();
        rec.add(&at, &bt, n).unwrap();
        rec.swiglu(&gate, &bt, n).unwrap();
        rec.submit().unwrap();
        let sum: Vec<f32> = gpu.read(&at).unwrap();
        for (i, ((&s, &x), &y)) in sum.iter().zip(&a).zip(&b).enumerate() {
            assert_eq!(s, x + y, "add of {n} at {i}");
        }
        let got: Vec<f32> = gpu.read(&gate).unwrap();
        let mut want = a.clone();
        silu_mul_scalar(&mut want, &b);
        for (i, ((&g, &w), &x)) in got.iter().zip(&want).zip(&a).enumerate() {
            // exp(−x) within 3 + 2|x| ulp on the GPU (WGSL's bound), ~1 on the CPU; the
            // division, the sum and the product a few more.
            let bound = f64::from(w).abs() * (2.0 * f64::from(x.abs()) + 12.0) * U;
            worst.check(|| format!("{n} [{i}]"), g, f64::from(w), bound);
        }
    }
    worst.report();
}

#[test]
fn rope_matches_the_cpu_for_both_styles_and_partial_rotation() {
    let gpu = gpu();
    let mut rng = Rng(13);
    let mut worst = Worst::new("rope");
    for &(tokens, heads, head_dim, n_rot) in &[
        (1, 1, 2, 2),
        (1, 3, 10, 6),
        (3, 5, 64, 64),
        (2, 7, 128, 32),
        (1, 32, 256, 64),
    ] {
        for style in [Rope::Normal, Rope::Neox] {
            let x = rng.vec(tokens * heads * head_dim, 2.0);
            let positions: Vec<usize> = (0..tokens).map(|t| 5 + 997 * t).collect();
            let angles = rope_angles(&positions, n_rot, 10_000.0);
            let flat: Vec<f32> = angles.iter().flat_map(|&(c, s)| [c, s]).collect();
            let xt = gpu.upload("x", &x).unwrap();
            let cs = gpu.upload("cos_sin", &flat).unwrap();
            let mut rec = gpu.recorder();
            rec.rope(&xt, &cs, tokens, heads, head_dim, n_rot, style)
                .unwrap();
            rec.submit().unwrap();
            let got: Vec<f32> = gpu.read(&xt).unwrap();
            let pairs = n_rot / 2;
            for (h, (head, out)) in x
                .chunks_exact(head_dim)
                .zip(got.chunks_exact(head_dim))
                .enumerate()
            {
                let cos_sin = &angles[h / heads * pairs..][..pairs];
                let mut want: Vec<f64> = head.iter().map(|&v| f64::from(v)).collect();
                let mut bound = vec![0.0f64; head_dim];
                for (i, &(c, s)) in cos_sin.iter().enumerate() {
                    let (a, b) = match style {
                        Rope::Normal => (2 * i, 2 * i + 1),
                        Rope::Neox => (i, i + pairs),
                    };
                    let (x0, x1) = (head[a], head[b]);
                    want[a] = f64::from(x0 * c - x1 * s);
                    want[b] = f64::from(x0 * s + x1 * c);
                    // Each side two products and a sum (a device may fuse one product).
                    let m = f64::from((x0 * c).abs() + (x1 * s).abs());
                    bound[a] = 4.0 * m * U;
                    bound[b] = 4.0 * f64::from((x0 * s).abs() + (x1 * c).abs()) * U;
                }
                for i in 0..head_dim {
                    let at = || format!("{style:?} {tokens}x{heads}x{head_dim}/{n_rot} [{h}][{i}]");
                    worst.check(at, out[i], want[i], bound[i]);
                }
            }
        }
    }
    worst.report();
}

#[test]
fn embedding_rows_match_the_dequantized_table() {
    let gpu = gpu();
    let mut rng = Rng(14);
    let ids = [3u32, 0, 3, 6, 1];
    let idt = gpu.upload("ids", &ids).unwrap();
    for &n_in in &[1usize, 7, 128, 300] {
        let n_rows = 7;
        let table = rng.vec(n_rows * n_in, 5.0);
        let halves: Vec<half::f16> = table.iter().map(|&v| half::f16::from_f32(v)).collect();
        for (f16, t) in [
            (
                false,
                EmbeddingTable::f32(&gpu, &table, n_rows, n_in).unwrap(),
            ),
            (
                true,
                EmbeddingTable::f16(&gpu, &halves, n_rows, n_in).unwrap(),
            ),
        ] {
            let out = gpu.tensor("out", ids.len() * n_in).unwrap();
            let mut rec = gpu.recorder();
            rec.embed(&t, &idt, ids.len(), &out).unwrap();
            rec.submit().unwrap();
            let got: Vec<f32> = gpu.read(&out).unwrap();
            for (k, &id) in ids.iter().enumerate() {
                let row = id as usize * n_in..(id as usize + 1) * n_in;
                let want: Vec<f32> = if f16 {
                    halves[row].iter().map(|h| h.to_f32()).collect()
                } else {
                    table[row].to_vec()
                };
                assert_eq!(
                    &got[k * n_in..(k + 1) * n_in],
                    &want[..],
                    "f16 {f16}, {n_in}"
                );
            }
        }
    }
    // Q1_0: the Q1Matrix itself (as a tied output projection would be).
    for &n_in in &[128usize, 384] {
        let n_rows = 7;
        let rows = support_q1_0(&mut rng, n_rows, n_in);
        let m = std::sync::Arc::new(Q1Matrix::upload(&gpu, &rows, n_rows, n_in).unwrap());
        let t = EmbeddingTable::Q1_0(m);
        let out = gpu.tensor("out", ids.len() * n_in).unwrap();
        let mut rec = gpu.recorder();
        rec.embed(&t, &idt, ids.len(), &out).unwrap();
        rec.submit().unwrap();
        let got: Vec<f32> = gpu.read(&out).unwrap();
        let row_bytes = n_in / 128 * 18;
        for (k, &id) in ids.iter().enumerate() {
            let mut want = vec![0f32; n_in];
            q1_0::dequantize(&rows[id as usize * row_bytes..][..row_bytes], &mut want);
            assert_eq!(&got[k * n_in..(k + 1) * n_in], &want[..], "q1_0 {n_in}");
        }
    }
}

fn support_q1_0(rng: &mut Rng, n_rows: usize, n_in: usize) -> Vec<u8> {
    let mut out = Vec::new();
    for _ in 0..n_rows * n_in / 128 {
        let d = half::f16::from_f32(0.001 + 0.05 * (rng.unit() + 1.0));
        out.extend_from_slice(&d.to_le_bytes());
        for _ in 0..2 {
            out.extend_from_slice(&rng.next().to_le_bytes());
        }
    }
    out
}

#[test]
fn bad_shapes_are_refused_by_name() {
    let gpu = gpu();
    let x = gpu.tensor("x", 10).unwrap();
    let w = gpu.tensor("w", 4).unwrap();
    let mut rec = gpu.recorder();
    let e = rec.rms_norm(&x, &w, 1e-6, 3, &x).unwrap_err().to_string();
    assert!(e.contains("rms_norm input") && e.contains("12"), "{e}");
    let e = rec
        .rope(&x, &x, 1, 1, 10, 12, Rope::Neox)
        .unwrap_err()
        .to_string();
    assert!(e.contains("12 rotated values of a 10-value head"), "{e}");
    let e = EmbeddingTable::f32(&gpu, &[0.0; 10], 3, 4)
        .err()
        .unwrap()
        .to_string();
    assert!(e.contains("10 values are not 3 rows of 4"), "{e}");
    rec.submit().unwrap();
}

/// `Recorder::copy` moves a token's row between a token-major tensor and a one-row tensor, between
/// dispatches (an add before and after, so the pass it ends and restarts keeps the order), and
/// refuses a range past either tensor.
#[test]
fn copy_moves_rows_between_dispatches() {
    let gpu = gpu();
    let rows: Vec<f32> = (0..15).map(|i| i as f32).collect();
    let batch = gpu.upload("rows", &rows).unwrap();
    let one = gpu.upload("row", &[100.0f32; 5]).unwrap();
    let ones = gpu.upload("ones", &[1.0f32; 15]).unwrap();
    let mut rec = gpu.recorder();
    rec.add(&batch, &ones, 15).unwrap();
    rec.copy(&batch, 5, &one, 0, 5).unwrap();
    rec.add(&one, &ones, 5).unwrap();
    rec.copy(&one, 0, &batch, 10, 5).unwrap();
    rec.add(&batch, &ones, 15).unwrap();
    assert!(rec.copy(&batch, 11, &one, 0, 5).is_err());
    assert!(rec.copy(&one, 0, &batch, 11, 5).is_err());
    rec.submit().unwrap();
    let got: Vec<f32> = gpu.read(&batch).unwrap();
    let want: Vec<f32> = (0..15)
        .map(|i| match i {
            10..15 => (i - 5) as f32 + 3.0,
            _ => i as f32 + 2.0,
        })
        .collect();
    assert_eq!(got, want);
}

/// `add_rows` adds one row to each row of a token-major tensor: a row at a time through `add`'s
/// own bits.
#[test]
fn add_rows_adds_the_row_to_each_row() {
    let gpu = gpu();
    let mut rng = Rng(31);
    for &(rows, width) in &[(1, 1), (3, 7), (5, 300)] {
        let x = rng.vec(rows * width, 3.0);
        let b = rng.vec(width, 1.0);
        let (xt, bt) = (gpu.upload("x", &x).unwrap(), gpu.upload("b", &b).unwrap());
        let mut rec = gpu.recorder();
        rec.add_rows(&xt, &bt, rows).unwrap();
        rec.submit().unwrap();
        let got: Vec<f32> = gpu.read(&xt).unwrap();
        for (i, (&g, &v)) in got.iter().zip(&x).enumerate() {
            assert_eq!(
                g.to_bits(),
                (v + b[i % width]).to_bits(),
                "{rows}x{width} at {i}"
            );
        }
        let mut rec = gpu.recorder();
        assert!(rec.add_rows(&xt, &bt, rows + 1).is_err());
    }
}

/// `copy_rows` splits token-major rows of a stacked output into its parts (every value moved to
/// where the strides say, nothing else written) and refuses ranges past either tensor and
/// overlapping strides.
#[test]
fn copy_rows_splits_stacked_rows() {
    let gpu = gpu();
    for &(rows, q, k, v) in &[
        (1, 4, 2, 2),
        (3, 7, 3, 5),
        (33, 64, 16, 16),
        (2, 300, 1, 299),
    ] {
        let w = q + k + v;
        let stacked: Vec<f32> = (0..rows * w).map(|i| i as f32 * 0.5 - 7.0).collect();
        let st = gpu.upload("stacked", &stacked).unwrap();
        let poison = -1234.5f32;
        // The parts with one spare row of room and a 3-value offset into each.
        let parts: Vec<Tensor> = [q, k, v]
            .iter()
            .map(|&n| {
                gpu.upload("part", &vec![poison; (rows + 1) * n + 3])
                    .unwrap()
            })
            .collect();
        let mut rec = gpu.recorder();
        let mut at = 0;
        for (t, &n) in parts.iter().zip(&[q, k, v]) {
            rec.copy_rows(&st, w, at, t, n, 3, n, rows).unwrap();
            at += n;
        }
        rec.submit().unwrap();
        let mut at = 0;
        for (t, &n) in parts.iter().zip(&[q, k, v]) {
            let got: Vec<f32> = gpu.read(t).unwrap();
            let mut want = vec![poison; (rows + 1) * n + 3];
            for r in 0..rows {
                want[3 + r * n..3 + (r + 1) * n]
                    .copy_from_slice(&stacked[r * w + at..r * w + at + n]);
            }
            assert_eq!(got, want, "{rows} rows of {q}|{k}|{v}, part at {at}");
            at += n;
        }
        let mut rec = gpu.recorder();
        assert!(rec.copy_rows(&st, w, 1, &parts[0], q, 3, w, rows).is_err());
        assert!(rec
            .copy_rows(&st, w, 0, &parts[0], q, 3, q, rows + 2)
            .is_err());
        assert!(rec
            .copy_rows(&st, w, 0, &parts[0], q - 1, 0, q, rows)
            .is_err());
    }
}
