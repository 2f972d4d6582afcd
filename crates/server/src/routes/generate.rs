//! What the two completion endpoints share: a job handed to the engine (after the context and
//! queue checks), its events read back whole or streamed as server-sent events, and the JSON
//! pieces both answers hold.

use std::convert::Infallible;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use futures_util::stream::{self, StreamExt};
use oxibonsai_engine::{Constraint, ConstraintError, Grammar};
use serde_json::{json, Value};
use tokio::sync::mpsc::{unbounded_channel, UnboundedReceiver, UnboundedSender};
use tokio_stream::wrappers::UnboundedReceiverStream;

use crate::api::Generation;
use crate::error::ApiError;
use crate::scheduler::{Event, Finish, Job, TokenLogprob, Usage, Work};
use crate::{AppState, Loaded};

/// A grammar the answer must follow, and the request field it came from.
pub(crate) type NamedGrammar = (Grammar, &'static str);

/// Releases the request's place in the in-flight count when dropped (finished, failed or
/// abandoned).
pub(super) struct InFlight(Arc<AppState>);

impl InFlight {
    /// Counts a request in, or refuses it when the slots and `--max-queue` are all taken.
    pub(super) fn admit(state: &Arc<AppState>) -> Result<InFlight, ApiError> {
        let limit = state.options.parallel.max(1) + state.options.max_queue;
        let previous = state.in_flight.fetch_add(1, Ordering::Relaxed);
        let guard = InFlight(Arc::clone(state));
        if previous >= limit {
            return Err(ApiError::QueueFull {
                waiting: previous.saturating_sub(state.options.parallel),
            });
        }
        Ok(guard)
    }
}

impl InFlight {
    pub(super) fn state(&self) -> &AppState {
        &self.0
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Checks the prompt against the context and the queue, then hands the job to the engine.
/// `grammar` holds the answer to a constraint, named by the field it came from.
pub(super) fn submit(
    state: &Arc<AppState>,
    l: &Loaded,
    prompt: Vec<u32>,
    g: &Generation,
    grammar: Option<&(Grammar, &'static str)>,
) -> Result<(UnboundedReceiver<Event>, InFlight), ApiError> {
    submit_to(state, l, prompt, g, grammar, None)
}

/// [`submit`], the job to run in `slot` if given (llama-server's `id_slot`).
pub(super) fn submit_to(
    state: &Arc<AppState>,
    l: &Loaded,
    prompt: Vec<u32>,
    g: &Generation,
    grammar: Option<&(Grammar, &'static str)>,
    slot: Option<usize>,
) -> Result<(UnboundedReceiver<Event>, InFlight), ApiError> {
    if state.closing.load(Ordering::Relaxed) {
        return Err(ApiError::ShuttingDown);
    }
    let mut checked = check_job(l, prompt, g, grammar)?;
    checked.slot = slot;
    let guard = InFlight::admit(state)?;
    let (tx, rx) = unbounded_channel();
    l.jobs
        .lock()
        .map_err(|_| ApiError::internal("the engine is gone"))?
        .send(Work::Generate(Box::new(checked.into_job(tx))))
        .map_err(|_| ApiError::internal("the engine thread has stopped"))?;
    Ok((rx, guard))
}

/// A job checked against the model (its grammar compiled, its prompt within the context), not
/// yet queued.
pub(crate) struct CheckedJob {
    prompt: Vec<u32>,
    /// The slot asked for (`id_slot`), checked against the slots there are.
    pub(crate) slot: Option<usize>,
    g: Generation,
    max_tokens: usize,
    constraint: Option<Constraint>,
}

impl CheckedJob {
    pub(crate) fn into_job(self, events: UnboundedSender<Event>) -> Job {
        Job {
            prompt: self.prompt,
            sampling: self.g.sampling,
            max_tokens: self.max_tokens,
            stop: self.g.stop,
            logprobs: self.g.logprobs,
            post_sampling_probs: self.g.post_sampling_probs,
            constraint: self.constraint,
            events,
            received: Instant::now(),
            slot: self.slot,
        }
    }
}

/// [`submit`]'s checks that need only the model: the grammar compiled, the prompt non-empty and
/// within the context, `max_tokens` cut to the room left.
pub(crate) fn check_job(
    l: &Loaded,
    prompt: Vec<u32>,
    g: &Generation,
    grammar: Option<&(Grammar, &'static str)>,
) -> Result<CheckedJob, ApiError> {
    let constraint = grammar
        .map(|(grammar, param)| compile(l, grammar, param, g))
        .transpose()?;
    if prompt.is_empty() {
        return Err(ApiError::invalid("prompt", "the prompt gave no tokens"));
    }
    if prompt.len() >= l.n_ctx {
        return Err(ApiError::ContextLength {
            n_ctx: l.n_ctx,
            prompt_tokens: prompt.len(),
            param: g.prompt_param,
        });
    }
    let room = l.n_ctx - prompt.len();
    let max_tokens = g.max_tokens.unwrap_or(room).min(room);
    Ok(CheckedJob {
        prompt,
        slot: None,
        g: g.clone(),
        max_tokens,
        constraint,
    })
}

/// The request's grammar compiled, and its first step's mask computed now: a grammar too complex
/// for the grammar engine is refused here (400 naming the field) rather than failing after some
/// tokens, and so is one whose every first token `logit_bias` bans.
fn compile(
    l: &Loaded,
    grammar: &Grammar,
    param: &str,
    g: &Generation,
) -> Result<Constraint, ApiError> {
    let refused = |e: ConstraintError| ApiError::invalid(param, constraint_message(&e));
    let mut constraint = Constraint::new(&l.constraint_vocab, grammar).map_err(refused)?;
    let mut first = vec![0.0f32; l.n_vocab];
    for &(id, bias) in &g.sampling.logit_bias {
        if let Some(logit) = first.get_mut(id as usize) {
            *logit += bias;
        }
    }
    constraint.mask(&mut first).map_err(refused)?;
    if first.iter().all(|l| *l == f32::NEG_INFINITY) {
        return Err(ApiError::invalid(
            "logit_bias",
            format!("'logit_bias' bans every token that '{param}' allows first"),
        ));
    }
    Ok(constraint)
}

/// A grammar error as a client reads it: what is wrong, in one short line (llguidance's reasons
/// can carry the matcher's internal state).
fn constraint_message(err: &ConstraintError) -> String {
    const MAX_CHARS: usize = 200;
    let text = err.to_string();
    let lower = text.to_lowercase();
    if lower.contains("too complex") || lower.contains("too many") {
        return "the grammar is too complex for the grammar engine (too many lexer states): \
                use smaller repetition counts or fewer nested alternatives"
            .to_owned();
    }
    match text.char_indices().nth(MAX_CHARS) {
        Some((cut, _)) => format!("{}…", &text[..cut]),
        None => text,
    }
}

/// A whole answer, for a request that did not ask to stream.
pub(super) struct Collected {
    pub text: String,
    pub logprobs: Vec<TokenLogprob>,
    pub finish: Finish,
    pub usage: Usage,
    /// llama-server's `timings` object for the answer.
    pub timings: Value,
}

/// Reads the job's events to the end; the request's in-flight place is released after.
pub(super) async fn collect(
    mut rx: UnboundedReceiver<Event>,
    guard: InFlight,
    mut clock: Clock,
) -> Result<Collected, ApiError> {
    let mut text = String::new();
    let mut logprobs = Vec::new();
    while let Some(event) = rx.recv().await {
        match event {
            Event::Token { text: t, logprob } => {
                clock.token();
                text.push_str(&t);
                logprobs.extend(logprob);
            }
            Event::Done {
                finish,
                text: t,
                usage,
            } => {
                text.push_str(&t);
                let timings = clock.timings(Some(&usage));
                return Ok(Collected {
                    text,
                    logprobs,
                    finish,
                    usage,
                    timings,
                });
            }
            Event::Error(message) => return Err(ApiError::internal(message)),
        }
    }
    Err(dropped(&guard.0))
}

/// Why the engine dropped a job without an answer: the server is shutting down (the engine
/// stopped), or else a bug.
pub(super) fn dropped(state: &AppState) -> ApiError {
    if state.closing.load(Ordering::Relaxed) {
        ApiError::ShuttingDown
    } else {
        ApiError::internal("the engine dropped the request")
    }
}

/// How one endpoint writes the engine's events as stream chunks. [`sse`] adds what every stream
/// has: the error chunk, `[DONE]`, and the request's in-flight place released at the end.
pub(super) trait Chunks: Send + 'static {
    /// The chunks for one generated token (possibly none: text held back).
    fn token(&mut self, text: String, logprob: Option<TokenLogprob>) -> Vec<Value>;
    /// The last chunks: text released at the end, the finish reason, and the usage chunk if the
    /// client asked for it. `timings` goes on the last of them, as llama-server sends it.
    fn done(&mut self, finish: Finish, text: String, usage: &Usage, timings: Value) -> Vec<Value>;
    /// Whether every token's chunk carries the `timings` so far (llama-server's
    /// `timings_per_token`).
    fn timings_per_token(&self) -> bool {
        false
    }
    /// Whether the stream ends with `data: [DONE]` (OpenAI's streams; llama-server's native
    /// ones just end).
    fn done_marker(&self) -> bool {
        true
    }
}

/// The job's events as server-sent events: `first` (if any) at once, then each event's chunks,
/// then `[DONE]` after the last.
pub(super) fn sse(
    rx: UnboundedReceiver<Event>,
    guard: InFlight,
    first: Option<Value>,
    mut chunks: impl Chunks,
    mut clock: Clock,
) -> Response {
    let state = Arc::clone(&guard.0);
    let marker = chunks.done_marker();
    let mut guard = Some(guard);
    let ended = Arc::new(AtomicBool::new(false));
    let seen_end = Arc::clone(&ended);
    let events = UnboundedReceiverStream::new(rx).flat_map(move |event| {
        let last = !matches!(event, Event::Token { .. });
        let values = match event {
            Event::Token { text, logprob } => {
                clock.token();
                let mut values = chunks.token(text, logprob);
                if chunks.timings_per_token() {
                    for v in &mut values {
                        v["timings"] = clock.timings(None);
                    }
                }
                values
            }
            Event::Done {
                finish,
                text,
                usage,
            } => {
                let timings = clock.timings(Some(&usage));
                chunks.done(finish, text, &usage, timings)
            }
            Event::Error(message) => vec![ApiError::internal(message).body()],
        };
        let mut out: Vec<Result<SseEvent, Infallible>> = values.iter().map(sse_json).collect();
        if last {
            if marker {
                out.push(Ok(SseEvent::default().data("[DONE]")));
            }
            guard.take();
            seen_end.store(true, Ordering::Relaxed);
        }
        stream::iter(out)
    });
    // A job dropped without its last event (the engine stopped at shutdown) still ends the
    // stream the way clients expect: an error chunk, then `[DONE]`.
    let tail = stream::once(async move {
        if ended.load(Ordering::Relaxed) {
            Vec::new()
        } else {
            let mut out = vec![sse_json(&dropped(&state).body())];
            if marker {
                out.push(Ok(SseEvent::default().data("[DONE]")));
            }
            out
        }
    })
    .flat_map(stream::iter);
    let first = stream::iter(first.as_ref().map(sse_json));
    Sse::new(first.chain(events).chain(tail))
        .keep_alive(KeepAlive::default())
        .into_response()
}

fn sse_json(v: &Value) -> Result<SseEvent, Infallible> {
    Ok(SseEvent::default().data(v.to_string()))
}

pub(super) fn usage_json(u: &Usage) -> Value {
    json!({
        "prompt_tokens": u.prompt_tokens,
        "completion_tokens": u.completion_tokens,
        "total_tokens": u.prompt_tokens + u.completion_tokens,
        "prompt_tokens_details": {"cached_tokens": u.cached_tokens},
    })
}

/// When a request's prompt was handed over and its first token came back, for llama-server's
/// `timings`. Measured here rather than in the engine: the prompt time includes any wait for a
/// slot, as a client sees it.
pub(super) struct Clock {
    submitted: Instant,
    first_token: Option<Instant>,
    prompt_n: usize,
    predicted_n: usize,
}

impl Clock {
    /// Starts now, for a prompt of `prompt_n` tokens.
    pub(super) fn start(prompt_n: usize) -> Clock {
        Clock {
            submitted: Instant::now(),
            first_token: None,
            prompt_n,
            predicted_n: 0,
        }
    }

    fn token(&mut self) {
        self.first_token.get_or_insert_with(Instant::now);
        self.predicted_n += 1;
    }

    /// llama-server's `timings` object: prompt and generation counts, milliseconds, per-token
    /// milliseconds and tokens per second, the cached prompt tokens (`cache_n`), and with
    /// speculative decoding the draft counts. From the job's usage at the end; mid-stream from
    /// the tokens seen so far.
    pub(super) fn timings(&self, usage: Option<&Usage>) -> Value {
        let now = Instant::now();
        let first = self.first_token.unwrap_or(now);
        let ms = |d: std::time::Duration| d.as_secs_f64() * 1e3;
        let prompt_ms = ms(first - self.submitted);
        let predicted_ms = ms(now - first);
        let (prompt_n, cache_n, predicted_n) = match usage {
            Some(u) => (
                u.prompt_tokens - u.cached_tokens,
                u.cached_tokens,
                u.completion_tokens,
            ),
            None => (self.prompt_n, 0, self.predicted_n),
        };
        // No NaN or infinity in JSON: an empty phase has zero rates.
        let per = |a: f64, b: f64| if b > 0.0 { a / b } else { 0.0 };
        let mut t = json!({
            "cache_n": cache_n,
            "prompt_n": prompt_n,
            "prompt_ms": prompt_ms,
            "prompt_per_token_ms": per(prompt_ms, prompt_n as f64),
            "prompt_per_second": per(1e3 * prompt_n as f64, prompt_ms),
            "predicted_n": predicted_n,
            "predicted_ms": predicted_ms,
            "predicted_per_token_ms": per(predicted_ms, generation_steps(predicted_n)),
            "predicted_per_second": per(1e3 * generation_steps(predicted_n), predicted_ms),
        });
        if let Some((drafted, accepted)) = usage.and_then(|u| u.draft) {
            t["draft_n"] = json!(drafted);
            t["draft_n_accepted"] = json!(accepted);
        }
        t
    }
}

/// The decode steps behind `predicted_n` tokens, over which llama-server's generation rates are
/// taken: the first token costs none (it comes from the prompt's last logits, and its time is
/// the prompt's).
pub(super) fn generation_steps(predicted_n: usize) -> f64 {
    predicted_n.saturating_sub(1) as f64
}

/// What llama-server answers as `system_fingerprint` (`b<build>-<commit>`): this build's version.
pub(super) fn system_fingerprint() -> String {
    format!("b{}-oxibonsai", env!("CARGO_PKG_VERSION"))
}

pub(super) fn finish_name(f: Finish) -> &'static str {
    match f {
        Finish::Stop => "stop",
        Finish::Length => "length",
    }
}

/// A token's bytes as text (a token may hold part of a character).
pub(super) fn lossy(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// A response (or tool call) id: the time and a counter, unique within this process.
pub(super) fn new_id(prefix: &str) -> String {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    let t = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    format!("{prefix}-{t:x}{n:x}")
}

pub(super) fn now_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}
