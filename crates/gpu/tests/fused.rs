//! The fused ops against the unfused chains they replace, run on the same device: each must give
//! the same bits (the unfused ops are proven against the CPU in their own tests), on awkward
//! shapes — widths of an odd number of blocks, several rows, GQA, partial rotary, f16 and f32
//! caches, a position past the cache.

#[allow(dead_code)] // the CPU's product is the other tests' business
mod common;
mod support;

use oxibonsai_formats::{format, FormatKind};
use oxibonsai_gpu::{
    AttentionKernel, Gpu, Input, KvCache, Matrix, Q1Matrix, Q1Reduce, Q8Tensor, QkNorms, Rope,
    Tensor,
};
use support::{cpu_q8_k, gpu, rope_angles, Rng};

fn same_bits(what: &str, got: &[u32], want: &[u32]) {
    assert_eq!(got.len(), want.len(), "{what}: lengths");
    let diffs: Vec<usize> = (0..got.len()).filter(|&i| got[i] != want[i]).collect();
    assert!(
        diffs.is_empty(),
        "{what}: {} of {} words differ, first at {} ({:#x} vs {:#x})",
        diffs.len(),
        got.len(),
        diffs[0],
        got[diffs[0]],
        want[diffs[0]]
    );
}

fn same_q8(gpu: &Gpu, what: &str, got: &Q8Tensor, want: &Q8Tensor) {
    let read = |t: &Tensor| gpu.read::<u32>(t).unwrap();
    same_bits(
        &format!("{what} codes"),
        &read(&got.words),
        &read(&want.words),
    );
    same_bits(
        &format!("{what} scales"),
        &read(&got.meta),
        &read(&want.meta),
    );
}

/// Q1_0 product splits the fused products are checked with, each set on the device for every
/// recorded product (lanes, rows an invocation, lane sum; `None`: the default): the default,
/// then the sweep's corners with each lane sum — 8 and 16 lanes, 8 rows, 128 lanes.
const Q1_SPLITS: [(Option<u32>, Option<u32>, Q1Reduce); 8] = [
    (None, None, Q1Reduce::Tree),
    (None, None, Q1Reduce::Subgroup),
    (Some(8), Some(1), Q1Reduce::Subgroup),
    (Some(16), Some(2), Q1Reduce::Tree),
    (Some(16), Some(1), Q1Reduce::Subgroup),
    (Some(32), Some(8), Q1Reduce::Subgroup),
    (Some(64), Some(8), Q1Reduce::Tree),
    (Some(128), Some(8), Q1Reduce::Subgroup),
];

fn set_q1_split(gpu: &Gpu, (lanes, rows, reduce): (Option<u32>, Option<u32>, Q1Reduce)) {
    gpu.set_q1_0_lanes(lanes).unwrap();
    gpu.set_q1_0_rows(rows).unwrap();
    gpu.set_q1_0_reduce(reduce).unwrap();
}

/// The attention output: quantized where a quantized activation is given, else f32.
fn output<'a>(q: &'a Option<Q8Tensor>, f: &'a Tensor) -> Input<'a> {
    match q {
        Some(q) => Input::Quantized(q),
        None => Input::F32(f),
    }
}

fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|x| x.to_bits()).collect()
}

/// A quantized activation of `kind` with every word poisoned, so a word the op leaves unwritten
/// shows against the unfused op's (poisoned the other way).
fn poisoned(gpu: &Gpu, kind: FormatKind, n: usize, poison: u32) -> Q8Tensor {
    let q = Q8Tensor::with_kind(gpu, kind, n).unwrap();
    gpu.write(&q.words, &vec![poison; q.words.len()]).unwrap();
    gpu.write(&q.meta, &vec![poison; q.meta.len()]).unwrap();
    q
}

/// Every partner format with (row width, rows) cases of awkward lengths for its block: Q8_0 /
/// Q8_1 odd numbers of 32-value blocks, Q8_K 1, 2, 3 and 9 blocks of 256.
fn partner_cases() -> [(FormatKind, &'static [(usize, usize)]); 3] {
    let q8 = &[(32, 1), (96, 3), (800, 2), (4128, 1), (12288, 1)][..];
    let k = &[(256, 1), (512, 3), (768, 2), (2304, 1), (256, 5)][..];
    [
        (FormatKind::Q8_0, q8),
        (FormatKind::Q8_1, q8),
        (FormatKind::Q8_K, k),
    ]
}

#[test]
fn rms_norm_quantize_gives_the_bits_of_rms_norm_then_quantize() {
    let gpu = gpu();
    let mut rng = Rng(41);
    for (kind, cases) in partner_cases() {
        for &(n, rows) in cases {
            for ties in [false, true] {
                let mut xs = rng.vec(n * rows, 3.0);
                let ws = if ties {
                    // Unit weights and each row's largest magnitude twice, once of each sign
                    // (the first one's sign is Q8_K's scale's), in a block of its own order.
                    for (r, row) in xs.chunks_mut(n).enumerate() {
                        let (i, j) = ((r * 37) % n, (r * 37 + 5) % n);
                        let sign = if r % 2 == 0 { 1.0 } else { -1.0 };
                        row[i.max(j)] = -sign * 9.0;
                        row[i.min(j)] = sign * 9.0;
                    }
                    vec![1.0; n]
                } else {
                    rng.vec(n, 1.5)
                };
                let x = gpu.upload("x", &xs).unwrap();
                let w = gpu.upload("w", &ws).unwrap();
                let xn = gpu.tensor("xn", n * rows).unwrap();
                let fused = poisoned(&gpu, kind, n * rows, 0xdead_beef);
                let unfused = poisoned(&gpu, kind, n * rows, 0x0bad_f00d);
                let mut rec = gpu.recorder();
                rec.rms_norm(&x, &w, 1e-6, rows, &xn).unwrap();
                rec.quantize(&xn, &unfused).unwrap();
                rec.rms_norm_quantize(&x, &w, 1e-6, &fused).unwrap();
                assert_eq!(rec.dispatches(), 3);
                rec.submit().unwrap();
                let what = format!("rms_norm_quantize {kind:?} {rows}×{n}, ties {ties}");
                same_q8(&gpu, &what, &fused, &unfused);
                if kind == FormatKind::Q8_K {
                    // Q8_K's standalone quantization shares the fused op's block piece: the
                    // CPU's reference quantizer of the norm's output is the independent check
                    // (the sign of the scale where the largest magnitude comes twice included).
                    let (words, meta) = cpu_q8_k(&gpu.read::<f32>(&xn).unwrap());
                    let read = |t: &Tensor| gpu.read::<u32>(t).unwrap();
                    same_bits(
                        &format!("{what}: codes vs the CPU"),
                        &read(&fused.words),
                        &words,
                    );
                    same_bits(
                        &format!("{what}: scales vs the CPU"),
                        &read(&fused.meta),
                        &meta,
                    );
                }
            }
        }
    }
    // A row width that is not whole blocks is refused, naming the op and the format.
    for (kind, n, width) in [(FormatKind::Q8_0, 96, 48), (FormatKind::Q8_K, 512, 128)] {
        let x = gpu.tensor("x", n).unwrap();
        let w = gpu.tensor("w", width).unwrap();
        let q = Q8Tensor::with_kind(&gpu, kind, n).unwrap();
        let e = gpu
            .recorder()
            .rms_norm_quantize(&x, &w, 1e-6, &q)
            .err()
            .unwrap();
        let e = e.to_string();
        assert!(
            e.contains("rms_norm_quantize") && e.contains(&format!("{kind:?}")),
            "{e}"
        );
    }
}

#[test]
fn swiglu_quantize_gives_the_bits_of_swiglu_then_quantize() {
    let gpu = gpu();
    let mut rng = Rng(42);
    let q8 = [32, 1184, 12320];
    let k = [256, 512, 768, 2304, 12288];
    for (kind, ns) in [
        (FormatKind::Q8_0, &q8[..]),
        (FormatKind::Q8_1, &q8[..]),
        (FormatKind::Q8_K, &k[..]),
    ] {
        for &n in ns {
            let (g, u) = (rng.vec(n, 6.0), rng.vec(n, 2.0));
            let gate_up = gpu
                .upload("gate and up", &[g.clone(), u.clone()].concat())
                .unwrap();
            let (gate, up) = (
                gpu.upload("gate", &g).unwrap(),
                gpu.upload("up", &u).unwrap(),
            );
            let fused = poisoned(&gpu, kind, n, 0xdead_beef);
            let unfused = poisoned(&gpu, kind, n, 0x0bad_f00d);
            let mut rec = gpu.recorder();
            rec.swiglu_quantize(&gate_up, &fused).unwrap();
            rec.swiglu(&gate, &up, n).unwrap();
            rec.quantize(&gate, &unfused).unwrap();
            rec.submit().unwrap();
            same_q8(
                &gpu,
                &format!("swiglu_quantize {kind:?} {n}"),
                &fused,
                &unfused,
            );
            // The fused op leaves its input as it was.
            same_bits(
                "gate and up",
                &gpu.read::<u32>(&gate_up).unwrap(),
                &bits(&[g, u].concat()),
            );
        }
    }
}

#[test]
fn rope_store_kv_gives_the_bits_of_rope_rope_store() {
    let gpu = gpu();
    let mut rng = Rng(43);
    // (query heads, KV heads, head dim, value head dim, rotated, style, f16 cache, position)
    let cases = [
        (6, 2, 64, 64, 64, Rope::Neox, true, 3),
        (6, 2, 64, 64, 64, Rope::Normal, false, 0),
        (4, 4, 96, 32, 32, Rope::Neox, false, 4),
        (8, 2, 128, 128, 96, Rope::Normal, true, 2),
        (2, 1, 32, 32, 32, Rope::Neox, true, 5), // past the 5-position cache: not stored
    ];
    for (nh, nkv, hd, hdv, n_rot, style, f16, pos) in cases {
        let what = format!(
            "{nh}/{nkv} heads of {hd}/{hdv}, {n_rot} rotated, {style:?}, f16 {f16}, at {pos}"
        );
        let n_ctx = 5;
        let (q, k, v) = (
            rng.vec(nh * hd, 2.0),
            rng.vec(nkv * hd, 2.0),
            rng.vec(nkv * hdv, 2.0),
        );
        let qkv: Vec<f32> = [q.clone(), k.clone(), v.clone()].concat();
        let angles: Vec<f32> = rope_angles(&[pos + 7], n_rot, 10_000.0)
            .into_iter()
            .flat_map(|(c, s)| [c, s])
            .collect();
        let cos_sin = gpu.upload("cos_sin", &angles).unwrap();
        let step = gpu.upload("step", &[pos as u32]).unwrap();
        let (qt, kt, vt, qkvt) = (
            gpu.upload("q", &q).unwrap(),
            gpu.upload("k", &k).unwrap(),
            gpu.upload("v", &v).unwrap(),
            gpu.upload("qkv", &qkv).unwrap(),
        );
        let cache = |seed: u32| {
            let c = KvCache::new(&gpu, nkv, hd, hdv, n_ctx, f16).unwrap();
            // Fill both caches alike, so a store that is missing or lands elsewhere shows.
            let fill = |t: &Tensor| {
                (0..t.len() as u32)
                    .map(|i| i.wrapping_mul(2_654_435_761) ^ seed)
                    .collect::<Vec<u32>>()
            };
            gpu.write(&c.k, &fill(&c.k)).unwrap();
            gpu.write(&c.v, &fill(&c.v)).unwrap();
            c
        };
        let (fused, unfused) = (cache(7), cache(7));
        let mut rec = gpu.recorder();
        rec.rope(&qt, &cos_sin, 1, nh, hd, n_rot, style).unwrap();
        rec.rope(&kt, &cos_sin, 1, nkv, hd, n_rot, style).unwrap();
        rec.store_kv(&unfused, &kt, &vt, &step).unwrap();
        rec.rope_store_kv(&qkvt, &cos_sin, nh, n_rot, style, &fused, &step)
            .unwrap();
        rec.submit().unwrap();
        let read = |t: &Tensor| gpu.read::<u32>(t).unwrap();
        let got = read(&qkvt);
        same_bits(&format!("queries, {what}"), &got[..nh * hd], &read(&qt));
        same_bits(
            &format!("values left, {what}"),
            &got[nh * hd + nkv * hd..],
            &bits(&v),
        );
        same_bits(
            &format!("key cache, {what}"),
            &read(&fused.k),
            &read(&unfused.k),
        );
        same_bits(
            &format!("value cache, {what}"),
            &read(&fused.v),
            &read(&unfused.v),
        );
    }
}

#[test]
fn stacked_products_and_the_residual_epilogue_give_the_bits_of_separate_ops() {
    let gpu = gpu();
    let mut crng = common::Rng(44);
    let mut rng = Rng(45);
    let n_in = 384;
    // Row counts that do not fill the product's 16-row workgroups.
    let parts: Vec<Vec<u8>> = [200, 40, 40]
        .iter()
        .map(|&r| common::random_q1_0(&mut crng, r, n_in))
        .collect();
    let stacked = Q1Matrix::upload_stacked(
        &gpu,
        &parts.iter().map(|p| &p[..]).collect::<Vec<_>>(),
        n_in,
    )
    .unwrap();
    assert_eq!(stacked.n_rows(), 280);
    let x = gpu.upload("x", &rng.vec(n_in, 2.0)).unwrap();
    let xq = Q8Tensor::new(&gpu, n_in).unwrap();
    let out = gpu.tensor("stacked out", 280).unwrap();
    let residual = rng.vec(200, 4.0);
    let (fused_res, unfused_res) = (
        gpu.upload("residual", &residual).unwrap(),
        gpu.upload("residual copy", &residual).unwrap(),
    );
    let mut rec = gpu.recorder();
    rec.quantize(&x, &xq).unwrap();
    rec.q1_0_gemv(&stacked, &xq, &out).unwrap();
    let mut separate = Vec::new();
    for (i, p) in parts.iter().enumerate() {
        let m = Q1Matrix::upload(&gpu, p, p.len() / (n_in / 128 * 18), n_in).unwrap();
        let o = gpu.tensor("part out", m.n_rows()).unwrap();
        rec.q1_0_gemv(&m, &xq, &o).unwrap();
        if i == 0 {
            rec.add(&unfused_res, &o, 200).unwrap();
            rec.q1_0_gemv_add(&m, &xq, &fused_res).unwrap();
        }
        separate.push((m, o));
    }
    rec.submit().unwrap();
    let read = |t: &Tensor| gpu.read::<u32>(t).unwrap();
    let want: Vec<u32> = separate.iter().flat_map(|(_, o)| read(o)).collect();
    same_bits("stacked Q/K/V product", &read(&out), &want);
    same_bits(
        "product with the residual epilogue",
        &read(&fused_res),
        &read(&unfused_res),
    );

    let e = Q1Matrix::upload_stacked(&gpu, &[&parts[0], &parts[1][..17]], n_in)
        .err()
        .unwrap();
    assert!(e.to_string().contains("part 1"), "{e}");
}

#[test]
fn attention_quantized_gives_the_bits_of_attention_then_quantize() {
    let gpu = gpu();
    let mut rng = Rng(46);
    // (query heads, KV heads, head dim, value head dim, f16 cache, position): one chunk, 3 and 12;
    // Q8_K where the heads' values are whole 256-value blocks — 1 to 5 blocks, of 4 heads of 64,
    // 2 of 128, 1 of 256, heads of 96 straddling blocks, a head of 512 spanning two.
    // Each attention kernel's fused dispatch against the same kernel's unfused ops.
    for kernel in attention_kernels() {
        gpu.set_attention_kernel(kernel);
        for (nh, nkv, hd, hdv, f16, pos) in [
            (4, 2, 64, 64, true, 5),
            (6, 3, 128, 96, false, 300),
            (2, 1, 40, 32, true, 0),
            (8, 2, 128, 128, true, 1500),
            (5, 5, 64, 256, false, 200),
            (10, 2, 64, 128, true, 130),
            (8, 4, 64, 96, false, 70),
            (2, 1, 128, 128, false, 0),
            (1, 1, 64, 512, true, 40),
        ] {
            let n_ctx = pos + 2;
            let cache = KvCache::new(&gpu, nkv, hd, hdv, n_ctx, f16).unwrap();
            for t in [&cache.k, &cache.v] {
                // Random values in the cache's own encoding: f16 pairs or f32.
                let words: Vec<u32> = if f16 {
                    (0..t.len())
                        .map(|_| {
                            let h = |v: f32| u32::from(half::f16::from_f32(v).to_bits());
                            h(rng.unit() * 2.0) | h(rng.unit() * 2.0) << 16
                        })
                        .collect()
                } else {
                    bits(&rng.vec(t.len(), 2.0))
                };
                gpu.write(t, &words).unwrap();
            }
            let q = gpu.upload("q", &rng.vec(nh * hd, 2.0)).unwrap();
            let step = gpu.upload("step", &[pos as u32]).unwrap();
            let att = gpu.tensor("att", nh * hdv).unwrap();
            let q8_k = (nh * hdv % 256 == 0).then_some(FormatKind::Q8_K);
            for kind in [Some(FormatKind::Q8_0), Some(FormatKind::Q8_1), q8_k]
                .into_iter()
                .flatten()
            {
                let fused = poisoned(&gpu, kind, nh * hdv, 0xdead_beef);
                let unfused = poisoned(&gpu, kind, nh * hdv, 0x0bad_f00d);
                let scale = 1.0 / (hd as f32).sqrt();
                let mut rec = gpu.recorder();
                rec.attention(&q, &cache, &step, nh, scale, &att).unwrap();
                rec.quantize(&att, &unfused).unwrap();
                rec.attention_quantized(&q, &cache, &step, nh, scale, &fused)
                    .unwrap();
                rec.submit().unwrap();
                same_q8(
                    &gpu,
                    &format!("attention_quantized {kernel}, {kind:?} {nh}/{nkv} heads of {hd}/{hdv}, f16 {f16}, at {pos}"),
                    &fused,
                    &unfused,
                );
            }
        }
    }
    gpu.set_attention_kernel(AttentionKernel::DEFAULT);
    // A value head that is not whole blocks is refused, naming the op.
    let cache = KvCache::new(&gpu, 1, 16, 16, 4, false).unwrap();
    let (q, step) = (gpu.tensor("q", 32).unwrap(), gpu.tensor("step", 1).unwrap());
    let out = Q8Tensor::new(&gpu, 32).unwrap();
    let e = gpu
        .recorder()
        .attention_quantized(&q, &cache, &step, 2, 0.25, &out)
        .err()
        .unwrap();
    assert!(e.to_string().contains("attention_quantized"), "{e}");
    // As are Q8_K blocks the heads do not fill (3 heads of 64 values into a 256-value block).
    let cache = KvCache::new(&gpu, 1, 64, 64, 4, false).unwrap();
    let (q, step) = (
        gpu.tensor("q", 192).unwrap(),
        gpu.tensor("step", 1).unwrap(),
    );
    let out = Q8Tensor::with_kind(&gpu, FormatKind::Q8_K, 256).unwrap();
    let e = gpu
        .recorder()
        .attention_quantized(&q, &cache, &step, 3, 0.25, &out)
        .err()
        .unwrap();
    assert!(e.to_string().contains("attention_quantized"), "{e}");
}

#[test]
fn rope_store_attention_gives_the_bits_of_the_ops_it_fuses() {
    let gpu = gpu();
    let mut rng = Rng(47);
    // (query heads, KV heads, head dim, value head dim, rotated, style, f16, position, positions)
    let cases = [
        (8, 2, 128, 128, 128, Rope::Neox, true, 6, 9),
        (6, 3, 64, 32, 32, Rope::Normal, false, 0, 4),
        (4, 1, 96, 64, 64, Rope::Neox, false, 270, 280), // 3 chunks
        (8, 2, 128, 128, 128, Rope::Neox, true, 1200, 4096), // 10 chunks
        (2, 2, 32, 32, 32, Rope::Normal, true, 4, 4), // past the cache: attends to it, stores nothing
    ];
    // The output as f32, or quantized in the dispatch to Q8_0 / Q8_1, or Q8_K where the heads
    // fill its blocks.
    // Each attention kernel's fused dispatch against the same kernel's unfused ops.
    for kernel in attention_kernels() {
        gpu.set_attention_kernel(kernel);
        for (nh, nkv, hd, hdv, n_rot, style, f16, pos, n_ctx) in cases {
            let q8_k = (nh * hdv % 256 == 0).then_some(FormatKind::Q8_K);
            let outputs = [None, Some(FormatKind::Q8_0), Some(FormatKind::Q8_1)];
            for out_kind in outputs.into_iter().chain(q8_k.map(Some)) {
                let what = format!(
                "kernel {kernel}, {nh}/{nkv} heads of {hd}/{hdv}, {n_rot} rotated, {style:?}, f16 {f16}, at {pos} of {n_ctx}, out {out_kind:?}"
            );
                let (q, k, v) = (
                    rng.vec(nh * hd, 2.0),
                    rng.vec(nkv * hd, 2.0),
                    rng.vec(nkv * hdv, 2.0),
                );
                let qkv = gpu
                    .upload("qkv", &[q.clone(), k.clone(), v.clone()].concat())
                    .unwrap();
                let angles: Vec<f32> = rope_angles(&[pos], n_rot, 10_000.0)
                    .into_iter()
                    .flat_map(|(c, s)| [c, s])
                    .collect();
                let cos_sin = gpu.upload("cos_sin", &angles).unwrap();
                let step = gpu.upload("step", &[pos as u32]).unwrap();
                let (qt, kt, vt) = (
                    gpu.upload("q", &q).unwrap(),
                    gpu.upload("k", &k).unwrap(),
                    gpu.upload("v", &v).unwrap(),
                );
                // Both caches hold the same earlier positions (values in the cache's own encoding).
                let (fused, unfused) = twin_caches(&gpu, &mut rng, [nkv, hd, hdv, n_ctx], f16);
                let att = gpu.tensor("att", nh * hdv).unwrap();
                let att_fused = gpu.tensor("fused attention", nh * hdv).unwrap();
                let got = out_kind.map(|k| poisoned(&gpu, k, nh * hdv, 0xdead_beef));
                let want = out_kind.map(|k| poisoned(&gpu, k, nh * hdv, 0x0bad_f00d));
                let scale = 1.0 / (hd as f32).sqrt();
                let mut rec = gpu.recorder();
                rec.rope(&qt, &cos_sin, 1, nh, hd, n_rot, style).unwrap();
                rec.rope(&kt, &cos_sin, 1, nkv, hd, n_rot, style).unwrap();
                rec.store_kv(&unfused, &kt, &vt, &step).unwrap();
                rec.attention(&qt, &unfused, &step, nh, scale, &att)
                    .unwrap();
                if let Some(want) = &want {
                    rec.quantize(&att, want).unwrap();
                }
                let keys = gpu.tensor("rotated keys", nkv * hd).unwrap();
                rec.rope_store_attention(
                    &qkv,
                    &cos_sin,
                    nh,
                    n_rot,
                    style,
                    &fused,
                    &step,
                    scale,
                    match &got {
                        Some(got) => Input::Quantized(got),
                        None => Input::F32(&att_fused),
                    },
                    Some(&keys),
                    None,
                )
                .unwrap();
                assert_eq!(rec.dispatches(), 6 + usize::from(want.is_some()));
                rec.submit().unwrap();
                let read = |t: &Tensor| gpu.read::<u32>(t).unwrap();
                match (&got, &want) {
                    (Some(got), Some(want)) => {
                        same_q8(&gpu, &format!("attention output, {what}"), got, want)
                    }
                    _ => same_bits(
                        &format!("attention output, {what}"),
                        &read(&att_fused),
                        &read(&att),
                    ),
                }
                same_bits(
                    &format!("key cache, {what}"),
                    &read(&fused.k),
                    &read(&unfused.k),
                );
                same_bits(
                    &format!("value cache, {what}"),
                    &read(&fused.v),
                    &read(&unfused.v),
                );
                // The rotated keys handed out (what a host cache stores): rope's, at any position.
                same_bits(&format!("rotated keys, {what}"), &read(&keys), &read(&kt));
            }
        }
    }
    gpu.set_attention_kernel(AttentionKernel::DEFAULT);
    // A Q8_K output the heads do not fill (512 values into 768) is refused, naming the op.
    let cache = KvCache::new(&gpu, 2, 128, 128, 4, false).unwrap();
    let qkv = gpu.tensor("qkv", 8 * 128).unwrap();
    let (cos_sin, step) = (
        gpu.tensor("cos_sin", 128).unwrap(),
        gpu.tensor("step", 1).unwrap(),
    );
    let out = Q8Tensor::with_kind(&gpu, FormatKind::Q8_K, 3 * 256).unwrap();
    let e = gpu
        .recorder()
        .rope_store_attention(
            &qkv,
            &cos_sin,
            4,
            128,
            Rope::Neox,
            &cache,
            &step,
            0.1,
            Input::Quantized(&out),
            None,
            None,
        )
        .err()
        .unwrap();
    assert!(e.to_string().contains("rope_store_attention"), "{e}");
}

#[test]
fn rms_norm_qk_gives_the_bits_of_two_rms_norms_and_a_copy() {
    let gpu = gpu();
    let mut rng = Rng(53);
    // (query heads, key heads, head dimension, values copied after them)
    for (nq, nk, hd, tail) in [
        (32, 8, 128, 1024),
        (6, 3, 40, 0),
        (4, 1, 300, 257),
        (1, 1, 1, 1),
    ] {
        let what = format!("{nq}/{nk} heads of {hd}, {tail} copied");
        let (q, k, v) = (
            rng.vec(nq * hd, 3.0),
            rng.vec(nk * hd, 3.0),
            rng.vec(tail, 3.0),
        );
        let (wq, wk) = (rng.vec(hd, 2.0), rng.vec(hd, 2.0));
        let up = |name: &str, v: &[f32]| gpu.upload(name, v).unwrap();
        let x = up("qkv", &[q.clone(), k.clone(), v.clone()].concat());
        let (wq, wk) = (up("q norm", &wq), up("k norm", &wk));
        let y = gpu.tensor("normed", x.len()).unwrap();
        let (qt, kt) = (up("q", &q), up("k", &k));
        let (qn, kn) = (
            gpu.tensor("q normed", q.len()).unwrap(),
            gpu.tensor("k normed", k.len()).unwrap(),
        );
        let mut rec = gpu.recorder();
        rec.rms_norm(&qt, &wq, 1e-6, nq, &qn).unwrap();
        rec.rms_norm(&kt, &wk, 1e-6, nk, &kn).unwrap();
        rec.rms_norm_qk(&x, &wq, &wk, 1e-6, nq, nk, tail, &y)
            .unwrap();
        assert_eq!(rec.dispatches(), 3);
        rec.submit().unwrap();
        let got = gpu.read::<u32>(&y).unwrap();
        let want: Vec<u32> = [
            gpu.read::<u32>(&qn).unwrap(),
            gpu.read::<u32>(&kn).unwrap(),
            v.iter().map(|f| f.to_bits()).collect(),
        ]
        .concat();
        same_bits(&what, &got, &want);
    }
}

#[test]
fn rope_store_attention_with_the_qk_norms_gives_the_bits_of_rms_norm_qk_before_it() {
    let gpu = gpu();
    let mut rng = Rng(59);
    // (query heads, KV heads, head dim, value head dim, rotated, f16, position, positions):
    // GQA 1 / 2 / 4, untied and partially rotated heads, position 0 and 1000 (8 chunks).
    let cases = [
        (4, 4, 64, 64, 64, false, 0, 3),
        (8, 4, 128, 128, 128, true, 1000, 1100),
        (8, 2, 80, 96, 64, false, 1000, 1001),
        (4, 1, 80, 96, 48, true, 0, 8),
        (8, 2, 128, 128, 128, false, 5, 40),
        (2, 1, 64, 64, 64, true, 3, 3), // past the cache: attends to it, stores nothing
    ];
    // Each attention kernel's fused dispatch against the same kernel's unfused ops.
    for kernel in attention_kernels() {
        gpu.set_attention_kernel(kernel);
        for (nh, nkv, hd, hdv, n_rot, f16, pos, n_ctx) in cases {
            let q8_k = (nh * hdv % 256 == 0).then_some(FormatKind::Q8_K);
            for out_kind in [None, Some(FormatKind::Q8_0)]
                .into_iter()
                .chain(q8_k.map(Some))
            {
                let what = format!(
                    "kernel {kernel}, {nh}/{nkv} heads of {hd}/{hdv}, {n_rot} rotated, f16 {f16}, at {pos} of {n_ctx}, out {out_kind:?}"
                );
                // Products of an unnormed scale, as before the norms.
                let pre = [
                    rng.vec(nh * hd, 6.0),
                    rng.vec(nkv * hd, 0.3),
                    rng.vec(nkv * hdv, 2.0),
                ]
                .concat();
                let up = |name: &str, v: &[f32]| gpu.upload(name, v).unwrap();
                let qkv_pre = up("q/k/v before the norms", &pre);
                let normed = gpu.tensor("q/k/v normed", pre.len()).unwrap();
                let (wq, wk) = (
                    up("q norm", &rng.vec(hd, 2.0)),
                    up("k norm", &rng.vec(hd, 2.0)),
                );
                let angles: Vec<f32> = rope_angles(&[pos], n_rot, 1e6)
                    .into_iter()
                    .flat_map(|(c, s)| [c, s])
                    .collect();
                let cos_sin = up("cos_sin", &angles);
                let step = gpu.upload("step", &[pos as u32]).unwrap();
                let (fused, unfused) = twin_caches(&gpu, &mut rng, [nkv, hd, hdv, n_ctx], f16);
                let (att, att_fused) = (
                    gpu.tensor("attention", nh * hdv).unwrap(),
                    gpu.tensor("fused attention", nh * hdv).unwrap(),
                );
                let got = out_kind.map(|k| poisoned(&gpu, k, nh * hdv, 0xdead_beef));
                let want = out_kind.map(|k| poisoned(&gpu, k, nh * hdv, 0x0bad_f00d));
                let (keys, keys_fused) = (
                    gpu.tensor("rotated keys", nkv * hd).unwrap(),
                    gpu.tensor("fused rotated keys", nkv * hd).unwrap(),
                );
                let scale = 1.0 / (hd as f32).sqrt();
                let eps = 1e-6;
                let mut rec = gpu.recorder();
                rec.rms_norm_qk(&qkv_pre, &wq, &wk, eps, nh, nkv, nkv * hdv, &normed)
                    .unwrap();
                rec.rope_store_attention(
                    &normed,
                    &cos_sin,
                    nh,
                    n_rot,
                    Rope::Neox,
                    &unfused,
                    &step,
                    scale,
                    output(&want, &att),
                    Some(&keys),
                    None,
                )
                .unwrap();
                let unfused_dispatches = rec.dispatches();
                rec.rope_store_attention(
                    &qkv_pre,
                    &cos_sin,
                    nh,
                    n_rot,
                    Rope::Neox,
                    &fused,
                    &step,
                    scale,
                    output(&got, &att_fused),
                    Some(&keys_fused),
                    Some(QkNorms {
                        q: &wq,
                        k: &wk,
                        eps,
                    }),
                )
                .unwrap();
                assert_eq!((unfused_dispatches, rec.dispatches()), (2, 3), "{what}");
                rec.submit().unwrap();
                let read = |t: &Tensor| gpu.read::<u32>(t).unwrap();
                match (&got, &want) {
                    (Some(got), Some(want)) => {
                        same_q8(&gpu, &format!("attention output, {what}"), got, want)
                    }
                    _ => same_bits(
                        &format!("attention output, {what}"),
                        &read(&att_fused),
                        &read(&att),
                    ),
                }
                for (name, a, b) in [
                    ("key cache", &fused.k, &unfused.k),
                    ("value cache", &fused.v, &unfused.v),
                    ("rotated keys", &keys_fused, &keys),
                ] {
                    same_bits(&format!("{name}, {what}"), &read(a), &read(b));
                }
                // The product's output is read, not normed in place.
                same_bits(&format!("q/k/v, {what}"), &read(&qkv_pre), &bits(&pre));
            }
        }
    }
    gpu.set_attention_kernel(AttentionKernel::DEFAULT);
    // Norm weights that are not a head's length are refused, naming the op.
    let cache = KvCache::new(&gpu, 1, 64, 64, 4, false).unwrap();
    let t = |n| gpu.tensor("t", n).unwrap();
    let (qkv, cos_sin, step, out, short) = (t(4 * 64), t(64), t(1), t(2 * 64), t(32));
    let e = gpu
        .recorder()
        .rope_store_attention(
            &qkv,
            &cos_sin,
            2,
            64,
            Rope::Neox,
            &cache,
            &step,
            0.1,
            Input::F32(&out),
            None,
            Some(QkNorms {
                q: &short,
                k: &short,
                eps: 1e-6,
            }),
        )
        .err()
        .unwrap();
    assert!(e.to_string().contains("rope_store_attention"), "{e}");
}

/// A decode layer's weights, as separate matrices and stacked.
struct Layer {
    q: Q1Matrix,
    k: Q1Matrix,
    v: Q1Matrix,
    o: Q1Matrix,
    gate: Q1Matrix,
    up: Q1Matrix,
    down: Q1Matrix,
    qkv: Q1Matrix,
    gate_up: Q1Matrix,
}

#[test]
fn a_fused_decode_layer_gives_the_bits_of_the_unfused_layer_step_after_step() {
    let gpu = gpu();
    let mut crng = common::Rng(48);
    let mut rng = Rng(49);
    let (n_embd, n_ff, nh, nkv, hd, n_ctx) = (256, 768, 4, 2, 64, 6);
    let (qd, kvd) = (nh * hd, nkv * hd);
    let mut rows = |r, n| common::random_q1_0(&mut crng, r, n);
    let (q, k, v, o) = (
        rows(qd, n_embd),
        rows(kvd, n_embd),
        rows(kvd, n_embd),
        rows(n_embd, qd),
    );
    let (gate, up, down) = (rows(n_ff, n_embd), rows(n_ff, n_embd), rows(n_embd, n_ff));
    let m = |r: &[u8], n_rows, n_in| Q1Matrix::upload(&gpu, r, n_rows, n_in).unwrap();
    let l = Layer {
        q: m(&q, qd, n_embd),
        k: m(&k, kvd, n_embd),
        v: m(&v, kvd, n_embd),
        o: m(&o, n_embd, qd),
        gate: m(&gate, n_ff, n_embd),
        up: m(&up, n_ff, n_embd),
        down: m(&down, n_embd, n_ff),
        qkv: Q1Matrix::upload_stacked(&gpu, &[&q, &k, &v], n_embd).unwrap(),
        gate_up: Q1Matrix::upload_stacked(&gpu, &[&gate, &up], n_embd).unwrap(),
    };
    let (attn_norm, ffn_norm) = (
        gpu.upload("attn_norm", &rng.vec(n_embd, 1.5)).unwrap(),
        gpu.upload("ffn_norm", &rng.vec(n_embd, 1.5)).unwrap(),
    );
    let t = |what, n| gpu.tensor(what, n).unwrap();
    let q8 = |n| Q8Tensor::new(&gpu, n).unwrap();
    let (xn, qt, kt, vt, att, ot, g, u) = (
        t("xn", n_embd),
        t("q", qd),
        t("k", kvd),
        t("v", kvd),
        t("att", qd),
        t("o", n_embd),
        t("gate", n_ff),
        t("up", n_ff),
    );
    let (qkv, gu) = (t("qkv", qd + 2 * kvd), t("gate_up", 2 * n_ff));
    let (xq, aq, gq) = (q8(n_embd), q8(qd), q8(n_ff));
    let (cos_sin, step) = (t("cos_sin", hd), t("step", 1));
    let caches = [true, false].map(|_| KvCache::new(&gpu, nkv, hd, hd, n_ctx, true).unwrap());
    let xs = [true, false].map(|_| t("x", n_embd));
    let scale = 1.0 / (hd as f32).sqrt();
    for pos in 0..n_ctx {
        let angles: Vec<f32> = rope_angles(&[pos], hd, 1e6)
            .into_iter()
            .flat_map(|(c, s)| [c, s])
            .collect();
        gpu.write(&cos_sin, &angles).unwrap();
        gpu.write(&step, &[pos as u32]).unwrap();
        let x0 = rng.vec(n_embd, 2.0);
        for (fused, (x, cache)) in [true, false].into_iter().zip(xs.iter().zip(&caches)) {
            gpu.write(x, &x0).unwrap();
            let mut rec = gpu.recorder();
            if fused {
                rec.rms_norm_quantize(x, &attn_norm, 1e-6, &xq).unwrap();
                rec.q1_0_gemv(&l.qkv, &xq, &qkv).unwrap();
                rec.rope_store_attention(
                    &qkv,
                    &cos_sin,
                    nh,
                    hd,
                    Rope::Neox,
                    cache,
                    &step,
                    scale,
                    Input::Quantized(&aq),
                    None,
                    None,
                )
                .unwrap();
                rec.q1_0_gemv_add(&l.o, &aq, x).unwrap();
                rec.rms_norm_quantize(x, &ffn_norm, 1e-6, &xq).unwrap();
                rec.q1_0_gemv(&l.gate_up, &xq, &gu).unwrap();
                rec.swiglu_quantize(&gu, &gq).unwrap();
                rec.q1_0_gemv_add(&l.down, &gq, x).unwrap();
                assert_eq!(rec.dispatches(), 8);
            } else {
                rec.rms_norm(x, &attn_norm, 1e-6, 1, &xn).unwrap();
                rec.quantize(&xn, &xq).unwrap();
                rec.q1_0_gemv(&l.q, &xq, &qt).unwrap();
                rec.q1_0_gemv(&l.k, &xq, &kt).unwrap();
                rec.q1_0_gemv(&l.v, &xq, &vt).unwrap();
                rec.rope(&qt, &cos_sin, 1, nh, hd, hd, Rope::Neox).unwrap();
                rec.rope(&kt, &cos_sin, 1, nkv, hd, hd, Rope::Neox).unwrap();
                rec.store_kv(cache, &kt, &vt, &step).unwrap();
                rec.attention(&qt, cache, &step, nh, scale, &att).unwrap();
                rec.quantize(&att, &aq).unwrap();
                rec.q1_0_gemv(&l.o, &aq, &ot).unwrap();
                rec.add(x, &ot, n_embd).unwrap();
                rec.rms_norm(x, &ffn_norm, 1e-6, 1, &xn).unwrap();
                rec.quantize(&xn, &xq).unwrap();
                rec.q1_0_gemv(&l.gate, &xq, &g).unwrap();
                rec.q1_0_gemv(&l.up, &xq, &u).unwrap();
                rec.swiglu(&g, &u, n_ff).unwrap();
                rec.quantize(&g, &gq).unwrap();
                rec.q1_0_gemv(&l.down, &gq, &ot).unwrap();
                rec.add(x, &ot, n_embd).unwrap();
                assert_eq!(rec.dispatches(), 21);
            }
            rec.submit().unwrap();
        }
        let read = |t: &Tensor| gpu.read::<u32>(t).unwrap();
        same_bits(
            &format!("layer output at {pos}"),
            &read(&xs[0]),
            &read(&xs[1]),
        );
        same_bits(
            &format!("key cache at {pos}"),
            &read(&caches[0].k),
            &read(&caches[1].k),
        );
        same_bits(
            &format!("value cache at {pos}"),
            &read(&caches[0].v),
            &read(&caches[1].v),
        );
    }
}

#[test]
fn gemv_add_gives_the_bits_of_gemv_then_add_for_every_partner() {
    let gpu = gpu();
    let mut rng = Rng(48);
    // 37 rows: not whole 8-row workgroups; 768 values: three Q8_K blocks, 24 Q8_0 blocks.
    let (n_rows, n_in) = (37, 768);
    for kind in [
        FormatKind::F32,
        FormatKind::F16,
        FormatKind::Q8_0,
        FormatKind::Q4_1,
        FormatKind::TQ2_0,
        FormatKind::Q4_K,
        FormatKind::Q6_K,
    ] {
        let f = format(kind);
        let values = rng.vec(n_rows * n_in, 1.0);
        let mut bytes = vec![0u8; values.len() / f.block_elems * f.block_bytes];
        (f.quantize)(&values, &mut bytes);
        let m = Matrix::upload(&gpu, kind, &bytes, n_rows, n_in).unwrap();
        let x = gpu.upload("x", &rng.vec(n_in, 2.0)).unwrap();
        let float = matches!(kind, FormatKind::F32 | FormatKind::F16);
        let quantized = (!float).then(|| Q8Tensor::with_kind(&gpu, f.partner, n_in).unwrap());
        let input = match &quantized {
            Some(q) => Input::Quantized(q),
            None => Input::F32(&x),
        };
        let residual = rng.vec(n_rows, 4.0);
        let (fused, unfused) = (
            gpu.upload("residual", &residual).unwrap(),
            gpu.upload("residual copy", &residual).unwrap(),
        );
        let o = gpu.tensor("product", n_rows).unwrap();
        let mut rec = gpu.recorder();
        if let Some(q) = &quantized {
            rec.quantize(&x, q).unwrap();
        }
        rec.gemv(&m, input, &o).unwrap();
        rec.add(&unfused, &o, n_rows).unwrap();
        rec.gemv_add(&m, input, &fused).unwrap();
        rec.submit().unwrap();
        let read = |t: &Tensor| gpu.read::<u32>(t).unwrap();
        same_bits(
            &format!("{kind:?} gemv_add"),
            &read(&fused),
            &read(&unfused),
        );
        // Not the product alone: the residual was added.
        assert_ne!(
            read(&fused),
            read(&o),
            "{kind:?}: the residual is in the sum"
        );
    }
}

#[test]
fn rms_norm_q1_0_gemv_gives_the_bits_of_rms_norm_quantize_then_q1_0_gemv() {
    let gpu = gpu();
    let mut crng = common::Rng(46);
    let mut rng = Rng(47);
    // (n_embd, rows, workgroups aimed at): widths of one, three and many Q1_0 blocks up to
    // Qwen3-14B's 5120; row counts that do not fill the 16-row tiles; and a workgroup taking
    // several tiles (the last workgroup's tiles past the rows).
    let cases = [
        (128, 1, 0),
        (384, 17, 0),
        (2048, 40, 0),
        (4096, 280, 0),
        (5120, 33, 0),
        (384, 300, 4),
        (2048, 161, 3),
    ];
    for (i, split) in Q1_SPLITS.into_iter().enumerate() {
        set_q1_split(&gpu, split);
        for (n, rows, workgroups) in cases {
            gpu.set_prologue_workgroups(workgroups);
            // Every row kind with the default split, random rows with the others.
            for row_kind in ["random", "ties", "zero block"]
                .into_iter()
                .take(if i == 0 { 3 } else { 1 })
            {
                let mut xs = rng.vec(n, 3.0);
                let mut ws = rng.vec(n, 1.5);
                match row_kind {
                    // The largest magnitude twice, of both signs, in one block; unit weights.
                    "ties" => {
                        ws = vec![1.0; n];
                        xs[37 % n] = 9.0;
                        xs[(37 + 9) % n] = -9.0;
                    }
                    // A block of zeros (d = 0) and one below the smallest scale.
                    "zero block" => {
                        xs[..32].fill(0.0);
                        ws[32..64].fill(1e-30);
                    }
                    _ => {}
                }
                let m = Q1Matrix::upload(&gpu, &common::random_q1_0(&mut crng, rows, n), rows, n)
                    .unwrap();
                let x = gpu.upload("x", &xs).unwrap();
                let w = gpu.upload("w", &ws).unwrap();
                let xq = poisoned(&gpu, FormatKind::Q8_0, n, 0x0bad_f00d);
                let fused = gpu.upload("fused out", &vec![f32::NAN; rows]).unwrap();
                let unfused = gpu.upload("unfused out", &vec![-1.0; rows]).unwrap();
                let mut rec = gpu.recorder();
                rec.rms_norm_quantize(&x, &w, 1e-6, &xq).unwrap();
                rec.q1_0_gemv(&m, &xq, &unfused).unwrap();
                rec.rms_norm_q1_0_gemv(&x, &w, 1e-6, &m, &fused).unwrap();
                assert_eq!(rec.dispatches(), 3);
                rec.submit().unwrap();
                let read = |t: &Tensor| gpu.read::<u32>(t).unwrap();
                same_bits(
                &format!("rms_norm_q1_0_gemv {rows}×{n}, {row_kind}, {workgroups} workgroups, split {split:?}"),
                &read(&fused)[..rows],
                &read(&unfused)[..rows],
            );
            }
        }
    }
    set_q1_split(&gpu, Q1_SPLITS[0]);
    gpu.set_prologue_workgroups(0);
    // A norm weight of another length, and a row past the device's workgroup memory, are
    // refused, naming the op.
    let too_wide = 7168 + 128;
    assert!(gpu.norm_prologue_fits(5120) && !gpu.norm_prologue_fits(too_wide));
    for (n, width) in [(256, 128), (too_wide, too_wide)] {
        let m = Q1Matrix::upload(&gpu, &common::random_q1_0(&mut crng, 16, n), 16, n).unwrap();
        let x = gpu.tensor("x", n).unwrap();
        let w = gpu.tensor("w", width).unwrap();
        let out = gpu.tensor("out", 16).unwrap();
        let e = gpu
            .recorder()
            .rms_norm_q1_0_gemv(&x, &w, 1e-6, &m, &out)
            .err()
            .unwrap()
            .to_string();
        assert!(e.contains("rms_norm_q1_0_gemv"), "{e}");
    }
}

#[test]
fn the_swiglu_epilogue_gives_the_bits_of_q1_0_gemv_then_swiglu_quantize() {
    let gpu = gpu();
    let mut crng = common::Rng(48);
    let mut rng = Rng(49);
    eprintln!(
        "workgroup memory: {} bytes; the norm with the SwiGLU epilogue fits: {}",
        gpu.workgroup_storage_bytes(),
        gpu.norm_prologue_swiglu_fits(4096)
    );
    // (n_embd, n_ff): one block of h, three, the golden models', an 8B-wide h on a narrow row,
    // a 4096-wide row.
    let cases = [
        (128, 32),
        (384, 96),
        (256, 768),
        (128, 12288),
        (4096, 160),
        (5120, 64),
    ];
    // The split by the rows' width (32 lanes to 4096 values: 32-row tiles; 64 past it: 16-row
    // tiles), then 128 lanes forced (8-row tiles), then the sweep's splits whose tiles divide 32.
    let splits = [(Some(128), None, Q1Reduce::Tree)]
        .into_iter()
        .chain(Q1_SPLITS);
    for split in splits {
        set_q1_split(&gpu, split);
        for (n, n_ff) in cases {
            if !gpu.q1_0_swiglu_fits(n) {
                // A tile past 32 rows: refused by name (the engine then records SwiGLU apart).
                let m = Q1Matrix::upload_stacked(
                    &gpu,
                    &[
                        &common::random_q1_0(&mut crng, n_ff, n),
                        &common::random_q1_0(&mut crng, n_ff, n),
                    ],
                    n,
                )
                .unwrap();
                let h = Q8Tensor::new(&gpu, n_ff).unwrap();
                let e = gpu
                    .recorder()
                    .q1_0_gemv_swiglu(&m, &Q8Tensor::new(&gpu, n).unwrap(), &h)
                    .err()
                    .unwrap()
                    .to_string();
                assert!(e.contains("tiles dividing 32"), "{split:?}: {e}");
                continue;
            }
            for kind in [FormatKind::Q8_0, FormatKind::Q8_1] {
                let gate = common::random_q1_0(&mut crng, n_ff, n);
                let up = common::random_q1_0(&mut crng, n_ff, n);
                let m = Q1Matrix::upload_stacked(&gpu, &[&gate, &up], n).unwrap();
                let x = gpu.upload("x", &rng.vec(n, 3.0)).unwrap();
                let w = gpu.upload("w", &rng.vec(n, 1.5)).unwrap();
                let xq = poisoned(&gpu, FormatKind::Q8_0, n, 0x0bad_f00d);
                let gu = gpu.tensor("gate|up", 2 * n_ff).unwrap();
                let want = poisoned(&gpu, kind, n_ff, 0x0bad_f00d);
                let from_q8 = poisoned(&gpu, kind, n_ff, 0xdead_beef);
                let from_x = poisoned(&gpu, kind, n_ff, 0xfeed_f00d);
                let mut rec = gpu.recorder();
                rec.rms_norm_quantize(&x, &w, 1e-6, &xq).unwrap();
                rec.q1_0_gemv(&m, &xq, &gu).unwrap();
                rec.swiglu_quantize(&gu, &want).unwrap();
                rec.q1_0_gemv_swiglu(&m, &xq, &from_q8).unwrap();
                let whole = gpu.norm_prologue_swiglu_fits(n);
                if whole {
                    rec.rms_norm_q1_0_gemv_swiglu(&x, &w, 1e-6, &m, &from_x)
                        .unwrap();
                }
                rec.submit().unwrap();
                let what = format!("{kind:?} h of {n_ff} from rows of {n}, split {split:?}");
                same_q8(&gpu, &format!("q1_0_gemv_swiglu, {what}"), &from_q8, &want);
                if whole {
                    same_q8(
                        &gpu,
                        &format!("rms_norm_q1_0_gemv_swiglu, {what}"),
                        &from_x,
                        &want,
                    );
                }
            }
        }
    }
    set_q1_split(&gpu, Q1_SPLITS[0]);
    // A matrix that is not two rows a value, and a Q8_K h, are refused, naming the op.
    let m = Q1Matrix::upload(&gpu, &common::random_q1_0(&mut crng, 96, 128), 96, 128).unwrap();
    let xq = Q8Tensor::new(&gpu, 128).unwrap();
    for (kind, n_ff) in [(FormatKind::Q8_0, 64), (FormatKind::Q8_K, 256)] {
        let h = Q8Tensor::with_kind(&gpu, kind, n_ff).unwrap();
        let e = gpu
            .recorder()
            .q1_0_gemv_swiglu(&m, &xq, &h)
            .err()
            .unwrap()
            .to_string();
        assert!(e.contains("q1_0_gemv_swiglu"), "{e}");
    }
}

#[test]
fn the_norm_tail_gives_the_bits_of_q1_0_gemv_add_then_rms_norm_quantize() {
    let gpu = gpu();
    let mut crng = common::Rng(52);
    let mut rng = Rng(53);
    // It binds nine storage buffers: a device that binds fewer cannot run it (the engine then
    // keeps the norm's dispatch); this test's device must.
    assert!(
        gpu.norm_tail_fits(),
        "the device binds too few storage buffers for the norm tail"
    );
    // (rows of the residual = the norm's width, the product's input width, lanes): one tile of
    // 32 rows, five, Qwen3-1.7B's / 4B's / 8B's / 14B's shapes (5120 rows: 320 workgroups of
    // 16-row tiles), an input wider than the residual, and 128 lanes forced (8-row tiles: 640
    // workgroups). The rows are whole 32-value blocks and every tile divides 32, so a tile never
    // runs past the rows.
    let cases = [
        (128, 128, None),
        (160, 256, None),
        (2048, 2048, None),
        (2560, 4096, None),
        (4096, 4096, None),
        (5120, 5120, None),
        (256, 12288, None),
        (5120, 1024, Some(128)),
        (4096, 4096, Some(128)),
    ];
    for (n, n_in, lanes) in cases {
        gpu.set_q1_0_lanes(lanes).unwrap();
        let m = Q1Matrix::upload(&gpu, &common::random_q1_0(&mut crng, n, n_in), n, n_in).unwrap();
        for kind in [FormatKind::Q8_0, FormatKind::Q8_1, FormatKind::Q8_K] {
            if !n.is_multiple_of(format(kind).block_elems) {
                continue;
            }
            // In place: the next activation is the tensor the product reads (Qwen3-8B's O
            // product: the attention's Q8_0 output and the residual both 4096 values).
            let places: &[bool] = if kind == FormatKind::Q8_0 && n == n_in {
                &[false, true]
            } else {
                &[false]
            };
            for (row_kind, in_place) in ["random", "zero row"]
                .into_iter()
                .flat_map(|r| places.iter().map(move |&p| (r, p)))
            {
                let zero = row_kind == "zero row";
                let scale = if zero { 0.0 } else { 1.0 };
                let act = gpu.upload("act", &rng.vec(n_in, 2.0 * scale)).unwrap();
                let residual = rng.vec(n, 3.0 * scale);
                let w = gpu.upload("w", &rng.vec(n, 1.5)).unwrap();
                let (x_tail, x_ref) = (
                    gpu.upload("residual, tail", &residual).unwrap(),
                    gpu.upload("residual, apart", &residual).unwrap(),
                );
                // The product's activation for each chain, and each chain's norm output: the
                // activation itself in place, else its own (poisoned two ways: a word the tail
                // leaves unwritten shows).
                let xq_tail = poisoned(&gpu, FormatKind::Q8_0, n_in, 0xdead_beef);
                let xq_ref = poisoned(&gpu, FormatKind::Q8_0, n_in, 0x0bad_f00d);
                let q_tail = poisoned(&gpu, kind, n, 0xdead_beef);
                let q_ref = poisoned(&gpu, kind, n, 0x0bad_f00d);
                let (q_tail, q_ref) = if in_place {
                    (&xq_tail, &xq_ref)
                } else {
                    (&q_tail, &q_ref)
                };
                let what =
                    format!("{kind:?} norm tail, {n} rows of {n_in}, lanes {lanes:?}, {row_kind}, in place {in_place}");
                // Three in a row in one submission, then two more in another: the count must be
                // back at zero before each (a stale count runs the tail early or never).
                for reps in [3, 2] {
                    let mut rec = gpu.recorder();
                    rec.quantize(&act, &xq_tail).unwrap();
                    rec.quantize(&act, &xq_ref).unwrap();
                    for _ in 0..reps {
                        rec.q1_0_gemv_add(&m, &xq_ref, &x_ref).unwrap();
                        rec.rms_norm_quantize(&x_ref, &w, 1e-6, q_ref).unwrap();
                        rec.q1_0_gemv_add_norm(&m, &xq_tail, &x_tail, &w, 1e-6, q_tail)
                            .unwrap();
                    }
                    assert_eq!(rec.dispatches(), 2 + 3 * reps, "{what}");
                    rec.submit().unwrap();
                }
                let read = |t: &Tensor| gpu.read::<u32>(t).unwrap();
                same_bits(&format!("{what}: residual"), &read(&x_tail), &read(&x_ref));
                same_q8(&gpu, &what, q_tail, q_ref);
                if zero {
                    assert!(read(&q_tail.meta).iter().all(|&m| m == 0), "{what}: d = 0");
                } else {
                    assert_ne!(
                        read(&x_tail),
                        bits(&residual),
                        "{what}: the product is added"
                    );
                }
            }
        }
    }
    gpu.set_q1_0_lanes(None).unwrap();
    // A norm weight of another length and an output of another width are refused, naming the
    // op.
    let m = Q1Matrix::upload(&gpu, &common::random_q1_0(&mut crng, 256, 128), 256, 128).unwrap();
    let xq = Q8Tensor::new(&gpu, 128).unwrap();
    let x = gpu.tensor("x", 256).unwrap();
    for (width, out) in [(128, 256), (256, 512)] {
        let w = gpu.tensor("w", width).unwrap();
        let q = Q8Tensor::new(&gpu, out).unwrap();
        let e = gpu
            .recorder()
            .q1_0_gemv_add_norm(&m, &xq, &x, &w, 1e-6, &q)
            .err()
            .unwrap()
            .to_string();
        assert!(e.contains("q1_0_gemv_add_norm"), "{e}");
    }
}

/// The attention kernels the fused tests run: the default, every change at once, and GQA packing
/// alone and with every other change (`AttentionKernel`; tests/attention.rs checks each alone
/// against an f64 reference, and GQA packing against the unpacked kernel's bits).
fn attention_kernels() -> Vec<AttentionKernel> {
    [
        "default",
        "tile32,min1,unroll,tree",
        "gqa",
        "tile32,min1,unroll,tree,gqa",
    ]
    .into_iter()
    .map(|k| AttentionKernel::parse(k).unwrap())
    .collect()
}

/// Two KV caches of `[KV heads, key dim, value dim, positions]` holding the same random rows
/// (in the cache's own encoding: f16 pairs or f32): one for the fused op, one for the ops apart.
fn twin_caches(gpu: &Gpu, rng: &mut Rng, shape: [usize; 4], f16: bool) -> (KvCache, KvCache) {
    let [nkv, hd, hdv, n_ctx] = shape;
    let (a, b) = (
        KvCache::new(gpu, nkv, hd, hdv, n_ctx, f16).unwrap(),
        KvCache::new(gpu, nkv, hd, hdv, n_ctx, f16).unwrap(),
    );
    for (x, y) in [(&a.k, &b.k), (&a.v, &b.v)] {
        let words: Vec<u32> = (0..x.len())
            .map(|_| {
                if f16 {
                    let h = |v: f32| u32::from(half::f16::from_f32(v).to_bits());
                    h(rng.unit()) | h(rng.unit()) << 16
                } else {
                    rng.unit().to_bits()
                }
            })
            .collect();
        gpu.write(x, &words).unwrap();
        gpu.write(y, &words).unwrap();
    }
    (a, b)
}
