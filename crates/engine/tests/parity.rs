//! Logit parity with the reference engine on every golden model, teacher-forced on the reference's
//! own token sequence in one batch, under the parity criterion of golden/README.md.

use std::sync::Arc;

use oxibonsai_engine::{CpuBackend, Logits, Model};
use oxibonsai_formats::kernels::Isa;
use oxibonsai_gguf::GgufFile;
use oxibonsai_testkit::golden;
use oxibonsai_testkit::parity::{bounds, compare, read_logits, Report};
use serde_json::Value;

mod common;
// Every tier this CPU runs: the parity suite runs on each (the kernels differ per tier).
use common::tiers;

fn manifest() -> serde_json::Map<String, Value> {
    let text = std::fs::read_to_string(golden("models/manifest.json")).unwrap();
    serde_json::from_str(&text).unwrap()
}

fn ids(value: &Value) -> Vec<u32> {
    value
        .as_array()
        .expect("id list")
        .iter()
        .map(|v| v.as_u64().unwrap() as u32)
        .collect()
}

fn load_on(relative: &str, isa: Isa) -> Model<CpuBackend> {
    let file = Arc::new(GgufFile::open(golden(relative)).expect("golden model opens"));
    Model::load(file, CpuBackend::with_isa(2, isa).unwrap()).expect("golden model loads")
}

fn load(relative: &str) -> Model<CpuBackend> {
    load_on(relative, Isa::best())
}

fn teacher_forced(model: &Model<CpuBackend>, tokens: &[u32]) -> Vec<f32> {
    let mut seq = model.new_sequence(tokens.len() + 8).unwrap();
    model
        .forward(&mut seq, tokens, Logits::All)
        .unwrap()
        .to_vec()
}

fn check(name: &str, report: &Report, logits_key: &str) {
    let b = bounds(logits_key);
    println!(
        "{name}: max {:.4} σ (bound {}), mean {:.4} σ (bound {}), top-1 mismatches {:?} over {} positions",
        report.worst_max_sigma, b.max_sigma, report.worst_mean_sigma, b.mean_sigma, report.top1_mismatches, report.positions
    );
    assert!(
        report.passes(b),
        "{name}: parity fails: {report:?} vs {b:?}"
    );
}

#[test]
fn every_reference_model_matches_the_reference_logits_on_every_tier() {
    let manifest = manifest();
    for isa in tiers() {
        let mut checked = 0;
        for (name, entry) in &manifest {
            let Some(logits_file) = entry.get("logits").and_then(Value::as_str) else {
                continue;
            };
            let model = load_on(entry["file"].as_str().unwrap(), isa);
            let mut tokens = ids(&entry["prompt_ids"]);
            tokens.extend(ids(&entry["greedy_ids"]));
            let ours = teacher_forced(&model, &tokens);
            let reference = read_logits(logits_file);
            let report = compare(&ours, &reference, model.config.n_vocab);
            check(&format!("{name} [{}]", isa.name()), &report, logits_file);
            checked += 1;
        }
        assert!(checked >= 8, "only {checked} models had reference logits");
    }
}

#[test]
fn ternary_layouts_the_reference_cannot_run_match_tq2_0_logits() {
    let manifest = manifest();
    let entry = &manifest["qwen3-ternary-tq2_0"];
    let mut tokens = ids(&entry["prompt_ids"]);
    tokens.extend(ids(&entry["greedy_ids"]));
    let logits_file = entry["logits"].as_str().unwrap();
    let reference = read_logits(logits_file);
    for isa in tiers() {
        for file in [
            "models/qwen3-ternary-pq2_0.gguf",
            "models/qwen3-ternary-q2_0_g128_legacy.gguf",
        ] {
            let model = load_on(file, isa);
            let ours = teacher_forced(&model, &tokens);
            let report = compare(&ours, &reference, model.config.n_vocab);
            check(&format!("{file} [{}]", isa.name()), &report, logits_file);
        }
    }
}

/// A prompt in one batch runs the matrix-matrix kernels (where the tier has them), token by token
/// the matrix-vector ones: on the scalar tier the two are the same code and agree to rounding; on
/// the others the float summation order differs and activations re-quantized at each layer can
/// round to a neighbouring code, so they agree under the parity criterion of the file.
#[test]
fn batched_prompt_equals_token_by_token_decode() {
    let manifest = manifest();
    for isa in tiers() {
        for name in [
            "qwen3-q1_0",
            "qwen2-f16-bias",
            "qwen3-mixed",
            "qwen3-ternary-tq2_0",
        ] {
            let entry = &manifest[name];
            let model = load_on(entry["file"].as_str().unwrap(), isa);
            let tokens = ids(&entry["prompt_ids"]);
            let batched = teacher_forced(&model, &tokens);
            let mut seq = model.new_sequence(tokens.len()).unwrap();
            let mut one_by_one = Vec::new();
            for &t in &tokens {
                one_by_one.extend_from_slice(model.forward(&mut seq, &[t], Logits::Last).unwrap());
            }
            let report = compare(&one_by_one, &batched, model.config.n_vocab);
            let what = format!("{name} [{}]: batched vs one-by-one", isa.name());
            check(&what, &report, entry["logits"].as_str().unwrap());
            if isa == Isa::Scalar {
                assert!(report.worst_max_sigma < 1e-3, "{what}: {report:?}");
            }
        }
    }
}

#[test]
fn bad_input_is_refused_with_a_specific_error() {
    let model = load("models/qwen3-q1_0.gguf");
    let mut seq = model.new_sequence(8).unwrap();
    let err = model.forward(&mut seq, &[], Logits::Last).unwrap_err();
    assert!(err.to_string().contains("empty"), "{err}");
    let err = model
        .forward(&mut seq, &[5, 2056], Logits::Last)
        .unwrap_err();
    assert!(err.to_string().contains("2056"), "{err}");
    let err = model.forward(&mut seq, &[1; 9], Logits::Last).unwrap_err();
    assert!(err.to_string().contains("context"), "{err}");
    // Nothing was consumed by the refused calls.
    assert_eq!(seq.n_past(), 0);
    model.forward(&mut seq, &[1; 8], Logits::Last).unwrap();
    let err = model.forward(&mut seq, &[1], Logits::Last).unwrap_err();
    assert!(err.to_string().contains("position 8"), "{err}");
}
