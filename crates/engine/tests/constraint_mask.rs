//! The constraint itself on real vocabularies, computed from the tokenizer alone (no model): the
//! mask is exactly the set of tokens that continue the language, a finished grammar allows only
//! the end of generation, a bad grammar is a specific error, and llama.cpp's `json.gbnf` accepts
//! JSON token by token. (Generation under constraints, judged independently: `constraint.rs`.)

use std::sync::Arc;

use oxibonsai_engine::constraint::{Constraint, ConstraintError, ConstraintVocab};
use oxibonsai_gguf::GgufFile;
use oxibonsai_testkit::golden;
use oxibonsai_tokenizer::Tokenizer;
use serde_json::json;

fn tokenizer_of(relative: &str) -> Arc<Tokenizer> {
    let file = GgufFile::open(golden(relative)).unwrap();
    Arc::new(Tokenizer::from_gguf(&file).unwrap())
}

/// The mask is exactly the set of tokens whose text can continue the language, computed here
/// from the tokenizer alone.
#[test]
fn the_mask_is_the_set_of_tokens_that_continue_the_language() {
    let tokenizer = tokenizer_of("tokenizer/qwen3/qwen3-vocab.gguf");
    let vocab = ConstraintVocab::new(tokenizer.clone()).unwrap();
    let n_vocab = tokenizer.vocab_size();
    let digits_only = |id: u32| {
        let piece = tokenizer.token_to_piece(id, false).unwrap();
        !piece.is_empty() && piece.iter().all(u8::is_ascii_digit)
    };
    let mut constraint = Constraint::regex(&vocab, "[0-9]+").unwrap();
    let mut logits = vec![1.0f32; n_vocab];
    constraint.mask(&mut logits).unwrap();
    let mut n_allowed = 0;
    for id in 0..n_vocab as u32 {
        let allowed = logits[id as usize] == 1.0;
        assert_eq!(allowed, digits_only(id), "token {id} at the start");
        n_allowed += usize::from(allowed);
    }
    assert!(!constraint.is_accepting());

    // After a digit the language may end: the end-of-generation tokens join the digits.
    let seven = tokenizer.encode("7", false, false).unwrap();
    assert_eq!(seven.len(), 1);
    constraint.accept(seven[0]).unwrap();
    assert!(constraint.is_accepting());
    let mut logits = vec![1.0f32; n_vocab + 5];
    constraint.mask(&mut logits).unwrap();
    for id in 0..n_vocab as u32 {
        let expected = digits_only(id) || tokenizer.is_eog(id);
        assert_eq!(
            logits[id as usize] == 1.0,
            expected,
            "token {id} after a digit"
        );
    }
    // A model row longer than the vocabulary: the extra ids are never allowed.
    assert!(logits[n_vocab..].iter().all(|&l| l == f32::NEG_INFINITY));
    println!("[0-9]+ allows {n_allowed} of {n_vocab} tokens at the start");

    // Multi-byte tokens: a word of 2 to 12 lower-case letters then '!'. At the start, exactly
    // the tokens made of 1 to 12 letters, or of 2 to 12 letters and the '!'.
    let mut words = Constraint::regex(&vocab, "[a-z]{2,12}!").unwrap();
    let mut logits = vec![1.0f32; n_vocab];
    words.mask(&mut logits).unwrap();
    let mut n_allowed = 0;
    for id in 0..n_vocab as u32 {
        let piece = tokenizer.token_to_piece(id, false).unwrap();
        let letters = piece.strip_suffix(b"!").unwrap_or(piece);
        let bang = letters.len() < piece.len();
        let expected = letters.iter().all(u8::is_ascii_lowercase)
            && letters.len() <= 12
            && letters.len() >= if bang { 2 } else { 1 };
        let allowed = logits[id as usize] == 1.0;
        assert_eq!(
            allowed, expected,
            "token {id} {piece:?} under [a-z]{{2,12}}!"
        );
        n_allowed += usize::from(allowed);
    }
    println!("[a-z]{{2,12}}! allows {n_allowed} of {n_vocab} tokens at the start");

    // A disallowed token is rejected, by name.
    let letter = tokenizer.encode("a", false, false).unwrap()[0];
    let err = constraint.accept(letter).unwrap_err();
    assert!(
        matches!(err, ConstraintError::TokenRejected { token, .. } if token == letter),
        "{err}"
    );
}

#[test]
fn a_finished_grammar_allows_only_end_of_generation() {
    let tokenizer = tokenizer_of("tokenizer/qwen3/qwen3-vocab.gguf");
    let vocab = ConstraintVocab::new(tokenizer.clone()).unwrap();
    let mut eog: Vec<u32> = tokenizer.eog_ids().to_vec();
    eog.sort_unstable();
    let mut eos: Vec<u32> = vocab.eos_tokens().to_vec();
    assert_eq!(eos[0], tokenizer.eos().unwrap());
    eos.sort_unstable();
    assert_eq!(eos, eog);

    let mut constraint = Constraint::regex(&vocab, "abc").unwrap();
    assert!(!constraint.is_finished());
    for token in tokenizer.encode("abc", false, false).unwrap() {
        constraint.accept(token).unwrap();
    }
    assert!(constraint.is_accepting());
    assert!(constraint.is_finished());
    let allowed = constraint.allowed_tokens().unwrap().to_list();
    assert_eq!(allowed, eog);
}

#[test]
fn invalid_constraints_are_specific_errors() {
    let tokenizer = tokenizer_of("tokenizer/smollm2/smollm2-vocab.gguf");
    let vocab = ConstraintVocab::new(tokenizer).unwrap();
    let check = |result: Result<Constraint, ConstraintError>,
                 expect: &dyn Fn(&ConstraintError) -> bool,
                 needle: &str| {
        let err = result.unwrap_err();
        println!("{err}");
        assert!(expect(&err), "{err:?}");
        assert!(
            err.to_string().contains(needle),
            "'{err}' should mention '{needle}'"
        );
    };
    let schema_error = |e: &ConstraintError| matches!(e, ConstraintError::InvalidJsonSchema { .. });
    check(
        Constraint::json_schema(&vocab, &json!({"type": "strnig"})),
        &schema_error,
        "strnig",
    );
    check(
        Constraint::json_schema(
            &vocab,
            &json!({"type": "integer", "minimum": 5, "maximum": 1}),
        ),
        &schema_error,
        "invalid JSON schema",
    );
    check(
        Constraint::json_schema(&vocab, &json!({"$ref": "#/$defs/missing"})),
        &schema_error,
        "missing",
    );
    check(
        Constraint::regex(&vocab, "(ab"),
        &|e| matches!(e, ConstraintError::InvalidRegex { pattern, .. } if pattern == "(ab"),
        "(ab",
    );
    check(
        Constraint::lark(&vocab, "start: undefined_rule\n"),
        &|e| matches!(e, ConstraintError::InvalidLark { .. }),
        "undefined_rule",
    );
    check(
        Constraint::gbnf(&vocab, "root ::= \"a\" other\n"),
        &|e| matches!(e, ConstraintError::InvalidGbnf { line: Some(1), .. }),
        "other",
    );
    // Well-formed GBNF that names a token the vocabulary does not have.
    check(
        Constraint::gbnf(&vocab, "root ::= \"a\" <|no_such_token|>\n"),
        &|e| matches!(e, ConstraintError::InvalidGbnf { line: None, .. }),
        "no_such_token",
    );
}

/// llama.cpp's `json.gbnf` as its grammar guide writes it (empty alternatives, comments inside a
/// rule, negated classes with escapes, `{m,n}` counts), translated and compiled: JSON text is
/// accepted token by token, and non-JSON is refused at the first token that breaks it.
const JSON_GBNF: &str = r#"
root   ::= object
value  ::= object | array | string | number | ("true" | "false" | "null") ws

object ::=
  "{" ws (
            string ":" ws value
    ("," ws string ":" ws value)*
  )? "}" ws

array  ::=
  "[" ws (
            value
    ("," ws value)*
  )? "]" ws

string ::=
  "\"" (
    [^"\\\x7F\x00-\x1F] |
    "\\" (["\\bfnrt] | "u" [0-9a-fA-F]{4}) # escapes
  )* "\"" ws

number ::= ("-"? ([0-9] | [1-9] [0-9]{0,15})) ("." [0-9]+)? ([eE] [-+]? [0-9] [1-7]{0,15})? ws

# Optional space: by convention, applied in this grammar after literal chars when allowed
ws ::= | " " | "\n" [ \t]{0,20}
"#;

#[test]
fn a_gbnf_json_grammar_accepts_json_and_refuses_the_rest() {
    let tokenizer = tokenizer_of("tokenizer/smollm2/smollm2-vocab.gguf");
    let vocab = ConstraintVocab::new(tokenizer.clone()).unwrap();
    let feed = |text: &str| -> (usize, bool) {
        let mut constraint = Constraint::gbnf(&vocab, JSON_GBNF).unwrap();
        let tokens = tokenizer.encode(text, false, false).unwrap();
        for (i, &token) in tokens.iter().enumerate() {
            if constraint.accept(token).is_err() {
                return (i, false);
            }
        }
        (tokens.len(), constraint.is_accepting())
    };
    for good in [
        r#"{"a": [1, -2.5, "x\n\u00e9"], "b": {"c": null}}"#,
        "{}",
        "{ \"key\": true }",
        r#"{"emoji": "héllo wörld ✓"}"#,
    ] {
        let (_, accepted) = feed(good);
        assert!(accepted, "{good:?} should be accepted");
    }
    for bad in [r#"{"a" 1}"#, "[1, 2]", r#"{"a": 01}"#, r#"{"a": tru}"#, "{"] {
        let (_, accepted) = feed(bad);
        assert!(!accepted, "{bad:?} should be refused");
    }
}
