//! The GPU backend's device-resident step keeps its device mirror of each KV cache in step with
//! the host cache, the source of truth, through everything that changes a sequence's past: a
//! speculative-style rewind (drafted tokens fed, then cut back and overwritten), a prefix copied
//! from another sequence (`extend_from`) into a sequence whose mirror holds other tokens, and two
//! sequences at different positions batched in one step (the server's case). Each scenario feeds
//! a golden file's prompt and greedy tokens, so the logits of every position are checked against
//! the reference engine's under the file's bounds (golden/README.md) — on the resident path, and on
//! the op-by-op GPU path for the same calls — and every step must have run resident (or, for the
//! op path, none). A dropped sequence's mirrors are freed. On the adapter `OXIBONSAI_GPU_ADAPTER` names (CI: lavapipe); no adapter fails.

use std::sync::Arc;

use oxibonsai_engine::kv_cache::CacheTypes;
use oxibonsai_engine::{BatchEntry, DeviceChoice, GpuBackend, Logits, Model, Workspace};
use oxibonsai_formats::FormatKind;
use oxibonsai_gguf::GgufFile;
use oxibonsai_gpu::{GemmTile, Gpu};
use oxibonsai_testkit::golden;
use oxibonsai_testkit::parity::{bounds, compare, read_logits};
use serde_json::Value;

const NAME: &str = "qwen3-q1_0";

struct Golden {
    prompt: Vec<u32>,
    greedy: Vec<u32>,
    reference: Vec<f32>,
    logits_file: String,
}

impl Golden {
    /// The prompt then the greedy tokens: the token at each position.
    fn stream(&self) -> Vec<u32> {
        self.prompt.iter().chain(&self.greedy).copied().collect()
    }
}

fn golden_entry() -> Golden {
    let text = std::fs::read_to_string(golden("models/manifest.json")).unwrap();
    let manifest: Value = serde_json::from_str(&text).unwrap();
    let entry = &manifest[NAME];
    let ids = |v: &Value| -> Vec<u32> {
        v.as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_u64().unwrap() as u32)
            .collect()
    };
    let logits_file = entry["logits"].as_str().unwrap().to_owned();
    Golden {
        prompt: ids(&entry["prompt_ids"]),
        greedy: ids(&entry["greedy_ids"]),
        reference: read_logits(&logits_file),
        logits_file,
    }
}

/// The golden model on the GPU backend: resident steps on, or every pass op by op.
fn load(resident: bool) -> Model<GpuBackend> {
    load_with(resident, true)
}

/// [`load`], with a resident chunk of several tokens batched (`gemm`) or one product a token;
/// the gemms the engine's default kernels (no register tile).
fn load_with(resident: bool, gemm: bool) -> Model<GpuBackend> {
    load_tiled(resident, gemm, None)
}

/// [`load_with`], the Q1_0 gemm's register tile `tile` (`None`: the gemv-exact kernel).
fn load_tiled(resident: bool, gemm: bool, tile: Option<GemmTile>) -> Model<GpuBackend> {
    load_chunked(resident, gemm, tile, 32)
}

/// [`load_tiled`], a pass's chunks of at most `chunk` tokens (`GpuBackend::with_chunk_tokens`).
fn load_chunked(
    resident: bool,
    gemm: bool,
    tile: Option<GemmTile>,
    chunk: usize,
) -> Model<GpuBackend> {
    let backend = match Gpu::new().map(|gpu| {
        gpu.set_gemm_tile(tile);
        GpuBackend::with_gpu(gpu, 2)
    }) {
        Ok(Ok(b)) => b
            .with_resident_steps(resident)
            .with_gemm(gemm)
            .with_chunk_tokens(chunk),
        Ok(Err(e)) => panic!("the GPU backend: {e}"),
        Err(e) => panic!("the GPU resident tests need an adapter: {e}"),
    };
    let file = GgufFile::open(golden(&format!("models/{NAME}.gguf"))).unwrap();
    Model::load(Arc::new(file), backend).unwrap()
}

/// `logits` (`[positions][n_vocab]`, every position of the golden stream) against the reference.
fn check(what: &str, model: &Model<GpuBackend>, g: &Golden, logits: &[f32]) {
    let n_vocab = model.config.n_vocab;
    assert_eq!(logits.len(), g.reference.len(), "{what}: positions");
    let report = compare(logits, &g.reference, n_vocab);
    let b = bounds(&g.logits_file);
    assert!(report.passes(b), "{what}: {report:?} vs {b:?}");
}

/// Every pass resident (or, with resident steps off, none), and `passes` of them.
fn check_steps(what: &str, model: &Model<GpuBackend>, resident: bool, passes: u64) {
    let offload = model.backend.offload();
    if resident {
        assert_eq!(offload.steps_not_resident, [], "{what}: {offload}");
        assert_eq!(offload.resident_steps, passes, "{what}: {offload}");
    } else {
        assert_eq!(offload.resident_steps, 0, "{what}: {offload}");
        let total: u64 = offload.steps_not_resident.iter().map(|(_, n)| n).sum();
        assert_eq!(total, passes, "{what}: {offload}");
    }
    for (op, n) in &offload.ops_on_cpu {
        assert!(!op.contains("GPU error"), "{what}: {op} ×{n}");
    }
}

/// The prompt, then the greedy tokens one at a time — except that at three points two wrong
/// drafted tokens follow the right one in one pass (its first row is kept) and are cut back, so
/// the next step overwrites their positions.
fn rewinds(model: &Model<GpuBackend>, g: &Golden) -> (Vec<f32>, u64) {
    let n_vocab = model.config.n_vocab;
    let stream = g.stream();
    let mut seq = model.new_sequence(stream.len() + 4).unwrap();
    let mut logits = model
        .forward(&mut seq, &g.prompt, Logits::All)
        .unwrap()
        .to_vec();
    let mut passes = 1;
    for (i, &t) in g.greedy.iter().enumerate() {
        if i % 5 == 1 {
            let drafted = [t, (t + 7) % n_vocab as u32, (t + 100) % n_vocab as u32];
            let rows = model.forward(&mut seq, &drafted, Logits::All).unwrap();
            logits.extend_from_slice(&rows[..n_vocab]);
            let kept = seq.n_past() - 2;
            let back = seq.rewind(model, kept).unwrap();
            assert_eq!(back.recomputed, 0, "a KV cache rewinds without computing");
        } else {
            logits.extend_from_slice(model.forward(&mut seq, &[t], Logits::Last).unwrap());
        }
        passes += 1;
    }
    (logits, passes)
}

#[test]
fn a_rewound_sequence_decodes_the_reference_logits() {
    let g = golden_entry();
    for resident in [true, false] {
        let model = load(resident);
        let (logits, passes) = rewinds(&model, &g);
        let what = format!("rewinds, resident {resident}");
        check(&what, &model, &g, &logits);
        check_steps(&what, &model, resident, passes);
    }
}

/// A receiver that first ran other tokens (its mirrors hold them) takes the donor's first `k`
/// positions by `extend_from`, then feeds the rest of the prompt and the greedy tokens.
fn prefix_copy(model: &Model<GpuBackend>, g: &Golden) -> (Vec<f32>, u64) {
    let n_vocab = model.config.n_vocab;
    let stream = g.stream();
    let k = g.prompt.len() - 5;
    let mut donor = model.new_sequence(stream.len()).unwrap();
    let mut logits = model
        .forward(&mut donor, &g.prompt[..k], Logits::All)
        .unwrap()
        .to_vec();
    let mut receiver = model.new_sequence(stream.len()).unwrap();
    let other: Vec<u32> = (0..k as u32 + 3)
        .map(|i| (i * 31 + 5) % n_vocab as u32)
        .collect();
    model.forward(&mut receiver, &other, Logits::Last).unwrap();
    assert_eq!(receiver.extend_from(&donor, k).unwrap(), k);
    logits.extend_from_slice(
        model
            .forward(&mut receiver, &g.prompt[k..], Logits::All)
            .unwrap(),
    );
    for &t in &g.greedy {
        logits.extend_from_slice(model.forward(&mut receiver, &[t], Logits::Last).unwrap());
    }
    (logits, 3 + g.greedy.len() as u64)
}

#[test]
fn a_copied_prefix_decodes_the_reference_logits() {
    let g = golden_entry();
    for resident in [true, false] {
        let model = load(resident);
        let (logits, passes) = prefix_copy(&model, &g);
        let what = format!("prefix copy, resident {resident}");
        check(&what, &model, &g, &logits);
        check_steps(&what, &model, resident, passes);
    }
}

/// Two sequences walk the golden stream `LAG` positions apart, batched one token each per step
/// (the lagging one alone once the other is done): the logits of every position of each.
fn batched(model: &Model<GpuBackend>, g: &Golden) -> ([Vec<f32>; 2], u64) {
    const LAG: usize = 3;
    let n_vocab = model.config.n_vocab;
    let stream = g.stream();
    let start = [g.prompt.len(), g.prompt.len() - LAG];
    let mut seqs = [
        model.new_sequence(stream.len()).unwrap(),
        model.new_sequence(stream.len()).unwrap(),
    ];
    let mut logits: [Vec<f32>; 2] = Default::default();
    for i in 0..2 {
        logits[i] = model
            .forward(&mut seqs[i], &stream[..start[i]], Logits::All)
            .unwrap()
            .to_vec();
    }
    // The reference's last position has logits, its token is the last greedy one: each sequence
    // feeds the stream up to its end.
    let mut passes = 2;
    let mut work = Workspace::default();
    loop {
        let [a, b] = &mut seqs;
        let mut entries = Vec::new();
        let mut which = Vec::new();
        for (i, seq) in [a, b].into_iter().enumerate() {
            let at = seq.n_past();
            if at < stream.len() {
                entries.push(BatchEntry {
                    seq,
                    tokens: &stream[at..at + 1],
                });
                which.push(i);
            }
        }
        if entries.is_empty() {
            break;
        }
        let rows = model.forward_batch(&mut entries, &mut work).unwrap();
        for (j, &i) in which.iter().enumerate() {
            logits[i].extend_from_slice(&rows[j * n_vocab..(j + 1) * n_vocab]);
        }
        passes += 1;
    }
    (logits, passes)
}

#[test]
fn two_sequences_batched_in_one_step_decode_the_reference_logits() {
    let g = golden_entry();
    for resident in [true, false] {
        let model = load(resident);
        let (logits, passes) = batched(&model, &g);
        for (i, l) in logits.iter().enumerate() {
            let what = format!("batched sequence {i}, resident {resident}");
            check(&what, &model, &g, l);
        }
        check_steps(
            &format!("batched, resident {resident}"),
            &model,
            resident,
            passes,
        );
    }
}

/// The largest |a − b| over the largest |b|: how far the batched pass's numbers (its tiled
/// attention sums in another order than the decode attention a token) are from the per-token
/// pass's.
fn spread(a: &[f32], b: &[f32]) -> f64 {
    assert_eq!(a.len(), b.len(), "lengths");
    let diff = a
        .iter()
        .zip(b)
        .map(|(x, y)| f64::from((x - y).abs()))
        .fold(0.0, f64::max);
    let top = b.iter().map(|y| f64::from(y.abs())).fold(0.0, f64::max);
    diff / top
}

/// How far the batched pass's logits may be from the per-token pass's, relative to the largest
/// logit: its attention — and the Q1_0 gemm's register tile (`GemmTile`) — is the same sum in
/// another order (a few ulp a layer), which the Q8_0 activations round on either side of a step
/// now and then.
const PATHS_APART: f64 = 2e-3;

/// The whole golden stream (48 tokens) in one pass, in chunks of 32 (two: 32 + 16, the default),
/// 5 (ten) and 128 (one, with the `128x16` register tile from 32 tokens: `GemmTile`'s `@32`):
/// each batched pass (matrix-matrix products, one tiled attention a layer) gives the reference's
/// logits at every position, and close to the per-token pass's (`OXIBONSAI_GPU_GEMM=0`), which
/// ran no batched chunk: within [`PATHS_APART`] (its attention and its Q1_0 products sum in
/// another order, so not the same bits).
#[test]
fn a_prompt_of_two_submissions_batched_matches_the_reference_and_the_per_token_products() {
    let g = golden_entry();
    let stream = g.stream();
    assert!(stream.len() > 32, "the stream must span two submissions");
    let late_tile = GemmTile::new(128, 16)
        .unwrap()
        .with_from_tokens(32)
        .unwrap();
    // (gemm, chunk, tile, batched chunks); the per-token pass first.
    let ways = [
        (false, 32, None, 0),
        (true, 32, None, 2),
        (true, 5, None, 10),
        (true, 128, Some(late_tile), 1),
    ];
    let mut per_token = Vec::new();
    for (gemm, chunk, tile, chunks) in ways {
        let what = format!("one pass, gemm {gemm}, chunks of {chunk}, tile {tile:?}");
        let model = load_chunked(true, gemm, tile, chunk);
        let mut seq = model.new_sequence(stream.len()).unwrap();
        let logits = model
            .forward(&mut seq, &stream, Logits::All)
            .unwrap()
            .to_vec();
        check(&what, &model, &g, &logits);
        check_steps(&what, &model, true, 1);
        assert_eq!(
            model.backend.batched_chunks(),
            chunks,
            "batched chunks, {what}"
        );
        if !gemm {
            per_token = logits;
            continue;
        }
        let apart = spread(&logits, &per_token);
        println!("{what}: batched vs per-token logits: largest difference {apart:.3e} of the largest logit");
        assert!(
            apart <= PATHS_APART,
            "{what}: batched vs per-token logits {apart:e} apart"
        );
    }
}

/// `logits` of the golden stream's first positions against the reference's.
fn check_prefix(what: &str, model: &Model<GpuBackend>, g: &Golden, logits: &[f32]) {
    let n_vocab = model.config.n_vocab;
    let report = compare(logits, &g.reference[..logits.len()], n_vocab);
    let b = bounds(&g.logits_file);
    assert!(report.passes(b), "{what}: {report:?} vs {b:?}");
}

/// What [`prompt_and_two_depths`] leaves: each sequence's logits, its host cache's keys and
/// values a layer (f16 bits), and the dispatches of the last submission (the two sequences'
/// chunk).
struct TwoDepths {
    logits: [Vec<f32>; 2],
    caches: [Vec<(Vec<u16>, Vec<u16>)>; 2],
    dispatches: usize,
}

/// A prompt of an awkward length (37 tokens: a chunk of 32 and one of 5, each one run of one
/// sequence) and one of 10; then both sequences in one step, 3 tokens at position 37 and 4 at
/// position 10 — a chunk of two runs, each its own store and tiled attention a layer.
fn prompt_and_two_depths(model: &Model<GpuBackend>, g: &Golden) -> TwoDepths {
    let stream = g.stream();
    let (deep, shallow) = (37, 10);
    let mut seqs = [
        model.new_sequence(stream.len()).unwrap(),
        model.new_sequence(stream.len()).unwrap(),
    ];
    let mut logits: [Vec<f32>; 2] = Default::default();
    for (i, n) in [deep, shallow].into_iter().enumerate() {
        logits[i] = model
            .forward(&mut seqs[i], &stream[..n], Logits::All)
            .unwrap()
            .to_vec();
    }
    let [a, b] = &mut seqs;
    let mut entries = vec![
        BatchEntry {
            seq: a,
            tokens: &stream[deep..deep + 3],
        },
        BatchEntry {
            seq: b,
            tokens: &stream[shallow..shallow + 4],
        },
    ];
    let mut work = Workspace::default();
    let rows = model
        .forward_batch_rows(&mut entries, &[3, 4], &mut work)
        .unwrap()
        .to_vec();
    let n_vocab = model.config.n_vocab;
    logits[0].extend_from_slice(&rows[..3 * n_vocab]);
    logits[1].extend_from_slice(&rows[3 * n_vocab..7 * n_vocab]);
    let caches = seqs.map(|seq| {
        seq.layers()
            .iter()
            .map(|l| {
                let (k, v) = l.kv().raw();
                (k.to_vec(), v.to_vec())
            })
            .collect()
    });
    TwoDepths {
        logits,
        caches,
        dispatches: model.backend.step_dispatches(),
    }
}

/// [`prompt_and_two_depths`] batched, with the Q1_0 gemm's register tile and with the gemv-exact
/// kernel (`OXIBONSAI_GPU_GEMM_TILE=0`): the reference's logits at every position of both
/// sequences; close to the per-token pass's (`OXIBONSAI_GPU_GEMM=0`); the host caches hold the
/// per-token pass's first-layer keys and values to the bit with the gemv-exact kernel (the
/// batched pass reads them back from its chunk's rows instead of a slot a token) and the later
/// layers' — and with the register tile, whose sums are the gemv's within rounding, every
/// layer's — within the f16 rounding of [`PATHS_APART`]-close numbers.
#[test]
fn an_awkward_prompt_and_two_sequences_at_different_depths_batched_match_the_per_token_pass() {
    let g = golden_entry();
    let mut runs = Vec::new();
    let ways = [(true, Some(GemmTile::DEFAULT)), (true, None), (false, None)];
    for (gemm, tile) in ways {
        let model = load_tiled(true, gemm, tile);
        let run = prompt_and_two_depths(&model, &g);
        for (i, l) in run.logits.iter().enumerate() {
            check_prefix(&format!("sequence {i}, gemm {gemm}"), &model, &g, l);
        }
        check_steps(&format!("two depths, gemm {gemm}"), &model, true, 3);
        // 32 + 5 of the first prompt, 10 of the second, the step of both.
        assert_eq!(
            model.backend.batched_chunks(),
            if gemm { 4 } else { 0 },
            "gemm {gemm}"
        );
        println!(
            "gemm {gemm}, tile {tile:?}: the two sequences' chunk of 7 tokens records {} dispatches",
            run.dispatches
        );
        runs.push(run);
    }
    let per_token = &runs[2];
    for ((batched, tile), i) in runs[..2]
        .iter()
        .zip([ways[0].1, ways[1].1])
        .flat_map(|b| [(b, 0), (b, 1)])
    {
        let apart = spread(&batched.logits[i], &per_token.logits[i]);
        println!("tile {tile:?}, sequence {i}: batched vs per-token logits {apart:.3e} apart");
        assert!(
            apart <= PATHS_APART,
            "tile {tile:?}, sequence {i}: {apart:e} apart"
        );
        let (b, p) = (&batched.caches[i], &per_token.caches[i]);
        assert_eq!(b.len(), p.len());
        assert!(
            tile.is_some() || b[0] == p[0],
            "tile {tile:?}, sequence {i}: the first layer's host cache rows differ"
        );
        let f = |w: &[u16]| -> Vec<f32> {
            w.iter()
                .map(|&h| half::f16::from_bits(h).to_f32())
                .collect()
        };
        for (li, ((bk, bv), (pk, pv))) in b.iter().zip(p).enumerate() {
            for (what, x, y) in [("keys", bk, pk), ("values", bv, pv)] {
                let apart = spread(&f(x), &f(y));
                println!("tile {tile:?}, sequence {i} layer {li} {what}: {apart:.3e} apart");
                assert!(
                    apart <= 4.0 * PATHS_APART,
                    "tile {tile:?}, sequence {i} layer {li} {what}: {apart:e} apart"
                );
            }
        }
    }
}

/// Two sequences' tokens in one step run as one batched chunk (each token attending to its own
/// sequence's mirror): `batched`'s steps of two tokens are the batched pass's.
#[test]
fn two_sequences_in_one_step_run_as_a_batched_chunk() {
    let g = golden_entry();
    let model = load(true);
    let (logits, passes) = batched(&model, &g);
    for (i, l) in logits.iter().enumerate() {
        check(&format!("batched sequence {i}"), &model, &g, l);
    }
    check_steps("batched", &model, true, passes);
    // Both prompts (31 and 32 tokens) and every step that fed both sequences.
    assert!(
        model.backend.batched_chunks() > 2,
        "{}",
        model.backend.batched_chunks()
    );
}

#[test]
fn the_mirrors_of_a_dropped_sequence_are_freed() {
    let g = golden_entry();
    let model = load(true);
    let n_layer = model.config.n_layer;
    let mut a = model.new_sequence(16).unwrap();
    model.forward(&mut a, &g.prompt[..4], Logits::Last).unwrap();
    assert_eq!(model.backend.kv_mirrors(), n_layer);
    let mut b = model.new_sequence(16).unwrap();
    model.forward(&mut b, &g.prompt[..3], Logits::Last).unwrap();
    assert_eq!(model.backend.kv_mirrors(), 2 * n_layer);
    drop(a);
    model
        .forward(&mut b, &g.prompt[3..5], Logits::Last)
        .unwrap();
    assert_eq!(model.backend.kv_mirrors(), n_layer);
    check_steps("dropped mirrors", &model, true, 3);
}

/// What `--device auto` reads from the file before loading (`DeviceChoice::for_model`) agrees
/// with what the loaded GPU backend does: no refusal and resident steps for f16 caches; for a
/// q8_0 cache the same reason the step gives when it declines, and every pass op by op.
#[test]
fn auto_reads_from_the_file_what_the_step_finds_after_loading() {
    let g = golden_entry();
    let file = GgufFile::open(golden(&format!("models/{NAME}.gguf"))).unwrap();
    let choice = |types| DeviceChoice::default().for_model(&file, types).auto_refusal;
    assert_eq!(choice(CacheTypes::default()), None);
    // -ngl at or below the layer count keeps the output matrix on the CPU: op by op.
    let n_layer = oxibonsai_engine::ModelConfig::from_gguf(&file)
        .unwrap()
        .n_layer;
    for (ngl, refused) in [(n_layer, true), (n_layer + 1, false)] {
        let partial = DeviceChoice {
            gpu_layers: Some(ngl),
            ..DeviceChoice::default()
        };
        let why = partial.for_model(&file, CacheTypes::default()).auto_refusal;
        assert_eq!(why.is_some(), refused, "-ngl {ngl}: {why:?}");
    }
    let q8_0 = CacheTypes {
        k: FormatKind::Q8_0,
        v: FormatKind::Q8_0,
    };
    let why = choice(q8_0).expect("a q8_0 cache cannot be mirrored: auto must refuse it");
    let mut model = load(true);
    model.set_cache_types(q8_0).unwrap();
    let mut seq = model.new_sequence(16).unwrap();
    model
        .forward(&mut seq, &g.prompt[..4], Logits::Last)
        .unwrap();
    model
        .forward(&mut seq, &g.prompt[4..5], Logits::Last)
        .unwrap();
    let offload = model.backend.offload();
    assert_eq!(offload.resident_steps, 0, "{offload}");
    assert_eq!(
        offload.steps_not_resident,
        [(why.to_owned(), 2)],
        "{offload}"
    );
}

/// A profiled backend (`with_profile`, `OXIBONSAI_GPU_PROFILE=1`) gives an unprofiled one's logits
/// bit for bit, at every position of the stream (a prompt of two batched chunks, then three
/// decode steps), and its profile counts each pass by kind and every dispatch of the decode steps
/// (the step's own count, `step_dispatches`), each with a device time.
#[test]
fn a_profiled_run_gives_the_same_bits_and_times_every_dispatch() {
    let g = golden_entry();
    let stream = g.stream();
    let (prompt, decode) = stream.split_at(stream.len() - 3);
    assert!(prompt.len() > 32, "the prompt must span two chunks");
    let mut runs = Vec::new();
    for profiled in [false, true] {
        let backend = match GpuBackend::new(2) {
            Ok(b) => b.with_profile(profiled),
            Err(e) => panic!("the GPU resident tests need an adapter: {e}"),
        };
        let file = GgufFile::open(golden(&format!("models/{NAME}.gguf"))).unwrap();
        let model = Model::load(Arc::new(file), backend).unwrap();
        let mut seq = model.new_sequence(stream.len()).unwrap();
        let mut logits = model
            .forward(&mut seq, prompt, Logits::All)
            .unwrap()
            .to_vec();
        for &t in decode {
            logits.extend_from_slice(model.forward(&mut seq, &[t], Logits::Last).unwrap());
        }
        check_prefix(&format!("profiled {profiled}"), &model, &g, &logits);
        let offload = model.backend.offload();
        assert_eq!(
            offload.steps_not_resident,
            [],
            "profiled {profiled}: {offload}"
        );
        if !profiled {
            assert!(offload.device_profile.is_empty() && offload.profiled_passes.is_empty());
            runs.push(logits);
            continue;
        }
        assert_eq!(
            offload.profiled_passes,
            [("batch", 2), ("decode", 3)],
            "the passes profiled"
        );
        let decode_lines: Vec<_> = offload
            .device_profile
            .iter()
            .filter(|l| l.pass == "decode")
            .collect();
        let dispatches: u64 = decode_lines.iter().map(|l| l.dispatches).sum();
        assert_eq!(
            dispatches,
            3 * model.backend.step_dispatches() as u64,
            "{decode_lines:?}"
        );
        assert!(
            decode_lines.iter().any(|l| l.op.starts_with("q1_0_gemv")),
            "{decode_lines:?}"
        );
        assert!(
            offload
                .device_profile
                .iter()
                .all(|l| l.seconds.is_finite() && l.seconds >= 0.0)
                && offload.device_profile.iter().any(|l| l.seconds > 0.0),
            "{:?}",
            offload.device_profile
        );
        assert!(
            offload
                .device_profile
                .windows(2)
                .all(|w| w[0].seconds >= w[1].seconds),
            "the most device time first"
        );
        let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        assert!(
            bits(&logits) == bits(&runs[0]),
            "profiled vs unprofiled logits"
        );
    }
}
