//! The quantize planner through the library, against `llama-quantize`'s own per-tensor choices
//! (`requant/*.json`: what the reference wrote for every file type). Only the decisions are
//! checked, so nothing is converted; the CLI's `tests/quantize.rs` checks the bytes.

use oxibonsai_convert::quantize::{
    file_type_by_name, mixture, ModelFacts, Options, PlanError, Quantization, TensorIn,
};
use oxibonsai_formats::format_by_name;
use oxibonsai_gguf::{GgufFile, Metadata, Value};
use oxibonsai_testkit::golden;
use serde_json::Value as Json;

/// `{file type: entry}` of a golden requant file.
fn golden_files(json: &str) -> serde_json::Map<String, Json> {
    let text = std::fs::read_to_string(golden(json)).expect("golden JSON readable");
    let root: Json = serde_json::from_str(&text).expect("valid JSON");
    root["files"].as_object().expect("a 'files' object").clone()
}

/// The reference's tensors of one file type: name, dims, type name, in its writing order.
fn golden_tensors(entry: &Json) -> Vec<(String, Vec<u64>, String)> {
    entry["tensors"]
        .as_array()
        .expect("tensors array")
        .iter()
        .map(|t| {
            let dims = t["dims"].as_array().unwrap();
            (
                t["name"].as_str().unwrap().to_owned(),
                dims.iter().map(|d| d.as_u64().unwrap()).collect(),
                t["type"].as_str().unwrap().to_owned(),
            )
        })
        .collect()
}

fn options(file_type: &str) -> Options {
    Options {
        file_type: file_type_by_name(file_type).unwrap_or_else(|| panic!("file type {file_type}")),
        tensor_types: Vec::new(),
        embedding_type: None,
        output_type: None,
        allow_requantize: true,
        fallback: false,
    }
}

/// The synthetic Qwen3 (rows of 256 and 768): the file's own metadata and tensor list go through
/// `Quantization::plan`; every file type gives every tensor the reference's type, in its order.
#[test]
fn qwen3_plan_equals_the_reference_choices_for_every_file_type() {
    let model = GgufFile::open(golden("models/qwen3-f16.gguf")).unwrap();
    let files = golden_files("requant/qwen3-f16.json");
    assert_eq!(files.len(), 20, "every file type of the reference data");
    for (file_type, entry) in &files {
        assert_eq!(entry["status"].as_i64(), Some(0), "{file_type}");
        let plan = Quantization::plan(&model, &options(file_type))
            .unwrap_or_else(|e| panic!("{file_type}: {e}"));
        let ours: Vec<(&str, &str)> = plan
            .decisions()
            .map(|(name, d)| (name, d.format.name))
            .collect();
        let reference = golden_tensors(entry);
        let theirs: Vec<(&str, &str)> = reference
            .iter()
            .map(|(name, _, ty)| (name.as_str(), ty.as_str()))
            .collect();
        assert_eq!(ours, theirs, "{file_type}");
    }
}

/// SmolLM2-135M (llama, 30 layers, 9 heads over 3 key/value heads, tied, rows of 576 that no
/// 256-value block divides): planned from the reference's own tensor list and the model's
/// hyper-parameters, every file type gives the reference's types, fallbacks included, and q1_0
/// is refused as the reference refused it.
#[test]
fn smollm2_plan_equals_the_reference_choices_and_refusal() {
    let files = golden_files("requant/smollm2.json");
    let metadata = Metadata::new(vec![
        ("general.architecture".into(), Value::String("llama".into())),
        ("llama.block_count".into(), Value::U32(30)),
        ("llama.attention.head_count".into(), Value::U32(9)),
        ("llama.attention.head_count_kv".into(), Value::U32(3)),
    ])
    .unwrap();
    // Any file type's list names the tensors and their shapes; the input types only decide
    // which tensors are copied (norms stay f32 in every file type).
    let tensors = golden_tensors(&files["f16"]);
    let facts = ModelFacts::new(&metadata, tensors.iter().map(|(n, _, _)| n.as_str())).unwrap();
    assert!(facts.tied_embeddings);
    let f32_or_q4_1 =
        |dims: &[u64]| format_by_name(if dims.len() == 1 { "f32" } else { "q4_1" }).unwrap();
    let inputs: Vec<TensorIn> = tensors
        .iter()
        .map(|(name, dims, _)| TensorIn {
            name,
            dims,
            format: f32_or_q4_1(dims),
        })
        .collect();
    for (file_type, entry) in &files {
        let planned = oxibonsai_convert::quantize::plan::plan(&inputs, &options(file_type), &facts);
        if entry["status"].as_i64() != Some(0) {
            let err = planned.expect_err(file_type);
            assert!(
                matches!(err, PlanError::IncompatibleRows { row_len: 576, .. }),
                "{file_type}: {err}"
            );
            continue;
        }
        let decisions = planned.unwrap_or_else(|e| panic!("{file_type}: {e}"));
        let reference = golden_tensors(entry);
        assert_eq!(decisions.len(), reference.len(), "{file_type}");
        for (d, (name, _, ty)) in decisions.iter().zip(&reference) {
            assert_eq!(d.format.name, ty, "{file_type}: {name}");
        }
    }
}

/// The summary line names the types by descending count, then by name, as the CLI tests'
/// independent tally does.
#[test]
fn mixture_orders_by_count_then_name() {
    let counts = [("q4_K", 24), ("f32", 17), ("q6_K", 5), ("a", 5)];
    assert_eq!(
        mixture("Q4_K_M", &counts),
        "Q4_K_M: q4_K 24, f32 17, a 5, q6_K 5"
    );
}

/// A metadata key of the wrong type is reported with the planner's context, the key's own
/// error following once in the chain.
#[test]
fn bad_metadata_is_reported_once_in_the_chain() {
    let metadata = Metadata::new(vec![("general.architecture".into(), Value::U32(7))]).unwrap();
    let err = ModelFacts::new(&metadata, ["token_embd.weight"]).unwrap_err();
    let source = std::error::Error::source(&err).expect("the metadata error is the source");
    assert!(
        source.to_string().contains("general.architecture"),
        "{source}"
    );
    assert!(!err.to_string().contains(&source.to_string()), "{err}");
}
