//! The HTTP routes. Every API error leaves in OpenAI's shape ([`ApiError`]).

use std::convert::Infallible;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{DefaultBodyLimit, Path, Request, State};
use axum::http::{header, StatusCode};
use axum::middleware::{self, Next};
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use axum::response::{Html, IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use futures_util::stream::{self, Stream, StreamExt};
use oxibonsai_engine::{Constraint, Grammar};
use oxibonsai_tokenizer::chat_template::ChatRequest;
use oxibonsai_tokenizer::reasoning::ThinkSplitter;
use serde_json::{json, Map, Value};
use tokio::sync::mpsc::{unbounded_channel, UnboundedReceiver};
use tokio_stream::wrappers::UnboundedReceiverStream;

use crate::answer::{self, AnswerSplitter};
use crate::api::{self, Fields, Generation};
use crate::error::ApiError;
use crate::scheduler::{Event, Finish, Job, TokenLogprob, Usage};
use crate::tool_parse::ToolCallParser;
use crate::tools::{self, ThinkStart};
use crate::{AppState, Loaded};

pub type App = Router;

pub fn app(state: Arc<AppState>) -> App {
    let api = Router::new()
        .route("/v1/chat/completions", post(chat_completions))
        .route("/v1/completions", post(completions))
        .route("/v1/models", get(list_models))
        .route("/v1/models/{*id}", get(get_model))
        .route("/tokenize", post(tokenize))
        .route("/detokenize", post(detokenize))
        .route("/metrics", get(metrics))
        .route("/health", get(health))
        .route("/", get(page))
        .fallback(not_found)
        .layer(middleware::from_fn_with_state(Arc::clone(&state), guard))
        .layer(DefaultBodyLimit::max(state.options.max_body_bytes))
        .with_state(state);
    // Paths are normalized before routing: clients built with a base URL ending in '/' ask for
    // `/v1//models`, others add a trailing slash.
    Router::new().fallback_service(
        tower::ServiceBuilder::new()
            .map_request(normalize)
            .service(api),
    )
}

fn normalize(mut req: Request) -> Request {
    let path = req.uri().path();
    let mut clean = String::with_capacity(path.len());
    for part in path.split('/').filter(|p| !p.is_empty()) {
        clean.push('/');
        clean.push_str(part);
    }
    if clean.is_empty() {
        clean.push('/');
    }
    if clean != path {
        let query = req
            .uri()
            .query()
            .map(|q| format!("?{q}"))
            .unwrap_or_default();
        if let Ok(uri) = format!("{clean}{query}").parse() {
            *req.uri_mut() = uri;
        }
    }
    req
}

/// API key (every route but `/health` and the page itself) and request counting.
async fn guard(State(state): State<Arc<AppState>>, req: Request, next: Next) -> Response {
    let path = req.uri().path().to_owned();
    let open = path == "/health" || path == "/";
    if let Some(key) = &state.options.api_key {
        if !open {
            let given = req
                .headers()
                .get(header::AUTHORIZATION)
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.strip_prefix("Bearer "))
                .map(str::trim);
            if given != Some(key.as_str()) {
                state.metrics.requests_failed.inc();
                return ApiError::Unauthorized.into_response();
            }
        }
    }
    let counted = path.starts_with("/v1/") || path == "/tokenize" || path == "/detokenize";
    if counted {
        state.metrics.requests.inc();
    }
    let response = next.run(req).await;
    if counted && (response.status().is_client_error() || response.status().is_server_error()) {
        state.metrics.requests_failed.inc();
    }
    response
}

async fn not_found(req: Request) -> ApiError {
    ApiError::not_found(format!(
        "no route for {} {}",
        req.method(),
        req.uri().path()
    ))
}

fn loaded(state: &AppState) -> Result<&Loaded, ApiError> {
    match state.loaded.get() {
        Some(l) => Ok(l),
        None => match state.load_error.get() {
            Some(err) => Err(ApiError::internal(format!(
                "the model failed to load: {err}"
            ))),
            None => Err(ApiError::Loading),
        },
    }
}

/// The body as JSON: 413 past the limit, 400 for anything that is not JSON.
fn json_body(body: Result<Bytes, BytesRejection>) -> Result<Value, ApiError> {
    let bytes = body.map_err(|rejection| {
        if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE {
            ApiError::TooLarge
        } else {
            ApiError::invalid("body", rejection.body_text())
        }
    })?;
    serde_json::from_slice(&bytes)
        .map_err(|e| ApiError::invalid("body", format!("the request body is not valid JSON: {e}")))
}

async fn health(State(state): State<Arc<AppState>>) -> Response {
    match loaded(&state) {
        Ok(_) => Json(json!({"status": "ok"})).into_response(),
        Err(ApiError::Loading) => (
            StatusCode::SERVICE_UNAVAILABLE,
            Json(json!({"status": "loading"})),
        )
            .into_response(),
        Err(e) => e.into_response(),
    }
}

async fn metrics(State(state): State<Arc<AppState>>) -> Response {
    (
        [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
        state.metrics.render(),
    )
        .into_response()
}

async fn page() -> Html<&'static str> {
    Html(include_str!("page.html"))
}

fn model_object(state: &AppState) -> Value {
    let mut m = json!({
        "id": state.model_id,
        "object": "model",
        "created": state.created,
        "owned_by": "oxibonsai",
    });
    if let Some(l) = state.loaded.get() {
        m["meta"] =
            json!({"n_ctx": l.n_ctx, "n_vocab": l.n_vocab, "slots": state.options.parallel});
    }
    m
}

async fn list_models(State(state): State<Arc<AppState>>) -> Json<Value> {
    Json(json!({"object": "list", "data": [model_object(&state)]}))
}

async fn get_model(
    State(state): State<Arc<AppState>>,
    Path(id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    if id == state.model_id {
        Ok(Json(model_object(&state)))
    } else {
        Err(ApiError::not_found(format!(
            "the model '{id}' does not exist"
        )))
    }
}

async fn tokenize(
    State(state): State<Arc<AppState>>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Json<Value>, ApiError> {
    let l = loaded(&state)?;
    let body = json_body(body)?;
    let f = Fields::new(&body)?;
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

async fn detokenize(
    State(state): State<Arc<AppState>>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Json<Value>, ApiError> {
    let l = loaded(&state)?;
    let body = json_body(body)?;
    let f = Fields::new(&body)?;
    let tokens = match f.get("tokens") {
        Some(Value::Array(items)) => items
            .iter()
            .map(|v| {
                v.as_u64()
                    .filter(|&id| (id as usize) < l.n_vocab)
                    .map(|id| id as u32)
                    .ok_or_else(|| {
                        ApiError::invalid(
                            "tokens",
                            format!("'tokens' must hold token ids below {}, got {v}", l.n_vocab),
                        )
                    })
            })
            .collect::<Result<Vec<u32>, _>>()?,
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

/// Releases the request's place in the in-flight count when dropped (finished, failed or
/// abandoned).
struct InFlight(Arc<AppState>);

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Checks the prompt against the context and the queue, then hands the job to the engine.
fn submit(
    state: &Arc<AppState>,
    l: &Loaded,
    prompt: Vec<u32>,
    g: &Generation,
    grammar: Option<(&Grammar, &str)>,
) -> Result<(UnboundedReceiver<Event>, InFlight, usize), ApiError> {
    let constraint = grammar
        .map(|(grammar, param)| {
            Constraint::new(&l.constraint_vocab, grammar)
                .map_err(|e| ApiError::invalid(param, e.to_string()))
        })
        .transpose()?;
    if prompt.is_empty() {
        return Err(ApiError::invalid("prompt", "the prompt gave no tokens"));
    }
    if prompt.len() >= l.n_ctx {
        return Err(ApiError::ContextLength {
            n_ctx: l.n_ctx,
            prompt_tokens: prompt.len(),
        });
    }
    let room = l.n_ctx - prompt.len();
    let max_tokens = g.max_tokens.unwrap_or(room).min(room);
    let limit = state.options.parallel.max(1) + state.options.max_queue;
    let previous = state.in_flight.fetch_add(1, Ordering::Relaxed);
    let guard = InFlight(Arc::clone(state));
    if previous >= limit {
        return Err(ApiError::QueueFull {
            waiting: previous.saturating_sub(state.options.parallel),
        });
    }
    let (tx, rx) = unbounded_channel();
    let job = Job {
        prompt,
        sampling: g.sampling.clone(),
        max_tokens,
        stop: g.stop.clone(),
        logprobs: g.logprobs,
        constraint,
        events: tx,
        received: Instant::now(),
    };
    let prompt_len = job.prompt.len();
    l.jobs
        .lock()
        .map_err(|_| ApiError::internal("the engine is gone"))?
        .send(job)
        .map_err(|_| ApiError::internal("the engine thread has stopped"))?;
    Ok((rx, guard, prompt_len))
}

fn usage_json(u: &Usage) -> Value {
    json!({
        "prompt_tokens": u.prompt_tokens,
        "completion_tokens": u.completion_tokens,
        "total_tokens": u.prompt_tokens + u.completion_tokens,
        "prompt_tokens_details": {"cached_tokens": u.cached_tokens},
    })
}

fn finish_name(f: Finish) -> &'static str {
    match f {
        Finish::Stop => "stop",
        Finish::Length => "length",
    }
}

fn lossy(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn chat_logprob_json(lp: &TokenLogprob) -> Value {
    json!({
        "token": lossy(&lp.token),
        "logprob": lp.logprob,
        "bytes": lp.token,
        "top_logprobs": lp.top.iter().map(|t| json!({
            "token": lossy(&t.token), "logprob": t.logprob, "bytes": t.token,
        })).collect::<Vec<_>>(),
    })
}

fn new_id(prefix: &str) -> String {
    use std::sync::atomic::AtomicU64;
    static NEXT: AtomicU64 = AtomicU64::new(1);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    format!("{prefix}-{t:x}{n:x}")
}

fn now_secs() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

async fn chat_completions(
    State(state): State<Arc<AppState>>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let l = loaded(&state)?;
    let body = json_body(body)?;
    let f = Fields::new(&body)?;
    let tools = tools::tool_request(&f)?;
    let grammar = api::constraint(&f)?;
    if let (Some((_, field)), Some(_)) = (&grammar, &tools) {
        return Err(ApiError::invalid(
            field,
            format!("'{field}' cannot be combined with 'tools' unless 'tool_choice' is 'none'"),
        ));
    }
    let messages = tools::prepare_messages(api::messages(&f)?, tools.as_ref(), l.renders_tools)?;
    let mut g = api::generation(&f, &["max_completion_tokens", "max_tokens"], l.n_vocab)?;
    g.logprobs = api::chat_logprobs(&f)?;
    let extra_kwargs = match f.get("chat_template_kwargs") {
        None => Map::new(),
        Some(Value::Object(m)) => m.clone(),
        Some(_) => {
            return Err(ApiError::invalid(
                "chat_template_kwargs",
                "'chat_template_kwargs' must be an object",
            ))
        }
    };
    let template = l.template.as_ref().ok_or_else(|| {
        ApiError::invalid(
            "messages",
            "this model has no chat template: use /v1/completions",
        )
    })?;
    let request = ChatRequest {
        messages,
        tools: tools
            .as_ref()
            .filter(|_| l.renders_tools)
            .map(|t| t.tools.clone()),
        add_generation_prompt: true,
        extra_kwargs,
    };
    let prompt_text = template
        .render(&request, &l.tokenizer.template_specials())
        .map_err(|e| ApiError::invalid("messages", e.to_string()))?;
    let prompt = l
        .tokenizer
        .encode(&prompt_text, true, true)
        .map_err(|e| ApiError::invalid("messages", e.to_string()))?;
    let opened = prompt_text.trim_end();
    let (splitter, think) = if !l.thinks {
        (None, ThinkStart::None)
    } else if opened.ends_with("<think>") {
        (Some(ThinkSplitter::thinking()), ThinkStart::Inside)
    } else if opened.ends_with("</think>") {
        (Some(ThinkSplitter::default()), ThinkStart::None)
    } else {
        (Some(ThinkSplitter::default()), ThinkStart::Optional)
    };
    let constraint = match (&grammar, &tools) {
        (Some((g, field)), _) => Some((g.clone(), *field)),
        (None, Some(t)) => tools::forced_call_grammar(t, think).map(|g| (g, "tools")),
        (None, None) => None,
    };
    let (rx, guard, _) = submit(
        &state,
        l,
        prompt,
        &g,
        constraint.as_ref().map(|(g, p)| (g, *p)),
    )?;
    let answer = AnswerSplitter::new(
        splitter,
        tools.as_ref().map(|t| ToolCallParser::new(t.parallel)),
        || new_id("call").replacen('-', "_", 1),
    );
    let id = new_id("chatcmpl");
    let model = state.model_id.clone();
    let created = now_secs();
    if g.stream {
        let stream = chat_stream(
            rx,
            guard,
            answer,
            id,
            model,
            created,
            g.include_usage,
            g.logprobs.is_some(),
        );
        return Ok(Sse::new(stream)
            .keep_alive(KeepAlive::default())
            .into_response());
    }
    let collected = collect(rx).await?;
    drop(guard);
    let mut answer = answer;
    let message = answer::fold(&answer.push(&collected.text, true));
    let logprobs = if g.logprobs.is_some() {
        json!({"content": collected.logprobs.iter().map(chat_logprob_json).collect::<Vec<_>>()})
    } else {
        Value::Null
    };
    Ok(Json(json!({
        "id": id,
        "object": "chat.completion",
        "created": created,
        "model": model,
        "choices": [{
            "index": 0,
            "message": message,
            "logprobs": logprobs,
            "finish_reason": chat_finish(collected.finish, &answer),
        }],
        "usage": usage_json(&collected.usage),
    }))
    .into_response())
}

/// A chat answer that stopped by itself after calling tools ends with `tool_calls`.
fn chat_finish(f: Finish, answer: &AnswerSplitter) -> &'static str {
    match f {
        Finish::Stop if answer.called() => "tool_calls",
        f => finish_name(f),
    }
}

struct Collected {
    text: String,
    logprobs: Vec<TokenLogprob>,
    finish: Finish,
    usage: Usage,
}

async fn collect(mut rx: UnboundedReceiver<Event>) -> Result<Collected, ApiError> {
    let mut text = String::new();
    let mut logprobs = Vec::new();
    while let Some(event) = rx.recv().await {
        match event {
            Event::Token { text: t, logprob } => {
                text.push_str(&t);
                logprobs.extend(logprob);
            }
            Event::Done {
                finish,
                text: t,
                usage,
            } => {
                text.push_str(&t);
                return Ok(Collected {
                    text,
                    logprobs,
                    finish,
                    usage,
                });
            }
            Event::Error(message) => return Err(ApiError::internal(message)),
        }
    }
    Err(ApiError::internal("the engine dropped the request"))
}

fn sse_json(v: &Value) -> Result<SseEvent, Infallible> {
    Ok(SseEvent::default().data(v.to_string()))
}

/// The end of a stream: the usage chunk if asked for, `[DONE]`, and the request's in-flight place
/// released.
fn end_stream(
    out: &mut Vec<Result<SseEvent, Infallible>>,
    usage: Option<Value>,
    guard: &mut Option<InFlight>,
) {
    if let Some(u) = usage {
        out.push(sse_json(&u));
    }
    out.push(Ok(SseEvent::default().data("[DONE]")));
    guard.take();
}

fn sse_error(message: String) -> Result<SseEvent, Infallible> {
    sse_json(&ApiError::internal(message).body())
}

#[allow(clippy::too_many_arguments)]
fn chat_stream(
    rx: UnboundedReceiver<Event>,
    guard: InFlight,
    mut answer: AnswerSplitter,
    id: String,
    model: String,
    created: u64,
    include_usage: bool,
    with_logprobs: bool,
) -> impl Stream<Item = Result<SseEvent, Infallible>> {
    let chunk = move |delta: Value, logprobs: Value, finish: Option<&str>| {
        json!({
            "id": id, "object": "chat.completion.chunk", "created": created, "model": model,
            "choices": [{"index": 0, "delta": delta, "logprobs": logprobs, "finish_reason": finish}],
        })
    };
    let first = sse_json(&chunk(
        json!({"role": "assistant", "content": ""}),
        Value::Null,
        None,
    ));
    let mut guard = Some(guard);
    let events = UnboundedReceiverStream::new(rx).flat_map(move |event| {
        let mut out: Vec<Result<SseEvent, Infallible>> = Vec::new();
        match event {
            Event::Token { text, logprob } => {
                let lp = match (&logprob, with_logprobs) {
                    (Some(lp), true) => json!({"content": [chat_logprob_json(lp)]}),
                    _ => Value::Null,
                };
                let ds = answer.push(&text, false);
                if ds.is_empty() && !lp.is_null() {
                    out.push(sse_json(&chunk(json!({}), lp, None)));
                } else {
                    let mut lp = Some(lp);
                    for d in ds {
                        out.push(sse_json(&chunk(d, lp.take().unwrap_or(Value::Null), None)));
                    }
                }
            }
            Event::Done {
                finish,
                text,
                usage,
            } => {
                for d in answer.push(&text, true) {
                    out.push(sse_json(&chunk(d, Value::Null, None)));
                }
                let mut last = chunk(json!({}), Value::Null, Some(chat_finish(finish, &answer)));
                if include_usage {
                    last["usage"] = Value::Null;
                }
                out.push(sse_json(&last));
                let usage = include_usage.then(|| {
                    let mut u = chunk(json!({}), Value::Null, None);
                    u["choices"] = json!([]);
                    u["usage"] = usage_json(&usage);
                    u
                });
                end_stream(&mut out, usage, &mut guard);
            }
            Event::Error(message) => {
                out.push(sse_error(message));
                end_stream(&mut out, None, &mut guard);
            }
        }
        stream::iter(out)
    });
    stream::once(async move { first }).chain(events)
}

/// `/v1/completions`: the prompt as text, a list of one text, or token ids.
async fn completions(
    State(state): State<Arc<AppState>>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let l = loaded(&state)?;
    let body = json_body(body)?;
    let f = Fields::new(&body)?;
    if f.bool("echo")? == Some(true) {
        return Err(ApiError::unsupported("echo", "echoing the prompt"));
    }
    if f.string("suffix")?.is_some_and(|s| !s.is_empty()) {
        return Err(ApiError::unsupported(
            "suffix",
            "a suffix (fill-in-the-middle)",
        ));
    }
    let mut g = api::generation(&f, &["max_tokens"], l.n_vocab)?;
    if g.max_tokens.is_none() {
        // The legacy endpoint's documented default.
        g.max_tokens = Some(16);
    }
    g.logprobs = f.int_in("logprobs", 0, 5)?.map(|n| n as usize);
    let prompt = completion_prompt(&f, l)?;
    let grammar = api::constraint(&f)?;
    let (rx, guard, _) = submit(
        &state,
        l,
        prompt,
        &g,
        grammar.as_ref().map(|(g, p)| (g, *p)),
    )?;
    let id = new_id("cmpl");
    let model = state.model_id.clone();
    let created = now_secs();
    let choice = move |text: String, logprobs: Value, finish: Option<&str>| json!({"index": 0, "text": text, "logprobs": logprobs, "finish_reason": finish});
    let legacy_logprobs = |lps: &[TokenLogprob]| {
        json!({
            "tokens": lps.iter().map(|lp| lossy(&lp.token)).collect::<Vec<_>>(),
            "token_logprobs": lps.iter().map(|lp| lp.logprob).collect::<Vec<_>>(),
            "top_logprobs": lps.iter().map(|lp| {
                let mut m = Map::new();
                for t in &lp.top { m.insert(lossy(&t.token), json!(t.logprob)); }
                Value::Object(m)
            }).collect::<Vec<_>>(),
        })
    };
    if g.stream {
        let include_usage = g.include_usage;
        let with_logprobs = g.logprobs.is_some();
        let mut guard = Some(guard);
        let envelope = move |choices: Value| json!({"id": id, "object": "text_completion", "created": created, "model": model, "choices": choices});
        let events = UnboundedReceiverStream::new(rx).flat_map(move |event| {
            let mut out: Vec<Result<SseEvent, Infallible>> = Vec::new();
            match event {
                Event::Token { text, logprob } => {
                    let lp = match (logprob, with_logprobs) {
                        (Some(lp), true) => legacy_logprobs(std::slice::from_ref(&lp)),
                        _ => Value::Null,
                    };
                    if !text.is_empty() || !lp.is_null() {
                        out.push(sse_json(&envelope(json!([choice(text, lp, None)]))));
                    }
                }
                Event::Done {
                    finish,
                    text,
                    usage,
                } => {
                    out.push(sse_json(&envelope(json!([choice(
                        text,
                        Value::Null,
                        Some(finish_name(finish))
                    )]))));
                    let usage = include_usage.then(|| {
                        let mut u = envelope(json!([]));
                        u["usage"] = usage_json(&usage);
                        u
                    });
                    end_stream(&mut out, usage, &mut guard);
                }
                Event::Error(message) => {
                    out.push(sse_error(message));
                    end_stream(&mut out, None, &mut guard);
                }
            }
            stream::iter(out)
        });
        return Ok(Sse::new(events)
            .keep_alive(KeepAlive::default())
            .into_response());
    }
    let collected = collect(rx).await?;
    drop(guard);
    let lp = if g.logprobs.is_some() {
        legacy_logprobs(&collected.logprobs)
    } else {
        Value::Null
    };
    Ok(Json(json!({
        "id": id,
        "object": "text_completion",
        "created": created,
        "model": model,
        "choices": [choice(collected.text, lp, Some(finish_name(collected.finish)))],
        "usage": usage_json(&collected.usage),
    }))
    .into_response())
}

fn completion_prompt(f: &Fields<'_>, l: &Loaded) -> Result<Vec<u32>, ApiError> {
    let ids = |items: &[Value]| -> Result<Vec<u32>, ApiError> {
        items
            .iter()
            .map(|v| {
                v.as_u64()
                    .filter(|&id| (id as usize) < l.n_vocab)
                    .map(|id| id as u32)
                    .ok_or_else(|| {
                        ApiError::invalid(
                            "prompt",
                            format!("token id {v} is not below {}", l.n_vocab),
                        )
                    })
            })
            .collect()
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
