//! Decode attention over the device KV cache (f32 and f16, GQA, causal up to n_past, the score
//! scale) against a straightforward f64 reference written here: the CPU backend's attention is
//! private to the engine and rounds queries to f16, which this shader does not. Storing rows into
//! the cache is checked bit for bit against the `half` crate's conversion (the CPU cache's).

mod support;

use half::f16;
use oxibonsai_gpu::KvCache;
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

#[test]
fn decode_attention_matches_an_f64_reference() {
    let gpu = gpu();
    let mut rng = Rng(41);
    for as_f16 in [false, true] {
        let mut worst = Worst::new(if as_f16 {
            "attention f16"
        } else {
            "attention f32"
        });
        for &(n_head, n_head_kv, hd, hdv, n_ctx, n_past) in &[
            (1, 1, 2, 2, 1, 0),
            (4, 2, 64, 64, 300, 0),
            (8, 2, 128, 128, 1024, 700),
            (6, 6, 80, 48, 600, 599),
            (2, 1, 64, 576, 40, 39),
            (3, 1, 32, 32, 520, 511),
        ] {
            let scale = 1.0 / (hd as f32).sqrt();
            let q = rng.vec(n_head * hd, 2.0);
            let keys: Vec<Vec<f32>> = (0..n_ctx).map(|_| rng.vec(n_head_kv * hd, 2.0)).collect();
            let values: Vec<Vec<f32>> = (0..n_ctx).map(|_| rng.vec(n_head_kv * hdv, 1.0)).collect();
            let cache = KvCache::new(&gpu, n_head_kv, hd, hdv, n_ctx, as_f16).unwrap();
            gpu.write(&cache.k, &layout(&keys, n_head_kv, hd, n_ctx, as_f16))
                .unwrap();
            gpu.write(&cache.v, &layout(&values, n_head_kv, hdv, n_ctx, as_f16))
                .unwrap();
            let (qt, step) = (
                gpu.upload("q", &q).unwrap(),
                gpu.upload("step", &[n_past as u32]).unwrap(),
            );
            let out = gpu.tensor("out", n_head * hdv).unwrap();
            let mut rec = gpu.recorder();
            rec.attention(&qt, &cache, &step, n_head, scale, &out)
                .unwrap();
            rec.submit().unwrap();
            let got: Vec<f32> = gpu.read(&out).unwrap();

            let stored = |v: f32| if as_f16 { f16::from_f32(v).to_f32() } else { v };
            let n_kv = n_past + 1;
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
                    // The GPU's f32 score: hd serial sums and the scale (relative to Σ|q·k|).
                    e.push(f64::from(scale) * mag * (hd as f64 + 2.0) * U);
                }
                let m = s.iter().cloned().fold(f64::MIN, f64::max);
                let p: Vec<f64> = s.iter().map(|&v| (v - m).exp()).collect();
                let l: f64 = p.iter().sum();
                // exp within 3 + 2|x| ulp (WGSL's bound), twice for the tile rescaling.
                let rel: Vec<f64> = e
                    .iter()
                    .zip(&s)
                    .map(|(&e, &v)| 2.0 * e + (8.0 + 4.0 * (v - m).abs()) * U)
                    .collect();
                let worst_rel = rel.iter().zip(&p).map(|(r, p)| r * p).sum::<f64>() / l;
                let series = (n_kv.min(256) + n_kv / 256 + 16) as f64 * U;
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
                                "{n_head}/{n_head_kv} heads {hd}/{hdv} n_past {n_past} [{h}][{d}]"
                            )
                        },
                        got[h * hdv + d],
                        want,
                        2.0 * bound + 1e-30,
                    );
                }
            }
        }
        worst.report();
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
