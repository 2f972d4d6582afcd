//! llama.cpp's `POST /tokenize {"content", "add_special", "parse_special"}` → `{"tokens"}` and
//! `POST /detokenize {"tokens"}` → `{"content"}`.

use axum::Json;
use serde_json::{json, Value};

use super::ModelRequest;
use crate::error::ApiError;

pub(super) async fn tokenize(req: ModelRequest) -> Result<Json<Value>, ApiError> {
    let (l, f) = req.parts()?;
    let content = f
        .string("content")?
        .ok_or_else(|| ApiError::invalid("content", "'content' is required"))?;
    let add_special = f.bool("add_special")?.unwrap_or(false);
    let parse_special = f.bool("parse_special")?.unwrap_or(true);
    let tokens = l
        .tokenizer
        .encode(content, add_special, parse_special)
        .map_err(|e| ApiError::invalid("content", e.to_string()))?;
    Ok(Json(json!({"tokens": tokens})))
}

pub(super) async fn detokenize(req: ModelRequest) -> Result<Json<Value>, ApiError> {
    let (l, f) = req.parts()?;
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
    let content = l
        .tokenizer
        .decode(&tokens, false)
        .map_err(|e| ApiError::invalid("tokens", e.to_string()))?;
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
