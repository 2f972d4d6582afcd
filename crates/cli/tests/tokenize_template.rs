//! `tokenize` and `template` through the binary, against the reference engine's ids and
//! transformers' renderings (the full golden sets are checked in the tokenizer crate's tests; here
//! every case goes through the command line as a user runs it).

mod common;

use common::{oxibonsai, path_str};
use oxibonsai_testkit::{golden, hex_bytes};
use serde_json::Value;

fn cases(file: &str) -> Vec<Value> {
    let text = std::fs::read_to_string(golden(file)).expect("golden ids");
    let doc: Value = serde_json::from_str(&text).expect("JSON");
    doc["cases"].as_array().expect("cases").clone()
}

#[test]
fn tokenize_gives_the_reference_ids() {
    for (ids_file, vocab) in [
        (
            "tokenizer/qwen3_ids.json",
            "tokenizer/qwen3/qwen3-vocab.gguf",
        ),
        (
            "tokenizer/smollm2_ids.json",
            "tokenizer/smollm2/smollm2-vocab.gguf",
        ),
    ] {
        let vocab = golden(vocab);
        let all = cases(ids_file);
        assert!(all.len() > 50);
        // Every fourth case keeps the test quick while crossing plain and special-token cases.
        for case in all.iter().step_by(4) {
            let text = case["text"].as_str().unwrap();
            let mut args = vec!["tokenize", "--json", "-m", path_str(&vocab)];
            if case["parse_special"].as_bool().unwrap() {
                args.push("--special");
            }
            args.push("--");
            args.push(text);
            let run = oxibonsai(&args);
            assert_eq!(run.code, 0, "{text:?}: {}", run.stderr);
            let ids: Value = serde_json::from_str(&run.stdout).expect("JSON ids");
            assert_eq!(ids, case["ids"], "{ids_file}: {text:?}");
            // The plain form prints the same ids separated by spaces.
            args.retain(|a| *a != "--json");
            let run = oxibonsai(&args);
            let plain: Vec<u64> = run
                .stdout
                .split_whitespace()
                .map(|t| t.parse().unwrap())
                .collect();
            let expected: Vec<u64> = case["ids"]
                .as_array()
                .unwrap()
                .iter()
                .map(|v| v.as_u64().unwrap())
                .collect();
            assert_eq!(plain, expected, "{text:?}");
            // detokenized_hex is checked against the library's token_to_piece in the tokenizer tests.
            let _ = hex_bytes(case["detokenized_hex"].as_str().unwrap());
        }
    }
}

#[test]
fn template_renders_every_golden_case_byte_for_byte() {
    for (family, vocab) in [
        ("qwen3", "tokenizer/qwen3/qwen3-vocab.gguf"),
        ("smollm2", "tokenizer/smollm2/smollm2-vocab.gguf"),
    ] {
        let vocab = golden(vocab);
        let dir = golden(&format!("chat_template/{family}"));
        let mut seen = 0;
        let mut entries: Vec<_> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        entries.sort();
        for request in entries
            .iter()
            .filter(|p| p.extension().is_some_and(|e| e == "json"))
        {
            let expected =
                std::fs::read(request.with_extension("txt")).expect("rendering beside request");
            let run = oxibonsai(["template", "-m", path_str(&vocab), path_str(request)]);
            assert_eq!(run.code, 0, "{}: {}", request.display(), run.stderr);
            assert_eq!(
                run.stdout.as_bytes(),
                expected.as_slice(),
                "{}: rendering differs",
                request.display()
            );
            seen += 1;
        }
        assert!(
            seen >= 5,
            "{family}: only {seen} cases found in {}",
            dir.display()
        );
    }
}

#[test]
fn template_edge_requests() {
    let vocab = golden("tokenizer/qwen3/qwen3-vocab.gguf");
    let dir = tempfile::tempdir().unwrap();
    // A request with only a system message: the template's own logic, rendered as transformers does.
    let request = dir.path().join("system_only.json");
    std::fs::write(
        &request,
        r#"{"messages": [{"role": "system", "content": "hi"}], "add_generation_prompt": true}"#,
    )
    .unwrap();
    let run = oxibonsai(["template", "-m", path_str(&vocab), path_str(&request)]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert_eq!(
        run.stdout,
        "<|im_start|>system\nhi<|im_end|>\n<|im_start|>assistant\n"
    );
    let bad = dir.path().join("bad.json");
    std::fs::write(&bad, "{\"messages\": 5}").unwrap();
    let run = oxibonsai(["template", "-m", path_str(&vocab), path_str(&bad)]);
    assert_eq!(run.code, 1, "{}", run.stderr);
    assert!(run.stderr.contains("bad.json"), "{}", run.stderr);
}

#[test]
fn tokenize_without_a_vocabulary_is_a_clear_error() {
    // The golden models carry a vocabulary; a file with none is refused by name of the key.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("empty.gguf");
    // A valid GGUF v3 with no keys and no tensors.
    let mut bytes = b"GGUF".to_vec();
    bytes.extend_from_slice(&3u32.to_le_bytes());
    bytes.extend_from_slice(&0u64.to_le_bytes());
    bytes.extend_from_slice(&0u64.to_le_bytes());
    std::fs::write(&path, &bytes).unwrap();
    let run = oxibonsai(["tokenize", "-m", path_str(&path), "hello"]);
    assert_eq!(run.code, 1, "{}", run.stderr);
    assert!(
        run.stderr.contains("tokenizer.ggml.model"),
        "{}",
        run.stderr
    );
}
