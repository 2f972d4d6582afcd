//! `POST /v1/completions` (the legacy text endpoint): the prompt as text, token ids, or a list of
//! either (one job each, times `n`); the answer as `text_completion` choices, whole or streamed.

use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::{json, Map, Value};

use super::generate::{
    collect, finish_name, lossy, new_id, now_secs, sse, submit, system_fingerprint, usage_json,
    Chunks, Clock, NamedGrammar,
};
use super::tokenize::token_ids;
use super::ModelRequest;
use crate::api::{self, Fields, Generation};
use crate::error::ApiError;
use crate::scheduler::{Finish, TokenLogprob, Usage};
use crate::Loaded;

pub(super) async fn completions(req: ModelRequest) -> Result<Response, ApiError> {
    let (l, f) = req.parts()?;
    let (prompts, mut g, grammar) = prepare_all(l, &f)?;
    req.state
        .options
        .request_defaults
        .apply(&f, &["max_tokens"], &mut g);
    let n = api::choices(&f)?;
    let chunks = TextChunks {
        id: new_id("cmpl"),
        model: req.state.model_id.clone(),
        created: now_secs(),
        include_usage: g.include_usage,
        with_logprobs: g.logprobs.is_some(),
        timings_per_token: g.timings_per_token,
    };
    if prompts.len() * n > api::MAX_CHOICES as usize {
        return Err(ApiError::invalid(
            "n",
            format!(
                "{} prompts times n = {n} asks for more than {} choices",
                prompts.len(),
                api::MAX_CHOICES
            ),
        ));
    }
    if g.stream {
        let single = prompts.len() == 1 && n == 1;
        let Some(prompt) = prompts.into_iter().next().filter(|_| single) else {
            return Err(ApiError::unsupported(
                "prompt",
                "several prompts or choices (n > 1) when streaming",
            ));
        };
        let clock = Clock::start(prompt.len());
        let (rx, guard) = submit(&req.state, l, prompt, &g, grammar.as_ref())?;
        return Ok(sse(rx, guard, None, chunks, clock));
    }
    // One job per prompt and choice, run side by side; the choices in OpenAI's order (by prompt,
    // then by choice).
    let mut jobs = Vec::with_capacity(prompts.len() * n);
    for prompt in &prompts {
        for _ in 0..n {
            let clock = Clock::start(prompt.len());
            jobs.push((
                submit(&req.state, l, prompt.clone(), &g, grammar.as_ref())?,
                clock,
            ));
        }
    }
    let mut choices = Vec::with_capacity(jobs.len());
    let mut usage: Option<Usage> = None;
    let mut timings = Value::Null;
    for (index, ((rx, guard), clock)) in jobs.into_iter().enumerate() {
        let collected = collect(rx, guard, clock).await?;
        let lp = if chunks.with_logprobs {
            legacy_logprobs(&collected.logprobs)
        } else {
            Value::Null
        };
        let finish = Some(finish_name(collected.finish));
        let mut c = choice(collected.text, lp, finish);
        c["index"] = json!(index);
        choices.push(c);
        // Each prompt counts once, each choice's answer once.
        let first_of_prompt = index % n == 0;
        usage = Some(match usage {
            None => collected.usage,
            Some(mut u) => {
                if first_of_prompt {
                    u.prompt_tokens += collected.usage.prompt_tokens;
                    u.cached_tokens += collected.usage.cached_tokens;
                }
                u.completion_tokens += collected.usage.completion_tokens;
                u
            }
        });
        if timings.is_null() {
            timings = collected.timings;
        }
    }
    let usage = usage.ok_or_else(|| ApiError::internal("no choice was generated"))?;
    let mut answer = chunks.envelope(Value::Array(choices));
    answer["usage"] = usage_json(&usage);
    answer["timings"] = timings;
    Ok(Json(answer).into_response())
}

/// [`prepare_all`] for a request of one prompt (the first, if there are several).
pub(crate) fn prepare(
    l: &Loaded,
    f: &Fields<'_>,
) -> Result<(Vec<u32>, Generation, Option<NamedGrammar>), ApiError> {
    let (prompts, g, grammar) = prepare_all(l, f)?;
    let prompt = prompts.into_iter().next().unwrap_or_default();
    Ok((prompt, g, grammar))
}

/// Each prompt's tokens, the sampling and stopping, the grammar named by its field.
type PreparedPrompts = (Vec<Vec<u32>>, Generation, Option<NamedGrammar>);

/// The completion handler's steps before the jobs are submitted.
fn prepare_all(l: &Loaded, f: &Fields<'_>) -> Result<PreparedPrompts, ApiError> {
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
    g.prompt_param = "prompt";
    if g.max_tokens.is_none() {
        // The legacy endpoint's documented default.
        g.max_tokens = Some(16);
    }
    g.logprobs = f.int_in("logprobs", 0, 5)?.map(|n| n as usize);
    let prompts = completion_prompts(f, l)?;
    let grammar = api::constraint(f)?;
    Ok((prompts, g, grammar))
}

fn completion_prompts(f: &Fields<'_>, l: &Loaded) -> Result<Vec<Vec<u32>>, ApiError> {
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
    let shape = || {
        ApiError::invalid(
            "prompt",
            "'prompt' must be a string, token ids, or a list of strings or token-id lists",
        )
    };
    match f.get("prompt") {
        Some(Value::String(s)) => Ok(vec![text(s)?]),
        Some(Value::Array(items)) if !items.is_empty() && items.iter().all(Value::is_number) => {
            Ok(vec![ids(items)?])
        }
        Some(Value::Array(items)) if !items.is_empty() => {
            if items.len() > api::MAX_CHOICES as usize {
                return Err(ApiError::invalid(
                    "prompt",
                    format!("at most {} prompts in one request", api::MAX_CHOICES),
                ));
            }
            items
                .iter()
                .map(|item| match item {
                    Value::String(s) => text(s),
                    Value::Array(list) => ids(list),
                    _ => Err(shape()),
                })
                .collect()
        }
        Some(_) => Err(shape()),
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
    timings_per_token: bool,
}

impl TextChunks {
    fn envelope(&self, choices: Value) -> Value {
        json!({
            "id": self.id, "object": "text_completion", "created": self.created,
            "model": self.model, "system_fingerprint": system_fingerprint(), "choices": choices,
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

    fn timings_per_token(&self) -> bool {
        self.timings_per_token
    }

    fn done(&mut self, finish: Finish, text: String, usage: &Usage, timings: Value) -> Vec<Value> {
        let last = choice(text, Value::Null, Some(finish_name(finish)));
        let mut out = vec![self.envelope(json!([last]))];
        if self.include_usage {
            let mut u = self.envelope(json!([]));
            u["usage"] = usage_json(usage);
            out.push(u);
        }
        if let Some(last) = out.last_mut() {
            last["timings"] = timings;
        }
        out
    }
}
