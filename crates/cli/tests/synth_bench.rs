//! `synth` writes a file of exactly the published shape that validates and runs; `bench --json`
//! reports llama-bench's keys (speed itself is measured in BENCHMARKS.md, never asserted here).

mod common;

use common::{oxibonsai, path_str, Run};
use serde_json::Value;

/// `oxibonsai bench -m PATH ARGS…`.
fn bench(path: &std::path::Path, args: &[&str]) -> Run {
    oxibonsai(["bench", "-m", path_str(path)].iter().chain(args))
}

#[test]
fn synth_writes_the_published_bonsai_1_7b_shape() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("b17.gguf");
    let run = oxibonsai([
        "synth",
        "--shape",
        "bonsai-1.7b",
        "--format",
        "q1_0",
        "-o",
        path_str(&path),
    ]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let run = oxibonsai(["validate", path_str(&path)]);
    assert_eq!(run.code, 0, "{}{}", run.stdout, run.stderr);
    let info: Value =
        serde_json::from_str(&oxibonsai(["info", "--json", path_str(&path)]).stdout).unwrap();
    // Bonsai-1.7B (Qwen3-1.7B): 2048 wide, 28 layers, 16 heads / 8 KV of 128, FFN 6144, tied, 151,936 tokens.
    for (key, value) in [
        ("n_embd", 2048),
        ("n_layer", 28),
        ("n_head", 16),
        ("n_head_kv", 8),
        ("head_dim", 128),
        ("n_ff", 6144),
    ] {
        assert_eq!(info[key], value, "{key}");
    }
    assert_eq!(info["tied_embeddings"], true);
    assert_eq!(info["tokenizer"]["vocab_size"], 151_936);
    assert_eq!(info["n_params"], 1_720_574_976u64);

    // The bench runs on this file: writing it is most of the test's time.
    bench_reports_llama_bench_keys_and_maps_the_weights(&path);
    bench_batches_sequences_and_starts_at_a_depth(&path);
}

/// `bench --json`: llama-bench's keys, and a peak resident set that shows the weights are mapped.
fn bench_reports_llama_bench_keys_and_maps_the_weights(path: &std::path::Path) {
    // On the CPU by name: `auto` first lists the GPU adapters, and a Vulkan driver's libraries
    // (lavapipe's LLVM) add ~55 MiB to the peak resident set that has nothing to do with weights.
    let run = bench(
        path,
        &[
            "-p", "4", "-n", "2", "-r", "2", "-t", "2", "--json", "--device", "cpu",
        ],
    );
    assert_eq!(run.code, 0, "{}", run.stderr);
    let report: Value = serde_json::from_str(&run.stdout).unwrap();
    for key in [
        "pp_tokens_per_s",
        "pp_sd",
        "tg_tokens_per_s",
        "tg_sd",
        "pp_tokens",
        "tg_tokens",
        "reps",
        "threads",
        "model",
        "isa",
    ] {
        assert!(report.get(key).is_some(), "missing {key} in {report}");
    }
    assert!(report["pp_tokens_per_s"].as_f64().unwrap() > 0.0);
    // Weights stay in the mapping (nothing copies them): the peak resident set stays within the
    // file, the KV cache and 15 %.
    let file_size = std::fs::metadata(path).unwrap().len() as f64;
    let kv = report["kv_cache_bytes"].as_f64().unwrap();
    let rss = report["max_rss_bytes"]
        .as_f64()
        .expect("Linux reports VmHWM");
    assert!(
        rss <= (file_size + kv) * 1.15,
        "peak RSS {rss} > 1.15 × (file {file_size} + KV {kv})"
    );
    assert_eq!(report["threads"], 2);
    assert_eq!(report["reps"], 2);
    assert_eq!(report["sequences"], 1);
}

/// `bench -s N` decodes N sequences together; `-d D` starts every test at a context of D tokens.
fn bench_batches_sequences_and_starts_at_a_depth(path: &std::path::Path) {
    // Batched decoding: tg over 3 sequences stepped together, no pp.
    let run = bench(
        path,
        &["-p", "0", "-n", "2", "-s", "3", "-r", "1", "--json"],
    );
    assert_eq!(run.code, 0, "{}", run.stderr);
    let report: Value = serde_json::from_str(&run.stdout).unwrap();
    assert_eq!(report["sequences"], 3);
    assert!(report["pp_tokens_per_s"].is_null(), "{report}");
    assert!(
        report["tg_tokens_per_s"].as_f64().unwrap() > 0.0,
        "{report}"
    );

    // At a depth (llama-bench's -d): each test's sequences start with 8 tokens of context, so the
    // first sequence's cache holds 8 + 2 + 2 + 16 positions of 28 layers × 8 KV heads × 128 × 2
    // (keys, values) f16 values.
    let run = bench(
        path,
        &[
            "-p", "2", "-n", "2", "-d", "8", "-s", "2", "-r", "1", "--json",
        ],
    );
    assert_eq!(run.code, 0, "{}", run.stderr);
    let report: Value = serde_json::from_str(&run.stdout).unwrap();
    assert_eq!(report["depth"], 8);
    assert_eq!(report["kv_cache_bytes"], 28 * (28 * 8 * 128 * 2 * 2));
    assert!(report["tg_tokens_per_s"].as_f64().unwrap() > 0.0);
    // A depth no cache can hold is refused, naming the context.
    let run = bench(path, &["-p", "0", "-n", "1", "-d", "18446744073709551615"]);
    assert_eq!(run.code, 1, "{}", run.stderr);
    assert!(run.stderr.contains("context length"), "{}", run.stderr);
}

#[test]
fn synth_and_bench_refuse_bad_arguments() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("x.gguf");
    for (args, needle) in [
        (
            vec![
                "synth",
                "--shape",
                "bonsai-99b",
                "--format",
                "q1_0",
                "-o",
                path_str(&out),
            ],
            "bonsai-99b",
        ),
        (
            vec![
                "synth",
                "--shape",
                "bonsai-1.7b",
                "--format",
                "q9_9",
                "-o",
                path_str(&out),
            ],
            "q9_9",
        ),
        (
            vec![
                "synth",
                "--shape",
                "bonsai-1.7b",
                "--format",
                "q8_K",
                "-o",
                path_str(&out),
            ],
            "activation",
        ),
        (
            vec!["bench", "-m", path_str(&out), "-r", "0"],
            "repetitions",
        ),
        (vec!["bench", "-m", path_str(&out), "-s", "0"], "sequences"),
    ] {
        let run = oxibonsai(&args);
        assert_eq!(run.code, 1, "{args:?}: {}", run.stderr);
        assert!(run.stderr.contains(needle), "{args:?}: {}", run.stderr);
    }
    assert!(!out.exists());
}

fn synth_1_7b_q1_0_with_vocab(vocab: &std::path::Path, out: &std::path::Path) -> common::Run {
    oxibonsai([
        "synth",
        "--shape",
        "bonsai-1.7b",
        "--format",
        "q1_0",
        "--vocab",
        path_str(vocab),
        "-o",
        path_str(out),
    ])
}

/// `synth --vocab` carries a real vocabulary over: the file tokenizes as the reference engine
/// tokenizes with that vocabulary (golden ids), and has the chat template.
#[test]
fn synth_takes_a_real_vocabulary() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("b17-vocab.gguf");
    let vocab = oxibonsai_testkit::golden("tokenizer/qwen3/qwen3-vocab.gguf");
    let run = synth_1_7b_q1_0_with_vocab(&vocab, &path);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let info: Value =
        serde_json::from_str(&oxibonsai(["info", "--json", path_str(&path)]).stdout).unwrap();
    assert_eq!(info["chat_template"], true);
    assert_eq!(info["tokenizer"]["vocab_size"], 151_936);
    assert_eq!(info["n_embd"], 2048);

    let golden: Value = serde_json::from_str(
        &std::fs::read_to_string(oxibonsai_testkit::golden("tokenizer/qwen3_ids.json")).unwrap(),
    )
    .unwrap();
    let mut checked = 0;
    for case in golden["cases"].as_array().unwrap() {
        let text = case["text"].as_str().unwrap();
        if text.is_empty() || case["add_special"] != true || text.starts_with('-') {
            continue;
        }
        let mut args = vec!["tokenize", "--json", "-m", path_str(&path)];
        if case["parse_special"] == true {
            args.push("--special");
        }
        args.push(text);
        let run = oxibonsai(&args);
        assert_eq!(run.code, 0, "{text:?}: {}", run.stderr);
        let ids: Value = serde_json::from_str(&run.stdout).unwrap();
        assert_eq!(ids, case["ids"], "{text:?}");
        checked += 1;
        if checked == 12 {
            break;
        }
    }
    assert!(checked >= 6, "only {checked} golden cases checked");

    // A vocabulary of another size is refused by name.
    let small = oxibonsai_testkit::golden("models/qwen3-q1_0.gguf");
    let out = dir.path().join("x.gguf");
    let run = synth_1_7b_q1_0_with_vocab(&small, &out);
    assert_eq!(run.code, 1, "{}", run.stderr);
    assert!(
        run.stderr.contains("tokenizer.ggml.tokens"),
        "{}",
        run.stderr
    );
    assert!(!out.exists());
}
