//! `info` and `validate` on every golden model, checked against the manifest written by the tool that
//! made the files; `validate` and the loader on malformed files made by mutating a valid one.

mod common;

use common::{oxibonsai, path_str};
use oxibonsai_testkit::golden;
use serde_json::Value;

fn manifest() -> serde_json::Map<String, Value> {
    let text = std::fs::read_to_string(golden("models/manifest.json")).expect("manifest readable");
    serde_json::from_str(&text).expect("manifest is JSON")
}

#[test]
fn info_json_matches_the_manifest_for_every_model() {
    let manifest = manifest();
    assert!(manifest.len() >= 10, "manifest lists the golden models");
    for (name, entry) in &manifest {
        let file = golden(entry["file"].as_str().expect("file"));
        let run = oxibonsai(["info", "--json", path_str(&file)]);
        assert_eq!(run.code, 0, "{name}: {}", run.stderr);
        let info: Value = serde_json::from_str(&run.stdout).expect("info --json is JSON");
        for (ours, theirs) in [
            ("architecture", "arch"),
            ("n_embd", "n_embd"),
            ("n_ff", "n_ff"),
            ("n_layer", "n_layer"),
            ("n_head", "n_head"),
            ("n_head_kv", "n_head_kv"),
            ("head_dim", "head_dim"),
            ("tied_embeddings", "tied_embeddings"),
        ] {
            assert_eq!(info[ours], entry[theirs], "{name}: {ours}");
        }
        assert_eq!(
            info["tokenizer"]["vocab_size"], entry["n_vocab"],
            "{name}: vocab"
        );
        assert_eq!(info["file_size"], entry["bytes"], "{name}: size");
        assert_eq!(info["chat_template"], Value::Bool(true), "{name}: template");
        // The per-type totals add up to the tensor count and the parameter count.
        let types = info["types"].as_array().expect("types");
        let count: u64 = types.iter().map(|t| t["tensors"].as_u64().unwrap()).sum();
        let params: u64 = types.iter().map(|t| t["params"].as_u64().unwrap()).sum();
        assert_eq!(count, info["tensor_count"].as_u64().unwrap(), "{name}");
        assert_eq!(params, info["n_params"].as_u64().unwrap(), "{name}");

        let run = oxibonsai(["validate", path_str(&file)]);
        assert_eq!(
            run.code, 0,
            "{name}: validate: {}{}",
            run.stdout, run.stderr
        );
        assert!(run.stdout.contains("OK"), "{name}: {}", run.stdout);
    }
}

#[test]
fn info_names_every_format_of_the_mixed_file() {
    let file = golden("models/qwen3-mixed.gguf");
    let run = oxibonsai(["info", "--json", path_str(&file)]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let info: Value = serde_json::from_str(&run.stdout).unwrap();
    let mut names: Vec<&str> = info["types"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["type"].as_str().unwrap())
        .collect();
    names.sort_unstable();
    // token_embd Q8_0, attention Q4_0, feed-forward Q1_0, output Q4_1, norms F32 (manifest note).
    assert_eq!(names, ["f32", "q1_0", "q4_0", "q4_1", "q8_0"]);
    // The text form shows the same facts.
    let text = oxibonsai(["info", path_str(&file)]);
    assert_eq!(text.code, 0);
    for needle in [
        "qwen3",
        "q1_0",
        "q4_1",
        "untied",
        "2056 tokens",
        "chat template     yes",
    ] {
        assert!(
            text.stdout.contains(needle),
            "missing {needle:?} in:\n{}",
            text.stdout
        );
    }
}

#[test]
fn id_42_layouts_are_told_apart_per_file() {
    for (file, layout) in [
        ("models/qwen3-ternary-q2_0.gguf", "q2_0"),
        (
            "models/qwen3-ternary-q2_0_g128_legacy.gguf",
            "q2_0_g128_legacy",
        ),
        ("models/qwen3-ternary-pq2_0.gguf", "pq2_0"),
    ] {
        let run = oxibonsai(["info", "--json", path_str(&golden(file))]);
        assert_eq!(run.code, 0, "{file}: {}", run.stderr);
        let info: Value = serde_json::from_str(&run.stdout).unwrap();
        let names: Vec<&str> = info["types"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["type"].as_str().unwrap())
            .collect();
        assert!(names.contains(&layout), "{file}: {names:?}");
    }
}

#[test]
fn vocabulary_files_open_and_validate() {
    for file in [
        "tokenizer/qwen3/qwen3-vocab.gguf",
        "tokenizer/smollm2/smollm2-vocab.gguf",
    ] {
        let path = golden(file);
        let run = oxibonsai(["validate", "--json", path_str(&path)]);
        assert_eq!(run.code, 0, "{file}: {}{}", run.stdout, run.stderr);
        let report: Value = serde_json::from_str(&run.stdout).unwrap();
        assert_eq!(report["ok"], Value::Bool(true));
        assert_eq!(report["problems"], Value::Array(vec![]));
    }
    let run = oxibonsai([
        "info",
        "--json",
        "-m",
        path_str(&golden("tokenizer/qwen3/qwen3-vocab.gguf")),
    ]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let info: Value = serde_json::from_str(&run.stdout).unwrap();
    assert_eq!(info["tokenizer"]["vocab_size"], 151936);
    assert_eq!(info["tokenizer"]["pre"], "qwen2");
    assert_eq!(info["tokenizer"]["kind"], "BPE");
    assert_eq!(info["tokenizer"]["bos_token_id"], 151643);
    assert_eq!(info["tokenizer"]["eos_token_id"], 151645);
    assert_eq!(info["tensor_count"], 0);
}

#[test]
fn missing_file_is_a_one_line_error_with_exit_code_1() {
    let run = oxibonsai(["info", "/nonexistent/model.gguf"]);
    assert_eq!(run.code, 1);
    assert!(
        run.stderr.contains("/nonexistent/model.gguf"),
        "{}",
        run.stderr
    );
    assert_eq!(run.stderr.trim().lines().count(), 1, "{}", run.stderr);
    let run = oxibonsai(["validate", "/nonexistent/model.gguf"]);
    assert_eq!(run.code, 1);
}

/// The mixture line: the file type (these synthetic files set none) and the tensor types by
/// descending count, as the manifest describes qwen3-mixed: per layer 4 norms (f32), 4 attention
/// matrices (q4_0) and 3 feed-forward ones (q1_0); token_embd q8_0, output q4_1, output_norm f32.
/// Files `quantize` writes name their file type; tests/quantize.rs checks those against the
/// reference's mixtures.
#[test]
fn info_shows_the_mixture_of_types() {
    let manifest = manifest();
    let n_layer = manifest["qwen3-mixed"]["n_layer"].as_u64().unwrap();
    let want = format!(
        "no file type: f32 {}, q4_0 {}, q1_0 {}, q4_1 1, q8_0 1",
        1 + 4 * n_layer,
        4 * n_layer,
        3 * n_layer
    );
    let file = golden("models/qwen3-mixed.gguf");
    let run = oxibonsai(["info", "--json", path_str(&file)]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let info: Value = serde_json::from_str(&run.stdout).unwrap();
    assert_eq!(info["mixture"].as_str(), Some(want.as_str()));
    assert_eq!(info["file_type"], Value::Null);
    assert_eq!(info["file_type_id"], Value::Null);
    let text = oxibonsai(["info", path_str(&file)]);
    assert!(text.stdout.contains(&want), "{}", text.stdout);
}

/// `info` names the CPU kernel tier and, per tensor type, whether it has a fast kernel there:
/// forced to the scalar tier, none has; on any vector tier (x86 or ARM), Q1_0 and Q8_0 do.
#[test]
fn info_reports_the_kernel_tier_and_the_types_without_a_fast_kernel() {
    use oxibonsai_formats::kernels::Isa;
    let file = golden("models/qwen3-mixed.gguf");
    let info_with = |isa: Option<&str>| -> Value {
        let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_oxibonsai"));
        command.args(["info", "--json", path_str(&file)]);
        match isa {
            Some(isa) => command.env("OXIBONSAI_ISA", isa),
            None => command.env_remove("OXIBONSAI_ISA"),
        };
        let output = command.output().expect("oxibonsai runs");
        assert!(output.status.success(), "{output:?}");
        serde_json::from_slice(&output.stdout).expect("info --json is JSON")
    };
    let fast = |info: &Value, name: &str| -> bool {
        info["types"]
            .as_array()
            .expect("types")
            .iter()
            .find(|t| t["type"] == name)
            .unwrap_or_else(|| panic!("no {name} in {info}"))["fast_kernel"]
            .as_bool()
            .expect("fast_kernel is a bool")
    };
    let scalar = info_with(Some("scalar"));
    assert_eq!(scalar["kernel_tier"], "scalar");
    for t in scalar["types"].as_array().expect("types") {
        assert_eq!(t["fast_kernel"], false, "{t}");
    }
    let best = info_with(None);
    assert_eq!(best["kernel_tier"], Isa::best().name());
    if Isa::best() != Isa::Scalar {
        assert!(fast(&best, "q1_0") && fast(&best, "q8_0"), "{best}");
    }
    let text = oxibonsai(["info", path_str(&file)]);
    assert!(text.stdout.contains("CPU kernels"), "{}", text.stdout);
}
