//! Our own quantized files run like the reference's: for every `requant/*.f32` reference logits
//! file, the source model is quantized by OUR `quantize` to that file type, run by the engine
//! teacher-forced on the reference's token sequence, and compared with the logits the reference
//! engine computed on ITS quantized file, under the parity criterion of golden/README.md and the
//! bounds of `logits/tolerance.json`. The quantizer is byte-identical (tests/quantize.rs), so this
//! checks the engine on every mixture the quantizer writes, on every CPU tier.

mod common;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use common::{oxibonsai, path_str};
use oxibonsai_engine::{CpuBackend, Logits, Model};
use oxibonsai_formats::kernels::Isa;
use oxibonsai_gguf::GgufFile;
use oxibonsai_testkit::golden;
use oxibonsai_testkit::parity::{bounds, compare, read_logits};
use serde_json::Value;

/// One reference logits file and how it was made.
struct Case {
    file_type: String,
    /// `requant/…f32`, also its key in tolerance.json.
    logits: String,
    tokens: Vec<u32>,
}

fn ids(value: &Value) -> Vec<u32> {
    value
        .as_array()
        .expect("id list")
        .iter()
        .map(|v| u32::try_from(v.as_u64().expect("id")).expect("id fits u32"))
        .collect()
}

/// Every file type of `json` that has reference logits, with its teacher-forced sequence.
fn cases(json: &str) -> Vec<Case> {
    let text = std::fs::read_to_string(golden(json)).expect("golden JSON readable");
    let root: Value = serde_json::from_str(&text).expect("valid JSON");
    let files = root["files"].as_object().expect("files object");
    files
        .iter()
        .filter_map(|(file_type, entry)| {
            let logits = entry.get("logits")?.as_str()?.to_owned();
            let tokens = match entry.get("token_ids") {
                Some(t) => ids(t),
                None => {
                    let mut t = ids(&entry["prompt_ids"]);
                    t.extend(ids(&entry["greedy_ids"]));
                    t
                }
            };
            Some(Case {
                file_type: file_type.clone(),
                logits,
                tokens,
            })
        })
        .collect()
}

/// Every tier this CPU runs; fails naming a tier `OXIBONSAI_REQUIRE_ISA` requires that it lacks.
fn tiers() -> Vec<Isa> {
    let tiers: Vec<Isa> = Isa::ALL.into_iter().filter(|isa| isa.available()).collect();
    let names: Vec<&str> = tiers.iter().map(|isa| isa.name()).collect();
    oxibonsai_testkit::assert_required_tiers(&names);
    tiers
}

fn quantize_with_ours(input: &Path, dir: &Path, file_type: &str) -> PathBuf {
    let out = dir.join(format!("{file_type}.gguf"));
    let run = oxibonsai([
        "quantize",
        "--allow-requantize",
        path_str(input),
        path_str(&out),
        file_type,
    ]);
    assert_eq!(run.code, 0, "quantize {file_type}: {}", run.stderr);
    out
}

/// Quantizes `input` to each case's type and checks its logits on each of `tiers`; returns one
/// line per (case, tier) with the observed distances.
fn check(input: &Path, json: &str, tiers: &[Isa], expected_cases: usize) -> Vec<String> {
    let cases = cases(json);
    assert_eq!(
        cases.len(),
        expected_cases,
        "{json}: reference logits files listed"
    );
    let dir = tempfile::tempdir().unwrap();
    let mut lines = Vec::new();
    let mut failures = Vec::new();
    for case in &cases {
        let path = quantize_with_ours(input, dir.path(), &case.file_type);
        let file = Arc::new(GgufFile::open(&path).expect("our output opens"));
        let reference = read_logits(&case.logits);
        let b = bounds(&case.logits);
        for &isa in tiers {
            let started = Instant::now();
            let model = Model::load(file.clone(), CpuBackend::with_isa(2, isa).unwrap())
                .unwrap_or_else(|e| panic!("{} [{}]: load: {e}", case.file_type, isa.name()));
            let mut seq = model.new_sequence(case.tokens.len()).unwrap();
            let ours = model
                .forward(&mut seq, &case.tokens, Logits::All)
                .unwrap()
                .to_vec();
            let report = compare(&ours, &reference, model.config.n_vocab);
            let line = format!(
                "{} [{}]: max {:.4} σ (bound {}), mean {:.4} σ (bound {}), top-1 mismatches {:?}, {:.1} s",
                case.file_type,
                isa.name(),
                report.worst_max_sigma,
                b.max_sigma,
                report.worst_mean_sigma,
                b.mean_sigma,
                report.top1_mismatches,
                started.elapsed().as_secs_f64()
            );
            println!("{line}");
            if !report.passes(b) {
                failures.push(line.clone());
            }
            lines.push(line);
        }
    }
    assert!(
        failures.is_empty(),
        "{json}: parity fails:\n{}",
        failures.join("\n")
    );
    lines
}

#[test]
fn our_qwen3_requantizations_match_the_reference_logits_on_every_tier() {
    let lines = check(
        &golden("models/qwen3-f16.gguf"),
        "requant/qwen3-f16.json",
        &tiers(),
        18,
    );
    assert_eq!(lines.len(), 18 * tiers().len());
}

#[test]
fn our_smollm2_requantizations_match_the_reference_logits_on_every_tier() {
    let input = oxibonsai_hub::resolve_model("smollm2", &oxibonsai_hub::FetchOptions::from_env())
        .expect("SmolLM2 Q4_1 is available (cached or fetched)");
    let lines = check(&input, "requant/smollm2.json", &tiers(), 8);
    assert_eq!(lines.len(), 8 * tiers().len());
}
