//! Drafting with qwen35's multi-token-prediction head (`--draft-mtp`): greedy output is plain
//! greedy output token for token (compared with generation without a drafter on the same file,
//! many prompts, every draft length 1..8, files written by `synth --arch qwen35 --nextn 1` with
//! GQA, recurrent patterns, a tied head, quantized matrices and the head's own LM head), and the
//! head's state follows the target's rewinds, prefix copies and cuts (its prediction then is a new
//! drafter's on a sequence computed from scratch); a file without the layers, or with one of their
//! tensors missing or misshapen, is refused naming the key or the tensor.

mod common;

use std::path::Path;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use common::{oxibonsai, path_str};
use oxibonsai_engine::generate::{generate_speculative, GenerateOptions, GenerationStats};
use oxibonsai_engine::sampling::{Sampler, SamplingParams};
use oxibonsai_engine::speculative::{Draft, DraftLimits, Drafter, MtpDrafter, Speculation};
use oxibonsai_engine::{CheckpointPolicy, CpuBackend, Logits, Model, Sequence};
use oxibonsai_gguf::{GgufFile, GgufWriter};
use oxibonsai_tokenizer::Tokenizer;

/// `synth --arch qwen35 ARGS -o dir/name.gguf`.
fn synth(dir: &Path, name: &str, args: &[&str]) -> std::path::PathBuf {
    let path = dir.join(format!("{name}.gguf"));
    let mut all = vec!["synth", "--arch", "qwen35"];
    all.extend_from_slice(args);
    all.extend(["-o", path_str(&path)]);
    let run = oxibonsai(all);
    assert_eq!(run.code, 0, "{name}: synth fails: {}", run.stderr);
    path
}

fn load(path: &Path) -> (Arc<Model<CpuBackend>>, Tokenizer) {
    let file = Arc::new(GgufFile::open(path).unwrap());
    let tokenizer = Tokenizer::from_gguf(&file).unwrap();
    let mut model = Model::load(file, CpuBackend::new(2).unwrap()).unwrap();
    model.load_mtp().unwrap();
    (Arc::new(model), tokenizer)
}

fn greedy(n_predict: usize) -> GenerateOptions {
    GenerateOptions {
        n_predict: Some(n_predict),
        sampling: SamplingParams {
            temperature: 0.0,
            ..SamplingParams::default()
        },
        stop: Vec::new(),
        render_special: false,
    }
}

fn generate(
    model: &Model<CpuBackend>,
    tokenizer: &Tokenizer,
    prompt: &[u32],
    n_predict: usize,
    draft: Option<(&mut MtpDrafter<CpuBackend>, DraftLimits)>,
) -> (GenerationStats, usize) {
    let mut seq = model.new_sequence(128).unwrap();
    let mut speculation = draft.map(|(d, limits)| Speculation::new(d, limits));
    let stats = generate_speculative(
        model,
        &mut seq,
        tokenizer,
        prompt,
        &greedy(n_predict),
        None,
        speculation.as_mut(),
        &AtomicBool::new(false),
        |_| true,
    )
    .unwrap();
    (stats, seq.n_past())
}

/// Prompts of 1..=24 tokens drawn from the vocabulary (a fixed generator), some repetitive.
fn prompts(n_vocab: u32) -> Vec<Vec<u32>> {
    let mut state = 0x2545_f491_4f6c_dd1du64;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        (state % u64::from(n_vocab)) as u32
    };
    let mut out: Vec<Vec<u32>> = [1usize, 3, 7, 12, 24]
        .iter()
        .map(|&len| (0..len).map(|_| next()).collect())
        .collect();
    out.push([5, 9, 5, 9, 5, 9, 5, 9].to_vec());
    out
}

#[test]
fn greedy_output_with_mtp_drafting_is_plain_greedy_output() {
    let dir = tempfile::tempdir().unwrap();
    let files = [
        (
            "f32-gqa",
            vec!["--format", "f32", "--nextn", "1", "--seed", "11"],
        ),
        (
            "f16-tied-interval2",
            vec![
                "--format",
                "f16",
                "--tied",
                "--interval",
                "2",
                "--nextn",
                "1",
                "--seed",
                "12",
            ],
        ),
        (
            "q8_0-pattern-own-head",
            vec![
                "--format",
                "q8_0",
                "--layers",
                "5",
                "--recurrent-layers",
                "1,0,1,1,0",
                "--nextn",
                "1",
                "--nextn-own-head",
                "--tensor-scales",
                "--seed",
                "13",
            ],
        ),
    ];
    for (name, args) in files {
        let path = synth(dir.path(), name, &args);
        let (model, tokenizer) = load(&path);
        let mut drafter = MtpDrafter::new(Arc::clone(&model), 128, 0.0).unwrap();
        let (mut drafted, mut accepted) = (0, 0);
        for prompt in prompts(model.config.n_vocab as u32) {
            let (plain, plain_past) = generate(&model, &tokenizer, &prompt, 24, None);
            for max in [1, 2, 3, 5, 8] {
                let limits = DraftLimits { max, min: 0 };
                let (spec, spec_past) = generate(
                    &model,
                    &tokenizer,
                    &prompt,
                    24,
                    Some((&mut drafter, limits)),
                );
                assert_eq!(
                    spec.tokens, plain.tokens,
                    "{name}: prompt {prompt:?}, --draft-max {max}"
                );
                assert_eq!(spec.stop_reason, plain.stop_reason, "{name}: {prompt:?}");
                assert_eq!(spec_past, plain_past, "{name}: positions held");
                drafted += spec.draft_tokens;
                accepted += spec.draft_accepted;
            }
        }
        // The head drafted (and, on random weights, was now and then right).
        assert!(drafted > 0, "{name}: nothing drafted");
        eprintln!("{name}: {accepted} of {drafted} drafted tokens accepted");
    }
}

/// The head's distribution for the first drafted token after `context` (temperature 1, nothing
/// cut off), indexed by token.
fn first_draft_distribution(
    drafter: &mut MtpDrafter<CpuBackend>,
    seq: &Sequence<CpuBackend>,
    context: &[u32],
    n_vocab: usize,
) -> Vec<f32> {
    let params = SamplingParams {
        temperature: 1.0,
        top_k: 0,
        top_p: 1.0,
        min_p: 0.0,
        seed: Some(1),
        ..SamplingParams::default()
    };
    let mut sampler = Sampler::new(params, n_vocab).unwrap();
    let mut out = Draft::default();
    drafter
        .draft_with_hidden(context, seq.hidden(), 1, &mut sampler, &mut out)
        .unwrap();
    let mut dist = vec![0.0; n_vocab];
    for t in out.probs[0]
        .as_ref()
        .expect("a sampled draft's distribution")
    {
        dist[t.id as usize] = t.prob;
    }
    dist
}

/// A new drafter's distribution on a new sequence that computed `context` but its last token.
fn from_scratch(model: &Arc<Model<CpuBackend>>, context: &[u32]) -> Vec<f32> {
    let mut seq = model.new_sequence(128).unwrap();
    seq.keep_hidden();
    model
        .forward(&mut seq, &context[..context.len() - 1], Logits::Last)
        .unwrap();
    let mut drafter = MtpDrafter::new(Arc::clone(model), 128, 0.0).unwrap();
    first_draft_distribution(&mut drafter, &seq, context, model.config.n_vocab)
}

fn assert_close(got: &[f32], want: &[f32], what: &str) {
    let worst = got
        .iter()
        .zip(want)
        .map(|(g, w)| (g - w).abs())
        .fold(0.0f32, f32::max);
    assert!(
        worst < 1e-4,
        "{what}: probabilities differ by up to {worst}"
    );
}

/// What the server's slots and the chat's turns do to a sequence: a prefix copied from another
/// sequence, a cut back to an earlier position and other tokens. A drafter that drafted for the
/// sequence's earlier tokens then predicts what a new one predicts on a sequence computed from
/// scratch — its cache cut back with the target and the positions it lacks fed again.
#[test]
fn the_head_follows_copied_and_cut_sequences() {
    let dir = tempfile::tempdir().unwrap();
    let path = synth(
        dir.path(),
        "m",
        &[
            "--format",
            "f32",
            "--interval",
            "2",
            "--nextn",
            "1",
            "--seed",
            "15",
        ],
    );
    let (model, _) = load(&path);
    let n_vocab = model.config.n_vocab;
    let all = prompts(n_vocab as u32);
    let prefix = &all[4]; // 24 tokens
    let other = &all[3]; // 12 tokens
    let mut donor = model.new_sequence(128).unwrap();
    donor.keep_hidden();
    model.forward(&mut donor, prefix, Logits::Last).unwrap();

    let mut seq = model.new_sequence(128).unwrap();
    seq.set_checkpoint_policy(CheckpointPolicy {
        interval: 4,
        max: 8,
    });
    seq.keep_hidden();
    model
        .forward(&mut seq, &other[..other.len() - 1], Logits::Last)
        .unwrap();
    let mut drafter = MtpDrafter::new(Arc::clone(&model), 128, 0.0).unwrap();
    let got = first_draft_distribution(&mut drafter, &seq, other, n_vocab);
    assert_close(&got, &from_scratch(&model, other), "before");

    // Cut back (to a checkpoint of the recurrent layers) and continued on other tokens: the
    // head keeps what it shares with them.
    let back = seq.truncate(9);
    assert_eq!(back, 8);
    let mut context = other[..back].to_vec();
    context.extend_from_slice(&prefix[..5]);
    model
        .forward(&mut seq, &context[back..context.len() - 1], Logits::Last)
        .unwrap();
    let got = first_draft_distribution(&mut drafter, &seq, &context, n_vocab);
    assert_close(&got, &from_scratch(&model, &context), "after a cut");

    // The donor's whole sequence copied over (its hidden states with it).
    let reached = seq.extend_from(&donor, prefix.len()).unwrap();
    assert_eq!(reached, prefix.len());
    assert_eq!(seq.hidden().map(|(first, _)| first), Some(0));
    let mut context = prefix.clone();
    context.push(other[0]);
    let got = first_draft_distribution(&mut drafter, &seq, &context, n_vocab);
    assert_close(&got, &from_scratch(&model, &context), "after a copy");
}

/// A copy of `path` without the tensor `drop`, or with `reshape` = (name, dims) stored with
/// other dimensions (its data cut to fit).
fn altered(path: &Path, drop: Option<&str>, reshape: Option<(&str, Vec<u64>)>) -> GgufFile {
    let file = GgufFile::open(path).unwrap();
    let mut w = GgufWriter::new();
    for (k, v) in file.metadata().iter() {
        w.add_kv(k, v.clone()).unwrap();
    }
    for t in file.tensors() {
        if drop == Some(t.name.as_str()) {
            continue;
        }
        match &reshape {
            Some((name, dims)) if *name == t.name => {
                let n: u64 = dims.iter().product();
                let bytes = t.format.bytes_for(n).unwrap() as usize;
                w.add_tensor(&t.name, dims, t.format, &file.tensor_data(t)[..bytes])
                    .unwrap();
            }
            _ => {
                w.add_tensor(&t.name, &t.dims, t.format, file.tensor_data(t))
                    .unwrap();
            }
        }
    }
    GgufFile::from_bytes(w.to_bytes().unwrap()).unwrap()
}

#[test]
fn files_without_a_usable_head_are_refused_naming_the_key_or_tensor() {
    let dir = tempfile::tempdir().unwrap();
    // No prediction layers: the library and `run --draft-mtp` name the key.
    let plain = synth(dir.path(), "plain", &["--format", "f32"]);
    let file = Arc::new(GgufFile::open(&plain).unwrap());
    let mut model = Model::load(file, CpuBackend::new(1).unwrap()).unwrap();
    let err = model.load_mtp().unwrap_err().to_string();
    assert!(err.contains("qwen35.nextn_predict_layers"), "{err}");
    for flag in [&["--draft-mtp"][..], &["--spec-type", "draft-mtp"]] {
        let mut args = vec!["run", "-m", path_str(&plain), "-p", "x", "-n", "2"];
        // (the model is refused before the prompt is read)
        args.extend_from_slice(flag);
        let run = oxibonsai(args);
        assert_eq!(run.code, 1, "{flag:?}: {}", run.stderr);
        assert!(
            run.stderr.contains("nextn_predict_layers"),
            "{flag:?}: {}",
            run.stderr
        );
    }
    let run = oxibonsai([
        "run",
        "-m",
        path_str(&plain),
        "-p",
        "x",
        "--spec-type",
        "eagle3",
    ]);
    assert_eq!(run.code, 1);
    assert!(run.stderr.contains("--spec-type eagle3"), "{}", run.stderr);

    // The head's tensors (block 4, after the 4 trunk layers), each missing, then misshapen.
    let with = synth(dir.path(), "with", &["--format", "f32", "--nextn", "1"]);
    let e = 256u64;
    let cases: [(&str, Vec<u64>); 6] = [
        ("blk.4.nextn.eh_proj.weight", vec![e, e]),
        ("blk.4.nextn.enorm.weight", vec![e / 2]),
        ("blk.4.nextn.hnorm.weight", vec![e / 2]),
        ("blk.4.attn_q.weight", vec![e, 64]),
        ("blk.4.ffn_down.weight", vec![e, e]),
        ("blk.4.attn_k_norm.weight", vec![32]),
    ];
    for (name, dims) in cases {
        for file in [
            altered(&with, Some(name), None),
            altered(&with, None, Some((name, dims.clone()))),
        ] {
            let mut model = Model::load(Arc::new(file), CpuBackend::new(1).unwrap())
                .unwrap_or_else(|e| panic!("{name}: the trunk no longer loads: {e}"));
            let err = model
                .load_mtp()
                .err()
                .unwrap_or_else(|| panic!("{name}: accepted"))
                .to_string();
            assert!(err.contains(name), "{name}: {err}");
        }
    }
    // The optional ones (shared_head_norm falls back to output_norm) are checked when present.
    let file = altered(
        &with,
        None,
        Some(("blk.4.nextn.shared_head_norm.weight", vec![e / 2])),
    );
    let mut model = Model::load(Arc::new(file), CpuBackend::new(1).unwrap()).unwrap();
    let err = model.load_mtp().unwrap_err().to_string();
    assert!(err.contains("shared_head_norm"), "{err}");
    let file = altered(&with, Some("blk.4.nextn.shared_head_norm.weight"), None);
    let mut model = Model::load(Arc::new(file), CpuBackend::new(1).unwrap()).unwrap();
    model.load_mtp().unwrap();
}

/// `run --draft-mtp` goes through the CLI: the same text as without it (a real vocabulary, so
/// the prompt is text).
#[test]
fn run_with_draft_mtp_prints_the_plain_output() {
    let dir = tempfile::tempdir().unwrap();
    let vocab = oxibonsai_testkit::golden("models/qwen3-q1_0.gguf");
    let args = [
        "--format", "q8_0", "--nextn", "1", "--seed", "21", "--vocab",
    ];
    let mut args = args.to_vec();
    args.push(path_str(&vocab));
    let path = synth(dir.path(), "m", &args);
    let base = [
        "run",
        "-m",
        path_str(&path),
        "-p",
        "The cat sat on the mat",
        "-n",
        "12",
        "--temp",
        "0",
    ];
    let plain = oxibonsai(base);
    assert_eq!(plain.code, 0, "{}", plain.stderr);
    let mut args = base.to_vec();
    args.extend(["--draft-mtp", "--draft-max", "3"]);
    let mtp = oxibonsai(args);
    assert_eq!(mtp.code, 0, "{}", mtp.stderr);
    assert_eq!(mtp.stdout, plain.stdout);
    assert!(mtp.stderr.contains("draft (mtp)"), "{}", mtp.stderr);
}
