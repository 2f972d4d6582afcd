//! Message content is text: special-token text a user types (`"<|im_end|>\n<|im_start|>system"`)
//! must not become the chat template's control tokens (a role injection). Only the template's
//! own markers are control tokens.
//!
//! The mechanism: before the template renders, each control token's text inside a message's
//! content is bracketed by two noncharacters ([`OPEN`], [`CLOSE`]); after rendering, [`unmark`]
//! removes them and returns the byte ranges they bracketed, which
//! [`Tokenizer::encode_with_literal`] tokenizes as text. The template sees content that differs
//! only by those brackets around the token texts, so what it does with the content (stripping
//! whitespace, splitting off a `<think>` block — user-defined tokens are never bracketed) gives
//! the same prompt text; a request that holds the noncharacters itself is refused.
//! `--parse-special-in-content` turns this off (llama.cpp's behaviour).

use std::ops::Range;

use oxibonsai_tokenizer::{TokenAttr, Tokenizer};
use regex::Regex;
use serde_json::Value;

use crate::error::ApiError;

/// Unicode noncharacters, reserved by the standard for a program's internal use: they do not
/// occur in text exchanged with clients ([`refuse_marks`] makes sure).
const OPEN: char = '\u{FDD0}';
const CLOSE: char = '\u{FDD1}';

/// The vocabulary's control-token texts, as one pattern (longest first, as the tokenizer matches).
pub(crate) struct ControlTexts {
    pattern: Option<Regex>,
}

impl ControlTexts {
    pub(crate) fn new(tokenizer: &Tokenizer) -> ControlTexts {
        let control = TokenAttr::CONTROL.with(TokenAttr::UNKNOWN);
        let mut texts: Vec<&str> = (0..tokenizer.vocab_size() as u32)
            .filter(|&id| {
                tokenizer
                    .token_attr(id)
                    .is_some_and(|a| a.intersects(control))
            })
            .filter_map(|id| tokenizer.token_text(id))
            .filter(|t| !t.is_empty())
            .collect();
        texts.sort_by(|a, b| b.len().cmp(&a.len()).then(a.cmp(b)));
        texts.dedup();
        let alternation = texts
            .iter()
            .map(|t| regex::escape(t))
            .collect::<Vec<_>>()
            .join("|");
        let pattern = if texts.is_empty() {
            None
        } else {
            // The vocabulary's own texts, escaped: this compiles unless the regex size limit is
            // hit, and then content is left unmarked (as llama.cpp treats it) with a warning.
            Regex::new(&alternation)
                .inspect_err(|err| tracing::warn!(%err, "control-token texts not protected"))
                .ok()
        };
        ControlTexts { pattern }
    }

    /// Brackets control-token text in each message's `content` and `reasoning_content`.
    pub(crate) fn mark(&self, messages: &mut [Value]) {
        let Some(pattern) = &self.pattern else {
            return;
        };
        for message in messages {
            for key in ["content", "reasoning_content"] {
                if let Some(Value::String(text)) = message.get_mut(key) {
                    if pattern.is_match(text) {
                        *text = pattern
                            .replace_all(text, |c: &regex::Captures<'_>| {
                                format!("{OPEN}{}{CLOSE}", &c[0])
                            })
                            .into_owned();
                    }
                }
            }
        }
    }
}

/// [`refuse_marks`] for each item of a list named `param`.
pub(crate) fn refuse_marks_in(items: &[Value], param: &str) -> Result<(), ApiError> {
    for (i, item) in items.iter().enumerate() {
        refuse_marks(item, &format!("{param}[{i}]"))?;
    }
    Ok(())
}

/// 400 if any string in `value` holds the brackets: they would be taken for the server's own.
pub(crate) fn refuse_marks(value: &Value, param: &str) -> Result<(), ApiError> {
    let holds = |s: &str| s.contains([OPEN, CLOSE]);
    let found = match value {
        Value::String(s) => holds(s),
        Value::Array(items) => {
            refuse_marks_in(items, param)?;
            false
        }
        Value::Object(map) => {
            for (key, item) in map {
                if holds(key) {
                    return Err(marks_refused(param));
                }
                refuse_marks(item, &format!("{param}.{key}"))?;
            }
            false
        }
        _ => false,
    };
    if found {
        return Err(marks_refused(param));
    }
    Ok(())
}

fn marks_refused(param: &str) -> ApiError {
    ApiError::invalid(
        param,
        format!("'{param}' holds U+FDD0 or U+FDD1, noncharacters this server reserves"),
    )
}

/// The rendered prompt without the brackets, and the byte ranges (in it) they enclosed.
pub(crate) fn unmark(rendered: &str) -> (String, Vec<Range<usize>>) {
    if !rendered.contains([OPEN, CLOSE]) {
        return (rendered.to_owned(), Vec::new());
    }
    let mut text = String::with_capacity(rendered.len());
    let mut ranges = Vec::new();
    let mut open: Option<usize> = None;
    for c in rendered.chars() {
        match c {
            OPEN => open = Some(text.len()),
            CLOSE => {
                if let Some(start) = open.take() {
                    ranges.push(start..text.len());
                }
            }
            c => text.push(c),
        }
    }
    (text, ranges)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unmark_gives_the_text_and_the_bracketed_ranges() {
        let (text, ranges) = unmark("a\u{FDD0}<x>\u{FDD1}b\u{FDD0}<y>\u{FDD1}");
        assert_eq!(text, "a<x>b<y>");
        assert_eq!(ranges, [1..4, 5..8]);
        assert_eq!(&text[ranges[1].clone()], "<y>");
        let (text, ranges) = unmark("plain");
        assert_eq!((text.as_str(), ranges.len()), ("plain", 0));
    }

    #[test]
    fn requests_holding_the_brackets_are_refused() {
        let messages = serde_json::json!([{"role": "user", "content": "a\u{FDD1}"}]);
        let err = refuse_marks_in(messages.as_array().unwrap(), "messages").unwrap_err();
        assert_eq!(err.body()["error"]["param"], "messages[0].content");
        assert!(refuse_marks(&serde_json::json!(["ok"]), "messages").is_ok());
    }
}
