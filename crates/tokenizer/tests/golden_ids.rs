//! Every golden case of the reference engine: ids of `llama_tokenize` and bytes of
//! `llama_token_to_piece`, for the Qwen3 and SmolLM2 vocabularies.

mod support;

use oxibonsai_testkit::hex_bytes;
use oxibonsai_tokenizer::{TokenAttr, TokenType, Tokenizer};
use support::Case;

fn check_ids_and_pieces(name: &str, tokenizer: &Tokenizer, cases: &[Case]) {
    let mut failures = Vec::new();
    for case in cases {
        assert!(
            case.add_special,
            "the golden cases are all add_special = true"
        );
        let ids = tokenizer
            .encode(&case.text, case.add_special, case.parse_special)
            .expect("encode");
        if ids != case.ids {
            failures.push(format!(
                "{name} {:?} parse_special={}: ids {ids:?}, reference {:?}",
                case.text, case.parse_special, case.ids
            ));
        }
        let bytes = tokenizer
            .decode_bytes(&case.ids, case.parse_special)
            .expect("golden ids are in range");
        let expected = hex_bytes(&case.detokenized_hex);
        if bytes != expected {
            failures.push(format!(
                "{name} {:?} parse_special={}: pieces {:?}, reference {:?}",
                case.text,
                case.parse_special,
                String::from_utf8_lossy(&bytes),
                String::from_utf8_lossy(&expected)
            ));
        }
    }
    assert!(
        failures.is_empty(),
        "{} mismatches:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

#[test]
fn qwen3_ids_and_pieces_match_the_reference() {
    let tokenizer = support::qwen3();
    assert_eq!((tokenizer.kind(), tokenizer.pre()), ("gpt2", "qwen2"));
    check_ids_and_pieces("qwen3", tokenizer, &support::qwen3_cases());
}

#[test]
fn smollm2_ids_and_pieces_match_the_reference() {
    let tokenizer = support::smollm2();
    assert_eq!((tokenizer.kind(), tokenizer.pre()), ("gpt2", "smollm"));
    check_ids_and_pieces("smollm2", tokenizer, &support::smollm2_cases());
}

#[test]
fn the_cases_cover_special_parsing_both_ways() {
    // Guards the two tests above against a fixture that lost its interesting half.
    for cases in [support::qwen3_cases(), support::smollm2_cases()] {
        let differing = cases
            .chunks(2)
            .filter(|pair| pair.len() == 2 && pair[0].ids != pair[1].ids)
            .count();
        assert!(
            differing >= 3,
            "expected cases where parse_special changes the ids"
        );
    }
}

#[test]
fn qwen3_special_ids_and_flags_are_the_files() {
    let tokenizer = support::qwen3();
    assert_eq!(tokenizer.vocab_size(), 151_936);
    assert_eq!(tokenizer.bos(), Some(151_643));
    assert_eq!(tokenizer.eos(), Some(151_645));
    assert_eq!(tokenizer.special_ids().padding, Some(151_643));
    assert!(!tokenizer.add_bos() && !tokenizer.add_eos());
    // Detected by text as llama.cpp does: <|im_end|> for end-of-turn, Qwen's FIM tokens.
    assert_eq!(tokenizer.eot(), tokenizer.token_id("<|im_end|>"));
    assert_eq!(
        tokenizer.special_ids().fim_pre,
        tokenizer.token_id("<|fim_prefix|>")
    );
    let eog: Vec<&str> = tokenizer
        .eog_ids()
        .iter()
        .map(|&id| tokenizer.token_text(id).expect("eog ids are tokens"))
        .collect();
    // "</s>" is an ordinary Qwen token (128247), but llama.cpp's name list makes it end
    // generation (for PaddleOCR) and so a control token.
    assert_eq!(
        eog,
        [
            "</s>",
            "<|endoftext|>",
            "<|im_end|>",
            "<|fim_pad|>",
            "<|repo_name|>",
            "<|file_sep|>"
        ]
    );
    let end_s = tokenizer.token_id("</s>").expect("Qwen has </s>");
    assert_eq!(tokenizer.token_type(end_s), Some(TokenType::Normal));
    assert!(tokenizer
        .token_attr(end_s)
        .is_some_and(|a| a.intersects(TokenAttr::CONTROL)));
    assert_eq!(tokenizer.encode("a</s>", false, true).unwrap(), [64, end_s]);
    assert_eq!(tokenizer.token_to_piece(end_s, false).unwrap(), b"");
    assert_eq!(tokenizer.token_to_piece(end_s, true).unwrap(), b"</s>");
}

#[test]
fn smollm2_special_ids_and_flags_are_the_files() {
    let tokenizer = support::smollm2();
    assert_eq!(tokenizer.vocab_size(), 49_152);
    assert_eq!((tokenizer.bos(), tokenizer.eos()), (Some(1), Some(2)));
    assert_eq!(tokenizer.special_ids().unknown, Some(0));
    assert!(!tokenizer.add_bos());
    assert!(tokenizer.is_eog(0) && tokenizer.is_eog(2) && !tokenizer.is_eog(1));
}

#[test]
fn the_qwen3_vocabulary_loads_well_under_a_second() {
    // Parsing the GGUF is the reader's cost; building the tokenizer from its metadata is ours.
    let path = oxibonsai_testkit::golden("tokenizer/qwen3/qwen3-vocab.gguf");
    let start = std::time::Instant::now();
    let file = oxibonsai_gguf::GgufFile::open(&path).expect("open");
    eprintln!("qwen3-vocab.gguf opened in {:?}", start.elapsed());
    let mut best = std::time::Duration::MAX;
    for _ in 0..3 {
        let start = std::time::Instant::now();
        let tokenizer = Tokenizer::from_gguf(&file).expect("build");
        best = best.min(start.elapsed());
        assert_eq!(tokenizer.vocab_size(), 151_936);
    }
    eprintln!("Qwen3 tokenizer built from GGUF metadata in {best:?}");
    // Loose enough for a loaded 2-core machine, tight enough to catch a quadratic build.
    assert!(best.as_millis() < 1500, "building took {best:?}");
}
