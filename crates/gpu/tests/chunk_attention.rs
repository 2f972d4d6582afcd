//! The prompt's attention (issue 28: "tiled for prefill"): a run of T tokens of one sequence
//! stored into the device cache in one dispatch (`store_kv_rows`, checked bit for bit against
//! `store_kv` a token at a time) and attending causally over it in one dispatch
//! (`chunk_attention`), checked against a straightforward f64 reference written here, on awkward
//! shapes: T = 2, 3, 7, 17, 33; the run at position 0 and deep in the cache; head dims 64 / 128
//! and untied value dims; GQA ratios 1, 2, 4; f32 and f16 caches; a run ending at the cache's
//! end; the run at a row other than the tensors' first. Shapes past the limits are refused with
//! errors naming them.

mod support;

use half::f16;
use oxibonsai_gpu::{ChunkRun, Gpu, KvCache, Tensor, MAX_CHUNK_HEAD_DIM_V};
use support::{gpu, Rng, Worst, U};

/// Cache words of `rows` (position-major, `n_head_kv` heads of `dim` each) as the device holds
/// them: head g's row t at [g][t], f32 bits or f16 pairs.
fn layout(rows: &[Vec<f32>], n_head_kv: usize, dim: usize, as_f16: bool) -> Vec<u32> {
    let mut words = Vec::new();
    for g in 0..n_head_kv {
        for row in rows {
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

/// `rows` token-major in a tensor, after `first_row` rows of garbage and with one more after.
fn rows_at(gpu: &Gpu, rng: &mut Rng, rows: &[Vec<f32>], first_row: usize) -> Tensor {
    let width = rows[0].len();
    let mut all = rng.vec(first_row * width, 9.0);
    for r in rows {
        all.extend_from_slice(r);
    }
    all.extend(rng.vec(width, 9.0));
    gpu.upload("rows", &all).unwrap()
}

#[test]
fn chunk_attention_matches_an_f64_reference() {
    let gpu = gpu();
    let mut rng = Rng(51);
    // (query heads, KV heads, head dim, value head dim, cache positions, first position,
    // tokens, first row)
    let shapes = [
        (1, 1, 2, 2, 2, 0, 2, 0),
        (4, 4, 64, 64, 40, 0, 3, 0),
        (8, 2, 64, 64, 100, 0, 7, 1),
        (8, 4, 128, 128, 64, 0, 17, 0),
        (4, 1, 128, 128, 200, 0, 33, 2),
        (4, 2, 64, 64, 400, 300, 2, 0),
        (8, 2, 128, 128, 1100, 1000, 17, 3),
        (4, 1, 64, 64, 700, 511, 33, 0),
        (6, 6, 80, 48, 300, 130, 7, 0),
        (2, 1, 64, 256, 90, 50, 33, 1),
        (4, 4, 32, 96, 60, 20, 3, 0),
        // A run ending at the cache's last position.
        (4, 2, 64, 64, 50, 17, 33, 0),
    ];
    for as_f16 in [false, true] {
        let mut worst = Worst::new(&format!(
            "chunk attention {}",
            if as_f16 { "f16" } else { "f32" }
        ));
        for &shape in &shapes {
            check(&gpu, &mut rng, &mut worst, shape, as_f16);
        }
        worst.report();
    }
}

#[allow(clippy::type_complexity)]
fn check(
    gpu: &Gpu,
    rng: &mut Rng,
    worst: &mut Worst,
    (n_head, n_head_kv, hd, hdv, n_ctx, p0, n, first_row): (
        usize,
        usize,
        usize,
        usize,
        usize,
        usize,
        usize,
        usize,
    ),
    as_f16: bool,
) {
    let scale = 1.0 / (hd as f32).sqrt();
    let keys: Vec<Vec<f32>> = (0..n_ctx).map(|_| rng.vec(n_head_kv * hd, 2.0)).collect();
    let values: Vec<Vec<f32>> = (0..n_ctx).map(|_| rng.vec(n_head_kv * hdv, 1.0)).collect();
    let queries: Vec<Vec<f32>> = (0..n).map(|_| rng.vec(n_head * hd, 2.0)).collect();
    // The past (positions before the run) in the cache, the rest garbage the run overwrites.
    let cache = KvCache::new(gpu, n_head_kv, hd, hdv, n_ctx, as_f16).unwrap();
    let mut past_k = keys.clone();
    let mut past_v = values.clone();
    for t in p0..n_ctx {
        past_k[t] = rng.vec(n_head_kv * hd, 50.0);
        past_v[t] = rng.vec(n_head_kv * hdv, 50.0);
    }
    gpu.write(&cache.k, &layout(&past_k, n_head_kv, hd, as_f16))
        .unwrap();
    gpu.write(&cache.v, &layout(&past_v, n_head_kv, hdv, as_f16))
        .unwrap();
    let k = rows_at(gpu, rng, &keys[p0..p0 + n], first_row);
    let v = rows_at(gpu, rng, &values[p0..p0 + n], first_row);
    let q = rows_at(gpu, rng, &queries, first_row);
    let out_len = (first_row + n + 1) * n_head * hdv;
    let out = gpu.upload("out", &vec![7.5f32; out_len]).unwrap();
    let mut run = ChunkRun::new(gpu).unwrap();
    run.set(gpu, p0, first_row, n).unwrap();
    let mut rec = gpu.recorder();
    rec.store_kv_rows(&cache, &k, &v, &run).unwrap();
    rec.chunk_attention(&q, &cache, &run, n_head, scale, &out)
        .unwrap();
    assert_eq!(rec.dispatches(), 2, "one store and one attention");
    rec.submit().unwrap();
    let got: Vec<f32> = gpu.read(&out).unwrap();
    // Rows outside the run untouched.
    let row_len = n_head * hdv;
    for (i, &x) in got.iter().enumerate() {
        let row = i / row_len;
        if row < first_row || row >= first_row + n {
            assert_eq!(x, 7.5, "output word {i} outside the run written");
        }
    }

    let stored = |v: f32| if as_f16 { f16::from_f32(v).to_f32() } else { v };
    let what = format!("{n_head}/{n_head_kv} heads {hd}/{hdv} of {n_ctx}, {n} tokens at {p0}");
    for (t, qt) in queries.iter().enumerate() {
        let n_kv = p0 + t + 1;
        let tiles = n_kv.div_ceil(16);
        for h in 0..n_head {
            let g = h / (n_head / n_head_kv);
            let qh = &qt[h * hd..(h + 1) * hd];
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
                // The f32 score: a sum of hd terms in order, and the scale (relative to Σ|q·k|).
                e.push(f64::from(scale) * mag * (hd as f64 + 2.0) * U);
            }
            let m = s.iter().cloned().fold(f64::MIN, f64::max);
            let p: Vec<f64> = s.iter().map(|&v| (v - m).exp()).collect();
            let l: f64 = p.iter().sum();
            // A key's weight: its exp in its tile and one rescaling exp per later tile, each
            // within 3 + 2|x| ulp (WGSL's bound), the |x| adding up to |s − m|; a rounding per
            // rescaling and the product with the value.
            let exps = (tiles + 1) as f64;
            let rel: Vec<f64> = e
                .iter()
                .zip(&s)
                .map(|(&e, &v)| 2.0 * e + (3.0 * exps + 2.0 * (v - m).abs() + exps + 3.0) * U)
                .collect();
            let worst_rel = rel.iter().zip(&p).map(|(r, p)| r * p).sum::<f64>() / l;
            // The float sums: 16 keys of a tile, then one addition a tile.
            let series = (16 + tiles + 4) as f64 * U;
            for d in 0..hdv {
                let mut want = 0.0;
                let mut bound = 0.0;
                for (key, value) in values[..n_kv].iter().enumerate() {
                    let v = f64::from(stored(value[g * hdv + d]));
                    want += p[key] / l * v;
                    bound += p[key] / l * v.abs() * (rel[key] + worst_rel + series);
                }
                worst.check(
                    || format!("{what} [{t}][{h}][{d}]"),
                    got[((first_row + t) * n_head + h) * hdv + d],
                    want,
                    2.0 * bound + 1e-30,
                );
            }
        }
    }
}

/// `store_kv_rows` stores the bits `store_kv` stores a token at a time (f16 ties to even
/// included), at the run's positions only.
#[test]
fn a_run_stored_in_one_dispatch_gives_store_kv_bits() {
    let gpu = gpu();
    let mut rng = Rng(52);
    for as_f16 in [false, true] {
        for (n_head_kv, hd, hdv, n_ctx, p0, n, first_row) in [
            (3, 6, 10, 9, 2, 5, 1),
            (2, 64, 64, 40, 0, 33, 0),
            (1, 128, 96, 50, 33, 17, 2),
        ] {
            let mut keys: Vec<Vec<f32>> = (0..n).map(|_| rng.vec(n_head_kv * hd, 3.0)).collect();
            let values: Vec<Vec<f32>> = (0..n).map(|_| rng.vec(n_head_kv * hdv, 3.0)).collect();
            // Values an f16 rounds at a tie: 1 + 2^-11 (to even: 1) and 1 + 3·2^-11 (up).
            keys[0][0] = 1.0 + 1.0 / 2048.0;
            keys[0][1] = 1.0 + 3.0 / 2048.0;
            let one = KvCache::new(&gpu, n_head_kv, hd, hdv, n_ctx, as_f16).unwrap();
            let step = gpu.tensor("step", 1).unwrap();
            for t in 0..n {
                let (k, v) = (
                    gpu.upload("k", &keys[t]).unwrap(),
                    gpu.upload("v", &values[t]).unwrap(),
                );
                gpu.write(&step, &[(p0 + t) as u32]).unwrap();
                let mut rec = gpu.recorder();
                rec.store_kv(&one, &k, &v, &step).unwrap();
                rec.submit().unwrap();
            }
            let all = KvCache::new(&gpu, n_head_kv, hd, hdv, n_ctx, as_f16).unwrap();
            let (k, v) = (
                rows_at(&gpu, &mut rng, &keys, first_row),
                rows_at(&gpu, &mut rng, &values, first_row),
            );
            let mut run = ChunkRun::new(&gpu).unwrap();
            run.set(&gpu, p0, first_row, n).unwrap();
            let mut rec = gpu.recorder();
            rec.store_kv_rows(&all, &k, &v, &run).unwrap();
            assert_eq!(rec.dispatches(), 1);
            rec.submit().unwrap();
            let what = format!("{n_head_kv} heads {hd}/{hdv}, {n} at {p0}, f16 {as_f16}");
            assert_eq!(
                gpu.read::<u32>(&all.k).unwrap(),
                gpu.read::<u32>(&one.k).unwrap(),
                "keys: {what}"
            );
            assert_eq!(
                gpu.read::<u32>(&all.v).unwrap(),
                gpu.read::<u32>(&one.v).unwrap(),
                "values: {what}"
            );
        }
    }
}

#[test]
fn chunk_shapes_past_the_limits_are_refused() {
    let gpu = gpu();
    let t = |len: usize| gpu.tensor("t", len).unwrap();
    let cache = KvCache::new(&gpu, 2, 64, 64, 20, false).unwrap();
    let mut run = ChunkRun::new(&gpu).unwrap();
    let err = |e: Option<oxibonsai_gpu::GpuError>| e.expect("refused").to_string();
    let mut rec = gpu.recorder();
    let (q, out, kv) = (t(64 * 8 * 30), t(64 * 8 * 30), t(128 * 30));
    // A run not set yet: no tokens.
    let e = err(rec.chunk_attention(&q, &cache, &run, 8, 0.1, &out).err());
    assert!(
        e.contains("chunk_attention") && e.contains("0 tokens"),
        "{e}"
    );
    // Past the cache's end.
    run.set(&gpu, 10, 0, 11).unwrap();
    let e = err(rec.store_kv_rows(&cache, &kv, &kv, &run).err());
    assert!(
        e.contains("store_kv_rows") && e.contains("20 positions"),
        "{e}"
    );
    let e = err(rec.chunk_attention(&q, &cache, &run, 8, 0.1, &out).err());
    assert!(
        e.contains("chunk_attention") && e.contains("20 positions"),
        "{e}"
    );
    run.set(&gpu, 10, 0, 10).unwrap();
    // Query heads not whole groups of the key heads.
    let e = err(rec.chunk_attention(&q, &cache, &run, 3, 0.1, &out).err());
    assert!(e.contains("3 query heads"), "{e}");
    // Tensors too small for the run's rows.
    run.set(&gpu, 0, 26, 5).unwrap();
    let e = err(rec.store_kv_rows(&cache, &kv, &kv, &run).err());
    assert!(e.contains("store_kv_rows keys"), "{e}");
    let e = err(rec
        .chunk_attention(&t(10), &cache, &run, 8, 0.1, &out)
        .err());
    assert!(e.contains("chunk_attention query"), "{e}");
    // Value heads wider than the shader holds.
    let wide = KvCache::new(&gpu, 1, 64, MAX_CHUNK_HEAD_DIM_V + 2, 8, false).unwrap();
    run.set(&gpu, 0, 0, 2).unwrap();
    let e = err(rec.chunk_attention(&q, &wide, &run, 1, 0.1, &out).err());
    assert!(e.contains("value head dimension 258 exceeds 256"), "{e}");
    assert_eq!(rec.dispatches(), 0);
}

/// A run of one token (a sequence's step among several in a chunk) attends through the decode
/// attention, split over positions, reading and writing its own row: `attention`'s bits.
#[test]
fn a_run_of_one_token_gives_the_decode_attention_bits() {
    let gpu = gpu();
    let mut rng = Rng(53);
    for as_f16 in [false, true] {
        for (n_head, n_head_kv, hd, hdv, n_ctx, pos, row) in [
            (4, 2, 64, 64, 40, 0, 0),
            (8, 2, 128, 128, 700, 513, 3),
            (6, 6, 80, 48, 300, 129, 1),
        ] {
            let cache = KvCache::new(&gpu, n_head_kv, hd, hdv, n_ctx, as_f16).unwrap();
            let words: Vec<u32> = (0..cache.k.len())
                .map(|_| rng.next() as u32 & 0x3bff_3bff)
                .collect();
            gpu.write(&cache.k, &words).unwrap();
            let words: Vec<u32> = (0..cache.v.len())
                .map(|_| rng.next() as u32 & 0x3bff_3bff)
                .collect();
            gpu.write(&cache.v, &words).unwrap();
            let query = rng.vec(n_head * hd, 2.0);
            let q = rows_at(&gpu, &mut rng, std::slice::from_ref(&query), row);
            let one = gpu.upload("q", &query).unwrap();
            let step = gpu.upload("step", &[pos as u32]).unwrap();
            let want = gpu.tensor("decode out", n_head * hdv).unwrap();
            let out = gpu.tensor("chunk out", (row + 1) * n_head * hdv).unwrap();
            let mut run = ChunkRun::new(&gpu).unwrap();
            run.set(&gpu, pos, row, 1).unwrap();
            let mut rec = gpu.recorder();
            rec.attention(&one, &cache, &step, n_head, 0.1, &want)
                .unwrap();
            rec.chunk_attention(&q, &cache, &run, n_head, 0.1, &out)
                .unwrap();
            rec.submit().unwrap();
            let got = gpu.read::<u32>(&out).unwrap();
            assert_eq!(
                got[row * n_head * hdv..],
                gpu.read::<u32>(&want).unwrap()[..],
                "{n_head}/{n_head_kv} heads {hd}/{hdv} at {pos}, f16 {as_f16}"
            );
        }
    }
}
