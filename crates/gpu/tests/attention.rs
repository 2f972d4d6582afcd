//! Decode attention over the device KV cache (f32 and f16, GQA, causal up to n_past, the score
//! scale, positions split into chunks) against a straightforward f64 reference written here: the
//! CPU backend's attention is private to the engine and rounds queries to f16, which this shader
//! does not. Storing rows into the cache is checked bit for bit against the `half` crate's
//! conversion (the CPU cache's).

mod support;

use half::f16;
use oxibonsai_formats::FormatKind;
use oxibonsai_gpu::{AttentionKernel, ChunkRun, Gpu, KvCache, Q8Tensor, MAX_ATTENTION_SPLITS};
use support::{gpu, Rng, Worst, U};

/// Cache rows as the device holds them: head g's row t at [g][t], as u32 words.
fn layout(rows: &[Vec<f32>], n_head_kv: usize, dim: usize, n_ctx: usize, as_f16: bool) -> Vec<u32> {
    let mut words = Vec::new();
    for g in 0..n_head_kv {
        for row in &rows[..n_ctx] {
            let row = &row[g * dim..(g + 1) * dim];
            if as_f16 {
                for p in row.chunks_exact(2) {
                    let (a, b) = (f16::from_f32(p[0]).to_bits(), f16::from_f32(p[1]).to_bits());
                    words.push(u32::from(a) | u32::from(b) << 16);
                }
            } else {
                words.extend(row.iter().map(|v| v.to_bits()));
            }
        }
    }
    words
}

/// The chunks the shader splits `n_kv` positions of an `n_ctx` cache into with `kernel`,
/// restated from attention.rs and attention_decode.wgsl (tiles of `kernel.tile`, at least
/// `kernel.min_tiles` a chunk, at most `most` chunks, never more than the cache needs at that
/// many a chunk): (tiles a chunk, chunks).
fn chunking(n_ctx: usize, n_kv: usize, most: usize, kernel: AttentionKernel) -> (usize, usize) {
    let (tile, min_tiles) = (kernel.tile as usize, kernel.min_tiles as usize);
    let splits = n_ctx.div_ceil(tile * min_tiles).clamp(1, most);
    let tiles = n_kv.div_ceil(tile);
    let chunk_tiles = tiles.div_ceil(splits).max(min_tiles);
    (chunk_tiles, tiles.div_ceil(chunk_tiles))
}

#[test]
fn decode_attention_matches_an_f64_reference() {
    let gpu = gpu();
    let mut rng = Rng(41);
    // (query heads, KV heads, head dim, value head dim, positions, n_past): GQA ratios 1, 2, 4
    // and 8; n_past at the tile and chunk edges (63, 64, 65, 127, 128); a context of one chunk,
    // of a few, and of more than 32 × 2 tiles (chunks of 3 tiles); value heads up to 1024.
    let shapes = [
        (1, 1, 2, 2, 1, 0),
        (4, 2, 64, 64, 300, 0),
        (8, 8, 64, 64, 64, 1),
        (4, 4, 128, 128, 200, 2),
        (8, 1, 128, 128, 512, 63),
        (2, 2, 64, 64, 600, 64),
        (4, 1, 64, 64, 600, 65),
        (2, 1, 128, 128, 600, 127),
        (2, 1, 128, 128, 600, 128),
        (8, 2, 128, 128, 1024, 700),
        (16, 2, 64, 64, 4096, 1500),
        (4, 2, 128, 128, 5000, 4999),
        (6, 6, 80, 48, 600, 599),
        (2, 1, 64, 576, 40, 39),
        (3, 1, 32, 32, 520, 511),
        (4, 2, 64, 1024, 300, 299),
    ];
    // Every shape split as the shader chooses, then the long ones as one chunk a head.
    for most in [MAX_ATTENTION_SPLITS, 1] {
        gpu.set_max_attention_splits(most);
        for as_f16 in [false, true] {
            let mut worst = Worst::new(&format!(
                "attention {}, at most {most} chunks",
                if as_f16 { "f16" } else { "f32" }
            ));
            for &(n_head, n_head_kv, hd, hdv, n_ctx, n_past) in &shapes {
                if most == 1 && n_past < 600 {
                    continue;
                }
                check_attention(
                    &gpu,
                    &mut rng,
                    &mut worst,
                    (n_head, n_head_kv, hd, hdv, n_ctx, n_past),
                    as_f16,
                    most,
                );
            }
            worst.report();
        }
    }
    gpu.set_max_attention_splits(MAX_ATTENTION_SPLITS);
}

fn check_attention(
    gpu: &Gpu,
    rng: &mut Rng,
    worst: &mut Worst,
    shape: (usize, usize, usize, usize, usize, usize),
    as_f16: bool,
    most: usize,
) {
    let (n_head, n_head_kv, hd, hdv, n_ctx, n_past) = shape;
    let case = Case::new(gpu, rng, (n_head, n_head_kv, hd, hdv, n_ctx), as_f16);
    case.check(gpu, worst, n_past, most, AttentionKernel::DEFAULT);
}

/// A query and a cache of random keys and values, the host's copies with them.
struct Case {
    n_head: usize,
    n_head_kv: usize,
    hd: usize,
    hdv: usize,
    n_ctx: usize,
    as_f16: bool,
    q: Vec<f32>,
    keys: Vec<Vec<f32>>,
    values: Vec<Vec<f32>>,
    cache: KvCache,
    qt: oxibonsai_gpu::Tensor,
}

impl Case {
    fn new(
        gpu: &Gpu,
        rng: &mut Rng,
        (n_head, n_head_kv, hd, hdv, n_ctx): (usize, usize, usize, usize, usize),
        as_f16: bool,
    ) -> Case {
        let q = rng.vec(n_head * hd, 2.0);
        let keys: Vec<Vec<f32>> = (0..n_ctx).map(|_| rng.vec(n_head_kv * hd, 2.0)).collect();
        let values: Vec<Vec<f32>> = (0..n_ctx).map(|_| rng.vec(n_head_kv * hdv, 1.0)).collect();
        let cache = KvCache::new(gpu, n_head_kv, hd, hdv, n_ctx, as_f16).unwrap();
        gpu.write(&cache.k, &layout(&keys, n_head_kv, hd, n_ctx, as_f16))
            .unwrap();
        gpu.write(&cache.v, &layout(&values, n_head_kv, hdv, n_ctx, as_f16))
            .unwrap();
        let qt = gpu.upload("q", &q).unwrap();
        Case {
            n_head,
            n_head_kv,
            hd,
            hdv,
            n_ctx,
            as_f16,
            q,
            keys,
            values,
            cache,
            qt,
        }
    }

    /// The device's attention at `n_past` with `kernel` (at most `most` chunks a head): its f32
    /// output's bits.
    fn run(&self, gpu: &Gpu, n_past: usize, most: usize, kernel: AttentionKernel) -> Vec<u32> {
        gpu.set_attention_kernel(kernel);
        gpu.set_max_attention_splits(most);
        let step = gpu.upload("step", &[n_past as u32]).unwrap();
        let out = gpu.tensor("out", self.n_head * self.hdv).unwrap();
        let scale = 1.0 / (self.hd as f32).sqrt();
        let mut rec = gpu.recorder();
        rec.attention(&self.qt, &self.cache, &step, self.n_head, scale, &out)
            .unwrap();
        rec.submit().unwrap();
        gpu.set_attention_kernel(AttentionKernel::DEFAULT);
        gpu.set_max_attention_splits(MAX_ATTENTION_SPLITS);
        gpu.read(&out).unwrap()
    }

    /// The device's attention at `n_past` with `kernel` quantized to `kind` (Q8_0 or Q8_K): the
    /// output's words and block metadata.
    fn run_quantized(
        &self,
        gpu: &Gpu,
        n_past: usize,
        kernel: AttentionKernel,
        kind: FormatKind,
    ) -> (Vec<u32>, Vec<u32>) {
        gpu.set_attention_kernel(kernel);
        let step = gpu.upload("step", &[n_past as u32]).unwrap();
        let out = Q8Tensor::with_kind(gpu, kind, self.n_head * self.hdv).unwrap();
        let scale = 1.0 / (self.hd as f32).sqrt();
        let mut rec = gpu.recorder();
        rec.attention_quantized(&self.qt, &self.cache, &step, self.n_head, scale, &out)
            .unwrap();
        rec.submit().unwrap();
        gpu.set_attention_kernel(AttentionKernel::DEFAULT);
        (gpu.read(&out.words).unwrap(), gpu.read(&out.meta).unwrap())
    }

    /// The device's one-token `chunk_attention` at `n_past` with `kernel` (the query as row 1
    /// of two, the output's row 1): its bits.
    fn run_rows(&self, gpu: &Gpu, n_past: usize, kernel: AttentionKernel) -> Vec<u32> {
        gpu.set_attention_kernel(kernel);
        let mut q: Vec<f32> = vec![0.0; self.n_head * self.hd];
        q.extend_from_slice(&self.q);
        let qt = gpu.upload("rows q", &q).unwrap();
        let out = gpu.tensor("rows out", 2 * self.n_head * self.hdv).unwrap();
        let mut run = ChunkRun::new(gpu).unwrap();
        run.set(gpu, n_past, 1, 1).unwrap();
        let scale = 1.0 / (self.hd as f32).sqrt();
        let mut rec = gpu.recorder();
        rec.chunk_attention(&qt, &self.cache, &run, self.n_head, scale, &out)
            .unwrap();
        rec.submit().unwrap();
        gpu.set_attention_kernel(AttentionKernel::DEFAULT);
        gpu.read(&out).unwrap()[self.n_head * self.hdv..].to_vec()
    }

    /// The device's attention at `n_past` with `kernel` against the f64 reference, within the
    /// bound of its chunking's roundings.
    fn check(
        &self,
        gpu: &Gpu,
        worst: &mut Worst,
        n_past: usize,
        most: usize,
        kernel: AttentionKernel,
    ) {
        let (n_head, n_head_kv, hd, hdv, n_ctx) =
            (self.n_head, self.n_head_kv, self.hd, self.hdv, self.n_ctx);
        let (q, keys, values) = (&self.q, &self.keys, &self.values);
        let scale = 1.0 / (hd as f32).sqrt();
        let got: Vec<f32> = self
            .run(gpu, n_past, most, kernel)
            .into_iter()
            .map(f32::from_bits)
            .collect();
        let as_f16 = self.as_f16;
        let stored = |v: f32| if as_f16 { f16::from_f32(v).to_f32() } else { v };
        let n_kv = n_past + 1;
        let (chunk_tiles, n_chunks) = chunking(n_ctx, n_kv, most, kernel);
        for h in 0..n_head {
            let g = h / (n_head / n_head_kv);
            let qh = &q[h * hd..(h + 1) * hd];
            let mut s = Vec::with_capacity(n_kv);
            let mut e = Vec::with_capacity(n_kv);
            for key in &keys[..n_kv] {
                let k = &key[g * hd..(g + 1) * hd];
                let dot: f64 = qh
                    .iter()
                    .zip(k)
                    .map(|(&a, &b)| f64::from(a) * f64::from(stored(b)))
                    .sum();
                let mag: f64 = qh
                    .iter()
                    .zip(k)
                    .map(|(&a, &b)| f64::from((a * stored(b)).abs()))
                    .sum();
                s.push(dot * f64::from(scale));
                // The GPU's f32 score: sums of hd terms in any order, and the scale (relative
                // to Σ|q·k|).
                e.push(f64::from(scale) * mag * (hd as f64 + 2.0) * U);
            }
            let m = s.iter().cloned().fold(f64::MIN, f64::max);
            let p: Vec<f64> = s.iter().map(|&v| (v - m).exp()).collect();
            let l: f64 = p.iter().sum();
            // A position's weight is a product of exps — its own in its tile, one rescaling per
            // later tile of its chunk, its chunk's in the combination — each within 3 + 2|x| ulp
            // (WGSL's bound), the |x| adding up to |s − m|; plus a rounding per rescaling and
            // the products with the value and the chunk's weight.
            let exps = (chunk_tiles + 1) as f64;
            let rel: Vec<f64> = e
                .iter()
                .zip(&s)
                .map(|(&e, &v)| 2.0 * e + (3.0 * exps + 2.0 * (v - m).abs() + exps + 3.0) * U)
                .collect();
            let worst_rel = rel.iter().zip(&p).map(|(r, p)| r * p).sum::<f64>() / l;
            // The float sums: a share's positions in its chunk, then up to 16 shares, then the
            // chunks.
            let chunk_len = chunk_tiles * kernel.tile as usize;
            let series = (chunk_len + 16 + n_chunks + 4) as f64 * U;
            for d in 0..hdv {
                let mut want = 0.0;
                let mut bound = 0.0;
                for (t, value) in values[..n_kv].iter().enumerate() {
                    let v = f64::from(stored(value[g * hdv + d]));
                    want += p[t] / l * v;
                    bound += p[t] / l * v.abs() * (rel[t] + worst_rel + series);
                }
                worst.check(
                    || {
                        format!(
                            "{n_head}/{n_head_kv} heads {hd}/{hdv} of {n_ctx} n_past {n_past} ({n_chunks} chunks, kernel {kernel}) [{h}][{d}]"
                        )
                    },
                    got[h * hdv + d],
                    want,
                    2.0 * bound + 1e-30,
                );
            }
        }
    }
}

/// Every kernel setting (`AttentionKernel`: 32-position tiles, chunks of one tile, the unrolled
/// key pass, the tree maximum, GQA packing, and all five) against the f64 reference, at the tile
/// and chunk edges of each and deep in a 4096-position cache; head dimensions 64, 128 and the
/// untied 80 / 96; GQA 1, 2, 4 and 8; f32 and f16 caches.
#[test]
fn every_attention_kernel_matches_an_f64_reference() {
    let gpu = gpu();
    let mut rng = Rng(44);
    let n_ctx = 4096;
    let shapes = [
        (2, 2, 64, 64),
        (4, 2, 128, 128),
        (8, 2, 80, 96),
        (8, 1, 64, 64),
    ];
    let positions = [0, 1, 31, 32, 33, 63, 64, 65, 127, 128, 129, 1000, 4095];
    for as_f16 in [false, true] {
        for &(n_head, n_head_kv, hd, hdv) in &shapes {
            let case = Case::new(&gpu, &mut rng, (n_head, n_head_kv, hd, hdv, n_ctx), as_f16);
            for kernel in kernels() {
                let mut worst = Worst::new(&format!(
                    "attention {}, kernel {kernel}",
                    if as_f16 { "f16" } else { "f32" }
                ));
                for &n_past in &positions {
                    case.check(&gpu, &mut worst, n_past, MAX_ATTENTION_SPLITS, kernel);
                }
                worst.report();
            }
        }
    }
}

/// The settings the tests run besides the default: each change alone, and all of them.
fn kernels() -> Vec<AttentionKernel> {
    [
        "tile32",
        "min1",
        "tile32,min1",
        "unroll",
        "tree",
        "tile32,min1,unroll,tree",
        "gqa",
        "tile32,min1,unroll,tree,gqa",
    ]
    .into_iter()
    .map(|k| AttentionKernel::parse(k).unwrap())
    .collect()
}

/// GQA packing gives the bits of the unpacked kernel (each head's products and sums in the same
/// order), with every other setting: GQA 1, 2, 4 and 8 (and 16, past the packing's limit: the
/// unpacked kernel), head dimensions 64, 128 and the untied 80 / 96, f32 and f16 caches, at one
/// chunk and at many; through the f32 output, the Q8_0 and Q8_K outputs, and a one-token
/// `chunk_attention` (the rows input).
#[test]
fn gqa_packing_gives_the_bits_of_the_unpacked_kernel() {
    let gpu = gpu();
    let mut rng = Rng(46);
    for (shape, as_f16) in [
        ((2, 2, 64, 64, 4096), false),
        ((4, 2, 128, 128, 4096), true),
        ((8, 2, 80, 96, 1100), false),
        ((8, 1, 64, 64, 4096), true),
        ((32, 8, 128, 128, 1100), false),
        ((16, 1, 64, 64, 300), false),
    ] {
        let case = Case::new(&gpu, &mut rng, shape, as_f16);
        for base in ["default", "tile32", "min1", "tile32,min1,unroll,tree"] {
            let plain = AttentionKernel::parse(base).unwrap();
            let packed = AttentionKernel {
                gqa_pack: true,
                ..plain
            };
            for n_past in [0, 1, 63, 64, 65, 1000, 4095] {
                if n_past >= shape.4 {
                    continue;
                }
                let what =
                    format!("{shape:?} f16 {as_f16} n_past {n_past}: {packed} against {plain}");
                assert_eq!(
                    case.run(&gpu, n_past, MAX_ATTENTION_SPLITS, packed),
                    case.run(&gpu, n_past, MAX_ATTENTION_SPLITS, plain),
                    "{what}"
                );
                if base == "default" && (n_past == 65 || n_past == 1000) {
                    let q8_k = (shape.0 * shape.3).is_multiple_of(256);
                    for kind in [FormatKind::Q8_0, FormatKind::Q8_K] {
                        if kind == FormatKind::Q8_K && !q8_k {
                            continue;
                        }
                        assert_eq!(
                            case.run_quantized(&gpu, n_past, packed, kind),
                            case.run_quantized(&gpu, n_past, plain, kind),
                            "{what} ({kind:?} output)"
                        );
                    }
                    assert_eq!(
                        case.run_rows(&gpu, n_past, packed),
                        case.run_rows(&gpu, n_past, plain),
                        "{what} (one-token chunk_attention)"
                    );
                }
            }
        }
    }
}

/// The unrolled key pass and the tree maximum give the bits of the kernel without them (the
/// same products added in the same order; a maximum is exact), for both tilings, at one chunk
/// and at many, f32 and f16 caches, head dimensions that leave the unrolled loop a tail.
#[test]
fn the_unrolled_keys_and_the_tree_maximum_give_the_bits_of_the_plain_kernel() {
    let gpu = gpu();
    let mut rng = Rng(45);
    for (shape, as_f16) in [
        ((4, 2, 128, 128, 2000), true),
        ((6, 3, 80, 96, 600), false),
        ((2, 1, 40, 32, 300), true),
        ((3, 3, 6, 10, 200), false),
    ] {
        let case = Case::new(&gpu, &mut rng, shape, as_f16);
        for base in ["default", "tile32", "min1", "tile32,min1"] {
            let plain = AttentionKernel::parse(base).unwrap();
            for n_past in [0, 40, 64, 150, shape.4 - 1] {
                let want = case.run(&gpu, n_past, MAX_ATTENTION_SPLITS, plain);
                for (unroll, tree) in [(true, false), (false, true), (true, true)] {
                    let kernel = AttentionKernel {
                        key_unroll: unroll,
                        tree_max: tree,
                        ..plain
                    };
                    assert_eq!(
                        case.run(&gpu, n_past, MAX_ATTENTION_SPLITS, kernel),
                        want,
                        "{shape:?} f16 {as_f16} n_past {n_past}: {kernel} against {plain}"
                    );
                }
            }
        }
    }
}

#[test]
fn attention_kernel_settings_parse_and_print() {
    for text in [
        "default",
        "tile32",
        "min1",
        "unroll",
        "tree",
        "tile32,min1,unroll,tree",
        "gqa",
        "tile32,min1,unroll,tree,gqa",
    ] {
        let kernel = AttentionKernel::parse(text).unwrap();
        assert_eq!(kernel.to_string(), text);
    }
    assert_eq!(
        AttentionKernel::parse(" tile32 , tile64,min2 ").unwrap(),
        AttentionKernel::DEFAULT
    );
    let e = AttentionKernel::parse("tile16").err().unwrap();
    assert!(e.to_string().contains("OXIBONSAI_GPU_ATTN"), "{e}");
    // The device keeps the setting.
    let gpu = gpu();
    let all = AttentionKernel::parse("tile32,min1,unroll,tree,gqa").unwrap();
    gpu.set_attention_kernel(all);
    assert_eq!(gpu.attention_kernel(), all);
    gpu.set_attention_kernel(AttentionKernel::DEFAULT);
}

/// The chunks that finish first leave their head's counter for the last to reset: the same
/// attention recorded again (in the same submission and the next) gives the same bits, for
/// every way of splitting it — and the same bits when dispatched for only the positions in use
/// (`set_attention_positions`); told fewer, it still attends to all of them.
#[test]
fn split_attention_leaves_its_counters_ready_for_the_next_dispatch() {
    let gpu = gpu();
    let mut rng = Rng(43);
    let (n_head, n_head_kv, hd, n_ctx) = (8, 2, 64, 2000);
    let cache = KvCache::new(&gpu, n_head_kv, hd, hd, n_ctx, true).unwrap();
    let words: Vec<u32> = (0..cache.k.len())
        .map(|_| rng.next() as u32 & 0x3bff_3bff)
        .collect();
    gpu.write(&cache.k, &words).unwrap();
    gpu.write(&cache.v, &words).unwrap();
    let q = gpu.upload("q", &rng.vec(n_head * hd, 1.0)).unwrap();
    let step = gpu.tensor("step", 1).unwrap();
    for n_past in [1999usize, 130, 5, 1000] {
        gpu.write(&step, &[n_past as u32]).unwrap();
        let outs: Vec<_> = (0..3)
            .map(|_| gpu.tensor("out", n_head * hd).unwrap())
            .collect();
        let mut rec = gpu.recorder();
        rec.attention(&q, &cache, &step, n_head, 0.125, &outs[0])
            .unwrap();
        rec.attention(&q, &cache, &step, n_head, 0.125, &outs[1])
            .unwrap();
        rec.submit().unwrap();
        let mut rec = gpu.recorder();
        rec.attention(&q, &cache, &step, n_head, 0.125, &outs[2])
            .unwrap();
        rec.submit().unwrap();
        // Dispatched for just the positions in use (and for fewer than in use: bigger chunks).
        let (hinted, short) = (
            gpu.tensor("hinted", n_head * hd).unwrap(),
            gpu.tensor("short", n_head * hd).unwrap(),
        );
        let mut rec = gpu.recorder();
        rec.set_attention_positions(n_past + 1);
        rec.attention(&q, &cache, &step, n_head, 0.125, &hinted)
            .unwrap();
        rec.set_attention_positions(1);
        rec.attention(&q, &cache, &step, n_head, 0.125, &short)
            .unwrap();
        rec.submit().unwrap();
        let first = gpu.read::<u32>(&outs[0]).unwrap();
        assert_eq!(
            gpu.read::<u32>(&hinted).unwrap(),
            first,
            "n_past {n_past}: dispatched for the positions in use"
        );
        // Bigger chunks: a different order of sums of positive terms (n_kv long at most) and of
        // exps (a rescaling a tile, |x| ≤ 16 here), both ways.
        let n_kv = n_past as f64 + 1.0;
        let tol = 2.0 * (n_kv + 3.0 * (n_kv / 64.0 + 2.0) + 2.0 * 16.0 + 64.0) * U;
        for (i, (s, f)) in gpu
            .read::<f32>(&short)
            .unwrap()
            .iter()
            .zip(&first)
            .enumerate()
        {
            let f = f32::from_bits(*f);
            let err = f64::from((s - f).abs());
            assert!(
                err <= tol * f64::from(f.abs()),
                "n_past {n_past} [{i}]: {s} vs {f}"
            );
        }
        assert!(
            first
                .iter()
                .all(|&w| f32::from_bits(w).is_finite() && w != 0),
            "n_past {n_past}: an output left unwritten or not finite"
        );
        for (i, o) in outs.iter().enumerate().skip(1) {
            assert_eq!(
                gpu.read::<u32>(o).unwrap(),
                first,
                "n_past {n_past}: dispatch {i} differs from the first"
            );
        }
    }
}

#[test]
fn stored_rows_land_at_their_position_bit_for_bit() {
    let gpu = gpu();
    let mut rng = Rng(42);
    for as_f16 in [false, true] {
        let (n_head_kv, hd, hdv, n_ctx) = (3, 6, 10, 5);
        let cache = KvCache::new(&gpu, n_head_kv, hd, hdv, n_ctx, as_f16).unwrap();
        let step = gpu.tensor("step", 1).unwrap();
        let mut keys = vec![vec![0f32; n_head_kv * hd]; n_ctx];
        let mut values = vec![vec![0f32; n_head_kv * hdv]; n_ctx];
        for pos in [3usize, 0, 4] {
            keys[pos] = rng.vec(n_head_kv * hd, 3.0);
            // Values an f16 rounds at a tie: 1 + 2^-11 (to even: 1) and 1 + 3·2^-11 (up).
            values[pos] = rng.vec(n_head_kv * hdv, 3.0);
            values[pos][0] = 1.0 + 1.0 / 2048.0;
            values[pos][1] = 1.0 + 3.0 / 2048.0;
            let (k, v) = (
                gpu.upload("k", &keys[pos]).unwrap(),
                gpu.upload("v", &values[pos]).unwrap(),
            );
            gpu.write(&step, &[pos as u32]).unwrap();
            let mut rec = gpu.recorder();
            rec.store_kv(&cache, &k, &v, &step).unwrap();
            rec.submit().unwrap();
        }
        assert_eq!(
            gpu.read::<u32>(&cache.k).unwrap(),
            layout(&keys, n_head_kv, hd, n_ctx, as_f16),
            "keys, f16 {as_f16}"
        );
        assert_eq!(
            gpu.read::<u32>(&cache.v).unwrap(),
            layout(&values, n_head_kv, hdv, n_ctx, as_f16),
            "values, f16 {as_f16}"
        );
    }
    let e = KvCache::new(&gpu, 2, 7, 8, 4, true).err().unwrap();
    assert!(e.to_string().contains("even head dimensions"), "{e}");
}
