//! `quantize` against the reference quantizer: for every file type of `requant/*.json` (the K-quant
//! mixtures included), the output's tensors (order, type, sha256 of the data), metadata tail and
//! file size equal what `llama_model_quantize` wrote; the summary and `info` name the same mixture.

mod common;

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use common::{oxibonsai, path_str};
use oxibonsai_formats::format_by_name;
use oxibonsai_gguf::GgufFile;
use oxibonsai_testkit::golden;
use serde_json::Value;
use sha2::{Digest, Sha256};

/// Every file type of the reference data; `quantize` writes them all.
const FILE_TYPES: &[&str] = &[
    "f16", "bf16", "q8_0", "q4_0", "q4_1", "q5_0", "q5_1", "q1_0", "q2_0", "tq1_0", "tq2_0",
    "q2_k", "q3_k_s", "q3_k_m", "q3_k_l", "q4_k_s", "q4_k_m", "q5_k_s", "q5_k_m", "q6_k",
];

#[derive(Debug, Clone, PartialEq)]
struct Tensor {
    name: String,
    dims: Vec<u64>,
    type_name: String,
    sha256: String,
}

fn sha256_hex(data: &[u8]) -> String {
    Sha256::digest(data)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

fn output_tensors(path: &Path) -> Vec<Tensor> {
    let file = GgufFile::open(path).expect("the output is a valid GGUF file");
    file.tensors()
        .iter()
        .map(|t| Tensor {
            name: t.name.clone(),
            dims: t.dims.clone(),
            type_name: t.format.name.to_owned(),
            sha256: sha256_hex(file.tensor_data(t)),
        })
        .collect()
}

/// The reference copies the input's keys, then sets these two, which moves them to the end.
fn assert_metadata(path: &Path, llama_ftype: u64) {
    let file = GgufFile::open(path).unwrap();
    let keys: Vec<(&str, &oxibonsai_gguf::Value)> = file.metadata().iter().collect();
    let tail: Vec<_> = keys[keys.len() - 2..]
        .iter()
        .map(|(k, v)| (*k, v.as_integer()))
        .collect();
    assert_eq!(
        tail,
        [
            ("general.quantization_version", Some(2)),
            ("general.file_type", Some(i128::from(llama_ftype))),
        ],
        "{}",
        path.display()
    );
}

fn golden_files(json: &str) -> serde_json::Map<String, Value> {
    let text = std::fs::read_to_string(golden(json)).expect("golden JSON readable");
    let mut root: serde_json::Map<String, Value> = serde_json::from_str(&text).expect("valid JSON");
    match root.remove("files") {
        Some(Value::Object(files)) => files,
        other => panic!("{json}: no 'files' object ({other:?})"),
    }
}

fn golden_tensors(entry: &Value) -> Vec<Tensor> {
    entry["tensors"]
        .as_array()
        .expect("tensors array")
        .iter()
        .map(|t| Tensor {
            name: t["name"].as_str().unwrap().to_owned(),
            dims: t["dims"]
                .as_array()
                .unwrap()
                .iter()
                .map(|d| d.as_u64().unwrap())
                .collect(),
            type_name: t["type"].as_str().unwrap().to_owned(),
            sha256: t["sha256"].as_str().unwrap().to_owned(),
        })
        .collect()
}

fn quantize(input: &Path, output: &Path, file_type: &str, extra: &[&str]) -> common::Run {
    let mut args = vec![
        "quantize".to_owned(),
        "--allow-requantize".to_owned(),
        path_str(input).to_owned(),
        path_str(output).to_owned(),
        file_type.to_owned(),
    ];
    args.extend(extra.iter().map(|s| s.to_string()));
    oxibonsai(args)
}

fn smollm2() -> PathBuf {
    oxibonsai_hub::resolve_model("smollm2", &oxibonsai_hub::FetchOptions::from_env())
        .expect("SmolLM2 Q4_1 is available (cached or fetched)")
}

/// `Q4_K_M: q4_K 24, f32 17, q6_K 5`: the file type and the tensor types by descending count.
fn mixture_of(file_type: &str, tensors: &[Tensor]) -> String {
    let mut counts: Vec<(String, usize)> = Vec::new();
    for t in tensors {
        match counts.iter_mut().find(|(name, _)| *name == t.type_name) {
            Some((_, n)) => *n += 1,
            None => counts.push((t.type_name.clone(), 1)),
        }
    }
    counts.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    let types: Vec<String> = counts.iter().map(|(t, n)| format!("{t} {n}")).collect();
    format!("{}: {}", file_type.to_uppercase(), types.join(", "))
}

/// Runs every golden file type of `json` on `input` and returns those written byte-identically
/// (a file type the reference refused must be refused too, naming a tensor).
fn check_all_file_types(input: &Path, json: &str) -> Vec<String> {
    let files = golden_files(json);
    let dir = tempfile::tempdir().unwrap();
    let mut identical = Vec::new();
    for &file_type in FILE_TYPES {
        let entry = &files[file_type];
        let out = dir.path().join(format!("{file_type}.gguf"));
        let run = quantize(input, &out, file_type, &[]);
        if entry["status"].as_i64() != Some(0) {
            assert_eq!(run.code, 1, "{json} {file_type}: the reference refused it");
            assert!(
                run.stderr.contains("tensor '"),
                "{json} {file_type}: {}",
                run.stderr
            );
            assert!(!out.exists(), "{json} {file_type}: no partial output");
            continue;
        }
        assert_eq!(run.code, 0, "{json} {file_type}: {}", run.stderr);
        let want = golden_tensors(entry);
        let got = output_tensors(&out);
        let wrong: Vec<String> = got
            .iter()
            .zip(&want)
            .filter(|(g, w)| g != w)
            .map(|(g, w)| {
                format!(
                    "{}: ours {} / reference {}",
                    w.name, g.type_name, w.type_name
                )
            })
            .collect();
        assert!(
            wrong.is_empty(),
            "{json} {file_type}: {} tensors differ: {wrong:#?}",
            wrong.len()
        );
        assert_eq!(got, want, "{json} {file_type}");
        assert_eq!(
            std::fs::metadata(&out).unwrap().len(),
            entry["file_bytes"].as_u64().unwrap(),
            "{json} {file_type}: file size (metadata and padding)"
        );
        assert_metadata(&out, entry["llama_ftype"].as_u64().unwrap());
        // The summary and `info` name the reference's mixture.
        let mixture = mixture_of(file_type, &want);
        assert!(
            run.stderr.contains(&format!("mixture: {mixture}")),
            "{json} {file_type}: summary lacks '{mixture}': {}",
            run.stderr
        );
        let info = oxibonsai(["info", "--json", path_str(&out)]);
        assert_eq!(info.code, 0, "{}", info.stderr);
        let info: Value = serde_json::from_str(&info.stdout).unwrap();
        assert_eq!(
            info["mixture"].as_str(),
            Some(mixture.as_str()),
            "{json} {file_type}"
        );
        assert_eq!(
            info["file_type"].as_str(),
            Some(file_type.to_uppercase().as_str())
        );
        identical.push(file_type.to_owned());
    }
    identical
}

#[test]
fn qwen3_matches_the_reference_for_every_file_type() {
    let identical =
        check_all_file_types(&golden("models/qwen3-f16.gguf"), "requant/qwen3-f16.json");
    assert_eq!(identical, FILE_TYPES, "every file type, q1_0 included");
}

#[test]
fn smollm2_matches_the_reference_for_every_file_type() {
    let identical = check_all_file_types(&smollm2(), "requant/smollm2.json");
    // Every type but q1_0, which the reference refuses (rows of 576, no fallback for q1_0); the
    // 576-wide tensors take the reference's fallbacks (q2_K/q3_K → q4_0, q4_K → q5_0, …).
    let want: Vec<&str> = FILE_TYPES
        .iter()
        .copied()
        .filter(|&t| t != "q1_0")
        .collect();
    assert_eq!(identical, want);
}

#[test]
fn q1_0_on_smollm2_is_refused_and_falls_back_to_q2_0_with_fallback() {
    let files = golden_files("requant/smollm2.json");
    assert_ne!(
        files["q1_0"]["status"].as_i64(),
        Some(0),
        "the reference refuses q1_0 here"
    );
    let q2_0 = golden_tensors(&files["q2_0"]);
    // The first tensor the reference would make q1_0 (as it makes it q2_0 in q2_0) with rows of 576.
    let first = q2_0
        .iter()
        .find(|t| t.type_name == "q2_0" && t.dims[0] % 128 != 0)
        .unwrap();
    let input = smollm2();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("q1_0.gguf");
    let run = quantize(&input, &out, "q1_0", &[]);
    assert_eq!(run.code, 1, "{}", run.stderr);
    assert!(
        run.stderr.contains(&format!("'{}'", first.name)) && run.stderr.contains("576"),
        "names {}: {}",
        first.name,
        run.stderr
    );
    assert!(!out.exists(), "no partial output after a refusal");

    let run = quantize(&input, &out, "q1_0", &["--fallback"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let got = output_tensors(&out);
    let source = GgufFile::open(&input).unwrap();
    let q1_0 = format_by_name("q1_0").unwrap();
    let by_name: HashMap<&str, &Tensor> = q2_0.iter().map(|t| (t.name.as_str(), t)).collect();
    let mut n_q1_0 = 0;
    for g in &got {
        let reference = by_name[g.name.as_str()];
        if reference.type_name == "q2_0" && g.dims[0] % 128 == 0 {
            // Fits q1_0: the source dequantized and quantized with the scalar reference codec.
            let t = source.tensor(&g.name).unwrap();
            let values = t.format.dequantize_row(source.tensor_data(t)).unwrap();
            assert_eq!(g.type_name, "q1_0", "{}", g.name);
            assert_eq!(
                g.sha256,
                sha256_hex(&q1_0.quantize_row(&values).unwrap()),
                "{}",
                g.name
            );
            n_q1_0 += 1;
        } else {
            // Documented fallback: q2_0, byte-identical to the reference's q2_0 of that tensor.
            assert_eq!(g, reference, "{}", g.name);
        }
    }
    assert!(n_q1_0 > 0, "the 1536-wide ffn_down tensors stay q1_0");
}

/// The first matching pattern wins (as in the reference), over the file type's own choice.
#[test]
fn tensor_type_patterns_override_the_reference_choice() {
    let files = golden_files("requant/qwen3-f16.json");
    let q8_0 = golden_tensors(&files["q8_0"]);
    let q4_0 = golden_tensors(&files["q4_0"]);
    let q4_1 = golden_tensors(&files["q4_1"]);
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("mixed.gguf");
    let input = golden("models/qwen3-f16.gguf");
    let run = quantize(
        &input,
        &out,
        "q8_0",
        &[
            "--tensor-type",
            "FFN_(down|up)=q4_0",
            "--tensor-type",
            "ffn=q4_1",
        ],
    );
    assert_eq!(run.code, 0, "{}", run.stderr);
    let got = output_tensors(&out);
    let (mut n_q4_0, mut n_q4_1) = (0, 0);
    for (i, g) in got.iter().enumerate() {
        if g.name.contains("ffn_down") || g.name.contains("ffn_up") {
            assert_eq!(g, &q4_0[i], "first pattern: q4_0");
            n_q4_0 += 1;
        } else if g.name.contains("ffn_gate") {
            assert_eq!(g, &q4_1[i], "second pattern: q4_1");
            n_q4_1 += 1;
        } else {
            assert_eq!(g, &q8_0[i]);
        }
    }
    assert_eq!((n_q4_0, n_q4_1), (8, 4), "per layer of 4: down + up, gate");
}

/// A pattern's type whose blocks do not divide the rows takes the reference's fallback (tq1_0 →
/// q4_0 on SmolLM2's rows of 576); an explicit --embedding-type that does not fit is refused.
#[test]
fn a_pattern_type_that_does_not_fit_falls_back_like_the_reference() {
    let files = golden_files("requant/smollm2.json");
    let q8_0 = golden_tensors(&files["q8_0"]);
    let q4_0 = golden_tensors(&files["q4_0"]);
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out.gguf");
    let input = smollm2();
    let run = quantize(&input, &out, "q8_0", &["--tensor-type", "attn_q=tq1_0"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let got = output_tensors(&out);
    let mut n_fallback = 0;
    for (i, g) in got.iter().enumerate() {
        if g.name.contains("attn_q.weight") {
            assert_eq!(g, &q4_0[i], "tq1_0 → q4_0");
            n_fallback += 1;
        } else {
            assert_eq!(g, &q8_0[i]);
        }
    }
    assert_eq!(n_fallback, 30);

    std::fs::remove_file(&out).unwrap();
    let run = quantize(&input, &out, "q8_0", &["--embedding-type", "tq1_0"]);
    assert_eq!(run.code, 1, "{}", run.stderr);
    for needle in ["'token_embd.weight'", "tq1_0", "576", "256"] {
        assert!(run.stderr.contains(needle), "{needle}: {}", run.stderr);
    }
    assert!(!out.exists());
}

#[test]
fn already_quantized_input_needs_allow_requantize() {
    let dir = tempfile::tempdir().unwrap();
    let q8 = dir.path().join("q8_0.gguf");
    let run = quantize(&golden("models/qwen3-f16.gguf"), &q8, "q8_0", &[]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let out = dir.path().join("f16.gguf");
    let run = oxibonsai(["quantize", path_str(&q8), path_str(&out), "f16"]);
    assert_eq!(run.code, 1, "{}", run.stderr);
    // token_embd.weight is the first 2-D weight in the reference's order.
    for needle in ["token_embd.weight", "q8_0", "--allow-requantize"] {
        assert!(run.stderr.contains(needle), "{needle}: {}", run.stderr);
    }
    assert!(!out.exists());
}

#[test]
fn unknown_type_and_bad_patterns_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let input = golden("models/qwen3-f16.gguf");
    let out = dir.path().join("out.gguf");
    let cases: &[(&str, &[&str], &[&str])] = &[
        ("q9_9", &[], &["'q9_9'", "expected one of"]),
        (
            "q8_0",
            &["--tensor-type", "attn_(q=q4_0"],
            &["bad pattern", "attn_(q"],
        ),
        ("q8_0", &["--tensor-type", "attn_q"], &["PATTERN=TYPE"]),
        ("q8_0", &["--tensor-type", "attn_q=q9_9"], &["'q9_9'"]),
        ("q8_0", &["--embedding-type", "q8_K"], &["'q8_K'"]),
    ];
    for (file_type, extra, needles) in cases {
        let run = quantize(&input, &out, file_type, extra);
        assert_eq!(run.code, 1, "{file_type} {extra:?}: {}", run.stderr);
        for needle in *needles {
            assert!(run.stderr.contains(needle), "{needle}: {}", run.stderr);
        }
        assert!(!out.exists());
    }
}

#[test]
fn pq2_0_is_the_q2_0_pipeline_with_pq2_0_blocks() {
    let files = golden_files("requant/qwen3-f16.json");
    let q2_0 = golden_tensors(&files["q2_0"]);
    let input = golden("models/qwen3-f16.gguf");
    let source = GgufFile::open(&input).unwrap();
    let pq2_0 = format_by_name("pq2_0").unwrap();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("pq2_0.gguf");
    let run = quantize(&input, &out, "pq2_0", &[]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert_metadata(&out, 142);
    let got = output_tensors(&out);
    assert_eq!(got.len(), q2_0.len());
    for (g, reference) in got.iter().zip(&q2_0) {
        assert_eq!(g.name, reference.name);
        match reference.type_name.as_str() {
            // Where the reference writes q2_0 we write pq2_0 of the same values.
            "q2_0" => {
                let t = source.tensor(&g.name).unwrap();
                let values = t.format.dequantize_row(source.tensor_data(t)).unwrap();
                assert_eq!(g.type_name, "pq2_0", "{}", g.name);
                assert_eq!(g.sha256, sha256_hex(&pq2_0.quantize_row(&values).unwrap()));
            }
            _ => assert_eq!(g, reference),
        }
    }
}
