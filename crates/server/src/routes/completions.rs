//! `POST /v1/completions` (the legacy text endpoint): the prompt as text, a list of one text, or
//! token ids; the answer as `text_completion` choices, whole or streamed.

use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::{json, Map, Value};

use super::generate::{
    add_timings, collect, finish_name, lossy, new_id, now_secs, sse, submit, usage_json, Chunks,
    NamedGrammar,
};
use super::tokenize::token_ids;
use super::ModelRequest;
use crate::api::{self, Fields, Generation};
use crate::error::ApiError;
use crate::scheduler::{Finish, TokenLogprob, Usage};
use crate::Loaded;

pub(super) async fn completions(req: ModelRequest) -> Result<Response, ApiError> {
    let (l, f) = req.parts()?;
    let (prompt, g, grammar) = prepare(l, &f)?;
    let (rx, guard) = submit(&req.state, l, prompt, &g, grammar.as_ref())?;
    let chunks = TextChunks {
        id: new_id("cmpl"),
        model: req.state.model_id.clone(),
        created: now_secs(),
        include_usage: g.include_usage,
        with_logprobs: g.logprobs.is_some(),
    };
    if g.stream {
        return Ok(sse(rx, guard, None, chunks));
    }
    let collected = collect(rx, guard).await?;
    let lp = if chunks.with_logprobs {
        legacy_logprobs(&collected.logprobs)
    } else {
        Value::Null
    };
    let finish = Some(finish_name(collected.finish));
    let mut answer = chunks.envelope(json!([choice(collected.text, lp, finish)]));
    answer["usage"] = usage_json(&collected.usage);
    add_timings(&mut answer, &collected.usage);
    Ok(Json(answer).into_response())
}

/// The completion handler's steps before the job is submitted: the prompt's tokens, sampling and
/// stopping, and the grammar named by its field.
pub(crate) fn prepare(
    l: &Loaded,
    f: &Fields<'_>,
) -> Result<(Vec<u32>, Generation, Option<NamedGrammar>), ApiError> {
    if f.bool("echo")? == Some(true) {
        return Err(ApiError::unsupported("echo", "echoing the prompt"));
    }
    if f.string("suffix")?.is_some_and(|s| !s.is_empty()) {
        return Err(ApiError::unsupported(
            "suffix",
            "a suffix (fill-in-the-middle)",
        ));
    }
    let mut g = api::generation(f, &["max_tokens"], l.n_vocab)?;
    if g.max_tokens.is_none() {
        // The legacy endpoint's documented default.
        g.max_tokens = Some(16);
    }
    g.logprobs = f.int_in("logprobs", 0, 5)?.map(|n| n as usize);
    let prompt = completion_prompt(f, l)?;
    let grammar = api::constraint(f)?;
    Ok((prompt, g, grammar))
}

fn completion_prompt(f: &Fields<'_>, l: &Loaded) -> Result<Vec<u32>, ApiError> {
    let ids = |items: &[Value]| {
        token_ids(items, l.n_vocab, |v| {
            ApiError::invalid("prompt", format!("token id {v} is not below {}", l.n_vocab))
        })
    };
    let text = |s: &str| {
        l.tokenizer
            .encode(s, true, true)
            .map_err(|e| ApiError::invalid("prompt", e.to_string()))
    };
    match f.get("prompt") {
        Some(Value::String(s)) => text(s),
        Some(Value::Array(items)) if items.len() == 1 && items[0].is_string() => {
            text(items[0].as_str().unwrap_or_default())
        }
        Some(Value::Array(items)) if items.len() == 1 && items[0].is_array() => {
            ids(items[0].as_array().map(Vec::as_slice).unwrap_or_default())
        }
        Some(Value::Array(items)) if !items.is_empty() && items.iter().all(Value::is_number) => {
            ids(items)
        }
        Some(Value::Array(items)) if items.len() > 1 => Err(ApiError::unsupported(
            "prompt",
            "several prompts in one request",
        )),
        Some(_) => Err(ApiError::invalid(
            "prompt",
            "'prompt' must be a string, a list of one string, or token ids",
        )),
        None => Err(ApiError::invalid("prompt", "'prompt' is required")),
    }
}

fn choice(text: String, logprobs: Value, finish: Option<&str>) -> Value {
    json!({"index": 0, "text": text, "logprobs": logprobs, "finish_reason": finish})
}

/// Log-probabilities in the legacy endpoint's shape: parallel lists, the alternatives as a map.
fn legacy_logprobs(lps: &[TokenLogprob]) -> Value {
    json!({
        "tokens": lps.iter().map(|lp| lossy(&lp.token)).collect::<Vec<_>>(),
        "token_logprobs": lps.iter().map(|lp| lp.logprob).collect::<Vec<_>>(),
        "top_logprobs": lps.iter().map(|lp| {
            let mut m = Map::new();
            for t in &lp.top { m.insert(lossy(&t.token), json!(t.logprob)); }
            Value::Object(m)
        }).collect::<Vec<_>>(),
    })
}

/// A text answer: `text_completion` objects, one choice each (streamed, one per token).
struct TextChunks {
    id: String,
    model: String,
    created: u64,
    include_usage: bool,
    with_logprobs: bool,
}

impl TextChunks {
    fn envelope(&self, choices: Value) -> Value {
        json!({
            "id": self.id, "object": "text_completion", "created": self.created,
            "model": self.model, "choices": choices,
        })
    }
}

impl Chunks for TextChunks {
    fn token(&mut self, text: String, logprob: Option<TokenLogprob>) -> Vec<Value> {
        let lp = match (logprob, self.with_logprobs) {
            (Some(lp), true) => legacy_logprobs(std::slice::from_ref(&lp)),
            _ => Value::Null,
        };
        if text.is_empty() && lp.is_null() {
            return Vec::new();
        }
        vec![self.envelope(json!([choice(text, lp, None)]))]
    }

    fn done(&mut self, finish: Finish, text: String, usage: &Usage) -> Vec<Value> {
        let last = choice(text, Value::Null, Some(finish_name(finish)));
        let mut out = vec![self.envelope(json!([last]))];
        add_timings(&mut out[0], usage);
        if self.include_usage {
            let mut u = self.envelope(json!([]));
            u["usage"] = usage_json(usage);
            out.push(u);
        }
        out
    }
}
