//! Constrained decoding: each step, the tokens that cannot continue a grammar are masked out of
//! the logits before sampling, so the output is in the grammar's language whatever the model's
//! weights — JSON (any object, or a JSON schema), a regular expression, a Lark grammar, or
//! llama.cpp's GBNF (translated to Lark here).
//!
//! The grammar engine is llguidance. Two halves:
//! - [`ConstraintVocab`], built once per model from the tokenizer (the token trie and the
//!   vocabulary's precomputed split over common lexemes) and shared by every request;
//! - [`Constraint`], one per request, compiled from a [`Grammar`] against that vocabulary. It lives
//!   beside a [`crate::sampling::Sampler`] in a generation loop: [`Constraint::mask`] before
//!   sampling, [`Constraint::accept`] with the token appended. Once the grammar is complete and
//!   nothing can extend it, only the end-of-generation tokens remain allowed.

mod gbnf;
mod vocab;

use std::panic::{catch_unwind, AssertUnwindSafe};

use llguidance::api::TopLevelGrammar;
use llguidance::toktrie::SimpleVob;
use llguidance::Matcher;
use serde_json::{json, Value};
use thiserror::Error;

pub use gbnf::gbnf_to_lark;
pub use vocab::ConstraintVocab;

#[derive(Error, Debug, Clone, PartialEq, Eq)]
pub enum ConstraintError {
    #[error("invalid JSON schema: {reason}")]
    InvalidJsonSchema { reason: String },
    #[error("invalid regular expression '{pattern}': {reason}")]
    InvalidRegex { pattern: String, reason: String },
    #[error("invalid Lark grammar: {reason}")]
    InvalidLark { reason: String },
    /// `line` is where the GBNF text is wrong; `None` when the translated grammar is refused
    /// as a whole (e.g. a token reference the vocabulary does not have).
    #[error("invalid GBNF grammar{}: {reason}", line.map(|l| format!(", line {l}")).unwrap_or_default())]
    InvalidGbnf { line: Option<usize>, reason: String },
    #[error("the vocabulary cannot be used for constrained decoding: {reason}")]
    Vocabulary { reason: String },
    #[error("token {token} does not continue the grammar: {reason}")]
    TokenRejected { token: u32, reason: String },
    #[error("the grammar matcher failed: {reason}")]
    Matcher { reason: String },
}

impl From<oxibonsai_tokenizer::TokenizerError> for ConstraintError {
    fn from(err: oxibonsai_tokenizer::TokenizerError) -> Self {
        ConstraintError::Vocabulary {
            reason: err.to_string(),
        }
    }
}

/// What the output must match. Building one checks nothing; [`Constraint::new`] compiles it and
/// reports what is wrong.
#[derive(Clone, Debug, PartialEq)]
pub enum Grammar {
    /// Any JSON object (OpenAI's `response_format: {"type": "json_object"}`).
    JsonObject,
    /// A JSON document valid against this schema.
    JsonSchema(Value),
    /// Text matching the whole regular expression (Rust `regex` syntax).
    Regex(String),
    /// llguidance's Lark dialect (<https://github.com/guidance-ai/llguidance/blob/main/docs/syntax.md>).
    Lark(String),
    /// llama.cpp's GBNF, the start rule being `root`.
    Gbnf(String),
}

/// Whitespace allowed between JSON tokens: a space, or one or two newlines and up to 20 spaces or
/// tabs of indent — the bound llama.cpp's schema grammars use. llguidance's default is unbounded,
/// and a model that keeps choosing whitespace (any random-weight model; small models in loops)
/// would then never finish the document. A schema's own `x-guidance` options take precedence.
pub const JSON_WHITESPACE: &str = r"\x20|\n{1,2}[\x20\x09]{0,20}";

impl Grammar {
    fn to_llguidance(&self) -> Result<TopLevelGrammar, ConstraintError> {
        Ok(match self {
            Grammar::JsonObject => {
                TopLevelGrammar::from_json_schema(with_json_defaults(json!({"type": "object"})))
            }
            Grammar::JsonSchema(schema) => {
                TopLevelGrammar::from_json_schema(with_json_defaults(schema.clone()))
            }
            Grammar::Regex(pattern) => TopLevelGrammar::from_regex(pattern),
            Grammar::Lark(source) => TopLevelGrammar::from_lark(source.clone()),
            Grammar::Gbnf(source) => TopLevelGrammar::from_lark(gbnf_to_lark(source)?),
        })
    }

    fn compile_error(&self, reason: String) -> ConstraintError {
        match self {
            Grammar::JsonObject | Grammar::JsonSchema(_) => {
                ConstraintError::InvalidJsonSchema { reason }
            }
            Grammar::Regex(pattern) => ConstraintError::InvalidRegex {
                pattern: pattern.clone(),
                reason,
            },
            Grammar::Lark(_) => ConstraintError::InvalidLark { reason },
            Grammar::Gbnf(_) => ConstraintError::InvalidGbnf { line: None, reason },
        }
    }
}

fn with_json_defaults(mut schema: Value) -> Value {
    if let Value::Object(map) = &mut schema {
        if !map.contains_key("x-guidance") {
            map.insert(
                "x-guidance".to_owned(),
                json!({ "whitespace_pattern": JSON_WHITESPACE }),
            );
        }
    }
    schema
}

/// One request's grammar state. Clone it to branch (e.g. `n` completions from one prompt).
#[derive(Clone)]
pub struct Constraint {
    matcher: Matcher,
    grammar_kind: &'static str,
    n_vocab: usize,
    /// The last mask, reused between steps.
    allowed: SimpleVob,
}

impl std::fmt::Debug for Constraint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Constraint")
            .field("grammar", &self.grammar_kind)
            .field("stopped", &self.matcher.is_stopped())
            .finish_non_exhaustive()
    }
}

// A request's constraint is built on a server thread and used on the engine's.
const _: () = {
    fn sendable<T: Send>() {}
    let _ = sendable::<Constraint>;
    let _ = sendable::<ConstraintVocab>;
};

impl Constraint {
    /// Compiles `grammar` against `vocab`; an invalid schema / regex / grammar is an error naming
    /// what is wrong.
    pub fn new(vocab: &ConstraintVocab, grammar: &Grammar) -> Result<Constraint, ConstraintError> {
        let top = grammar.to_llguidance()?;
        // llguidance reports bad input as errors; a panic inside it must not take a server down.
        let parser = catch_unwind(AssertUnwindSafe(|| vocab.factory().create_parser(top)))
            .map_err(|panic| grammar.compile_error(panic_message(&panic)))?
            .map_err(|e| grammar.compile_error(one_line(&format!("{e:#}"))))?;
        let mut matcher = Matcher::new(Ok(parser));
        if let Some(reason) = matcher.get_error() {
            return Err(grammar.compile_error(reason));
        }
        for warning in matcher.grammar_warnings() {
            tracing::warn!("grammar: {warning}");
        }
        Ok(Constraint {
            matcher,
            grammar_kind: match grammar {
                Grammar::JsonObject => "json_object",
                Grammar::JsonSchema(_) => "json_schema",
                Grammar::Regex(_) => "regex",
                Grammar::Lark(_) => "lark",
                Grammar::Gbnf(_) => "gbnf",
            },
            n_vocab: vocab.n_vocab(),
            allowed: SimpleVob::new(),
        })
    }

    pub fn json_object(vocab: &ConstraintVocab) -> Result<Constraint, ConstraintError> {
        Constraint::new(vocab, &Grammar::JsonObject)
    }

    pub fn json_schema(
        vocab: &ConstraintVocab,
        schema: &Value,
    ) -> Result<Constraint, ConstraintError> {
        Constraint::new(vocab, &Grammar::JsonSchema(schema.clone()))
    }

    pub fn regex(vocab: &ConstraintVocab, pattern: &str) -> Result<Constraint, ConstraintError> {
        Constraint::new(vocab, &Grammar::Regex(pattern.to_owned()))
    }

    pub fn lark(vocab: &ConstraintVocab, source: &str) -> Result<Constraint, ConstraintError> {
        Constraint::new(vocab, &Grammar::Lark(source.to_owned()))
    }

    pub fn gbnf(vocab: &ConstraintVocab, source: &str) -> Result<Constraint, ConstraintError> {
        Constraint::new(vocab, &Grammar::Gbnf(source.to_owned()))
    }

    /// The tokens allowed next, one bit per token id (only the end-of-generation tokens once the
    /// grammar is finished). This is where the per-token cost of a constraint is.
    pub fn allowed_tokens(&mut self) -> Result<&SimpleVob, ConstraintError> {
        self.allowed = self
            .matcher
            .compute_mask_or_eos()
            .map_err(|e| matcher_error(&e))?;
        Ok(&self.allowed)
    }

    /// Sets the logit of every token the grammar does not allow next to −∞ (ids past the
    /// tokenizer's vocabulary too, should the model's output row be longer).
    pub fn mask(&mut self, logits: &mut [f32]) -> Result<(), ConstraintError> {
        let allowed = self.allowed_tokens()?;
        let words = allowed.as_slice();
        let n_masked = logits.len().min(allowed.len());
        let (inside, past) = logits.split_at_mut(n_masked);
        for (chunk, &word) in inside.chunks_mut(32).zip(words) {
            // Most words are all-banned or all-allowed: those take no bit test.
            if word == u32::MAX {
                continue;
            }
            if word == 0 {
                chunk.fill(f32::NEG_INFINITY);
                continue;
            }
            // A select, not a branch: inside a JSON string most words are mixed, and this loop
            // then runs over the whole vocabulary.
            for (bit, logit) in chunk.iter_mut().enumerate() {
                let keep = (word >> bit) & 1 != 0;
                *logit = if keep { *logit } else { f32::NEG_INFINITY };
            }
        }
        past.fill(f32::NEG_INFINITY);
        Ok(())
    }

    /// Advances the grammar by the token appended to the output. An end-of-generation token is
    /// accepted only where the grammar is complete.
    pub fn accept(&mut self, token: u32) -> Result<(), ConstraintError> {
        if token as usize >= self.n_vocab {
            return Err(ConstraintError::TokenRejected {
                token,
                reason: format!("past the vocabulary of {} tokens", self.n_vocab),
            });
        }
        self.matcher
            .consume_token(token)
            .map_err(|e| ConstraintError::TokenRejected {
                token,
                reason: one_line(&format!("{e:#}")),
            })
    }

    /// Whether the output so far is a complete sentence of the grammar (ending here is valid).
    pub fn is_accepting(&mut self) -> bool {
        !self.matcher.is_error() && self.matcher.is_accepting().unwrap_or(false)
    }

    /// Whether the grammar is complete and nothing can extend it: the only tokens left are the
    /// end-of-generation ones.
    pub fn is_finished(&self) -> bool {
        self.matcher.is_stopped() && !self.matcher.is_error()
    }
}

fn matcher_error(err: &dyn std::fmt::Display) -> ConstraintError {
    ConstraintError::Matcher {
        reason: one_line(&err.to_string()),
    }
}

/// llguidance's messages span several lines (a regex error draws a caret under the pattern) and,
/// for errors while generating, can append the parser state: one line, bounded.
fn one_line(message: &str) -> String {
    const MAX_CHARS: usize = 400;
    let joined = message
        .lines()
        .map(str::trim)
        .filter(|line| !line.is_empty())
        .collect::<Vec<_>>()
        .join(" ");
    match joined.char_indices().nth(MAX_CHARS) {
        Some((cut, _)) => format!("{}…", &joined[..cut]),
        None => joined,
    }
}

fn panic_message(panic: &Box<dyn std::any::Any + Send>) -> String {
    let what = panic
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "unknown cause".to_owned());
    format!("the grammar compiler failed: {what}")
}
