//! The CPU backend's packed weights against the plain path.

use rayon::prelude::*;

use super::*;

/// The packed copy against the mapped rows of the same file: embedding rows bit for bit,
/// products within summation-order noise, and each token's product bit-identical whatever
/// the number of tokens sharing the call (one kernel serves every count). Q1_0, and the
/// ternary TQ2_0 and TQ1_0 (converted to TQ2_0 at packing) matrices.
#[test]
fn packed_weights_embed_and_multiply_like_the_mapped_rows() {
    let cases = [
        (
            "models/qwen3-q1_0.gguf",
            ["token_embd.weight", "blk.0.ffn_down.weight"],
            q1_0_packing_tiers(),
        ),
        (
            "models/qwen3-ternary-tq2_0.gguf",
            ["blk.0.attn_q.weight", "blk.0.ffn_down.weight"],
            ternary_packing_tiers(),
        ),
        (
            "models/qwen3-ternary-tq1_0.gguf",
            ["blk.0.attn_q.weight", "blk.0.ffn_down.weight"],
            ternary_packing_tiers(),
        ),
    ];
    for (path, names, packing_tiers) in cases {
        let file =
            Arc::new(GgufFile::open(oxibonsai_testkit::golden(path)).expect("golden model opens"));
        let tested = packed_like_mapped(&file, &names);
        assert_eq!(
            tested,
            2 * packing_tiers,
            "{path}: weights were not packed where expected"
        );
    }
}

/// [`packed_weights_embed_and_multiply_like_the_mapped_rows`] on the tensors `names` of `file`
/// on every tier; returns how many (tier, tensor) pairs were packed (and so compared).
fn packed_like_mapped(file: &Arc<GgufFile>, names: &[&str]) -> usize {
    let mut tested = 0;
    for isa in Isa::ALL.into_iter().filter(|isa| isa.available()) {
        let packing = CpuBackend::with_isa(2, isa).unwrap().with_packing(true);
        let plain = CpuBackend::with_isa(2, isa).unwrap().with_packing(false);
        for &name in names {
            let tensor = file.tensor(name).expect("tensor");
            let p = packing.prepare(file, tensor).unwrap();
            let m = plain.prepare(file, tensor).unwrap();
            assert!(!m.is_packed());
            if !p.is_packed() {
                continue;
            }
            tested += 1;
            let ids = [0, 7, p.n_out as u32 - 1];
            let mut a = vec![f32::NAN; ids.len() * p.n_in];
            let mut b = vec![0.0f32; ids.len() * p.n_in];
            packing.embed(&p, &ids, &mut a);
            plain.embed(&m, &ids, &mut b);
            assert_eq!(a, b, "{} {name}: embedding rows", isa.name());

            // 8 tokens: bands of rows for every token; 130: chunks of tokens through every row.
            for n_tokens in [8, 130] {
                let x: Vec<f32> = (0..n_tokens * p.n_in)
                    .map(|i| ((i * 7919 % 1000) as f32 / 500.0 - 1.0) * (1 + i % 3) as f32)
                    .collect();
                let mut scratch = CpuScratch::default();
                let mut all = vec![0.0f32; n_tokens * p.n_out];
                let mut want = vec![0.0f32; n_tokens * p.n_out];
                packing.matmul(&p, &x, n_tokens, &mut all, &mut scratch);
                plain.matmul(&m, &x, n_tokens, &mut want, &mut scratch);
                let scale = want.iter().fold(0.0f32, |s, v| s.max(v.abs()));
                for (i, (g, w)) in all.iter().zip(&want).enumerate() {
                    assert!(
                        (g - w).abs() <= 1e-5 * scale,
                        "{} {name}: value {i} of {n_tokens} tokens: packed {g} vs mapped {w}",
                        isa.name()
                    );
                }
                for t in 0..n_tokens {
                    let mut one = vec![0.0f32; p.n_out];
                    let xt = &x[t * p.n_in..(t + 1) * p.n_in];
                    packing.matmul(&p, xt, 1, &mut one, &mut scratch);
                    assert_eq!(
                        one[..],
                        all[t * p.n_out..(t + 1) * p.n_out],
                        "{} {name}: token {t} alone vs in a batch of {n_tokens}",
                        isa.name()
                    );
                }
            }
        }
    }
    tested
}

/// Several products of one activation (`matmuls`: the Q / K / V and gate / up projections run as
/// one pass over shared prepared activations) against `matmul` on each matrix alone: bit for bit,
/// packed or not, one token or several, on every tier.
#[test]
fn matmuls_equal_each_matmul_alone() {
    let file = Arc::new(
        GgufFile::open(oxibonsai_testkit::golden("models/qwen3-q1_0.gguf"))
            .expect("golden model opens"),
    );
    let groups = [
        &[
            "blk.0.attn_q.weight",
            "blk.0.attn_k.weight",
            "blk.0.attn_v.weight",
        ][..],
        &["blk.1.ffn_gate.weight", "blk.1.ffn_up.weight"][..],
    ];
    let mut fused = 0;
    for isa in Isa::ALL.into_iter().filter(|isa| isa.available()) {
        for pack in [true, false] {
            let be = CpuBackend::with_isa(2, isa).unwrap().with_packing(pack);
            for names in groups {
                let ws: Vec<CpuWeight> = names
                    .iter()
                    .map(|n| be.prepare(&file, file.tensor(n).expect("tensor")).unwrap())
                    .collect();
                fused += usize::from(ws.iter().all(CpuWeight::is_packed));
                let n_in = ws[0].n_in;
                for n_tokens in [1, 5] {
                    let x: Vec<f32> = (0..n_tokens * n_in)
                        .map(|i| ((i * 7919 % 1000) as f32 / 500.0 - 1.0) * (1 + i % 3) as f32)
                        .collect();
                    let mut scratch = CpuScratch::default();
                    let mut outs: Vec<Vec<f32>> = ws
                        .iter()
                        .map(|w| vec![f32::NAN; n_tokens * w.n_out])
                        .collect();
                    let mut products: Vec<(&CpuWeight, &mut [f32])> = ws
                        .iter()
                        .zip(outs.iter_mut())
                        .map(|(w, o)| (w, &mut o[..]))
                        .collect();
                    be.matmuls(&mut products, &x, n_tokens, &mut scratch);
                    for ((w, got), name) in ws.iter().zip(&outs).zip(names) {
                        let mut want = vec![0.0f32; n_tokens * w.n_out];
                        be.matmul(w, &x, n_tokens, &mut want, &mut scratch);
                        assert_eq!(
                            got[..],
                            want[..],
                            "{} pack={pack} {name} at {n_tokens} tokens",
                            isa.name()
                        );
                    }
                }
            }
        }
    }
    // Two fused groups on each tier that packs Q1_0.
    assert_eq!(
        fused,
        2 * q1_0_packing_tiers(),
        "the groups were not packed where expected"
    );
}

/// A pass keeps the other workers spinning until it ends: a panic inside it must still end the
/// pass (reach the caller, not leave the pool waiting for its spinners), and the backend keeps
/// working afterwards. Run on a thread with a deadline so a hang fails instead of stalling.
#[test]
fn a_panic_inside_a_pass_reaches_the_caller() {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let be = CpuBackend::with_isa(2, Isa::Scalar).unwrap();
        let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            be.run(|| -> usize { panic!("inside the pass") })
        }));
        let after = be.run(|| (0..1000usize).into_par_iter().sum::<usize>());
        tx.send((caught.is_err(), after)).unwrap();
    });
    let (panicked, after) = rx
        .recv_timeout(std::time::Duration::from_secs(60))
        .expect("the pass did not end within 60 s");
    assert!(panicked, "the panic did not reach the caller");
    assert_eq!(after, 499_500);
}

/// The golden Qwen3 model's file with `changes` made to its metadata.
fn golden_with(changes: &[(&str, u32)]) -> Arc<GgufFile> {
    use oxibonsai_gguf::{GgufWriter, Value};
    let file = GgufFile::open(oxibonsai_testkit::golden("models/qwen3-q1_0.gguf"))
        .expect("golden model opens");
    let mut w = GgufWriter::new();
    for (k, v) in file.metadata().iter() {
        let v = match changes.iter().find(|(c, _)| *c == k) {
            Some((_, new)) => Value::from(*new),
            None => v.clone(),
        };
        w.add_kv(k, v).unwrap();
    }
    for t in file.tensors() {
        w.add_tensor(&t.name, &t.dims, t.format, file.tensor_data(t))
            .unwrap();
    }
    Arc::new(GgufFile::from_bytes(w.to_bytes().unwrap()).unwrap())
}

/// The limits of the attention kernels are the backend's: the configuration takes any grouping
/// and head size, and the backend refuses what it cannot run — by the key's name, also when the
/// model is loaded (before any weight is prepared).
#[test]
fn more_query_heads_per_key_head_than_attention_takes_are_refused_by_name() {
    let be = CpuBackend::with_isa(1, Isa::Scalar).unwrap();
    let ok = golden_with(&[
        ("qwen3.attention.head_count", 64),
        ("qwen3.attention.head_count_kv", 1),
    ]);
    let config = ModelConfig::from_gguf(&ok).expect("the configuration takes 64 per key head");
    assert!(
        be.check_config(&config).is_ok(),
        "64 per key head is allowed"
    );
    let bad = golden_with(&[
        ("qwen3.attention.head_count", 128),
        ("qwen3.attention.head_count_kv", 1),
    ]);
    let config = ModelConfig::from_gguf(&bad).expect("the configuration takes 128 per key head");
    let refused = be.check_config(&config).unwrap_err().to_string();
    assert!(
        refused.contains("qwen3.attention.head_count_kv") && refused.contains("128 query heads"),
        "{refused}"
    );
    let Err(err) = crate::Model::load(bad, be) else {
        panic!("the model loaded with 128 query heads per key head");
    };
    assert_eq!(err.to_string(), refused, "Model::load's error");
}

/// A head dimension over `MAX_HEAD_DIM` is refused by its key (keys and values each).
#[test]
fn a_head_dimension_the_attention_cannot_hold_is_refused_by_name() {
    let be = CpuBackend::with_isa(1, Isa::Scalar).unwrap();
    let mut config = ModelConfig::from_gguf(&golden_with(&[])).expect("golden config");
    assert!(be.check_config(&config).is_ok());
    config.head_dim_v = MAX_HEAD_DIM + 1;
    let err = be.check_config(&config).unwrap_err().to_string();
    assert!(
        err.contains("qwen3.attention.value_length")
            && err.contains(&format!(
                "head dimension {} exceeds {MAX_HEAD_DIM}",
                MAX_HEAD_DIM + 1
            )),
        "{err}"
    );
    config.head_dim = MAX_HEAD_DIM + 1;
    let err = be.check_config(&config).unwrap_err().to_string();
    assert!(err.contains("qwen3.attention.key_length"), "{err}");
}

/// How many of this CPU's tiers repack TQ2_0 and TQ1_0 matrices: AVX2, and AVX-512 with VNNI,
/// where present; no ARM tier yet.
fn ternary_packing_tiers() -> usize {
    #[cfg(target_arch = "x86_64")]
    {
        q1_0_packing_tiers()
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        0
    }
}

/// How many of this CPU's tiers repack Q1_0 matrices: AVX2, and AVX-512 with VNNI, where present;
/// on ARM `dotprod` and `i8mm` (which inherits `dotprod`'s packed kernels), where present.
fn q1_0_packing_tiers() -> usize {
    #[cfg(target_arch = "x86_64")]
    {
        usize::from(Isa::Avx2.available())
            + usize::from(
                Isa::Avx512.available() && std::arch::is_x86_feature_detected!("avx512vnni"),
            )
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        usize::from(Isa::Dotprod.available()) + usize::from(Isa::I8mm.available())
    }
}
