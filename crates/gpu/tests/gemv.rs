//! Activation quantization to Q8_0 / Q8_1 / Q8_K and every GPU product (F32, F16, BF16, Q8_0, Q4_0,
//! Q4_1, Q5_0, Q5_1, IQ4_NL, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, TQ2_0, PTQ1_0, the Q2_0 codec)
//! against the formats crate's scalar code (the CPU backend's reference: the registry's
//! `quantize_activation` and each format's `dot`), on awkward shapes. Bounds come from the arithmetic: the integer parts are exact on both sides, so
//! only the float sums' order differs — (terms summed in series) · 2^-24 · Σ|terms|.

mod support;

use oxibonsai_formats::q2_k::BlockQ2_K;
use oxibonsai_formats::q4_k::BlockQ4_K;
use oxibonsai_formats::q5_k::BlockQ5_K;
use oxibonsai_formats::q8_0::QK8_0;
use oxibonsai_formats::q8_1::{self, BlockQ8_1};
use oxibonsai_formats::q8_k::QK_K;
use oxibonsai_formats::{bf16, f16, f32 as f32_format, format, FormatKind};
use oxibonsai_gpu::{GemmTile, Input, Matrix, Q8Tensor, Tq2Kernel};
use support::{cpu_q8, cpu_q8_k, gpu, Rng, Worst, U};

/// Blocks whose conversion is delicate: exact ties at 127/amax = 1, a zero block, a block whose
/// scale is an f16 subnormal, large values, one value alone, then random blocks.
fn awkward_activation(rng: &mut Rng, n: usize) -> Vec<f32> {
    let mut x = Vec::with_capacity(n);
    type Special = Box<dyn Fn(usize, &mut Rng) -> f32>;
    let specials: [Special; 6] = [
        Box::new(|j, _| if j == 0 { 127.0 } else { j as f32 - 15.5 }),
        Box::new(|_, _| 0.0),
        Box::new(|_, r| r.unit() * 3e-4),
        Box::new(|_, r| r.unit() * 6.0e4),
        Box::new(|j, _| if j == 7 { -2.5 } else { 0.0 }),
        Box::new(|j, _| (j as f32 - 16.0) * 0.25),
    ];
    let mut b = 0;
    while x.len() < n {
        for j in 0..QK8_0 {
            let v = match specials.get(b) {
                Some(f) => f(j, rng),
                None => rng.unit() * 4.0,
            };
            x.push(v);
        }
        b += 1;
    }
    x.truncate(n);
    x
}

#[test]
fn q8_0_quantization_matches_the_cpu_bit_for_bit() {
    let gpu = gpu();
    let mut rng = Rng(21);
    for &n in &[32, 64, 224, 4096, 17408, 32 * 3000] {
        let x = awkward_activation(&mut rng, n);
        let xt = gpu.upload("x", &x).unwrap();
        let q = Q8Tensor::new(&gpu, n).unwrap();
        let mut rec = gpu.recorder();
        rec.quantize(&xt, &q).unwrap();
        rec.submit().unwrap();
        let (words, meta) = cpu_q8(&x);
        let got_words: Vec<u32> = gpu.read(&q.words).unwrap();
        let got_meta: Vec<u32> = gpu.read(&q.meta).unwrap();
        for b in 0..n / QK8_0 {
            assert_eq!(
                (&got_words[8 * b..8 * b + 8], &got_meta[2 * b..2 * b + 2]),
                (&words[8 * b..8 * b + 8], &meta[2 * b..2 * b + 2]),
                "block {b} of {n}: {:?}",
                &x[32 * b..32 * b + 32]
            );
        }
    }
    assert!(Q8Tensor::new(&gpu, 33).is_err());
}

/// `quantize_first` quantizes a prefix (a gemm's first tokens) into a longer activation: the bits
/// `quantize` gives the prefix alone; a length past the activation or not whole blocks is refused.
#[test]
fn quantize_first_matches_quantize_of_the_prefix() {
    let gpu = gpu();
    let mut rng = Rng(29);
    for kind in [FormatKind::Q8_0, FormatKind::Q8_1, FormatKind::Q8_K] {
        let block = if kind == FormatKind::Q8_K {
            QK_K
        } else {
            QK8_0
        };
        let x = rng.vec(5 * block, 3.0);
        let xt = gpu.upload("x", &x).unwrap();
        let long = Q8Tensor::with_kind(&gpu, kind, 5 * block).unwrap();
        let short = Q8Tensor::with_kind(&gpu, kind, 3 * block).unwrap();
        let mut rec = gpu.recorder();
        rec.quantize_first(&xt, &long, 3 * block).unwrap();
        rec.quantize(&xt, &short).unwrap();
        assert!(rec.quantize_first(&xt, &short, 4 * block).is_err());
        assert!(rec.quantize_first(&xt, &long, block + 1).is_err());
        rec.submit().unwrap();
        let (lw, lm): (Vec<u32>, Vec<u32>) = (
            gpu.read(&long.words).unwrap(),
            gpu.read(&long.meta).unwrap(),
        );
        let (sw, sm): (Vec<u32>, Vec<u32>) = (
            gpu.read(&short.words).unwrap(),
            gpu.read(&short.meta).unwrap(),
        );
        assert_eq!(lw[..sw.len()], sw[..], "{kind:?} codes");
        assert_eq!(lm[..sm.len()], sm[..], "{kind:?} scales");
    }
}

#[test]
fn q8_1_quantization_matches_the_cpu_bit_for_bit() {
    let gpu = gpu();
    let mut rng = Rng(25);
    for &n in &[32, 96, 4096, 32 * 3000] {
        let x = awkward_activation(&mut rng, n);
        let xt = gpu.upload("x", &x).unwrap();
        let q = Q8Tensor::with_kind(&gpu, FormatKind::Q8_1, n).unwrap();
        let mut rec = gpu.recorder();
        rec.quantize(&xt, &q).unwrap();
        rec.submit().unwrap();
        let mut blocks = vec![0u8; n / QK8_0 * size_of::<BlockQ8_1>()];
        q8_1::quantize_activation(&x, &mut blocks);
        let got_words: Vec<u32> = gpu.read(&q.words).unwrap();
        let got_meta: Vec<u32> = gpu.read(&q.meta).unwrap();
        for (b, block) in blocks.chunks_exact(size_of::<BlockQ8_1>()).enumerate() {
            let block: BlockQ8_1 = bytemuck::pod_read_unaligned(block);
            let words: Vec<u32> = (0..8)
                .map(|i| u32::from_le_bytes([0, 1, 2, 3].map(|l| block.qs[8 * l + i] as u8)))
                .collect();
            let meta = [block.d.to_f32().to_bits(), block.s.to_f32().to_bits()];
            assert_eq!(
                (&got_words[8 * b..8 * b + 8], &got_meta[2 * b..2 * b + 2]),
                (&words[..], &meta[..]),
                "Q8_1 block {b} of {n}: {:?}",
                &x[32 * b..32 * b + 32]
            );
        }
    }
    assert!(Q8Tensor::with_kind(&gpu, FormatKind::Q8_1, 48).is_err());
}

#[test]
fn q8_k_quantization_matches_the_cpu_bit_for_bit() {
    let gpu = gpu();
    let mut rng = Rng(23);
    for &n in &[256, 512, 4096, 17408, 256 * 600] {
        // Negative and positive largest values both (the scale takes the sign), ties, zeros.
        let mut x = awkward_activation(&mut rng, n);
        x[256..512.min(n)].iter_mut().for_each(|v| *v = -*v);
        // The largest magnitude with both signs: the first one sets the scale's sign.
        let last = &mut x[n - 256..];
        last.iter_mut().for_each(|v| *v *= 0.01);
        (last[10], last[200]) = (5.0, -5.0);
        let xt = gpu.upload("x", &x).unwrap();
        let q = Q8Tensor::with_kind(&gpu, FormatKind::Q8_K, n).unwrap();
        let mut rec = gpu.recorder();
        rec.quantize(&xt, &q).unwrap();
        rec.submit().unwrap();
        let (words, meta) = cpu_q8_k(&x);
        let got_words: Vec<u32> = gpu.read(&q.words).unwrap();
        let got_meta: Vec<u32> = gpu.read(&q.meta).unwrap();
        for b in 0..n / QK_K {
            assert_eq!(
                (&got_words[64 * b..64 * b + 64], &got_meta[2 * b..2 * b + 2]),
                (&words[64 * b..64 * b + 64], &meta[2 * b..2 * b + 2]),
                "Q8_K block {b} of {n}"
            );
        }
    }
    assert!(Q8Tensor::with_kind(&gpu, FormatKind::Q8_K, 128).is_err());
}

/// `n_rows` random rows of `kind`, through the format's own quantizer.
fn random_matrix(rng: &mut Rng, kind: FormatKind, n_rows: usize, n_in: usize) -> Vec<u8> {
    let x = rng.vec(n_rows * n_in, 1.0);
    let f = format(kind);
    let mut out = vec![0u8; n_rows * n_in / f.block_elems * f.block_bytes];
    (f.quantize)(&x, &mut out);
    out
}

/// The CPU's product of each row and the sum of its terms' magnitudes.
fn cpu_gemv(kind: FormatKind, rows: &[u8], n_rows: usize, x: &[f32]) -> Vec<(f64, f64)> {
    let n_in = x.len();
    let row_bytes = rows.len() / n_rows;
    let mut out = Vec::new();
    match kind {
        FormatKind::F32 | FormatKind::F16 | FormatKind::BF16 => {
            let f16_x: Vec<half::f16> = x.iter().map(|&v| half::f16::from_f32(v)).collect();
            let bf16_x: Vec<half::bf16> = x.iter().map(|&v| half::bf16::from_f32(v)).collect();
            for row in rows.chunks_exact(row_bytes) {
                let (dot, w): (f32, Vec<f32>) = match kind {
                    FormatKind::F32 => {
                        let w: Vec<f32> = bytemuck::pod_collect_to_vec(row);
                        (f32_format::dot(row, bytemuck::cast_slice(x)), w)
                    }
                    FormatKind::F16 => {
                        let w: Vec<half::f16> = bytemuck::pod_collect_to_vec(row);
                        let w = w.iter().map(|h| h.to_f32()).collect();
                        (f16::dot(row, bytemuck::cast_slice(&f16_x)), w)
                    }
                    _ => {
                        let w: Vec<half::bf16> = bytemuck::pod_collect_to_vec(row);
                        let w = w.iter().map(|h| h.to_f32()).collect();
                        (bf16::dot(row, bytemuck::cast_slice(&bf16_x)), w)
                    }
                };
                let xs: Vec<f32> = match kind {
                    FormatKind::F32 => x.to_vec(),
                    FormatKind::F16 => f16_x.iter().map(|h| h.to_f32()).collect(),
                    _ => bf16_x.iter().map(|h| h.to_f32()).collect(),
                };
                let mag: f64 = w
                    .iter()
                    .zip(&xs)
                    .map(|(&a, &b)| f64::from((a * b).abs()))
                    .sum();
                out.push((f64::from(dot), mag));
            }
        }
        _ => {
            let (f, p) = (format(kind), format(format(kind).partner));
            let mut act = vec![0u8; n_in / p.block_elems * p.block_bytes];
            (p.quantize_activation.unwrap())(x, &mut act);
            let mut act_values = vec![0f32; n_in];
            (p.dequantize)(&act, &mut act_values);
            for row in rows.chunks_exact(row_bytes) {
                let mag: f64 = if let Some(mag) = offset_magnitude(kind, row, &act, &act_values) {
                    mag
                } else if f.block_elems == p.block_elems
                    && !matches!(kind, FormatKind::Q3_K | FormatKind::Q6_K)
                {
                    // Σ over blocks of |block term|, each block through the format's own dot (the
                    // GPU scales each block's integer sum once; Q3_K / Q6_K's sub-blocks apart).
                    row.chunks_exact(f.block_bytes)
                        .zip(act.chunks_exact(p.block_bytes))
                        .map(|(w, a)| f64::from((f.dot)(w, a).abs()))
                        .sum()
                } else {
                    // A block spans several activation blocks, or a term is a sub-block's: Σ |w·a|
                    // over the values bounds the sum of the terms' magnitudes.
                    let mut w = vec![0f32; n_in];
                    (f.dequantize)(row, &mut w);
                    w.iter()
                        .zip(&act_values)
                        .map(|(&a, &b)| f64::from(a).abs() * f64::from(b).abs())
                        .sum()
                };
                out.push((f64::from((f.dot)(row, &act)), mag));
            }
        }
    }
    out
}

/// Σ|terms| of a row whose format adds an offset term to each (sub-)block: the code part
/// (Σ|(w − offset)·a|) and the offset part (|offset · Σ a|) apart, since they may cancel.
fn offset_magnitude(kind: FormatKind, row: &[u8], act: &[u8], a: &[f32]) -> Option<f64> {
    let f = format(kind);
    let mut w = vec![0f32; a.len()];
    (f.dequantize)(row, &mut w);
    let f16_at = |b: &[u8], at: usize| f64::from(half::f16::from_le_bytes([b[at], b[at + 1]]));
    let mut mag = 0.0;
    match kind {
        FormatKind::Q4_1 | FormatKind::Q5_1 => {
            // Both: d, m, then codes; the Q8_1 block: d, s, codes.
            let blocks = row
                .chunks_exact(f.block_bytes)
                .zip(act.chunks_exact(size_of::<BlockQ8_1>()));
            for ((wb, ab), (ws, xs)) in blocks.zip(w.chunks_exact(32).zip(a.chunks_exact(32))) {
                let m = f16_at(wb, 2);
                mag += (m * f16_at(ab, 2)).abs();
                mag += ws
                    .iter()
                    .zip(xs)
                    .map(|(&w, &x)| (f64::from(w) - m).abs() * f64::from(x).abs())
                    .sum::<f64>();
            }
        }
        FormatKind::Q4_K | FormatKind::Q5_K => {
            for (b, (ws, xs)) in row
                .chunks_exact(f.block_bytes)
                .zip(w.chunks_exact(QK_K).zip(a.chunks_exact(QK_K)))
            {
                // (dmin, the eight minimums).
                let (dmin, mins): (f32, [u8; 8]) = if kind == FormatKind::Q4_K {
                    let b: BlockQ4_K = bytemuck::pod_read_unaligned(b);
                    (b.dmin.to_f32(), std::array::from_fn(|j| b.scale_min(j).1))
                } else {
                    let b: BlockQ5_K = bytemuck::pod_read_unaligned(b);
                    (b.dmin.to_f32(), std::array::from_fn(|j| b.scale_min(j).1))
                };
                for (j, (ws, xs)) in ws.chunks_exact(32).zip(xs.chunks_exact(32)).enumerate() {
                    let ml = f64::from(dmin) * f64::from(mins[j]);
                    for (&w, &x) in ws.iter().zip(xs) {
                        mag += ((f64::from(w) + ml).abs() + ml) * f64::from(x).abs();
                    }
                }
            }
        }
        FormatKind::Q2_K => {
            for (b, (ws, xs)) in row
                .chunks_exact(f.block_bytes)
                .zip(w.chunks_exact(QK_K).zip(a.chunks_exact(QK_K)))
            {
                let b: BlockQ2_K = bytemuck::pod_read_unaligned(b);
                for (g, (ws, xs)) in ws.chunks_exact(16).zip(xs.chunks_exact(16)).enumerate() {
                    let ml = f64::from(b.dmin.to_f32()) * f64::from(b.scales[g] >> 4);
                    for (&w, &x) in ws.iter().zip(xs) {
                        mag += ((f64::from(w) + ml).abs() + ml) * f64::from(x).abs();
                    }
                }
            }
        }
        _ => return None,
    }
    Some(mag)
}

/// The terms a product's error bound counts (× U × Σ|terms|): the GPU's n/32 per invocation (two
/// terms a 32-value sub-block for the K-quants; TQ2_0's default split ⌈blocks/16⌉) + a 5-level tree, the CPU's per-block f32 sum (the
/// float formats sum in f64; the K-quants' eight lanes and the minimums' sum) and a rounding of
/// each term; 8 spare.
fn series(kind: FormatKind, n_in: usize) -> f64 {
    let f = format(kind);
    let float = matches!(kind, FormatKind::F32 | FormatKind::F16 | FormatKind::BF16);
    let terms = n_in / f.block_elems;
    let gpu_terms = if kind == FormatKind::TQ2_0 {
        // `Tq2Kernel::DEFAULT`: 16 lanes a row (a 4-level tree, within the 5 counted).
        terms.div_ceil(16)
    } else if f.block_elems == QK_K {
        2 * (n_in / 32).div_ceil(32)
    } else {
        terms / 32
    };
    (gpu_terms + 5 + 8) as f64 + if float { 1.0 } else { (terms + 8) as f64 }
}

/// The gemm (T tokens, token-major) against each token's gemv — the same bits, as
/// `Recorder::gemm` promises without a register tile (`Gpu::set_gemm_tile(None)`; the tile's
/// formats: the test below) — and against the CPU's scalar dot within the gemv's bound, for every
/// format, T = 1 … 19 and 33 (F32, Q8_0; the others a spread of them) past a tile of 8 tokens, rows
/// not a multiple of the 8-row workgroup and rows of the format's smallest length and odd
/// multiples of it.
#[test]
fn gemm_matches_each_tokens_gemv_bit_for_bit_and_the_scalar_dots() {
    let mut gpu = gpu();
    gpu.set_gemm_tile(None);
    let mut rng = Rng(28);
    let mut runs: Vec<(FormatKind, bool)> = [
        FormatKind::F32,
        FormatKind::F16,
        FormatKind::BF16,
        FormatKind::Q8_0,
        FormatKind::Q4_0,
        FormatKind::Q4_1,
        FormatKind::Q5_0,
        FormatKind::Q5_1,
        FormatKind::IQ4_NL,
        FormatKind::Q2_K,
        FormatKind::Q3_K,
        FormatKind::Q4_K,
        FormatKind::Q5_K,
        FormatKind::Q6_K,
        FormatKind::TQ2_0,
        FormatKind::Q2_0,
        FormatKind::PQ2_0,
        FormatKind::Q2_0G128Legacy,
        FormatKind::PTQ1_0,
    ]
    .map(|kind| (kind, false))
    .into();
    if gpu.report().shader_f16 {
        runs.push((FormatKind::F16, true));
    }
    for (kind, native_f16) in runs {
        // Every token count for two formats (the walk is the same for all), a spread of them —
        // one token, within a tile, a whole one, past it, past two and four — for the others
        // (each count is a pipeline to compile: lavapipe's time).
        let tokens: Vec<usize> = if matches!(kind, FormatKind::F32 | FormatKind::Q8_0) {
            (1..=19).chain([33]).collect()
        } else {
            vec![1, 5, 8, 9, 19, 33]
        };
        assert_eq!(gpu.use_native_f16(native_f16), native_f16);
        let f = format(kind);
        let float = matches!(kind, FormatKind::F32 | FormatKind::F16 | FormatKind::BF16);
        let label = if native_f16 { " (shader-f16)" } else { "" };
        let mut worst = Worst::new(&format!("{kind:?} gemm{label}"));
        // The smallest row (an odd one for the float formats), then odd multiples.
        let unit = if float { 7 } else { f.block_elems };
        for (i, &n_tok) in tokens.iter().enumerate() {
            let n_rows = [1, 9, 13, 37][i % 4];
            let n_in = unit * [1, 3, 5][i % 3];
            let rows = random_matrix(&mut rng, kind, n_rows, n_in);
            let x = rng.vec(n_tok * n_in, 3.0);
            let m = Matrix::upload(&gpu, kind, &rows, n_rows, n_in).unwrap();
            let xt = gpu.upload("x", &x).unwrap();
            let out = gpu.tensor("gemm out", n_tok * n_rows).unwrap();
            let singles: Vec<_> = (0..n_tok)
                .map(|t| {
                    let x1 = gpu.upload("x token", &x[t * n_in..(t + 1) * n_in]).unwrap();
                    (x1, gpu.tensor("gemv out", n_rows).unwrap())
                })
                .collect();
            let mut rec = gpu.recorder();
            if float {
                rec.gemm(&m, Input::F32(&xt), &out, n_tok).unwrap();
                for (x1, o1) in &singles {
                    rec.gemv(&m, Input::F32(x1), o1).unwrap();
                }
                rec.submit().unwrap();
            } else {
                let q = Q8Tensor::with_kind(&gpu, f.partner, n_tok * n_in).unwrap();
                rec.quantize(&xt, &q).unwrap();
                rec.gemm(&m, Input::Quantized(&q), &out, n_tok).unwrap();
                let qs: Vec<Q8Tensor> = singles
                    .iter()
                    .map(|_| Q8Tensor::with_kind(&gpu, f.partner, n_in).unwrap())
                    .collect();
                for ((x1, o1), q1) in singles.iter().zip(&qs) {
                    rec.quantize(x1, q1).unwrap();
                    rec.gemv(&m, Input::Quantized(q1), o1).unwrap();
                }
                rec.submit().unwrap();
            }
            let got: Vec<f32> = gpu.read(&out).unwrap();
            let series = series(kind, n_in);
            for (t, (_, o1)) in singles.iter().enumerate() {
                let single: Vec<f32> = gpu.read(o1).unwrap();
                let batch = &got[t * n_rows..(t + 1) * n_rows];
                for (r, (g, s)) in batch.iter().zip(&single).enumerate() {
                    assert_eq!(
                        g.to_bits(),
                        s.to_bits(),
                        "{kind:?}{label} {n_tok} tokens of {n_rows}x{n_in}: token {t} row {r}: \
                         gemm {g} gemv {s}"
                    );
                }
                let want = cpu_gemv(kind, &rows, n_rows, &x[t * n_in..(t + 1) * n_in]);
                for (r, (&g, &(w, mag))) in batch.iter().zip(&want).enumerate() {
                    let bound = series * U * mag + f64::from(f32::MIN_POSITIVE);
                    worst.check(
                        || format!("T={n_tok} {n_rows}x{n_in} t{t} r{r}"),
                        g,
                        w,
                        bound,
                    );
                }
            }
        }
        worst.report();
    }
}

/// The register-tile gemm of the 32-value Q8_0 / Q8_1-partnered formats (`Gpu::set_gemm_tile`,
/// `gemm_q8_tile.wgsl`) against the CPU's scalar dot: each (token, row) adds its blocks in order,
/// so the bound counts every block's term (the GPU's n / 32 in series, a rounding of each, the
/// CPU's per-block f32 sum; 8 spare). T = 1, 3, 8, 17, 33, 64, rows not a multiple of any tile,
/// rows of 32, 4096 and 12288 values and odd multiples of 32; every tile shape.
#[test]
fn gemm_tile_matches_the_scalar_dots_for_the_32_value_formats() {
    let gpu = gpu();
    let tiles = [
        GemmTile::DEFAULT,
        GemmTile::new(64, 32).unwrap(),
        GemmTile::new(128, 16).unwrap(),
        GemmTile::new(32, 64).unwrap(),
        GemmTile::new(256, 8).unwrap(),
        GemmTile::new(64, 64).unwrap(),
    ];
    let cases = [
        (1, 1, 32),
        (3, 45, 4096),
        (8, 100, 12288),
        (17, 33, 32 * 9),
        (33, 70, 4096),
        (64, 129, 32 * 5),
    ];
    let mut rng = Rng(0x5118);
    for (f_i, kind) in [
        FormatKind::Q8_0,
        FormatKind::Q4_0,
        FormatKind::Q4_1,
        FormatKind::Q5_0,
        FormatKind::Q5_1,
        FormatKind::IQ4_NL,
    ]
    .into_iter()
    .enumerate()
    {
        let f = format(kind);
        let mut worst = Worst::new(&format!("{kind:?} tiled gemm"));
        for (i, &(n_tok, n_rows, n_in)) in cases.iter().enumerate() {
            let tile = tiles[(i + f_i) % tiles.len()];
            gpu.set_gemm_tile(Some(tile));
            let rows = random_matrix(&mut rng, kind, n_rows, n_in);
            let x = rng.vec(n_tok * n_in, 3.0);
            let m = Matrix::upload(&gpu, kind, &rows, n_rows, n_in).unwrap();
            let xt = gpu.upload("x", &x).unwrap();
            let out = gpu.tensor("gemm out", n_tok * n_rows).unwrap();
            let q = Q8Tensor::with_kind(&gpu, f.partner, n_tok * n_in).unwrap();
            let mut rec = gpu.recorder();
            rec.quantize(&xt, &q).unwrap();
            rec.gemm(&m, Input::Quantized(&q), &out, n_tok).unwrap();
            rec.submit().unwrap();
            let got: Vec<f32> = gpu.read(&out).unwrap();
            let terms = n_in / f.block_elems;
            let series = (terms + 5 + 8 + terms + 8) as f64;
            for t in 0..n_tok {
                let want = cpu_gemv(kind, &rows, n_rows, &x[t * n_in..(t + 1) * n_in]);
                let batch = &got[t * n_rows..(t + 1) * n_rows];
                for (r, (&g, &(w, mag))) in batch.iter().zip(&want).enumerate() {
                    let bound = series * U * mag + f64::from(f32::MIN_POSITIVE);
                    worst.check(
                        || format!("{tile:?} T={n_tok} {n_rows}x{n_in} t{t} r{r}"),
                        g,
                        w,
                        bound,
                    );
                }
            }
        }
        worst.report();
    }
}

#[test]
fn products_match_the_scalar_dots_on_awkward_shapes() {
    let mut gpu = gpu();
    let mut rng = Rng(22);
    // F16 by both paths: the integer decode everywhere, `shader-f16` where the adapter has it
    // (lavapipe does; `OXIBONSAI_REQUIRE_GPU_F16=1` makes its absence a failure).
    let native = gpu.report().shader_f16;
    if !native {
        eprintln!(
            "adapter {} lacks shader-f16: its F16 path does not run here",
            gpu.report().name
        );
        assert!(
            std::env::var_os("OXIBONSAI_REQUIRE_GPU_F16").is_none(),
            "OXIBONSAI_REQUIRE_GPU_F16 is set and adapter {} lacks shader-f16",
            gpu.report().name
        );
    }
    let mut runs: Vec<(FormatKind, bool)> = [
        FormatKind::F32,
        FormatKind::F16,
        FormatKind::BF16,
        FormatKind::Q8_0,
        FormatKind::Q4_0,
        FormatKind::Q4_1,
        FormatKind::Q5_0,
        FormatKind::Q5_1,
        FormatKind::IQ4_NL,
        FormatKind::Q2_K,
        FormatKind::Q3_K,
        FormatKind::Q4_K,
        FormatKind::Q5_K,
        FormatKind::Q6_K,
        FormatKind::TQ2_0,
        FormatKind::Q2_0,
        FormatKind::PQ2_0,
        FormatKind::Q2_0G128Legacy,
        FormatKind::PTQ1_0,
    ]
    .map(|kind| (kind, false))
    .into();
    if native {
        runs.push((FormatKind::F16, true));
    }
    for (kind, native_f16) in runs {
        assert_eq!(gpu.use_native_f16(native_f16), native_f16);
        let format = kind;
        let f = oxibonsai_formats::format(kind);
        let label = if native_f16 { " (shader-f16)" } else { "" };
        let mut worst = Worst::new(&format!("{format:?} gemv{label}"));
        let float = matches!(format, FormatKind::F32 | FormatKind::F16 | FormatKind::BF16);
        let mut shapes = vec![
            (1, 32),
            (7, 64),
            (9, 96),
            (257, 2048),
            (1000, 4096 + 32),
            (31, 17408),
        ];
        if float {
            shapes.extend([(3, 1), (5, 7), (2, 33)]);
        }
        shapes.retain(|&(_, n_in)| n_in % f.block_elems == 0);
        if f.block_elems == QK_K {
            shapes.extend([(1, 256), (7, 512), (9, 1536), (1000, 4096 + 256)]);
        }
        if f.block_elems > QK8_0 && f.block_elems < QK_K {
            shapes.extend([(1, 128), (5, 384), (1000, 4096 + 128)]);
        }
        for (n_rows, n_in) in shapes {
            let rows = random_matrix(&mut rng, format, n_rows, n_in);
            let x = rng.vec(n_in, 3.0);
            let m = Matrix::upload(&gpu, format, &rows, n_rows, n_in).unwrap();
            let xt = gpu.upload("x", &x).unwrap();
            let out = gpu.tensor("out", n_rows).unwrap();
            let mut rec = gpu.recorder();
            if float {
                rec.gemv(&m, Input::F32(&xt), &out).unwrap();
            } else {
                let q = Q8Tensor::with_kind(&gpu, f.partner, n_in).unwrap();
                rec.quantize(&xt, &q).unwrap();
                rec.gemv(&m, Input::Quantized(&q), &out).unwrap();
            }
            rec.submit().unwrap();
            let got: Vec<f32> = gpu.read(&out).unwrap();
            let want = cpu_gemv(format, &rows, n_rows, &x);
            let series = series(kind, n_in);
            for (r, (&g, &(w, mag))) in got.iter().zip(&want).enumerate() {
                let bound = series * U * mag + f64::from(f32::MIN_POSITIVE);
                worst.check(|| format!("{n_rows}x{n_in} row {r}"), g, w, bound);
            }
        }
        worst.report();
    }
}

/// TQ2_0's kernels (`Gpu::set_tq2_kernel`) on awkward shapes — rows 1, 7, 9, 33 and 4097 (not a
/// multiple of any split's rows a workgroup), blocks 1, 3, 16 and 48 a row, T = 1, 3, 8 and 17
/// tokens (within a tile, a whole one, past two): every split of `tq2_0_gemv.wgsl` against the
/// CPU's scalar dot (`tq2_0::dot` on the CPU's Q8_K) within its own bound (⌈blocks/lanes⌉ terms
/// in series, a log2(lanes)-level tree); the 32-lane, 1-row split against the old kernel
/// (`gemv_tq2_0.wgsl` on the file's layout) bit for bit — the same terms in the same order —; each
/// split's gemm against its gemv of each token bit for bit; and `gemv_add` against the gemv
/// added on the CPU (one f32 addition) bit for bit.
#[test]
fn tq2_0_kernels_match_the_old_kernel_and_the_scalar_dots() {
    let gpu = gpu();
    let mut rng = Rng(31);
    let kind = FormatKind::TQ2_0;
    let splits = [(32u32, 1u32), (16, 2), (8, 4), (64, 3), (4, 1), (256, 1)];
    // (rows, blocks a row, tokens)
    let shapes = [
        (1, 1, 1),
        (7, 3, 3),
        (9, 16, 8),
        (33, 48, 17),
        (9, 1, 17),
        (33, 3, 8),
        (4097, 16, 1),
        (4097, 48, 3),
        (7, 48, 1),
    ];
    let mut worst: Vec<Worst> = splits
        .iter()
        .map(|(l, r)| Worst::new(&format!("TQ2_0 {l}x{r}")))
        .collect();
    for (n_rows, n_blocks, n_tok) in shapes {
        let n_in = n_blocks * QK_K;
        let rows = random_matrix(&mut rng, kind, n_rows, n_in);
        let x = awkward_activation(&mut rng, n_tok * n_in);
        let xt = gpu.upload("x", &x).unwrap();
        let q = Q8Tensor::with_kind(&gpu, FormatKind::Q8_K, n_tok * n_in).unwrap();
        let singles: Vec<Q8Tensor> = (0..n_tok)
            .map(|t| {
                let one = gpu.upload("x token", &x[t * n_in..(t + 1) * n_in]).unwrap();
                let q1 = Q8Tensor::with_kind(&gpu, FormatKind::Q8_K, n_in).unwrap();
                let mut rec = gpu.recorder();
                rec.quantize(&one, &q1).unwrap();
                rec.submit().unwrap();
                q1
            })
            .collect();
        let mut rec = gpu.recorder();
        rec.quantize(&xt, &q).unwrap();
        rec.submit().unwrap();
        // The product of `m` for every token (a gemm where T > 1), and each token's gemv.
        let run = |m: &Matrix| -> (Vec<f32>, Vec<f32>) {
            let out = gpu.tensor("gemm out", n_tok * n_rows).unwrap();
            let mut rec = gpu.recorder();
            if n_tok > 1 {
                rec.gemm(m, Input::Quantized(&q), &out, n_tok).unwrap();
            } else {
                rec.gemv(m, Input::Quantized(&q), &out).unwrap();
            }
            rec.submit().unwrap();
            let mut one = Vec::with_capacity(n_tok * n_rows);
            for q1 in &singles {
                let o1 = gpu.tensor("gemv out", n_rows).unwrap();
                let mut rec = gpu.recorder();
                rec.gemv(m, Input::Quantized(q1), &o1).unwrap();
                rec.submit().unwrap();
                one.extend(gpu.read::<f32>(&o1).unwrap());
            }
            (gpu.read(&out).unwrap(), one)
        };
        gpu.set_tq2_kernel(Tq2Kernel::Old);
        let old_m = Matrix::upload(&gpu, kind, &rows, n_rows, n_in).unwrap();
        let (old, _) = run(&old_m);
        gpu.set_tq2_kernel(Tq2Kernel::DEFAULT);
        let m = Matrix::upload(&gpu, kind, &rows, n_rows, n_in).unwrap();
        let want: Vec<Vec<(f64, f64)>> = (0..n_tok)
            .map(|t| cpu_gemv(kind, &rows, n_rows, &x[t * n_in..(t + 1) * n_in]))
            .collect();
        for (&(lanes, r), worst) in splits.iter().zip(&mut worst) {
            gpu.set_tq2_kernel(Tq2Kernel::Split { lanes, rows: r });
            let at = |t: usize, row: usize| format!("{n_tok}x{n_rows}x{n_in} t{t} r{row}");
            let (got, single) = run(&m);
            let series =
                (n_blocks.div_ceil(lanes as usize) + lanes.ilog2() as usize + 8) + (n_blocks + 8);
            for (i, (&g, &s)) in got.iter().zip(&single).enumerate() {
                let (t, row) = (i / n_rows, i % n_rows);
                assert_eq!(
                    g.to_bits(),
                    s.to_bits(),
                    "{lanes}x{r} {}: gemm {g} gemv {s}",
                    at(t, row)
                );
                if (lanes, r) == (32, 1) {
                    let o = old[i];
                    assert_eq!(
                        g.to_bits(),
                        o.to_bits(),
                        "32x1 {}: {g}, old {o}",
                        at(t, row)
                    );
                }
                let (w, mag) = want[t][row];
                worst.check(
                    || at(t, row),
                    g,
                    w,
                    series as f64 * U * mag + f64::from(f32::MIN_POSITIVE),
                );
            }
            // The residual epilogue: the first token's gemv added to a random `out`.
            let base = rng.vec(n_rows, 2.0);
            let acc = gpu.upload("accumulated", &base).unwrap();
            let mut rec = gpu.recorder();
            rec.gemv_add(&m, Input::Quantized(&singles[0]), &acc)
                .unwrap();
            rec.submit().unwrap();
            let added: Vec<f32> = gpu.read(&acc).unwrap();
            for (row, (&a, (&b, &s))) in added.iter().zip(base.iter().zip(&single)).enumerate() {
                assert_eq!(
                    a.to_bits(),
                    (b + s).to_bits(),
                    "{lanes}x{r} add {}",
                    at(0, row)
                );
            }
        }
    }
    gpu.set_tq2_kernel(Tq2Kernel::DEFAULT);
    for w in &worst {
        w.report();
    }
}

/// The default TQ2_0 setting picks a matrix's split by its height: a matrix filling 192
/// workgroups of 8 × 4's 128 rows runs 8 × 4, a shorter one 16 × 2 — each the bits of that split
/// forced for every matrix (gemv, residual and gemm alike).
#[test]
fn the_tq2_0_split_by_shape_is_the_forced_split_of_that_shape() {
    assert_eq!(Tq2Kernel::ByShape.split_for(24_575), (16, 2));
    assert_eq!(Tq2Kernel::ByShape.split_for(24_576), (8, 4));
    assert_eq!(Tq2Kernel::Old.split_for(24_576), (8, 4));
    assert_eq!(
        Tq2Kernel::Split { lanes: 4, rows: 1 }.split_for(24_576),
        (4, 1)
    );
    let gpu = gpu();
    let mut rng = Rng(47);
    let kind = FormatKind::TQ2_0;
    for (n_rows, n_tok) in [(24_576, 1), (24_577, 3), (4_097, 1), (24_575, 3)] {
        // 24 blocks a row: 8 × 4 sums a lane's blocks l, l + 8, l + 16 in turn, 16 × 2 adds
        // block l + 8 in its tree after l + 16 — different orders, so a wrong pick shows (at 16
        // blocks the two orders are the same).
        let n_in = 24 * QK_K;
        let rows = random_matrix(&mut rng, kind, n_rows, n_in);
        let x = awkward_activation(&mut rng, n_tok * n_in);
        let xt = gpu.upload("x", &x).unwrap();
        let q = Q8Tensor::with_kind(&gpu, FormatKind::Q8_K, n_tok * n_in).unwrap();
        let mut rec = gpu.recorder();
        rec.quantize(&xt, &q).unwrap();
        rec.submit().unwrap();
        gpu.set_tq2_kernel(Tq2Kernel::ByShape);
        let m = Matrix::upload(&gpu, kind, &rows, n_rows, n_in).unwrap();
        let base = rng.vec(n_rows, 2.0);
        let run = || -> (Vec<f32>, Vec<f32>) {
            let out = gpu.tensor("product out", n_tok * n_rows).unwrap();
            let acc = gpu.upload("accumulated", &base).unwrap();
            let mut rec = gpu.recorder();
            if n_tok > 1 {
                rec.gemm(&m, Input::Quantized(&q), &out, n_tok).unwrap();
            } else {
                rec.gemv(&m, Input::Quantized(&q), &out).unwrap();
                rec.gemv_add(&m, Input::Quantized(&q), &acc).unwrap();
            }
            rec.submit().unwrap();
            (gpu.read(&out).unwrap(), gpu.read(&acc).unwrap())
        };
        let by_shape = run();
        let (lanes, r) = if n_rows >= 24_576 { (8, 4) } else { (16, 2) };
        gpu.set_tq2_kernel(Tq2Kernel::Split { lanes, rows: r });
        let forced = run();
        gpu.set_tq2_kernel(Tq2Kernel::DEFAULT);
        for (what, a, b) in [
            ("product", &by_shape.0, &forced.0),
            ("residual", &by_shape.1, &forced.1),
        ] {
            for (i, (x, y)) in a.iter().zip(b.iter()).enumerate() {
                assert_eq!(
                    x.to_bits(),
                    y.to_bits(),
                    "{n_rows} rows, {n_tok} tokens, {what} {i}: by shape {x}, {lanes}x{r} {y}"
                );
            }
        }
    }
}

#[test]
fn bad_tq2_0_kernels_are_refused_by_name() {
    assert_eq!(Tq2Kernel::parse("old").unwrap(), Tq2Kernel::Old);
    assert_eq!(Tq2Kernel::parse("new").unwrap(), Tq2Kernel::DEFAULT);
    assert_eq!(
        Tq2Kernel::parse(" 8x4 ").unwrap(),
        Tq2Kernel::Split { lanes: 8, rows: 4 }
    );
    for bad in ["", "fast", "12x2", "16x5", "16x0", "512x1", "16"] {
        let e = Tq2Kernel::parse(bad).err().unwrap().to_string();
        assert!(e.contains("TQ2_0 kernel"), "{bad:?}: {e}");
    }
}

#[test]
fn bad_products_are_refused_by_name() {
    let gpu = gpu();
    let e = Matrix::upload(&gpu, FormatKind::Q4_0, &[0u8; 18], 1, 33)
        .err()
        .unwrap();
    assert!(e.to_string().contains("row length 33"), "{e}");
    let e = Matrix::upload(&gpu, FormatKind::Q8_0, &[0u8; 33], 1, 32)
        .err()
        .unwrap();
    assert!(e.to_string().contains("need 34 bytes, got 33"), "{e}");
    let e = Matrix::upload(&gpu, FormatKind::Q8_K, &[0u8; 292], 1, 256)
        .err()
        .unwrap();
    assert!(e.to_string().contains("Q8_K"), "{e}");
    let m = Matrix::upload(&gpu, FormatKind::Q8_0, &[0u8; 34], 1, 32).unwrap();
    let x = gpu.tensor("x", 32).unwrap();
    let out = gpu.tensor("out", 1).unwrap();
    let mut rec = gpu.recorder();
    let e = rec.gemv(&m, Input::F32(&x), &out).err().unwrap();
    assert!(e.to_string().contains("Q8_0 activation"), "{e}");
    let q4_1 = Matrix::upload(&gpu, FormatKind::Q4_1, &[0u8; 20], 1, 32).unwrap();
    let q = Q8Tensor::new(&gpu, 32).unwrap();
    let e = rec.gemv(&q4_1, Input::Quantized(&q), &out).err().unwrap();
    assert!(e.to_string().contains("Q8_1 activation, not Q8_0"), "{e}");
    let q = Q8Tensor::new(&gpu, 64).unwrap();
    let e = rec.gemv(&m, Input::Quantized(&q), &out).err().unwrap();
    assert!(
        e.to_string().contains("activation of 64, rows of 32"),
        "{e}"
    );
    // A gemm: its activation holds too few tokens, no tokens, an output too short.
    let out3 = gpu.tensor("out", 3).unwrap();
    let e = rec.gemm(&m, Input::Quantized(&q), &out3, 3).err().unwrap();
    assert!(
        e.to_string()
            .contains("activation of 64, 3 tokens of rows of 32"),
        "{e}"
    );
    let e = rec.gemm(&m, Input::Quantized(&q), &out3, 0).err().unwrap();
    assert!(e.to_string().contains("at least one token"), "{e}");
    let e = rec.gemm(&m, Input::Quantized(&q), &out, 2).err().unwrap();
    assert!(e.to_string().contains("product output"), "{e}");
    rec.submit().unwrap();
}
