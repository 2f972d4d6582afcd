//! Shared by the tokenizer's integration tests: the reference vocabularies and their golden cases.
#![allow(dead_code)]

use std::sync::OnceLock;

use oxibonsai_gguf::GgufFile;
use oxibonsai_tokenizer::Tokenizer;
use serde::Deserialize;

/// One `llama_tokenize(text, add_special = true, parse_special)` call of the reference engine.
#[derive(Debug, Deserialize)]
pub struct Case {
    pub text: String,
    pub parse_special: bool,
    pub add_special: bool,
    pub ids: Vec<u32>,
    /// The concatenated `llama_token_to_piece(id, special = parse_special)` bytes, hex.
    pub detokenized_hex: String,
    /// Qwen3 only, with `parse_special`: Hugging Face `tokenizers` on the real tokenizer.json.
    pub hf_tokenizers_ids: Option<Vec<u32>>,
}

#[derive(Debug, Deserialize)]
struct CaseFile {
    cases: Vec<Case>,
}

pub fn cases(fixture: &str) -> Vec<Case> {
    let path = oxibonsai_testkit::fixture(fixture);
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    let file: CaseFile = serde_json::from_str(&text)
        .unwrap_or_else(|e| panic!("cannot parse {}: {e}", path.display()));
    assert!(!file.cases.is_empty(), "{} has no cases", path.display());
    file.cases
}

pub fn qwen3_cases() -> Vec<Case> {
    cases("tokenizer/qwen3_ids.json")
}

pub fn smollm2_cases() -> Vec<Case> {
    cases("tokenizer/smollm2_ids.json")
}

fn load(relative: &str) -> Tokenizer {
    let path = oxibonsai_testkit::golden(relative);
    let file = GgufFile::open(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    Tokenizer::from_gguf(&file).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The Qwen3 vocabulary (Bonsai's), built from the reference's vocabulary-only GGUF.
pub fn qwen3() -> &'static Tokenizer {
    static TOKENIZER: OnceLock<Tokenizer> = OnceLock::new();
    TOKENIZER.get_or_init(|| load("tokenizer/qwen3/qwen3-vocab.gguf"))
}

/// SmolLM2's vocabulary (`pre = smollm`).
pub fn smollm2() -> &'static Tokenizer {
    static TOKENIZER: OnceLock<Tokenizer> = OnceLock::new();
    TOKENIZER.get_or_init(|| load("tokenizer/smollm2/smollm2-vocab.gguf"))
}
