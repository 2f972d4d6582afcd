//! `oxibonsai embed` against the reference engine's embeddings (`tests/fixtures/embedding/
//! reference.json`, made by `scripts/embedding-reference.py` with llama-cpp-python's low-level API:
//! `embeddings = True`, `pooling_type`, `llama_get_embeddings_seq` / `_ith`), raw (before
//! normalization), for every pooling type on the synthetic qwen3 model carrying
//! `qwen3.pooling_type` (written by `synth --from … --pooling`, as the fixture's files were) and
//! on SmolLM2 Q4_1 with mean pooling.
//!
//! The bound on the largest difference is twice the reference's own spread: the largest
//! difference between its runs (batched vs each input alone, f16 vs f32 KV cache, flash attention
//! on vs off). The cosine must reach 0.9999 — except where the reference's runs themselves are
//! further apart (SmolLM2, whose mean is dominated by a few huge activations: its runs agree to
//! 0.9994), where it must be as close as twice the reference's own distance from 1.

use std::path::{Path, PathBuf};

use serde_json::Value;

mod common;
mod serve_common;

use common::{oxibonsai, path_str};

fn fixture() -> Value {
    let path = oxibonsai_testkit::fixture("embedding/reference.json");
    serde_json::from_str(&std::fs::read_to_string(&path).expect("the embedding fixture"))
        .expect("fixture JSON")
}

/// The model of a fixture case: a synthetic qwen3 file written with the case's pooling key (and
/// for rank the classifier head of tokens 100 and 200, as the fixture's file was), or SmolLM2.
fn model_of(case: &Value, dir: &Path) -> (PathBuf, Vec<String>) {
    let name = case["name"].as_str().unwrap();
    if name == "smollm2-mean" {
        return (
            serve_common::smollm2(),
            vec!["--pooling".into(), "mean".into()],
        );
    }
    let (source, pooling) = match name.split_once('-').unwrap() {
        ("q3mixed", p) => ("models/qwen3-mixed.gguf", p),
        ("q3", p) => ("models/qwen3-f16.gguf", p),
        _ => panic!("unknown fixture case {name}"),
    };
    let out = dir.join(format!("{name}.gguf"));
    let golden = oxibonsai_testkit::golden(source);
    let mut args = vec![
        "synth",
        "--from",
        path_str(&golden),
        "--pooling",
        pooling,
        "-o",
        path_str(&out),
    ];
    if pooling == "rank" {
        args.extend(["--classifier-tokens", "100,200"]);
    }
    let run = oxibonsai(&args);
    assert_eq!(run.code, 0, "synth {args:?}: {}", run.stderr);
    // The pooling comes from the file: no --pooling for these.
    (out, Vec::new())
}

fn cosine(a: &[f64], b: &[f64]) -> f64 {
    let dot: f64 = a.iter().zip(b).map(|(x, y)| x * y).sum();
    let na: f64 = a.iter().map(|x| x * x).sum::<f64>().sqrt();
    let nb: f64 = b.iter().map(|x| x * x).sum::<f64>().sqrt();
    dot / (na * nb)
}

fn rows(v: &Value) -> Vec<Vec<f64>> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|r| {
            r.as_array()
                .unwrap()
                .iter()
                .map(|x| x.as_f64().unwrap())
                .collect()
        })
        .collect()
}

#[test]
fn every_pooling_type_matches_the_reference_within_its_own_spread() {
    let fixture = fixture();
    let dir = tempfile::tempdir().unwrap();
    let cases = fixture["cases"].as_array().unwrap();
    let names: Vec<&str> = cases.iter().map(|c| c["name"].as_str().unwrap()).collect();
    for pooling in ["none", "mean", "cls", "last", "rank"] {
        assert!(
            names.contains(&format!("q3-{pooling}").as_str()),
            "the fixture lacks pooling {pooling}"
        );
    }
    assert!(names.contains(&"smollm2-mean"));
    let mut report = Vec::new();
    for case in cases {
        let name = case["name"].as_str().unwrap();
        let (model, extra) = model_of(case, dir.path());
        let mut args: Vec<String> = vec![
            "embed".into(),
            "-m".into(),
            path_str(&model).into(),
            "--embd-normalize".into(),
            "-1".into(),
            "--json".into(),
            "-t".into(),
            "2".into(),
        ];
        args.extend(extra);
        for ids in case["inputs"].as_array().unwrap() {
            let ids: Vec<String> = ids
                .as_array()
                .unwrap()
                .iter()
                .map(|v| v.to_string())
                .collect();
            args.push("--tokens".into());
            args.push(ids.join(","));
        }
        let run = oxibonsai(&args);
        assert_eq!(run.code, 0, "{name}: {}", run.stderr);
        let ours: Value = serde_json::from_str(run.stdout.trim()).unwrap();
        let data = ours["data"].as_array().unwrap();
        let expected = case["embeddings"].as_array().unwrap();
        assert_eq!(
            data.len(),
            expected.len(),
            "{name}: one embedding per input"
        );
        let spread = &case["spread"];
        let own_abs = ["batch_vs_single", "f16_vs_f32_kv", "flash_on_vs_off"]
            .iter()
            .map(|k| spread[format!("{k}_max_abs")].as_f64().unwrap())
            .fold(0.0, f64::max);
        let own_cos = ["batch_vs_single", "f16_vs_f32_kv", "flash_on_vs_off"]
            .iter()
            .map(|k| spread[format!("{k}_min_cos")].as_f64().unwrap())
            .fold(1.0, f64::min);
        let bound_abs = 2.0 * own_abs;
        let bound_cos = 0.9999f64.min(1.0 - 2.0 * (1.0 - own_cos));
        let (mut worst_abs, mut worst_cos) = (0.0f64, 1.0f64);
        for (d, e) in data.iter().zip(expected) {
            let e = rows(e);
            let ours: Vec<Vec<f64>> = if case["pooling"] == "none" {
                rows(&d["embedding"])
            } else {
                vec![d["embedding"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|x| x.as_f64().unwrap())
                    .collect()]
            };
            assert_eq!(ours.len(), e.len(), "{name}: rows per input");
            for (a, b) in ours.iter().zip(&e) {
                assert_eq!(a.len(), b.len(), "{name}: width");
                for (x, y) in a.iter().zip(b) {
                    worst_abs = worst_abs.max((x - y).abs());
                }
                worst_cos = worst_cos.min(cosine(a, b));
            }
        }
        report.push(format!(
            "{name}: max |Δ| {worst_abs:.3e} (bound {bound_abs:.3e}), min cos {worst_cos:.7} (bound {bound_cos:.7})"
        ));
        assert!(
            worst_abs <= bound_abs && worst_cos >= bound_cos,
            "{name}: max |Δ| {worst_abs} (bound {bound_abs}), min cos {worst_cos} (bound {bound_cos})"
        );
    }
    eprintln!("{}", report.join("\n"));
}

#[test]
fn a_generation_model_refuses_rank_pooling_and_bad_inputs_are_named() {
    let model = oxibonsai_testkit::golden("models/qwen3-f16.gguf");
    let m = path_str(&model);
    let run = oxibonsai(["embed", "-m", m, "--pooling", "rank", "--tokens", "1,2"]);
    assert_eq!(run.code, 1);
    assert!(run.stderr.contains("cls.output.weight"), "{}", run.stderr);
    let run = oxibonsai(["embed", "-m", m, "--tokens", "1,2,3,4", "-c", "3"]);
    assert_eq!(run.code, 1);
    assert!(
        run.stderr.contains("input 0 has 4 tokens"),
        "{}",
        run.stderr
    );
    let run = oxibonsai([
        "embed",
        "-m",
        m,
        "--tokens",
        "1,2,3,4",
        "-c",
        "3",
        "--truncate",
        "--json",
    ]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let out: Value = serde_json::from_str(run.stdout.trim()).unwrap();
    assert_eq!(out["usage"]["prompt_tokens"], 3);
    let run = oxibonsai(["embed", "-m", m, "--tokens", ""]);
    assert_eq!(run.code, 1);
    assert!(run.stderr.contains("input 0 is empty"), "{}", run.stderr);
    // A file gives one input per non-empty line; plain output is one line per input.
    let dir = tempfile::tempdir().unwrap();
    let inputs = dir.path().join("inputs.txt");
    std::fs::write(&inputs, "first line\n\nsecond line\n").unwrap();
    let run = oxibonsai(["embed", "-m", m, "-f", path_str(&inputs)]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let lines: Vec<&str> = run.stdout.lines().collect();
    assert_eq!(lines.len(), 2, "{}", run.stdout);
    assert!(lines.iter().all(|l| l.split(' ').count() == 256));
    let run = oxibonsai(["embed", "-m", m]);
    assert_eq!(run.code, 1);
    assert!(run.stderr.contains("no input"), "{}", run.stderr);
    let run = oxibonsai(["embed", "-m", m, "--pooling", "max", "--tokens", "1"]);
    assert_eq!(run.code, 1);
    assert!(run.stderr.contains("--pooling 'max'"), "{}", run.stderr);
    // A pooling key llama.cpp does not define is refused naming the key.
    let bad = dir.path().join("bad.gguf");
    let file = oxibonsai_gguf::GgufFile::open(&model).unwrap();
    let mut w = oxibonsai_gguf::GgufWriter::from_file(&file).unwrap();
    w.add_kv("qwen3.pooling_type", oxibonsai_gguf::Value::U32(7))
        .unwrap();
    w.write_file(&bad).unwrap();
    let run = oxibonsai(["embed", "-m", path_str(&bad), "--tokens", "1"]);
    assert_eq!(run.code, 1);
    assert!(run.stderr.contains("qwen3.pooling_type"), "{}", run.stderr);
}

#[test]
fn embeddings_are_l2_normalized_by_default_and_batching_changes_nothing() {
    let model = oxibonsai_testkit::golden("models/qwen3-f16.gguf");
    let m = path_str(&model);
    let embed = |extra: &[&str]| -> Vec<Vec<f64>> {
        let mut args = vec![
            "embed", "-m", m, "--json", "--tokens", "5,6,7", "--tokens", "9",
        ];
        args.extend(extra);
        let run = oxibonsai(&args);
        assert_eq!(run.code, 0, "{}", run.stderr);
        let out: Value = serde_json::from_str(run.stdout.trim()).unwrap();
        out["data"]
            .as_array()
            .unwrap()
            .iter()
            .map(|d| {
                d["embedding"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|x| x.as_f64().unwrap())
                    .collect()
            })
            .collect()
    };
    let normed = embed(&[]);
    let raw = embed(&["--embd-normalize", "-1"]);
    // One input per pass: the same vectors as all inputs in one batch.
    let alone = embed(&["--embd-normalize", "-1", "-b", "1"]);
    for ((n, r), a) in normed.iter().zip(&raw).zip(&alone) {
        let norm = r.iter().map(|x| x * x).sum::<f64>().sqrt();
        for ((x, y), z) in n.iter().zip(r).zip(a) {
            assert!((x - y / norm).abs() < 1e-6, "{x} vs {}", y / norm);
            assert!(
                (y - z).abs() <= 1e-4 * y.abs().max(1.0),
                "batched {y} vs alone {z}"
            );
        }
    }
}
