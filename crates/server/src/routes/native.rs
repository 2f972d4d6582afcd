//! llama-server's native completion endpoint, `POST /completion` (and `/completions`, which
//! llama-server binds to the same handler; the OpenAI one is `/v1/completions`): the prompt as
//! text, token ids or a mix, several prompts at once; the answer as llama-server writes it
//! (`content`, `stop_type`, `timings`, `generation_settings`, `completion_probabilities`), whole
//! or streamed as `data:` chunks without a closing `[DONE]`. The jobs are the same engine jobs
//! as the OpenAI routes' ([`submit`]); only the request's reading and the answer's writing
//! differ. `/infill` (see [`super::infill`]) answers through the same code.

use std::time::Instant;

use axum::response::{IntoResponse, Response};
use axum::Json;
use futures_util::future::join_all;
use serde_json::{json, Map, Value};
use tokio::sync::mpsc::UnboundedReceiver;

use super::generate::{
    dropped, lossy, sse, submit_to, Chunks, Clock, Collected, InFlight, NamedGrammar,
};
use super::ModelRequest;
use crate::api::{self, Fields, Generation};
use crate::error::ApiError;
use crate::scheduler::{Event, Finish, TokenLogprob, Usage};
use crate::Loaded;
use oxibonsai_engine::sampling::SamplingParams;

/// llama-server's `LLAMA_DEFAULT_SEED`: the seed reported when the request asked for none.
const DEFAULT_SEED: u64 = 0xFFFF_FFFF;
/// The most alternatives `n_probs` may ask for per token.
const MAX_N_PROBS: i64 = 100;

pub(super) async fn completion(req: ModelRequest) -> Result<Response, ApiError> {
    let (l, f) = req.parts()?;
    let prompts = prompts(l, &f)?;
    let native = read(l, &f, &req.state.options.request_defaults)?;
    answer(&req, l, prompts, native).await
}

/// Runs one job per prompt and answers: one object for one prompt (streamed if asked), a list
/// of them, in prompt order, for several.
pub(super) async fn answer(
    req: &ModelRequest,
    l: &Loaded,
    prompts: Vec<Vec<u32>>,
    native: Native,
) -> Result<Response, ApiError> {
    if native.stream && prompts.len() > 1 {
        return Err(ApiError::unsupported(
            "prompt",
            "streaming the answers of several prompts",
        ));
    }
    let slots = req.state.options.parallel.max(1);
    if let Some(id) = native.id_slot.filter(|&id| id >= slots) {
        return Err(ApiError::invalid(
            "id_slot",
            format!("Invalid slot ID: {id} (the server has {slots} slots)"),
        ));
    }
    let mut jobs = Vec::with_capacity(prompts.len());
    for prompt in prompts {
        let settings = native.settings(&prompt);
        let (rx, guard) = submit_to(
            &req.state,
            l,
            prompt,
            &native.g,
            native.grammar.as_ref(),
            native.id_slot,
        )?;
        jobs.push((rx, guard, settings));
    }
    if native.stream {
        let (rx, guard, (prompt_len, prompt_text)) = jobs.remove(0);
        let writer = native.writer(req, prompt_len, prompt_text);
        // The writer keeps llama-server's native timings itself; the shared clock is unused here.
        return Ok(sse(rx, guard, None, writer, Clock::start(prompt_len)));
    }
    let answers = join_all(jobs.into_iter().enumerate().map(|(index, (rx, guard, s))| {
        let mut writer = native.writer(req, s.0, s.1);
        writer.index = index;
        collect(rx, guard, writer)
    }))
    .await
    .into_iter()
    .collect::<Result<Vec<_>, _>>()?;
    let mut answers: Vec<Value> = answers.into_iter().map(|a| native.filtered(a)).collect();
    let body = if answers.len() == 1 {
        answers.remove(0)
    } else {
        Value::Array(answers)
    };
    Ok(Json(body).into_response())
}

/// The native request's fields besides the prompt.
pub(super) struct Native {
    pub g: Generation,
    pub grammar: Option<NamedGrammar>,
    stream: bool,
    n_predict: i64,
    n_probs: usize,
    return_tokens: bool,
    timings_per_token: bool,
    ignore_eos: bool,
    /// The slot asked for (`id_slot`, or its older name `slot_id`; -1: any).
    id_slot: Option<usize>,
    /// `response_fields`: the answer reduced to these paths (`a/b` reads `answer.a.b`).
    response_fields: Vec<String>,
    tokenizer: std::sync::Arc<oxibonsai_tokenizer::Tokenizer>,
}

/// Reads the native request's generation fields, llama-server's names and defaults. A field
/// out of its range, or a sampler this server does not have set to anything but its neutral
/// value, is a 400 naming it.
/// The request's fields; what it leaves out comes from the server's `--temp`, `--seed` and `-n`
/// (`defaults`), else llama-server's own defaults.
pub(super) fn read(
    l: &Loaded,
    f: &Fields<'_>,
    defaults: &api::RequestDefaults,
) -> Result<Native, ApiError> {
    for (field, neutral) in [
        ("mirostat", 0.0),
        ("dynatemp_range", 0.0),
        ("xtc_probability", 0.0),
        ("dry_multiplier", 0.0),
        ("typical_p", 1.0),
    ] {
        if let Some(v) = f.get(field) {
            if v.as_f64() != Some(neutral) {
                return Err(ApiError::unsupported(
                    field,
                    &format!("'{field}' other than {neutral}"),
                ));
            }
        }
    }
    if f.get("lora")
        .is_some_and(|v| v.as_array().is_none_or(|a| !a.is_empty()))
    {
        return Err(ApiError::unsupported("lora", "LoRA adapters"));
    }
    if f.get("image_data")
        .is_some_and(|v| v.as_array().is_none_or(|a| !a.is_empty()))
    {
        return Err(ApiError::unsupported(
            "image_data",
            "images (multimodal input)",
        ));
    }
    let mut id_slot = None;
    for field in ["id_slot", "slot_id"] {
        if let Some(id) = f.int_in(field, -1, i64::from(u32::MAX))? {
            id_slot = usize::try_from(id).ok();
            break;
        }
    }
    f.bool("cache_prompt")?;
    let mut sampling = sampling(l, f)?;
    let ignore_eos = f.bool("ignore_eos")?.unwrap_or(false);
    if ignore_eos {
        // llama-server's ignore_eos: the end-of-generation tokens are never sampled.
        for &id in l.tokenizer.eog_ids() {
            sampling.logit_bias.push((id, f32::NEG_INFINITY));
        }
    }
    sampling
        .validate(l.n_vocab)
        .map_err(|e| ApiError::invalid("sampling", e.to_string()))?;
    let n_predict = match f.int_in("n_predict", -1, i64::from(u32::MAX))? {
        Some(n) => n,
        None => f
            .int_in("max_tokens", -1, i64::from(u32::MAX))?
            .unwrap_or(-1),
    };
    if n_predict == 0 {
        return Err(ApiError::invalid(
            "n_predict",
            "'n_predict' 0 generates nothing: ask for at least 1 token, or -1 for no limit",
        ));
    }
    let stop = match f.get("stop") {
        None => Vec::new(),
        Some(Value::Array(items)) => items
            .iter()
            .map(|v| match v.as_str() {
                Some(s) if !s.is_empty() => Ok(s.to_owned()),
                _ => Err(ApiError::invalid(
                    "stop",
                    "'stop' must be a list of non-empty strings",
                )),
            })
            .collect::<Result<_, _>>()?,
        Some(Value::String(s)) if !s.is_empty() => vec![s.clone()],
        Some(_) => {
            return Err(ApiError::invalid(
                "stop",
                "'stop' must be a list of non-empty strings",
            ))
        }
    };
    let n_probs = f.int_in("n_probs", 0, MAX_N_PROBS)?.unwrap_or(0) as usize;
    let return_tokens = f.bool("return_tokens")?.unwrap_or(false);
    let response_fields = match f.get("response_fields") {
        None => Vec::new(),
        Some(Value::Array(items)) => items
            .iter()
            .map(|v| {
                v.as_str().map(str::to_owned).ok_or_else(|| {
                    ApiError::invalid("response_fields", "'response_fields' must list strings")
                })
            })
            .collect::<Result<_, _>>()?,
        Some(_) => {
            return Err(ApiError::invalid(
                "response_fields",
                "'response_fields' must list strings",
            ))
        }
    };
    let stream = f.bool("stream")?.unwrap_or(false);
    let mut g = Generation {
        sampling,
        max_tokens: (n_predict > 0).then_some(n_predict as usize),
        stop,
        stream,
        include_usage: false,
        // The chosen tokens' ids come with their log-probabilities.
        logprobs: (n_probs > 0 || return_tokens).then_some(n_probs),
        post_sampling_probs: f.bool("post_sampling_probs")?.unwrap_or(false),
        // The native writer adds its own timings to each chunk.
        timings_per_token: false,
        prompt_param: "prompt",
    };
    defaults.apply(f, &["n_predict", "max_tokens"], &mut g);
    let n_predict = g.max_tokens.map_or(n_predict, |n| n as i64);
    Ok(Native {
        g,
        grammar: api::constraint(f)?,
        stream,
        n_predict,
        n_probs,
        return_tokens,
        timings_per_token: f.bool("timings_per_token")?.unwrap_or(false),
        ignore_eos,
        id_slot,
        response_fields,
        tokenizer: std::sync::Arc::clone(&l.tokenizer),
    })
}

/// llama-server's sampling fields and defaults (temperature 0.8, top-k 40, top-p 0.95, min-p
/// 0.05); a temperature at or below 0 is greedy, as there.
fn sampling(l: &Loaded, f: &Fields<'_>) -> Result<SamplingParams, ApiError> {
    let mut s = SamplingParams {
        temperature: f
            .f32_in("temperature", -100.0, 100.0)?
            .unwrap_or(0.8)
            .max(0.0),
        top_k: match f.int_in("top_k", -1, i64::from(u32::MAX))? {
            None => 40,
            Some(k) if k <= 0 => 0,
            Some(k) => k as usize,
        },
        top_p: f.f32_in("top_p", 0.0, 1.0)?.unwrap_or(0.95),
        min_p: f.f32_in("min_p", 0.0, 1.0)?.unwrap_or(0.05),
        ..SamplingParams::default()
    };
    if let Some(p) = f.f32_in("repeat_penalty", 0.0, 10.0)? {
        s.repeat_penalty = p;
    }
    if let Some(n) = f.int_in("repeat_last_n", -1, i64::from(u32::MAX))? {
        s.repeat_last_n = if n < 0 { l.n_ctx } else { n as usize };
    }
    s.presence_penalty = f.f32_in("presence_penalty", -2.0, 2.0)?.unwrap_or(0.0);
    s.frequency_penalty = f.f32_in("frequency_penalty", -2.0, 2.0)?.unwrap_or(0.0);
    s.seed = match f.get("seed") {
        None => None,
        Some(v) => match v.as_i64() {
            Some(-1) => None,
            Some(n) if n >= 0 => Some(n as u64),
            _ => {
                return Err(ApiError::invalid(
                    "seed",
                    format!("'seed' must be an integer from -1 (random) up, got {v}"),
                ))
            }
        },
    };
    s.logit_bias = logit_bias(l, f)?;
    Ok(s)
}

/// llama-server's `logit_bias`: a list of `[token, bias]` pairs or an object, the token an id
/// or a text (each of its tokens biased), the bias a number or `false` (never sampled).
fn logit_bias(l: &Loaded, f: &Fields<'_>) -> Result<Vec<(u32, f32)>, ApiError> {
    let bad = |why: String| ApiError::invalid("logit_bias", why);
    let pairs: Vec<(Value, &Value)> = match f.get("logit_bias") {
        None => return Ok(Vec::new()),
        Some(Value::Array(items)) => items
            .iter()
            .map(|item| match item.as_array().map(Vec::as_slice) {
                Some([token, bias]) => Ok((token.clone(), bias)),
                _ => Err(bad(format!(
                    "'logit_bias' items must be [token, bias] pairs, got {item}"
                ))),
            })
            .collect::<Result<_, _>>()?,
        // Object keys are always text: a numeric one is read as an id below.
        Some(Value::Object(map)) => map
            .iter()
            .map(|(k, v)| (Value::String(k.clone()), v))
            .collect(),
        Some(other) => {
            return Err(bad(format!(
                "'logit_bias' must be a list of [token, bias] pairs or an object, got {other}"
            )))
        }
    };
    let mut out = Vec::new();
    for (token, bias) in pairs {
        let bias = match bias {
            Value::Bool(false) => f32::NEG_INFINITY,
            v => match v.as_f64() {
                Some(b) if b.is_finite() && b <= -100.0 => f32::NEG_INFINITY,
                Some(b) if b.is_finite() && b <= 100.0 => b as f32,
                _ => {
                    return Err(bad(format!(
                        "a 'logit_bias' bias must be false or a number from -100 to 100, got {v}"
                    )))
                }
            },
        };
        let ids = match &token {
            Value::String(text) => match text.parse::<u32>() {
                Ok(id) => vec![id],
                Err(_) => l
                    .tokenizer
                    .encode(text, false, false)
                    .map_err(|e| bad(e.to_string()))?,
            },
            v => vec![v
                .as_u64()
                .and_then(|id| u32::try_from(id).ok())
                .ok_or_else(|| {
                    bad(format!(
                        "a 'logit_bias' token must be an id or a text, got {v}"
                    ))
                })?],
        };
        for id in ids {
            if id as usize >= l.n_vocab {
                return Err(bad(format!(
                    "'logit_bias' token {id} is not below {}",
                    l.n_vocab
                )));
            }
            out.push((id, bias));
        }
    }
    Ok(out)
}

/// The prompts: a text, token ids, or a mix of both (one prompt), or a list of those (one
/// prompt each), as llama-server reads `prompt`.
pub(super) fn prompts(l: &Loaded, f: &Fields<'_>) -> Result<Vec<Vec<u32>>, ApiError> {
    let prompt = f
        .get("prompt")
        .ok_or_else(|| ApiError::invalid("prompt", "'prompt' is required"))?;
    let one = |v: &Value| -> Result<Vec<u32>, ApiError> { mixed(l, v, "prompt") };
    match prompt {
        Value::Array(items) if items.iter().any(|v| v.is_array() || v.is_object()) => {
            if items.is_empty() {
                return Err(ApiError::invalid("prompt", "'prompt' is an empty list"));
            }
            items.iter().map(one).collect()
        }
        v => Ok(vec![one(v)?]),
    }
}

/// One prompt: a text (with the vocabulary's BOS, special-token text parsed, as llama-server
/// does), token ids, a list mixing texts and ids (BOS only before a leading text), or
/// `{"prompt_string": …}` holding one of those.
pub(super) fn mixed(l: &Loaded, v: &Value, field: &str) -> Result<Vec<u32>, ApiError> {
    let encode = |s: &str, add_special: bool| {
        l.tokenizer
            .encode(s, add_special, true)
            .map_err(|e| ApiError::invalid(field, e.to_string()))
    };
    let id = |v: &Value| {
        v.as_u64()
            .filter(|&id| (id as usize) < l.n_vocab)
            .map(|id| id as u32)
            .ok_or_else(|| {
                ApiError::invalid(
                    field,
                    format!("'{field}' token {v} is not a token id below {}", l.n_vocab),
                )
            })
    };
    match v {
        Value::String(s) => encode(s, true),
        Value::Array(items) => {
            let mut out = Vec::new();
            for (i, item) in items.iter().enumerate() {
                match item {
                    Value::String(s) => out.extend(encode(s, i == 0)?),
                    other => out.push(id(other)?),
                }
            }
            Ok(out)
        }
        // llama-server's multimodal prompt object: the text in `prompt_string`, files beside it.
        Value::Object(o) if o.contains_key("prompt_string") => {
            if o.contains_key("multimodal_data") {
                return Err(ApiError::unsupported(
                    "multimodal_data",
                    "multimodal prompts (this model reads text only)",
                ));
            }
            match &o["prompt_string"] {
                text @ (Value::String(_) | Value::Array(_)) => mixed(l, text, field),
                other => Err(ApiError::invalid(
                    field,
                    format!("'{field}.prompt_string' must be a text or a list of texts and ids, got {other}"),
                )),
            }
        }
        other => Err(ApiError::invalid(
            field,
            format!(
                "'{field}' must be a text, token ids, an object with 'prompt_string', or a list of \
                 those, got {other}"
            ),
        )),
    }
}

impl Native {
    /// The prompt's length and its text (llama-server's `prompt` answer field).
    fn settings(&self, prompt: &[u32]) -> (usize, String) {
        let text = self.tokenizer.decode(prompt, true).unwrap_or_default();
        (prompt.len(), text)
    }

    fn writer(&self, req: &ModelRequest, prompt_len: usize, prompt_text: String) -> Writer {
        Writer {
            index: 0,
            model: req.state.model_id.clone(),
            settings: self.generation_settings(),
            prompt_len,
            prompt_text,
            stream: self.stream,
            n_probs: self.n_probs,
            post_sampling_probs: self.g.post_sampling_probs,
            return_tokens: self.return_tokens,
            timings_per_token: self.timings_per_token,
            submitted: Instant::now(),
            id_slot: self.id_slot,
            first_token: None,
            n_decoded: 0,
            content: String::new(),
            tokens: Vec::new(),
            probs: Vec::new(),
        }
    }

    /// llama-server's `generation_settings`: the sampling this job runs with, and its samplers'
    /// neutral values for the ones this server does not have.
    pub(super) fn generation_settings(&self) -> Value {
        let s = &self.g.sampling;
        json!({
            "seed": s.seed.unwrap_or(DEFAULT_SEED),
            "temperature": s.temperature,
            "dynatemp_range": 0.0, "dynatemp_exponent": 1.0,
            "top_k": s.top_k, "top_p": s.top_p, "min_p": s.min_p,
            "top_n_sigma": -1.0, "xtc_probability": 0.0, "xtc_threshold": 0.1,
            "typical_p": 1.0,
            "repeat_last_n": s.repeat_last_n, "repeat_penalty": s.repeat_penalty,
            "presence_penalty": s.presence_penalty, "frequency_penalty": s.frequency_penalty,
            "dry_multiplier": 0.0, "dry_base": 1.75, "dry_allowed_length": 2,
            "dry_penalty_last_n": -1,
            "mirostat": 0, "mirostat_tau": 5.0, "mirostat_eta": 0.1,
            "adaptive_target": -1.0, "adaptive_decay": 0.9,
            "stop": self.g.stop,
            "max_tokens": self.n_predict, "n_predict": self.n_predict,
            "n_keep": 0, "n_discard": 0,
            "ignore_eos": self.ignore_eos,
            "stream": self.stream,
            // llama-server's shape; its JSON writes a ban (-inf) as null.
            "logit_bias": s.logit_bias.iter().map(|(id, b)| {
                json!({"bias": if b.is_finite() { json!(b) } else { Value::Null }, "token": id})
            }).collect::<Vec<_>>(),
            "n_probs": self.n_probs,
            "min_keep": 0,
            "grammar": self.grammar.as_ref().map_or("", |(_, field)| field),
            "samplers": ["penalties", "top_k", "top_p", "min_p", "temperature"],
            "timings_per_token": self.timings_per_token,
            "post_sampling_probs": self.g.post_sampling_probs,
            "lora": [],
        })
    }

    /// The answer reduced to `response_fields`, each path a key of its own.
    fn filtered(&self, answer: Value) -> Value {
        if self.response_fields.is_empty() {
            return answer;
        }
        let mut out = Map::new();
        for path in &self.response_fields {
            let found = path.split('/').try_fold(&answer, |v, key| v.get(key));
            if let Some(v) = found {
                out.insert(path.clone(), v.clone());
            }
        }
        Value::Object(out)
    }
}

/// llama-server's `stop_type`.
fn stop_type(finish: Finish, usage: &Usage) -> &'static str {
    match (finish, &usage.stop_word) {
        (Finish::Length, _) => "limit",
        (Finish::Stop, Some(_)) => "word",
        (Finish::Stop, None) => "eos",
    }
}

/// The `__verbose` object llama-server adds to an OpenAI-style answer when asked (`verbose`):
/// the native answer's fields for the same job, the rendered `prompt` among them.
pub(super) fn verbose_answer(collected: &Collected, prompt_text: &str, model: &str) -> Value {
    let usage = &collected.usage;
    json!({
        "index": 0,
        "content": collected.text,
        "tokens": [],
        "id_slot": usage.slot,
        "stop": true,
        "model": model,
        "tokens_predicted": usage.completion_tokens,
        "tokens_evaluated": usage.prompt_tokens,
        "prompt": prompt_text,
        "has_new_line": collected.text.contains('\n'),
        "truncated": false,
        "stop_type": stop_type(collected.finish, usage),
        "stopping_word": usage.stop_word.clone().unwrap_or_default(),
        "tokens_cached": usage.prompt_tokens + usage.completion_tokens.saturating_sub(1),
        "timings": collected.timings,
    })
}

/// Writes one job's events as llama-server's native answer.
pub(super) struct Writer {
    index: usize,
    model: String,
    settings: Value,
    prompt_len: usize,
    prompt_text: String,
    stream: bool,
    n_probs: usize,
    /// Probabilities (`prob`, `top_probs`) after the sampler chain instead of the model's
    /// log-probabilities (`logprob`, `top_logprobs`), as llama-server names them.
    post_sampling_probs: bool,
    return_tokens: bool,
    timings_per_token: bool,
    submitted: Instant,
    /// The slot asked for; the answer's last chunk names the one used.
    id_slot: Option<usize>,
    first_token: Option<Instant>,
    /// Tokens generated so far.
    n_decoded: usize,
    content: String,
    tokens: Vec<u32>,
    probs: Vec<Value>,
}

impl Writer {
    /// llama-server's `timings`; the prompt's time is the wait for the first token.
    fn timings(&self, usage: Option<&Usage>) -> Value {
        let now = Instant::now();
        let first = self.first_token.unwrap_or(now);
        let prompt_ms = first.duration_since(self.submitted).as_secs_f64() * 1e3;
        let predicted_ms = now.duration_since(first).as_secs_f64() * 1e3;
        let (cache_n, prompt_n, predicted_n) = match usage {
            Some(u) => (
                u.cached_tokens,
                u.prompt_tokens - u.cached_tokens,
                u.completion_tokens,
            ),
            None => (0, self.prompt_len, self.n_decoded),
        };
        let per = |ms: f64, n: usize| if n == 0 { 0.0 } else { ms / n as f64 };
        let rate = |ms: f64, n: usize| if ms <= 0.0 { 0.0 } else { n as f64 * 1e3 / ms };
        let mut t = json!({
            "cache_n": cache_n,
            "prompt_n": prompt_n,
            "prompt_ms": prompt_ms,
            "prompt_per_token_ms": per(prompt_ms, prompt_n),
            "prompt_per_second": rate(prompt_ms, prompt_n),
            "predicted_n": predicted_n,
            "predicted_ms": predicted_ms,
            // The first token costs no decode step (see `generate::generation_steps`).
            "predicted_per_token_ms": per(predicted_ms, predicted_n.saturating_sub(1)),
            "predicted_per_second": rate(predicted_ms, predicted_n.saturating_sub(1)),
        });
        if let Some((drafted, accepted)) = usage.and_then(|u| u.draft) {
            t["draft_n"] = json!(drafted);
            t["draft_n_accepted"] = json!(accepted);
        }
        t
    }

    fn probs_json(&self, lp: &TokenLogprob) -> Value {
        let (value, list) = if self.post_sampling_probs {
            ("prob", "top_probs")
        } else {
            ("logprob", "top_logprobs")
        };
        // After the samplers the engine reports log(p): p itself is what llama-server answers.
        let number = |logprob: f32| {
            if self.post_sampling_probs {
                f64::from(logprob).exp()
            } else {
                f64::from(logprob)
            }
        };
        let entry = |id: u32, token: &[u8], logprob: f32| {
            let mut e = json!({"id": id, "token": lossy(token), "bytes": token});
            e[value] = json!(number(logprob));
            e
        };
        let mut v = entry(lp.id, &lp.token, lp.logprob);
        v[list] = lp
            .top
            .iter()
            .map(|t| entry(t.id, &t.token, t.logprob))
            .collect();
        v
    }

    /// The last answer: the whole text (streamed: what was released at the end) and the
    /// job's counts.
    fn last(&self, content: String, tokens: Vec<u32>, finish: Finish, usage: &Usage) -> Value {
        let stop_type = stop_type(finish, usage);
        let mut v = json!({
            "index": self.index,
            "content": content,
            "tokens": if self.return_tokens { tokens } else { Vec::new() },
            "id_slot": usage.slot,
            "stop": true,
            "model": self.model,
            "tokens_predicted": usage.completion_tokens,
            "tokens_evaluated": usage.prompt_tokens,
            "generation_settings": self.settings,
            "prompt": self.prompt_text,
            "has_new_line": self.content.contains('\n'),
            "truncated": usage.truncated,
            "stop_type": stop_type,
            "stopping_word": usage.stop_word.clone().unwrap_or_default(),
            "tokens_cached": usage.prompt_tokens + usage.completion_tokens.saturating_sub(1),
            "timings": self.timings(Some(usage)),
        });
        if !self.stream && self.n_probs > 0 {
            v["completion_probabilities"] = Value::Array(self.probs.clone());
        }
        v
    }

    /// Takes one generated token; returns its stream chunk, if it has anything to say.
    fn push(&mut self, text: String, logprob: Option<TokenLogprob>) -> Option<Value> {
        self.first_token.get_or_insert_with(Instant::now);
        self.n_decoded += 1;
        let id = logprob.as_ref().map(|lp| lp.id);
        self.tokens.extend(id);
        let probs = logprob
            .as_ref()
            .filter(|_| self.n_probs > 0)
            .map(|lp| self.probs_json(lp));
        self.content.push_str(&text);
        if !self.stream {
            self.probs.extend(probs);
            return None;
        }
        if text.is_empty() && probs.is_none() && !self.return_tokens {
            return None;
        }
        let mut v = json!({
            "index": self.index,
            "content": text,
            "tokens": if self.return_tokens { id.into_iter().collect() } else { Vec::new() },
            "stop": false,
            "id_slot": self.id_slot.map_or(-1, |id| id as i64),
            "tokens_predicted": self.n_decoded,
            "tokens_evaluated": self.prompt_len,
        });
        if let Some(p) = probs {
            v["completion_probabilities"] = json!([p]);
        }
        if self.timings_per_token {
            v["timings"] = self.timings(None);
        }
        Some(v)
    }
}

impl Chunks for Writer {
    fn token(&mut self, text: String, logprob: Option<TokenLogprob>) -> Vec<Value> {
        self.push(text, logprob).into_iter().collect()
    }

    fn done(&mut self, finish: Finish, text: String, usage: &Usage, _: Value) -> Vec<Value> {
        self.content.push_str(&text);
        vec![self.last(text, Vec::new(), finish, usage)]
    }

    fn done_marker(&self) -> bool {
        false
    }
}

/// Reads a job's events to the end into its whole answer.
async fn collect(
    mut rx: UnboundedReceiver<Event>,
    guard: InFlight,
    mut w: Writer,
) -> Result<Value, ApiError> {
    while let Some(event) = rx.recv().await {
        match event {
            Event::Token { text, logprob } => {
                w.push(text, logprob);
            }
            Event::Done {
                finish,
                text,
                usage,
            } => {
                w.content.push_str(&text);
                let content = w.content.clone();
                let tokens = std::mem::take(&mut w.tokens);
                return Ok(w.last(content, tokens, finish, &usage));
            }
            Event::Error(message) => return Err(ApiError::internal(message)),
        }
    }
    Err(dropped(guard.state()))
}
