//! Bad vocabularies and bad ids: each is its own error variant, naming what was wrong.

use std::borrow::Cow;

use oxibonsai_gguf::{Array, Metadata, Value};
use oxibonsai_tokenizer::{SpecialTokenIds, Tokenizer, TokenizerError, VocabSpec};

/// A small but complete byte-level vocabulary: "a", "b", "ab", a control token.
fn spec() -> VocabSpec<'static> {
    VocabSpec {
        model: "gpt2".into(),
        pre: Some("qwen2".into()),
        tokens: Cow::Owned(vec!["a".into(), "b".into(), "ab".into(), "<|end|>".into()]),
        token_types: Some(Cow::Owned(vec![1, 1, 1, 3])),
        merges: Some(Cow::Owned(vec!["a b".into()])),
        special: SpecialTokenIds {
            eos: Some(3),
            ..SpecialTokenIds::default()
        },
        add_bos: None,
        add_eos: None,
        extra: Default::default(),
    }
}

fn metadata(without: &str) -> Metadata {
    let entries: Vec<(String, Value)> = vec![
        ("tokenizer.ggml.model".into(), Value::String("gpt2".into())),
        ("tokenizer.ggml.pre".into(), Value::String("qwen2".into())),
        (
            "tokenizer.ggml.tokens".into(),
            Value::Array(Array::String(vec!["a".into(), "b".into(), "ab".into()])),
        ),
        (
            "tokenizer.ggml.merges".into(),
            Value::Array(Array::String(vec!["a b".into()])),
        ),
    ];
    Metadata::new(entries.into_iter().filter(|(k, _)| k != without).collect())
        .expect("no duplicate keys")
}

#[test]
fn the_small_vocabulary_builds_and_merges() {
    let tokenizer = Tokenizer::from_spec(spec()).expect("valid");
    assert_eq!(tokenizer.encode("ab<|end|>", true, true).unwrap(), [2, 3]);
    // Unparsed, the control token's text is BPE'd; none of its characters is a token here and
    // llama.cpp drops such characters silently.
    assert_eq!(tokenizer.encode("ab<|end|>", true, false).unwrap(), [2]);
    let from_metadata = Tokenizer::from_metadata(&metadata("")).expect("valid");
    assert_eq!(
        from_metadata.encode("abba", false, false).unwrap(),
        [2, 1, 0]
    );
}

#[test]
fn an_unsupported_model_is_named() {
    let spec = VocabSpec {
        model: "rwkv".into(),
        ..spec()
    };
    let error = Tokenizer::from_spec(spec).unwrap_err();
    assert!(matches!(&error, TokenizerError::UnsupportedModel { found } if found == "rwkv"));
    assert!(error.to_string().contains("'rwkv'"), "{error}");
}

#[test]
fn an_unsupported_pre_tokenizer_is_named_with_the_supported_ones() {
    let spec = VocabSpec {
        pre: Some("made-up".into()),
        ..spec()
    };
    let error = Tokenizer::from_spec(spec).unwrap_err();
    assert!(matches!(&error, TokenizerError::UnsupportedPre { found, .. } if found == "made-up"));
    let message = error.to_string();
    for name in [
        "'made-up'",
        "tekken",
        "qwen35",
        "deepseek-llm",
        "qwen2",
        "smollm",
        "llama-bpe",
        "gpt-2",
        "default",
    ] {
        assert!(message.contains(name), "{message} should name {name}");
    }
}

#[test]
fn a_missing_pre_tokenizer_means_llama_cpp_default() {
    let spec = VocabSpec {
        pre: None,
        ..spec()
    };
    let tokenizer = Tokenizer::from_spec(spec).expect("llama.cpp accepts a missing pre");
    assert_eq!(tokenizer.pre(), "default");
}

#[test]
fn out_of_range_ids_name_the_id_and_the_vocabulary_size() {
    let tokenizer = Tokenizer::from_spec(spec()).unwrap();
    let check = |error: TokenizerError| {
        assert!(
            matches!(
                error,
                TokenizerError::TokenOutOfRange {
                    id: 4,
                    vocab_size: 4
                }
            ),
            "{error}"
        );
    };
    check(tokenizer.token_to_piece(4, true).unwrap_err());
    check(tokenizer.decode(&[0, 4], false).unwrap_err());
    check(tokenizer.stream_decoder(false).push(4).unwrap_err());
    assert_eq!(tokenizer.token_text(4), None);
}

#[test]
fn missing_required_keys_are_named() {
    for key in [
        "tokenizer.ggml.model",
        "tokenizer.ggml.tokens",
        "tokenizer.ggml.merges",
    ] {
        let error = Tokenizer::from_metadata(&metadata(key)).unwrap_err();
        assert!(
            matches!(&error, TokenizerError::MissingKey { key: k } if *k == key),
            "{key}: {error}"
        );
        assert!(error.to_string().contains(key));
    }
}

#[test]
fn a_key_of_the_wrong_type_is_reported_by_the_gguf_reader() {
    let mut entries: Vec<(String, Value)> = metadata("tokenizer.ggml.pre")
        .iter()
        .map(|(k, v)| (k.to_owned(), v.clone()))
        .collect();
    entries.push(("tokenizer.ggml.pre".into(), Value::U32(2)));
    let error = Tokenizer::from_metadata(&Metadata::new(entries).unwrap()).unwrap_err();
    assert!(matches!(error, TokenizerError::Gguf(_)), "{error}");
    assert!(error.to_string().contains("tokenizer.ggml.pre"), "{error}");
}

#[test]
fn inconsistent_vocabularies_are_rejected() {
    let short_types = VocabSpec {
        token_types: Some(Cow::Owned(vec![1, 1])),
        ..spec()
    };
    assert!(matches!(
        Tokenizer::from_spec(short_types).unwrap_err(),
        TokenizerError::LengthMismatch {
            key: "tokenizer.ggml.token_type",
            expected: 4,
            found: 2
        }
    ));

    let duplicate = VocabSpec {
        tokens: Cow::Owned(vec!["a".into(), "b".into(), "a".into()]),
        token_types: None,
        ..spec()
    };
    assert!(matches!(
        Tokenizer::from_spec(duplicate).unwrap_err(),
        TokenizerError::DuplicateToken {
            first: 0,
            second: 2,
            ..
        }
    ));

    let empty = VocabSpec {
        tokens: Cow::Owned(Vec::new()),
        token_types: None,
        ..spec()
    };
    assert!(matches!(
        Tokenizer::from_spec(empty).unwrap_err(),
        TokenizerError::EmptyVocabulary
    ));

    let malformed_byte = VocabSpec {
        token_types: Some(Cow::Owned(vec![1, 6, 1, 3])),
        ..spec()
    };
    assert!(matches!(
        Tokenizer::from_spec(malformed_byte).unwrap_err(),
        TokenizerError::MalformedByteToken { id: 1, .. }
    ));
}

#[test]
fn add_bos_without_a_bos_token_is_rejected() {
    // The BPE default BOS (id 11) does not exist in a 4-token vocabulary.
    let spec = VocabSpec {
        add_bos: Some(true),
        ..spec()
    };
    assert!(matches!(
        Tokenizer::from_spec(spec).unwrap_err(),
        TokenizerError::MissingSpecialToken {
            id_key: "tokenizer.ggml.bos_token_id",
            ..
        }
    ));
}

#[test]
fn add_special_adds_bos_and_eos_per_the_flags() {
    let spec = VocabSpec {
        add_bos: Some(true),
        add_eos: Some(true),
        special: SpecialTokenIds {
            bos: Some(1),
            eos: Some(3),
            ..SpecialTokenIds::default()
        },
        ..spec()
    };
    let tokenizer = Tokenizer::from_spec(spec).unwrap();
    assert_eq!(tokenizer.encode("a", true, false).unwrap(), [1, 0, 3]);
    assert_eq!(tokenizer.encode("a", false, false).unwrap(), [0]);
    assert_eq!(tokenizer.encode("", true, false).unwrap(), [1, 3]);
}

#[test]
fn llama_bpe_adds_bos_unless_the_file_says_otherwise() {
    let with = |add_bos| VocabSpec {
        pre: Some("llama-bpe".into()),
        add_bos,
        special: SpecialTokenIds {
            bos: Some(3),
            ..SpecialTokenIds::default()
        },
        ..spec()
    };
    assert!(Tokenizer::from_spec(with(None)).unwrap().add_bos());
    assert!(!Tokenizer::from_spec(with(Some(false))).unwrap().add_bos());
}
