//! Speculative decoding through the binary and on models the engine's tests do not cover: greedy
//! `run` output with `--draft-ngram` / `--model-draft` is byte for byte the output without
//! (SmolLM2 drafted by a lower-bit copy of itself made by `oxibonsai quantize`); a qwen35 hybrid
//! (recurrent layers: rejected drafts are dropped by going back to a checkpoint and computing
//! again) gives plain greedy output, compared through the engine; a draft model whose vocabulary
//! differs is refused naming the first differing token.

mod common;

use std::path::Path;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use common::{oxibonsai, path_str};
use oxibonsai_engine::generate::{generate_speculative, GenerateOptions};
use oxibonsai_engine::sampling::SamplingParams;
use oxibonsai_engine::speculative::{DraftLimits, DraftModel, Drafter, PromptLookup, Speculation};
use oxibonsai_engine::{CpuBackend, Model};
use oxibonsai_gguf::{GgufFile, GgufWriter, Value};
use oxibonsai_hub::{resolve_model, FetchOptions};
use oxibonsai_tokenizer::Tokenizer;

fn smollm2() -> std::path::PathBuf {
    resolve_model("smollm2", &FetchOptions::from_env()).expect("SmolLM2 from the model cache")
}

fn tempdir() -> tempfile::TempDir {
    tempfile::tempdir().expect("a temporary folder")
}

const TEXT: &str =
    "The old lighthouse keeper climbed the stairs every evening. The old lighthouse \
keeper climbed the stairs every evening, and the lamp";

#[test]
fn greedy_run_output_is_the_same_with_either_drafter() {
    let model = smollm2();
    let dir = tempdir();
    // A lower-bit copy of the model drafts for it.
    let draft = dir.path().join("draft-q4_0.gguf");
    let made = oxibonsai([
        "quantize",
        "--allow-requantize",
        path_str(&model),
        path_str(&draft),
        "q4_0",
    ]);
    assert_eq!(made.code, 0, "quantize: {}", made.stderr);
    let base = [
        "run",
        "-m",
        path_str(&model),
        "-t",
        "2",
        "--temp",
        "0",
        "-n",
        "40",
        "-p",
        TEXT,
    ];
    let plain = oxibonsai(base);
    assert_eq!(plain.code, 0, "{}", plain.stderr);
    assert!(plain.stdout.len() > 40, "{:?}", plain.stdout);
    let cases: [&[&str]; 4] = [
        &["--draft-ngram"],
        &["--draft-ngram", "2", "--draft-max", "4", "--draft-min", "2"],
        &["-md", path_str(&draft)],
        &[
            "--model-draft",
            path_str(&draft),
            "--draft-max",
            "3",
            "--draft-p-min",
            "0.5",
        ],
    ];
    for extra in cases {
        let run = oxibonsai(base.iter().chain(extra));
        assert_eq!(run.code, 0, "{extra:?}: {}", run.stderr);
        assert_eq!(run.stdout, plain.stdout, "{extra:?}");
        assert!(
            run.stderr.contains("tokens drafted"),
            "{extra:?}: {}",
            run.stderr
        );
        eprintln!("{extra:?}: {}", run.stderr.lines().last().unwrap_or(""));
    }
}

#[test]
fn a_draft_model_with_another_vocabulary_is_refused() {
    let golden = oxibonsai_testkit::golden("models/qwen3-q1_0.gguf");
    let dir = tempdir();
    let changed = dir.path().join("changed.gguf");
    renamed_token(&golden, 700, "zzz-not-a-token", &changed);
    let run = oxibonsai([
        "run",
        "-m",
        path_str(&golden),
        "-md",
        path_str(&changed),
        "-n",
        "4",
        "-p",
        "hi",
    ]);
    assert_eq!(run.code, 1, "{}", run.stderr);
    assert!(
        run.stderr.contains("token 700 is")
            && run.stderr.contains("zzz-not-a-token")
            && run.stderr.contains("vocabularies must be the same"),
        "{}",
        run.stderr
    );
    // Another size altogether.
    let run = oxibonsai([
        "run",
        "-m",
        path_str(&golden),
        "-md",
        path_str(&smollm2()),
        "-n",
        "4",
        "-p",
        "hi",
    ]);
    assert_eq!(run.code, 1, "{}", run.stderr);
    assert!(
        run.stderr.contains("2056 tokens and the draft 49152"),
        "{}",
        run.stderr
    );
}

/// A copy of `model` whose token `id` has the text `text`.
fn renamed_token(model: &Path, id: usize, text: &str, out: &Path) {
    let file = GgufFile::open(model).unwrap();
    let mut writer = GgufWriter::new();
    for (key, value) in file.metadata().iter() {
        let mut value = value.clone();
        if key == "tokenizer.ggml.tokens" {
            if let Value::Array(oxibonsai_gguf::Array::String(tokens)) = &mut value {
                tokens[id] = text.to_owned();
            } else {
                panic!("tokenizer.ggml.tokens is not a string array");
            }
        }
        writer.add_kv(key, value).unwrap();
    }
    for t in file.tensors() {
        writer
            .add_tensor(&t.name, &t.dims, t.format, file.tensor_data(t))
            .unwrap();
    }
    writer.write_file(out).unwrap();
}

fn synth_qwen35(dir: &Path, name: &str, seed: &str) -> std::path::PathBuf {
    let path = dir.join(name);
    let vocab = oxibonsai_testkit::golden("models/qwen3-q1_0.gguf");
    let run = oxibonsai([
        "synth",
        "--arch",
        "qwen35",
        "--format",
        "q8_0",
        "--layers",
        "5",
        "--recurrent-layers",
        "1,0,1,1,0",
        "--seed",
        seed,
        "--vocab",
        path_str(&vocab),
        "-o",
        path_str(&path),
    ]);
    assert_eq!(run.code, 0, "synth: {}", run.stderr);
    path
}

#[test]
fn a_hybrid_model_gives_plain_greedy_output_with_either_drafter() {
    let dir = tempdir();
    let target_path = synth_qwen35(dir.path(), "target.gguf", "3");
    let draft_path = synth_qwen35(dir.path(), "draft.gguf", "9");
    let open = |p: &Path| {
        let file = Arc::new(GgufFile::open(p).unwrap());
        let tokenizer = Tokenizer::from_gguf(&file).unwrap();
        (
            Model::load(file, CpuBackend::new(2).unwrap()).unwrap(),
            tokenizer,
        )
    };
    let (target, tokenizer) = open(&target_path);
    assert!(target.config.has_recurrent_layers());
    let (draft_model, draft_tokenizer) = open(&draft_path);
    let (twin_model, _) = open(&target_path);
    let n_vocab = target.config.n_vocab;
    let mut other =
        DraftModel::new(draft_model, &tokenizer, n_vocab, &draft_tokenizer, 256, 0.0).unwrap();
    let mut twin = DraftModel::new(twin_model, &tokenizer, n_vocab, &tokenizer, 256, 0.0).unwrap();
    let options = GenerateOptions {
        n_predict: Some(32),
        sampling: SamplingParams {
            temperature: 0.0,
            ..SamplingParams::default()
        },
        stop: Vec::new(),
        render_special: false,
    };
    let generate = |drafter: Option<&mut dyn Drafter>, prompt: &[u32], max: usize| {
        let mut seq = target.new_sequence(256).unwrap();
        let mut speculation = drafter.map(|d| Speculation::new(d, DraftLimits { max, min: 0 }));
        let stats = generate_speculative(
            &target,
            &mut seq,
            &tokenizer,
            prompt,
            &options,
            None,
            speculation.as_mut(),
            &AtomicBool::new(false),
            |_| true,
        )
        .unwrap();
        let recomputed = speculation.map_or(0, |s| s.recomputed);
        (stats, seq.tokens().to_vec(), recomputed)
    };
    let prompts: [&[u32]; 3] = [
        &[17, 230, 5, 499, 64, 3, 311, 128],
        &[9, 8, 9, 8, 9, 8, 9, 8, 9, 8],
        &[1000],
    ];
    let mut recomputed = 0;
    for prompt in prompts {
        let (plain, plain_tokens, _) = generate(None, prompt, 1);
        for max in [1, 3, 8, 16] {
            let mut lookup = PromptLookup::default();
            let drafters: [&mut dyn Drafter; 3] = [&mut lookup, &mut other, &mut twin];
            for drafter in drafters {
                let name = drafter.name();
                let (spec, spec_tokens, r) = generate(Some(drafter), prompt, max);
                assert_eq!(spec.tokens, plain.tokens, "{name}, max {max}, {prompt:?}");
                assert_eq!(spec.stop_reason, plain.stop_reason);
                // The sequence holds exactly what plain generation left: the recurrent state
                // went back to a checkpoint and computed the accepted tokens again.
                assert_eq!(spec_tokens, plain_tokens, "{name}, max {max}");
                recomputed += r;
            }
        }
    }
    assert!(recomputed > 0, "no rejected draft was ever cut");
    eprintln!("positions recomputed after rejected drafts: {recomputed}");
}
