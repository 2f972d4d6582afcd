//! `POST /v1/embeddings` (OpenAI's schema: `input` a string, a list of strings, token ids or a list
//! of token-id lists; `encoding_format` float | base64; `dimensions` only the model's own) and
//! llama.cpp's `POST /v1/rerank` / `/rerank` (`query`, `documents` or TEI's `texts`, `top_n`),
//! both computed by the engine thread as [`EmbedJob`]s beside the running generations.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;

use axum::Json;
use oxibonsai_engine::Pooling;
use serde_json::{json, Value};

use super::generate::InFlight;
use super::tokenize::token_ids;
use super::ModelRequest;
use crate::api::Fields;
use crate::error::ApiError;
use crate::scheduler::{EmbedJob, Work};
use crate::{AppState, Loaded};

/// The most inputs one request may carry (OpenAI's limit).
const MAX_INPUTS: usize = 2048;

pub(super) async fn embeddings(req: ModelRequest) -> Result<Json<Value>, ApiError> {
    let (l, f) = req.parts()?;
    if l.pooling == Pooling::None {
        return Err(ApiError::invalid(
            "input",
            "pooling 'none' gives one vector per token, which OpenAI's embeddings do not hold: \
             start the server with --pooling mean, cls or last",
        ));
    }
    let base64 = match f.string("encoding_format")? {
        None | Some("float") => false,
        Some("base64") => true,
        Some(other) => {
            return Err(ApiError::invalid(
                "encoding_format",
                format!("'encoding_format' must be \"float\" or \"base64\", got \"{other}\""),
            ))
        }
    };
    if let Some(d) = f.get("dimensions").filter(|v| !v.is_null()) {
        if d.as_u64() != Some(l.embedding_width as u64) {
            return Err(ApiError::invalid(
                "dimensions",
                format!(
                    "this model's embeddings have {} dimensions and cannot be shortened; got {d}",
                    l.embedding_width
                ),
            ));
        }
    }
    let embd_normalize = f.int_in("embd_normalize", -1, 64)?.unwrap_or(2) as i32;
    let inputs = embedding_inputs(&f, l)?;
    let n_tokens: usize = inputs.iter().map(Vec::len).sum();
    let vectors = embed(&req.state, l, inputs, embd_normalize).await?;
    let data: Vec<Value> = vectors
        .iter()
        .enumerate()
        .map(|(index, v)| {
            let embedding = if base64 {
                let bytes: Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()).collect();
                json!(encode_base64(&bytes))
            } else {
                json!(v)
            };
            json!({"object": "embedding", "index": index, "embedding": embedding})
        })
        .collect();
    Ok(Json(json!({
        "object": "list",
        "data": data,
        "model": f.string("model")?.unwrap_or(&req.state.model_id),
        "usage": {"prompt_tokens": n_tokens, "total_tokens": n_tokens},
    })))
}

/// The inputs as token ids: each text tokenized with the vocabulary's special tokens (as
/// llama.cpp's server does), each within the context.
fn embedding_inputs(f: &Fields<'_>, l: &Loaded) -> Result<Vec<Vec<u32>>, ApiError> {
    let text = |s: &str| {
        l.tokenizer
            .encode(s, true, true)
            .map_err(|e| ApiError::invalid("input", e.to_string()))
    };
    let ids = |items: &[Value]| {
        token_ids(items, l.n_vocab, |v| {
            ApiError::invalid(
                "input",
                format!("'input' token id {v} is not below {}", l.n_vocab),
            )
        })
    };
    let shape = "'input' must be a string, a list of strings, a list of token ids or a list of \
                 token-id lists";
    let inputs = match f.get("input") {
        None | Some(Value::Null) => return Err(ApiError::invalid("input", "'input' is required")),
        Some(Value::String(s)) => vec![text(s)?],
        Some(Value::Array(items)) if items.is_empty() => {
            return Err(ApiError::invalid("input", "'input' is an empty list"))
        }
        Some(Value::Array(items)) if items.len() > MAX_INPUTS => {
            return Err(ApiError::invalid(
                "input",
                format!(
                    "'input' holds {} items, more than {MAX_INPUTS}",
                    items.len()
                ),
            ))
        }
        Some(Value::Array(items)) if items.iter().all(Value::is_number) => vec![ids(items)?],
        Some(Value::Array(items)) => items
            .iter()
            .map(|item| match item {
                Value::String(s) => text(s),
                Value::Array(list) if list.iter().all(Value::is_number) => ids(list),
                _ => Err(ApiError::invalid("input", shape)),
            })
            .collect::<Result<_, _>>()?,
        Some(_) => return Err(ApiError::invalid("input", shape)),
    };
    for (i, ids) in inputs.iter().enumerate() {
        if ids.is_empty() {
            return Err(ApiError::invalid(
                "input",
                format!("input {i} is empty: it has no tokens"),
            ));
        }
        if ids.len() > l.n_ctx {
            return Err(ApiError::invalid(
                "input",
                format!(
                    "input {i} has {} tokens, more than the context of {} tokens",
                    ids.len(),
                    l.n_ctx
                ),
            ));
        }
    }
    Ok(inputs)
}

/// Hands the inputs to the engine thread and waits for their vectors (queue limits as for a
/// generation).
async fn embed(
    state: &Arc<AppState>,
    l: &Loaded,
    inputs: Vec<Vec<u32>>,
    embd_normalize: i32,
) -> Result<Vec<Vec<f32>>, ApiError> {
    if state.closing.load(Ordering::Relaxed) {
        return Err(ApiError::ShuttingDown);
    }
    let _guard = InFlight::admit(state)?;
    let (reply, answer) = tokio::sync::oneshot::channel();
    let job = EmbedJob {
        inputs,
        pooling: l.pooling,
        embd_normalize,
        reply,
        received: Instant::now(),
    };
    l.jobs
        .lock()
        .map_err(|_| ApiError::internal("the engine is gone"))?
        .send(Work::Embed(job))
        .map_err(|_| ApiError::internal("the engine thread has stopped"))?;
    answer
        .await
        .map_err(|_| ApiError::internal("the engine thread has stopped"))?
        .map_err(ApiError::internal)
}

/// llama.cpp's rerank: each document scored with the query (the file's rerank template, or BOS,
/// query, EOS / SEP as the vocabulary adds them, document, EOS), by rank pooling; the results
/// sorted by score, the first `top_n` kept. A body with `texts` gets TEI's answer (a bare list).
pub(super) async fn rerank(req: ModelRequest) -> Result<Json<Value>, ApiError> {
    let (l, f) = req.parts()?;
    if l.pooling != Pooling::Rank {
        return Err(ApiError::invalid(
            "query",
            "this server does not rerank: its model has no rank pooling (start it with a \
             reranker model, or --pooling rank on one with a classifier head)",
        ));
    }
    let query = match f.get("query") {
        Some(Value::String(q)) => q.as_str(),
        Some(_) => return Err(ApiError::invalid("query", "'query' must be a string")),
        None => return Err(ApiError::invalid("query", "'query' is required")),
    };
    let tei = f.get("texts").is_some();
    let field = if tei { "texts" } else { "documents" };
    let documents: Vec<&str> = match f.get(field) {
        Some(Value::Array(items)) if !items.is_empty() && items.len() <= MAX_INPUTS => items
            .iter()
            .map(|v| {
                v.as_str().ok_or_else(|| {
                    ApiError::invalid(field, format!("'{field}' must be a list of strings"))
                })
            })
            .collect::<Result<_, _>>()?,
        _ => {
            return Err(ApiError::invalid(
                field,
                format!("'{field}' must be a non-empty list of at most {MAX_INPUTS} strings"),
            ))
        }
    };
    let top_n = f
        .int_in("top_n", 0, i64::MAX)?
        .map_or(documents.len(), |n| n as usize);
    let return_text = tei && f.bool("return_text")? == Some(true);
    let mut inputs = Vec::with_capacity(documents.len());
    for (i, doc) in documents.iter().enumerate() {
        let ids = rerank_prompt(l, query, doc)?;
        if ids.is_empty() || ids.len() > l.n_ctx {
            return Err(ApiError::invalid(
                field,
                format!(
                    "document {i} with the query has {} tokens; the context holds {}",
                    ids.len(),
                    l.n_ctx
                ),
            ));
        }
        inputs.push(ids);
    }
    let n_tokens: usize = inputs.iter().map(Vec::len).sum();
    // llama.cpp's score is the first output, not normalized.
    let scores = embed(&req.state, l, inputs, -1).await?;
    let label = if tei { "score" } else { "relevance_score" };
    let mut results: Vec<(usize, f32)> = scores
        .iter()
        .enumerate()
        .map(|(i, v)| (i, v.first().copied().unwrap_or(f32::NAN)))
        .collect();
    results.sort_by(|a, b| b.1.total_cmp(&a.1));
    results.truncate(top_n);
    let results: Vec<Value> = results
        .into_iter()
        .map(|(index, score)| {
            let mut r = json!({"index": index, label: score});
            if return_text {
                r["text"] = json!(documents[index]);
            }
            r
        })
        .collect();
    if tei {
        return Ok(Json(Value::Array(results)));
    }
    Ok(Json(json!({
        "model": f.string("model")?.unwrap_or(&req.state.model_id),
        "object": "list",
        "usage": {"prompt_tokens": n_tokens, "total_tokens": n_tokens},
        "results": results,
    })))
}

/// llama.cpp's `format_prompt_rerank`.
fn rerank_prompt(l: &Loaded, query: &str, doc: &str) -> Result<Vec<u32>, ApiError> {
    let t = &l.tokenizer;
    let encode = |text: &str, add: bool, parse: bool| {
        t.encode(text, add, parse)
            .map_err(|e| ApiError::invalid("query", e.to_string()))
    };
    if let Some(template) = &l.rerank_template {
        let prompt = template
            .replace("{query}", query)
            .replace("{document}", doc);
        return encode(&prompt, false, true);
    }
    let mut ids = Vec::new();
    if t.add_bos() {
        ids.extend(t.bos());
    }
    ids.extend(encode(query, false, false)?);
    if t.add_eos() {
        ids.extend(t.eos());
    }
    if t.add_sep() {
        ids.extend(t.special_ids().separator);
    }
    ids.extend(encode(doc, false, false)?);
    if t.add_eos() {
        ids.extend(t.eos());
    }
    Ok(ids)
}

/// Standard base64 with padding (RFC 4648), what OpenAI's `encoding_format: "base64"` sends.
fn encode_base64(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let b = [
            chunk[0],
            chunk.get(1).copied().unwrap_or(0),
            chunk.get(2).copied().unwrap_or(0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(ALPHABET[(n >> (18 - 6 * i)) as usize & 63] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::encode_base64;

    #[test]
    fn base64_matches_rfc_4648_vectors() {
        // RFC 4648, section 10.
        for (plain, coded) in [
            ("", ""),
            ("f", "Zg=="),
            ("fo", "Zm8="),
            ("foo", "Zm9v"),
            ("foob", "Zm9vYg=="),
            ("fooba", "Zm9vYmE="),
            ("foobar", "Zm9vYmFy"),
        ] {
            assert_eq!(encode_base64(plain.as_bytes()), coded);
        }
    }
}
