//! llama.cpp's `POST /tokenize {"content", "add_special", "parse_special", "with_pieces"}` →
//! `{"tokens"}` (ids, or `{"id", "piece"}` objects with `with_pieces`) and
//! `POST /detokenize {"tokens"}` → `{"content"}`.
//!
//! Tokenizing takes intermediates of about 26 times the text (the tokenizer's per-word ranges and
//! per-token lists), so these routes are bounded three ways: a body of at most
//! [`TEXT_ROUTE_MAX_BYTES`] (413 beyond; more text than any context holds), one request at a time
//! ([`TEXT_ROUTES_AT_ONCE`], the turn taken before the body is read, in `routes::guard`), and the
//! work on the blocking pool, so that it neither adds up in memory nor stalls the async threads
//! (`/health`, streams). The token list is written straight to the answer's text, without a JSON
//! value per token.

use std::fmt::Write;
use std::sync::Arc;

use axum::http::header;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::{json, Value};

use super::ModelRequest;
use crate::error::ApiError;

/// Text-route requests read and worked on at once; more wait their turn.
pub(crate) const TEXT_ROUTES_AT_ONCE: usize = 1;

/// The largest body the text routes take (or `--max-body`, if smaller): 1 MiB, some 250k tokens
/// of text, more than any context.
pub(super) const TEXT_ROUTE_MAX_BYTES: usize = 1 << 20;

pub(super) fn is_text_route(path: &str) -> bool {
    path == "/tokenize" || path == "/detokenize"
}

/// Runs `work` on the blocking pool.
async fn text_work<T: Send + 'static>(
    work: impl FnOnce() -> T + Send + 'static,
) -> Result<T, ApiError> {
    tokio::task::spawn_blocking(work)
        .await
        .map_err(|e| ApiError::internal(format!("the tokenizer task failed: {e}")))
}

pub(super) async fn tokenize(req: ModelRequest) -> Result<Response, ApiError> {
    let (tokenizer, add_special, parse_special, with_pieces) = {
        let (l, f) = req.parts()?;
        (
            Arc::clone(&l.tokenizer),
            f.bool("add_special")?.unwrap_or(false),
            f.bool("parse_special")?.unwrap_or(true),
            f.bool("with_pieces")?.unwrap_or(false),
        )
    };
    // The content moves to the worker; nothing else of the body is needed.
    let ModelRequest { mut body, .. } = req;
    let content = match body.get_mut("content").map(Value::take) {
        Some(Value::String(s)) => s,
        None | Some(Value::Null) => {
            return Err(ApiError::invalid("content", "'content' is required"))
        }
        Some(v) => {
            return Err(ApiError::invalid(
                "content",
                format!("'content' must be a string, got {}", kind(&v)),
            ))
        }
    };
    drop(body);
    let answer = text_work(move || {
        let tokens = tokenizer
            .encode(&content, add_special, parse_special)
            .map_err(|e| ApiError::invalid("content", e.to_string()))?;
        drop(content);
        let mut text = String::with_capacity(16 + tokens.len() * 7);
        text.push_str("{\"tokens\":[");
        for (i, &t) in tokens.iter().enumerate() {
            if i > 0 {
                text.push(',');
            }
            if with_pieces {
                // llama-server's piece: the token's text, or its bytes where they are not
                // UTF-8 on their own (part of a character).
                let bytes = tokenizer
                    .token_to_piece(t, true)
                    .map_err(|e| ApiError::internal(e.to_string()))?;
                let piece = match std::str::from_utf8(bytes) {
                    Ok(s) => json!(s),
                    Err(_) => json!(bytes),
                };
                let _ = write!(text, "{}", json!({"id": t, "piece": piece}));
            } else {
                let _ = write!(text, "{t}");
            }
        }
        text.push_str("]}");
        Ok::<_, ApiError>(text)
    })
    .await??;
    Ok(([(header::CONTENT_TYPE, "application/json")], answer).into_response())
}

fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "an object",
    }
}

pub(super) async fn detokenize(req: ModelRequest) -> Result<Json<Value>, ApiError> {
    let (l, f) = req.parts()?;
    let tokenizer = Arc::clone(&l.tokenizer);
    let tokens = match f.get("tokens") {
        Some(Value::Array(items)) => token_ids(items, l.n_vocab, |v| {
            ApiError::invalid(
                "tokens",
                format!("'tokens' must hold token ids below {}, got {v}", l.n_vocab),
            )
        })?,
        _ => {
            return Err(ApiError::invalid(
                "tokens",
                "'tokens' must be a list of token ids",
            ))
        }
    };
    drop(req);
    let content = text_work(move || {
        tokenizer
            .decode(&tokens, false)
            .map_err(|e| ApiError::invalid("tokens", e.to_string()))
    })
    .await??;
    Ok(Json(json!({"content": content})))
}

/// Token ids from a JSON list, each below `n_vocab`; `bad` words the error for the first item
/// that is not one.
pub(super) fn token_ids(
    items: &[Value],
    n_vocab: usize,
    bad: impl Fn(&Value) -> ApiError,
) -> Result<Vec<u32>, ApiError> {
    items
        .iter()
        .map(|v| {
            v.as_u64()
                .filter(|&id| (id as usize) < n_vocab)
                .map(|id| id as u32)
                .ok_or_else(|| bad(v))
        })
        .collect()
}
