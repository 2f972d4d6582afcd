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

/// Held-out strings (tests/fixtures/tokenizer/generate_llama_vocabs_fixture.py, recorded with
/// llama-cpp-python 0.3.36): on all 19 vocabularies of the set (Unigram included), the ids with and
/// without special handling and `llama_detokenize` of them; and every pre-tokenizer name llama.cpp
/// knows, on the qwen35 vocabulary.
#[derive(serde::Deserialize)]
struct HeldOut {
    texts: Vec<String>,
    short_texts: Vec<String>,
    /// Per vocabulary, per text and flag pair: [add_special, parse_special, ids, detokenized hex].
    vocabs: std::collections::BTreeMap<String, Vec<(bool, bool, String, String)>>,
    pre: std::collections::BTreeMap<String, Vec<String>>,
}

fn held_out() -> HeldOut {
    let path = oxibonsai_testkit::fixture("tokenizer/llama_vocabs_heldout.json");
    serde_json::from_str(&std::fs::read_to_string(path).expect("read")).expect("parse")
}

fn parse_ids(ids: &str) -> Vec<u32> {
    ids.split_whitespace()
        .map(|id| id.parse().expect("an id"))
        .collect()
}

#[test]
fn held_out_strings_on_every_vocabulary_match_the_reference() {
    let dir = vocab_dir();
    let reference = held_out();
    assert_eq!(reference.vocabs.len(), 19);
    let mut failures = Vec::new();
    let mut checked = 0;
    for (name, cases) in &reference.vocabs {
        let tokenizer = load(&dir, name);
        assert_eq!(cases.len(), 2 * reference.texts.len());
        for (text, (add_special, parse_special, ids, hex)) in
            reference.texts.iter().flat_map(|t| [t, t]).zip(cases)
        {
            checked += 1;
            let expected = parse_ids(ids);
            let ours = tokenizer
                .encode(text, *add_special, *parse_special)
                .unwrap();
            if ours != expected {
                failures.push(format!(
                    "{name} {text:?} add_special={add_special}:\n  ours   {ours:?}\n  theirs {expected:?}"
                ));
                continue;
            }
            let detokenized = tokenizer.detokenize(&ours, false, *parse_special).unwrap();
            if detokenized != oxibonsai_testkit::hex_bytes(hex) {
                failures.push(format!(
                    "{name} {text:?}: detokenized {:?}, reference {:?}",
                    String::from_utf8_lossy(&detokenized),
                    String::from_utf8_lossy(&oxibonsai_testkit::hex_bytes(hex))
                ));
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {checked} differ:\n{}",
        failures.len(),
        failures.join("\n")
    );
    eprintln!("{checked} held-out cases match");
}

#[test]
fn every_pre_tokenizer_name_matches_the_reference_on_the_qwen35_vocabulary() {
    let dir = vocab_dir();
    let reference = held_out();
    let file = oxibonsai_gguf::GgufFile::open(dir.join("ggml-vocab-qwen35.gguf")).expect("open");
    let mut failures = Vec::new();
    let mut checked = 0;
    for (pre, expected) in &reference.pre {
        let mut spec = oxibonsai_tokenizer::VocabSpec::from_metadata(file.metadata()).unwrap();
        spec.pre = Some(pre.as_str().into());
        let tokenizer = Tokenizer::from_spec(spec).unwrap_or_else(|error| panic!("{pre}: {error}"));
        for (text, ids) in reference.short_texts.iter().zip(expected) {
            checked += 1;
            let ours = tokenizer.encode(text, true, true).unwrap();
            if ours != parse_ids(ids) {
                failures.push(format!(
                    "{pre} {text:?}:\n  ours   {ours:?}\n  theirs {:?}",
                    parse_ids(ids)
                ));
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {checked} differ:\n{}",
        failures.len(),
        failures.join("\n")
    );
    eprintln!("{checked} pre-tokenizer cases match");
}

/// llama.cpp loads a `kimi-k2` file without merges (and only that pre-tokenizer): each word is then
/// its characters' tokens. Checked on the qwen35 vocabulary with its merges dropped: the text
/// comes back whole and every id is one character's token (or one byte of a character that has
/// none), while a non-Kimi file without merges is refused naming the key.
#[test]
fn kimi_k2_without_merges_tokenizes_by_character() {
    let dir = vocab_dir();
    let file = oxibonsai_gguf::GgufFile::open(dir.join("ggml-vocab-qwen35.gguf")).expect("open");
    let mut spec = oxibonsai_tokenizer::VocabSpec::from_metadata(file.metadata()).unwrap();
    spec.merges = None;
    let mut other = spec.clone();
    other.pre = Some("qwen2".into());
    let Err(error) = Tokenizer::from_spec(other) else {
        panic!("a qwen2 vocabulary without merges was accepted");
    };
    assert!(
        error.to_string().contains("tokenizer.ggml.merges"),
        "{error}"
    );
    spec.pre = Some("kimi-k2".into());
    let tokenizer = Tokenizer::from_spec(spec).expect("kimi-k2 without merges");
    let text = "Kimi 说：hello, wörld 12345!\n";
    let ids = tokenizer.encode(text, false, false).unwrap();
    assert_eq!(
        tokenizer.detokenize(&ids, false, false).unwrap(),
        text.as_bytes()
    );
    let chars = text.chars().count();
    assert!(
        ids.len() >= chars,
        "{} ids for {chars} characters",
        ids.len()
    );
    for &id in &ids {
        let piece = tokenizer.detokenize(&[id], false, false).unwrap();
        assert!(
            std::str::from_utf8(&piece).map_or(piece.len() == 1, |s| s.chars().count() == 1),
            "token {id} is {piece:?}, more than one character"
        );
    }
}

mod properties {
    use std::sync::OnceLock;

    use proptest::prelude::*;

    use super::{load, stream, vocab_dir, Tokenizer};

    /// The lossless vocabularies: byte-level BPE without space clean-up, and SentencePiece with
    /// byte fallback.
    fn lossless() -> &'static [(&'static str, Tokenizer)] {
        static TOKENIZERS: OnceLock<Vec<(&'static str, Tokenizer)>> = OnceLock::new();
        TOKENIZERS.get_or_init(|| {
            let dir = vocab_dir();
            [
                "qwen35",
                "qwen2",
                "deepseek-llm",
                "command-r",
                "llama-spm",
                "phi-3",
            ]
            .into_iter()
            .map(|name| (name, load(&dir, name)))
            .collect()
        })
    }

    // No `▁`: SentencePiece writes spaces as that character, so it cannot round-trip.
    const ALPHABET: &[&str] = &[
        "a",
        "Z",
        "é",
        "ß",
        "中",
        "한",
        "1",
        "٣",
        "½",
        " ",
        "  ",
        "\t",
        "\n",
        "\r\n",
        "\u{A0}",
        "\u{3000}",
        "'",
        "s",
        "ll",
        ".",
        ",",
        "!",
        "$",
        "😀",
        "\u{200B}",
        "\u{301}",
        "_",
        "word",
        " the",
        "<s>",
        "</s>",
        "<|endoftext|>",
        "<|im_start|>",
        "\u{1C}",
        "\0",
    ];

    fn text() -> impl Strategy<Value = String> {
        prop::collection::vec(prop::sample::select(ALPHABET), 0..40).prop_map(|p| p.concat())
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(300))]

        #[test]
        fn detokenize_inverts_tokenize_and_streaming_equals_it(text in text()) {
            for (name, tokenizer) in lossless() {
                let ids = tokenizer.encode(&text, false, false).unwrap();
                let whole = tokenizer.detokenize(&ids, false, false).unwrap();
                prop_assert_eq!(String::from_utf8_lossy(&whole), text.as_str(), "{}", name);
                prop_assert_eq!(stream(tokenizer, &ids), text.as_str(), "{} stream", name);
            }
        }
    }
}
