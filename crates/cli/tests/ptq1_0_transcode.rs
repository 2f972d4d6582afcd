//! PTQ1_0 at model level. The reference engine has no PTQ1_0, but the golden ternary model's
//! TQ2_0 weights (256-value blocks, one f16 scale, ternary codes) are exactly ternary at 128
//! values a block too, so `quantize --allow-requantize … ptq1_0` must transcode them without
//! loss (checked value by value), and the engine on the transcoded file must match the logits
//! the reference computed on the TQ2_0 original, on every CPU tier, under the parity bounds of
//! `logits/tolerance.json`. Data PTQ1_0 cannot hold exactly is refused, naming the tensor.

mod common;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use common::{oxibonsai, path_str};
use oxibonsai_engine::{CpuBackend, Logits, Model};
use oxibonsai_formats::kernels::Isa;
use oxibonsai_formats::FormatKind;
use oxibonsai_gguf::GgufFile;
use oxibonsai_testkit::golden;
use oxibonsai_testkit::parity::{bounds, compare, read_logits};
use serde_json::Value;

const SOURCE: &str = "models/qwen3-ternary-tq2_0.gguf";
const LOGITS: &str = "logits/qwen3-ternary-tq2_0.f32";

fn ids(value: &Value) -> Vec<u32> {
    value
        .as_array()
        .expect("id list")
        .iter()
        .map(|v| u32::try_from(v.as_u64().expect("id")).expect("id fits u32"))
        .collect()
}

/// Every tier this CPU runs; fails naming a tier `OXIBONSAI_REQUIRE_ISA` requires that it lacks.
fn tiers() -> Vec<Isa> {
    let tiers: Vec<Isa> = Isa::ALL.into_iter().filter(|isa| isa.available()).collect();
    let names: Vec<&str> = tiers.iter().map(|isa| isa.name()).collect();
    oxibonsai_testkit::assert_required_tiers(&names);
    tiers
}

/// `quantize --allow-requantize IN OUT ptq1_0`, the Q8_0 embedding and output kept as they are.
fn transcode(input: &Path, out: &Path) -> common::Run {
    oxibonsai([
        "quantize",
        "--allow-requantize",
        "--embedding-type",
        "q8_0",
        "--output-type",
        "q8_0",
        path_str(input),
        path_str(out),
        "ptq1_0",
    ])
}

fn transcoded(dir: &Path) -> PathBuf {
    let out = dir.join("ptq1_0.gguf");
    let run = transcode(&golden(SOURCE), &out);
    assert_eq!(run.code, 0, "quantize ptq1_0: {}", run.stderr);
    out
}

#[test]
fn ternary_tq2_0_transcodes_to_ptq1_0_without_loss() {
    let dir = tempfile::tempdir().unwrap();
    let source = GgufFile::open(golden(SOURCE)).unwrap();
    let ours = GgufFile::open(transcoded(dir.path())).unwrap();
    let mut transcoded = 0;
    for t in source.tensors() {
        let o = ours
            .tensor(&t.name)
            .unwrap_or_else(|| panic!("{} missing", t.name));
        assert_eq!(o.dims, t.dims, "{}: dims", t.name);
        if t.format.kind == FormatKind::TQ2_0 {
            assert_eq!(o.format.kind, FormatKind::PTQ1_0, "{}", t.name);
            let want = t.format.dequantize_row(source.tensor_data(t)).unwrap();
            let got = o.format.dequantize_row(ours.tensor_data(o)).unwrap();
            // Equal as numbers: TQ2_0 may store a zero as −0 (a negative scale times 0).
            assert!(want == got, "{}: values changed", t.name);
            transcoded += 1;
        } else {
            assert_eq!(o.format.kind, t.format.kind, "{}", t.name);
            assert_eq!(
                ours.tensor_data(o),
                source.tensor_data(t),
                "{}: bytes",
                t.name
            );
        }
    }
    // 4 layers × 7 projections.
    assert_eq!(transcoded, 28, "TQ2_0 tensors transcoded");
}

#[test]
fn the_ptq1_0_transcode_matches_the_reference_logits_of_tq2_0_on_every_tier() {
    let manifest: serde_json::Map<String, Value> =
        serde_json::from_str(&std::fs::read_to_string(golden("models/manifest.json")).unwrap())
            .unwrap();
    let entry = &manifest["qwen3-ternary-tq2_0"];
    assert_eq!(entry["logits"].as_str(), Some(LOGITS));
    let mut tokens = ids(&entry["prompt_ids"]);
    tokens.extend(ids(&entry["greedy_ids"]));
    let reference = read_logits(LOGITS);
    let b = bounds(LOGITS);

    let dir = tempfile::tempdir().unwrap();
    let file = Arc::new(GgufFile::open(transcoded(dir.path())).unwrap());
    let mut failures = Vec::new();
    for isa in tiers() {
        let model = Model::load(file.clone(), CpuBackend::with_isa(2, isa).unwrap())
            .unwrap_or_else(|e| panic!("[{}] load: {e}", isa.name()));
        // The prompt in one batch (matrix-matrix kernels), then token by token (matrix-vector).
        let mut seq = model.new_sequence(tokens.len()).unwrap();
        let batched = model
            .forward(&mut seq, &tokens, Logits::All)
            .unwrap()
            .to_vec();
        let mut seq = model.new_sequence(tokens.len()).unwrap();
        let mut one_by_one = Vec::new();
        for &t in &tokens {
            one_by_one.extend_from_slice(model.forward(&mut seq, &[t], Logits::All).unwrap());
        }
        for (how, ours) in [("batched", &batched), ("one by one", &one_by_one)] {
            let report = compare(ours, &reference, model.config.n_vocab);
            let line = format!(
                "ptq1_0 {how} [{}]: max {:.4} σ (bound {}), mean {:.4} σ (bound {}), top-1 mismatches {:?}",
                isa.name(),
                report.worst_max_sigma,
                b.max_sigma,
                report.worst_mean_sigma,
                b.mean_sigma,
                report.top1_mismatches
            );
            println!("{line}");
            if !report.passes(b) {
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
fn data_ptq1_0_cannot_hold_exactly_is_refused_naming_the_tensor() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("refused.gguf");
    // Q4_K / Q6_K / Q8_0 weights are not ternary.
    let run = transcode(&golden("models/qwen3-mixed.gguf"), &out);
    assert_eq!(run.code, 1, "{}", run.stderr);
    assert!(
        run.stderr.contains("tensor 'blk.") && run.stderr.contains("ptq1_0"),
        "{}",
        run.stderr
    );
    assert!(run.stderr.contains("exactly"), "{}", run.stderr);
    assert!(!out.exists(), "a refused transcode wrote {}", out.display());
}
