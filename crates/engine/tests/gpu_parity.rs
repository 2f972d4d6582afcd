//! Logit parity with the reference engine on every golden model through the GPU backend, on the
//! adapter `OXIBONSAI_GPU_ADAPTER` names (CI: Mesa's lavapipe, `llvmpipe`); no adapter fails.
//! The prompt goes in one batch (the products' multi-token path), the reference's greedy tokens
//! one at a time (decode), and all 48 positions must meet the file's bounds of golden/README.md.
//! The backend must also have run the products on the GPU: a GPU op that failed and was rerun on
//! the CPU fails the test, and only formats without a GPU product may stay on the CPU.

use std::sync::Arc;

use oxibonsai_engine::{GpuBackend, Logits, Model};
use oxibonsai_gguf::GgufFile;
use oxibonsai_testkit::golden;
use oxibonsai_testkit::parity::{bounds, compare, read_logits};
use serde_json::Value;

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

fn load(relative: &str) -> Model<GpuBackend> {
    let backend = match GpuBackend::new(2) {
        Ok(b) => b,
        Err(e) => panic!("the GPU parity tests need an adapter: {e}"),
    };
    let file = Arc::new(GgufFile::open(golden(relative)).expect("golden model opens"));
    Model::load(file, backend).expect("golden model loads on the GPU backend")
}

/// The prompt in one batch, then each greedy token alone: the logits of every position.
fn prompt_then_decode(model: &Model<GpuBackend>, prompt: &[u32], decode: &[u32]) -> Vec<f32> {
    let mut seq = model.new_sequence(prompt.len() + decode.len()).unwrap();
    let mut logits = model
        .forward(&mut seq, prompt, Logits::All)
        .unwrap()
        .to_vec();
    for &t in decode {
        logits.extend_from_slice(model.forward(&mut seq, &[t], Logits::Last).unwrap());
    }
    logits
}

/// Runs `file` teacher-forced on `entry`'s sequence against `logits_file`; returns worst σ.
fn check(name: &str, file: &str, entry: &Value, logits_file: &str, cpu_formats: &[&str]) {
    let start = std::time::Instant::now();
    let model = load(file);
    let ours = prompt_then_decode(
        &model,
        &ids(&entry["prompt_ids"]),
        &ids(&entry["greedy_ids"]),
    );
    let reference = read_logits(logits_file);
    let report = compare(&ours, &reference, model.config.n_vocab);
    let b = bounds(logits_file);
    let offload = model.backend.offload();
    println!(
        "{name} on {}: max {:.4} σ (bound {}), mean {:.4} σ (bound {}), top-1 mismatches {:?} \
         over {} positions; {offload}; {:.1} s",
        model.backend.adapter().name,
        report.worst_max_sigma,
        b.max_sigma,
        report.worst_mean_sigma,
        b.mean_sigma,
        report.top1_mismatches,
        report.positions,
        start.elapsed().as_secs_f64()
    );
    assert!(
        report.passes(b),
        "{name}: parity fails: {report:?} vs {b:?}"
    );
    for (op, n) in &offload.ops_on_cpu {
        assert!(!op.contains("GPU error"), "{name}: {op} ×{n}");
        let product_on_cpu = op.strip_prefix("matmul ");
        assert!(
            product_on_cpu.is_none_or(|f| cpu_formats.contains(&f)),
            "{name}: {op} ran on the CPU ×{n}"
        );
    }
    let kept: Vec<&str> = offload
        .weights_on_cpu
        .iter()
        .map(|(f, _)| f.as_str())
        .collect();
    assert_eq!(kept, cpu_formats, "{name}: matrices kept on the CPU");
}

#[test]
fn every_reference_model_matches_the_reference_logits_on_the_gpu() {
    let manifest = manifest();
    let mut checked = 0;
    for (name, entry) in &manifest {
        let Some(logits_file) = entry.get("logits").and_then(Value::as_str) else {
            continue;
        };
        // The mixed file's output matrix is Q4_1, which has no GPU product yet.
        let cpu_formats: &[&str] = if name == "qwen3-mixed" {
            &["q4_1"]
        } else {
            &[]
        };
        check(
            name,
            entry["file"].as_str().unwrap(),
            entry,
            logits_file,
            cpu_formats,
        );
        checked += 1;
    }
    assert!(checked >= 8, "only {checked} models had reference logits");
}

#[test]
fn ternary_layouts_the_reference_cannot_run_match_tq2_0_logits_on_the_gpu() {
    let manifest = manifest();
    let entry = &manifest["qwen3-ternary-tq2_0"];
    let logits_file = entry["logits"].as_str().unwrap();
    for file in [
        "models/qwen3-ternary-pq2_0.gguf",
        "models/qwen3-ternary-q2_0_g128_legacy.gguf",
    ] {
        check(file, file, entry, logits_file, &[]);
    }
}
