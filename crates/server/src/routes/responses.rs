//! `POST /v1/responses`: OpenAI's Responses API, written as a chat completion (see [`compat`]).
//! `instructions` becomes the system message, `input` (a string or items: messages,
//! `function_call`, `function_call_output`) the turns, flat function `tools` the chat tools,
//! `text.format` the `response_format`. The answer's blocks become output items (`message`,
//! `function_call`, `reasoning`), whole or streamed as OpenAI's `response.*` events.
//!
//! `previous_response_id`: a stored response's conversation (its input and output as chat turns)
//! continues in the new request. The store is memory only, per server, and bounded: at most
//! [`MAX_STORED`] responses and [`MAX_STORED_BYTES`] of their JSON; past either the least recently
//! used go first, and a conversation larger than the byte bound is not kept. A forgotten or
//! unknown id is a 404, as OpenAI answers it. `store: false` keeps nothing.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{post, MethodRouter};
use axum::{Extension, Json};
use serde_json::{json, Map, Value};

use super::compat::{event_stream, joined_text, Block, BlockEvent, Blocks, EventWriter};
use super::generate::{collect, new_id, now_secs, submit, Clock};
use super::{prepare_chat, ModelRequest};
use crate::answer::AnswerSplitter;
use crate::api::Fields;
use crate::error::ApiError;
use crate::scheduler::{Finish, TokenLogprob, Usage};

/// How many responses `previous_response_id` can name at once.
pub const MAX_STORED: usize = 1024;
/// How many bytes of conversation (as JSON) the stored responses hold at most.
pub const MAX_STORED_BYTES: usize = 64 << 20;

type SharedStore = Arc<Mutex<ResponseStore>>;

/// The route, with its own store of responses.
pub(super) fn route() -> MethodRouter<Arc<crate::AppState>> {
    let store = ResponseStore::new(MAX_STORED, MAX_STORED_BYTES);
    post(create).layer(Extension(Arc::new(Mutex::new(store))))
}

/// Conversations by response id, least recently used first out.
pub(super) struct ResponseStore {
    entries: HashMap<String, (Vec<Value>, usize)>,
    order: VecDeque<String>,
    bytes: usize,
    max_entries: usize,
    max_bytes: usize,
}

impl ResponseStore {
    pub fn new(max_entries: usize, max_bytes: usize) -> ResponseStore {
        ResponseStore {
            entries: HashMap::new(),
            order: VecDeque::new(),
            bytes: 0,
            max_entries,
            max_bytes,
        }
    }

    /// The conversation, now the most recently used.
    pub fn get(&mut self, id: &str) -> Option<Vec<Value>> {
        let (messages, _) = self.entries.get(id)?;
        let messages = messages.clone();
        self.order.retain(|k| k != id);
        self.order.push_back(id.to_owned());
        Some(messages)
    }

    pub fn insert(&mut self, id: String, messages: Vec<Value>) {
        let size = Value::Array(messages.clone()).to_string().len();
        if size > self.max_bytes || self.max_entries == 0 {
            return;
        }
        while self.entries.len() >= self.max_entries || self.bytes + size > self.max_bytes {
            let Some(oldest) = self.order.pop_front() else {
                break;
            };
            if let Some((_, freed)) = self.entries.remove(&oldest) {
                self.bytes -= freed;
            }
        }
        self.bytes += size;
        self.order.push_back(id.clone());
        self.entries.insert(id, (messages, size));
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.entries.len()
    }
}

/// The handler's refusals: OpenAI's shape throughout, and the unknown previous response with
/// the code OpenAI gives it.
enum Refusal {
    Api(ApiError),
    UnknownPrevious(String),
}

impl From<ApiError> for Refusal {
    fn from(e: ApiError) -> Refusal {
        Refusal::Api(e)
    }
}

impl IntoResponse for Refusal {
    fn into_response(self) -> Response {
        match self {
            Refusal::Api(e) => e.into_response(),
            Refusal::UnknownPrevious(id) => (
                StatusCode::NOT_FOUND,
                Json(json!({"error": {
                    "message": format!("Previous response with id '{id}' not found."),
                    "type": "invalid_request_error",
                    "param": "previous_response_id",
                    "code": "previous_response_not_found",
                }})),
            )
                .into_response(),
        }
    }
}

async fn create(
    Extension(store): Extension<SharedStore>,
    req: ModelRequest,
) -> Result<Response, Refusal> {
    let (l, f) = req.parts()?;
    let previous = f.string("previous_response_id")?;
    let history = match previous {
        None => Vec::new(),
        Some(id) => store
            .lock()
            .map_err(|_| ApiError::internal("the response store is poisoned"))?
            .get(id)
            .ok_or_else(|| Refusal::UnknownPrevious(id.chars().take(100).collect()))?,
    };
    let turns = input_messages(&f)?;
    if turns.is_empty() && history.is_empty() {
        return Err(ApiError::invalid("input", "'input' is required").into());
    }
    let instructions = f.string("instructions")?;
    let mut messages = Vec::with_capacity(history.len() + turns.len() + 1);
    if let Some(text) = instructions {
        messages.push(json!({"role": "system", "content": text}));
    }
    messages.extend(history.iter().cloned());
    messages.extend(turns.iter().cloned());
    let body = chat_body(&f, messages)?;
    let prepared = prepare_chat(l, &Fields::new(&body)?)?;
    let answer = AnswerSplitter::new(
        prepared.splitter,
        prepared.tools.as_ref().map(|t| t.parser(l.tool_format)),
        || new_id("call").replacen('-', "_", 1),
    );
    let keep = f.bool("store")?.unwrap_or(true);
    let mut conversation = history;
    conversation.extend(turns);
    let mut writer = ResponseWriter {
        blocks: Blocks::new(answer),
        meta: meta(&f, req.state.model_id.clone())?,
        item_ids: Vec::new(),
        sequence: 0,
        store: keep.then_some((store, conversation)),
    };
    let stream = f.bool("stream")?.unwrap_or(false);
    let clock = Clock::start(prepared.prompt.len());
    let (rx, guard) = submit(
        &req.state,
        l,
        prepared.prompt,
        &prepared.g,
        prepared.constraint.as_ref(),
    )?;
    if stream {
        let created = writer.response("in_progress", None);
        let first = vec![
            writer.event(json!({"type": "response.created", "response": created})),
            writer.event(json!({"type": "response.in_progress", "response": created})),
        ];
        return Ok(event_stream(
            rx,
            guard,
            Arc::clone(&req.state),
            first,
            writer,
        ));
    }
    let collected = collect(rx, guard, clock).await?;
    writer.blocks.push(&collected.text, true);
    let answer = writer.finish(collected.finish, &collected.usage);
    Ok(Json(answer).into_response())
}

/// `input` as chat turns: a string is one user turn; items are messages (`type: "message"` or
/// just a `role`), `function_call` (an assistant turn's tool call) and `function_call_output` (a
/// tool turn); consecutive assistant items (an answer's text and calls) share one turn. Reasoning
/// items are dropped: the chat template decides what earlier reasoning the model sees.
fn input_messages(f: &Fields<'_>) -> Result<Vec<Value>, ApiError> {
    let items = match f.get("input") {
        None => return Ok(Vec::new()),
        Some(Value::String(s)) => return Ok(vec![json!({"role": "user", "content": s})]),
        Some(Value::Array(items)) => items,
        Some(_) => {
            return Err(ApiError::invalid(
                "input",
                "'input' must be a string or a list of items",
            ))
        }
    };
    let mut out: Vec<Value> = Vec::with_capacity(items.len());
    for (i, item) in items.iter().enumerate() {
        let at = format!("input[{i}]");
        let kind = item.get("type").and_then(Value::as_str);
        let field = |name: &str| -> Result<&str, ApiError> {
            item.get(name).and_then(Value::as_str).ok_or_else(|| {
                ApiError::invalid(
                    &format!("{at}.{name}"),
                    format!("'{at}.{name}' must be a string"),
                )
            })
        };
        match kind {
            None | Some("message") => {
                let role = match item.get("role").and_then(Value::as_str) {
                    Some(r @ ("user" | "assistant" | "system")) => r,
                    Some("developer") => "system",
                    _ => {
                        return Err(ApiError::invalid(
                            &format!("{at}.role"),
                            format!("'{at}.role' must be user, assistant, system or developer"),
                        ))
                    }
                };
                let content = item.get("content").unwrap_or(&Value::Null);
                let text = joined_text(
                    content,
                    &["input_text", "output_text", "text"],
                    &format!("{at}.content"),
                )?;
                // An answer's items (text, calls) are one assistant turn, as the chat has it.
                match out.last_mut() {
                    Some(last) if role == "assistant" && last["role"] == "assistant" => {
                        let before = last["content"].as_str().unwrap_or_default();
                        last["content"] = Value::String(format!("{before}{text}"));
                    }
                    _ => out.push(json!({"role": role, "content": text})),
                }
            }
            Some("function_call") => {
                let call = json!({
                    "id": field("call_id")?,
                    "type": "function",
                    "function": {"name": field("name")?, "arguments": field("arguments")?},
                });
                match out.last_mut() {
                    Some(last) if last["role"] == "assistant" => match last.get_mut("tool_calls") {
                        Some(Value::Array(calls)) => calls.push(call),
                        _ => last["tool_calls"] = json!([call]),
                    },
                    _ => {
                        out.push(json!({"role": "assistant", "content": "", "tool_calls": [call]}))
                    }
                }
            }
            Some("function_call_output") => {
                let output = item.get("output").unwrap_or(&Value::Null);
                let text = joined_text(
                    output,
                    &["input_text", "output_text"],
                    &format!("{at}.output"),
                )?;
                out.push(
                    json!({"role": "tool", "tool_call_id": field("call_id")?, "content": text}),
                );
            }
            Some("reasoning") => {}
            Some(other) => {
                return Err(ApiError::unsupported(
                    &format!("{at}.type"),
                    &format!("input item type '{other}'"),
                ))
            }
        }
    }
    Ok(out)
}

/// The chat completion body the request amounts to.
fn chat_body(f: &Fields<'_>, messages: Vec<Value>) -> Result<Value, ApiError> {
    let mut body = Map::new();
    body.insert("messages".into(), Value::Array(messages));
    for name in [
        "temperature",
        "top_p",
        "tool_choice",
        "parallel_tool_calls",
        "seed",
    ] {
        if let Some(v) = f.get(name) {
            body.insert(name.into(), v.clone());
        }
    }
    if let Some(v) = f.get("max_output_tokens") {
        body.insert("max_tokens".into(), v.clone());
    }
    if let Some(tools) = f.get("tools") {
        let list = tools
            .as_array()
            .ok_or_else(|| ApiError::invalid("tools", "'tools' must be a list"))?;
        let mut chat_tools = Vec::with_capacity(list.len());
        for (i, tool) in list.iter().enumerate() {
            match tool.get("type").and_then(Value::as_str) {
                Some("function") => {}
                Some(other) => {
                    return Err(ApiError::unsupported(
                        &format!("tools[{i}].type"),
                        &format!("tool type '{other}' (only function tools run here)"),
                    ))
                }
                None => {
                    return Err(ApiError::invalid(
                        &format!("tools[{i}].type"),
                        format!("'tools[{i}].type' is required and must be 'function'"),
                    ))
                }
            }
            let mut function = Map::new();
            for key in ["name", "description", "parameters"] {
                if let Some(v) = tool.get(key).filter(|v| !v.is_null()) {
                    function.insert(key.into(), v.clone());
                }
            }
            chat_tools.push(json!({"type": "function", "function": function}));
        }
        body.insert("tools".into(), Value::Array(chat_tools));
    }
    if let Some(format) = f.get("text").and_then(|t| t.get("format")) {
        let response_format = match format.get("type").and_then(Value::as_str) {
            Some("json_schema") => json!({"type": "json_schema", "json_schema": {
                "name": format.get("name").cloned().unwrap_or(Value::Null),
                "schema": format.get("schema").cloned().unwrap_or(Value::Null),
            }}),
            _ => format.clone(),
        };
        body.insert("response_format".into(), response_format);
    }
    Ok(Value::Object(body))
}

/// The request's fields a response object repeats.
fn meta(f: &Fields<'_>, model: String) -> Result<Value, ApiError> {
    let echo = |name: &str, default: Value| f.get(name).cloned().unwrap_or(default);
    Ok(json!({
        "id": new_id("resp").replacen('-', "_", 1),
        "object": "response",
        "created_at": now_secs(),
        "model": model,
        "instructions": echo("instructions", Value::Null),
        "max_output_tokens": echo("max_output_tokens", Value::Null),
        "previous_response_id": echo("previous_response_id", Value::Null),
        "temperature": echo("temperature", json!(1.0)),
        "top_p": echo("top_p", json!(1.0)),
        "tool_choice": echo("tool_choice", json!("auto")),
        "tools": echo("tools", json!([])),
        "parallel_tool_calls": echo("parallel_tool_calls", json!(true)),
        "text": echo("text", json!({"format": {"type": "text"}})),
        "store": f.bool("store")?.unwrap_or(true),
        "metadata": echo("metadata", json!({})),
        "truncation": "disabled",
        "error": null,
    }))
}

/// Writes the answer as output items, streamed or whole, and stores the conversation.
struct ResponseWriter {
    blocks: Blocks,
    meta: Value,
    /// Each block's output item id.
    item_ids: Vec<String>,
    sequence: u64,
    store: Option<(SharedStore, Vec<Value>)>,
}

impl ResponseWriter {
    fn event(&mut self, mut v: Value) -> Value {
        v["sequence_number"] = json!(self.sequence);
        self.sequence += 1;
        v
    }

    fn response(&self, status: &str, usage: Option<&Usage>) -> Value {
        let mut r = self.meta.clone();
        r["status"] = json!(status);
        r["incomplete_details"] = if status == "incomplete" {
            json!({"reason": "max_output_tokens"})
        } else {
            Value::Null
        };
        r["output"] = Value::Array(
            (0..self.blocks.blocks.len())
                .map(|i| self.item(i, "completed"))
                .collect(),
        );
        r["usage"] = usage.map_or(Value::Null, |u| {
            json!({
                "input_tokens": u.prompt_tokens,
                "input_tokens_details": {"cached_tokens": u.cached_tokens},
                "output_tokens": u.completion_tokens,
                "output_tokens_details": {"reasoning_tokens": 0},
                "total_tokens": u.prompt_tokens + u.completion_tokens,
            })
        });
        r
    }

    fn item_id(&mut self, at: usize) -> String {
        while self.item_ids.len() <= at {
            let prefix = match self.blocks.blocks.get(self.item_ids.len()) {
                Some(Block::Call { .. }) => "fc",
                Some(Block::Reasoning(_)) => "rs",
                _ => "msg",
            };
            self.item_ids.push(new_id(prefix).replacen('-', "_", 1));
        }
        self.item_ids[at].clone()
    }

    /// Block `at` as an output item.
    fn item(&self, at: usize, status: &str) -> Value {
        let id = self.item_ids.get(at).cloned().unwrap_or_default();
        match &self.blocks.blocks[at] {
            Block::Text(text) => json!({
                "id": id, "type": "message", "status": status, "role": "assistant",
                "content": [{"type": "output_text", "text": text, "annotations": [], "logprobs": []}],
            }),
            Block::Reasoning(text) => json!({
                "id": id, "type": "reasoning", "summary": [],
                "content": [{"type": "reasoning_text", "text": text}],
            }),
            Block::Call {
                id: call_id,
                name,
                arguments,
            } => json!({
                "id": id, "type": "function_call", "status": status, "call_id": call_id,
                "name": name, "arguments": arguments,
            }),
        }
    }

    fn stream_events(&mut self, events: Vec<BlockEvent>) -> Vec<Value> {
        let mut out = Vec::new();
        for e in events {
            match e {
                BlockEvent::Open(at) => {
                    let item_id = self.item_id(at);
                    let mut item = self.item(at, "in_progress");
                    match &self.blocks.blocks[at] {
                        Block::Text(_) | Block::Reasoning(_) => item["content"] = json!([]),
                        Block::Call { .. } => item["arguments"] = json!(""),
                    }
                    out.push(self.event(json!({
                        "type": "response.output_item.added", "output_index": at, "item": item,
                    })));
                    if let Block::Text(_) = self.blocks.blocks[at] {
                        out.push(self.event(json!({
                            "type": "response.content_part.added", "item_id": item_id,
                            "output_index": at, "content_index": 0,
                            "part": {"type": "output_text", "text": "", "annotations": []},
                        })));
                    }
                }
                BlockEvent::Delta(at, delta) => {
                    let item_id = self.item_id(at);
                    let v = match &self.blocks.blocks[at] {
                        Block::Text(_) => json!({
                            "type": "response.output_text.delta", "item_id": item_id,
                            "output_index": at, "content_index": 0, "delta": delta, "logprobs": [],
                        }),
                        Block::Reasoning(_) => json!({
                            "type": "response.reasoning_text.delta", "item_id": item_id,
                            "output_index": at, "content_index": 0, "delta": delta,
                        }),
                        Block::Call { .. } => json!({
                            "type": "response.function_call_arguments.delta", "item_id": item_id,
                            "output_index": at, "delta": delta,
                        }),
                    };
                    out.push(self.event(v));
                }
                BlockEvent::Close(at) => {
                    let item_id = self.item_id(at);
                    let item = self.item(at, "completed");
                    let closing = match &self.blocks.blocks[at] {
                        Block::Text(text) => vec![
                            json!({
                                "type": "response.output_text.done", "item_id": item_id,
                                "output_index": at, "content_index": 0, "text": text, "logprobs": [],
                            }),
                            json!({
                                "type": "response.content_part.done", "item_id": item_id,
                                "output_index": at, "content_index": 0,
                                "part": item["content"][0],
                            }),
                        ],
                        Block::Reasoning(text) => vec![json!({
                            "type": "response.reasoning_text.done", "item_id": item_id,
                            "output_index": at, "content_index": 0, "text": text,
                        })],
                        Block::Call {
                            name, arguments, ..
                        } => vec![json!({
                            "type": "response.function_call_arguments.done", "item_id": item_id,
                            "output_index": at, "name": name, "arguments": arguments,
                        })],
                    };
                    for v in closing {
                        out.push(self.event(v));
                    }
                    out.push(self.event(json!({
                        "type": "response.output_item.done", "output_index": at, "item": item,
                    })));
                }
            }
        }
        out
    }

    /// The finished response; its conversation stored if the request asked.
    fn finish(&mut self, finish: Finish, usage: &Usage) -> Value {
        for at in 0..self.blocks.blocks.len() {
            self.item_id(at);
        }
        let status = match finish {
            Finish::Length => "incomplete",
            Finish::Stop => "completed",
        };
        let response = self.response(status, Some(usage));
        if let Some((store, mut conversation)) = self.store.take() {
            conversation.push(self.chat_turn());
            if let (Some(id), Ok(mut store)) = (response["id"].as_str(), store.lock()) {
                store.insert(id.to_owned(), conversation);
            }
        }
        response
    }

    /// The answer as the assistant turn of a chat.
    fn chat_turn(&self) -> Value {
        let mut content = String::new();
        let mut calls = Vec::new();
        for block in &self.blocks.blocks {
            match block {
                Block::Text(t) => content.push_str(t),
                Block::Reasoning(_) => {}
                Block::Call {
                    id,
                    name,
                    arguments,
                } => calls.push(json!({
                    "id": id, "type": "function",
                    "function": {"name": name, "arguments": arguments},
                })),
            }
        }
        let mut turn = json!({"role": "assistant", "content": content});
        if !calls.is_empty() {
            turn["tool_calls"] = Value::Array(calls);
        }
        turn
    }
}

impl EventWriter for ResponseWriter {
    fn token(&mut self, text: String, _logprob: Option<TokenLogprob>) -> Vec<Value> {
        let events = self.blocks.push(&text, false);
        self.stream_events(events)
    }

    fn done(&mut self, finish: Finish, text: String, usage: &Usage) -> Vec<Value> {
        let events = self.blocks.push(&text, true);
        let mut out = self.stream_events(events);
        let response = self.finish(finish, usage);
        let kind = if finish == Finish::Length {
            "response.incomplete"
        } else {
            "response.completed"
        };
        out.push(self.event(json!({"type": kind, "response": response})));
        out
    }

    fn error(&mut self, error: ApiError) -> Vec<Value> {
        let body = error.body();
        let e = &body["error"];
        vec![self.event(json!({
            "type": "error", "code": e["code"], "message": e["message"], "param": e["param"],
        }))]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn turn(text: &str) -> Vec<Value> {
        vec![json!({"role": "user", "content": text})]
    }

    #[test]
    fn the_store_forgets_the_least_recently_used_first() {
        let mut store = ResponseStore::new(3, 1 << 20);
        for id in ["a", "b", "c"] {
            store.insert(id.into(), turn(id));
        }
        // "a" used: "b" is now the oldest.
        assert!(store.get("a").is_some());
        store.insert("d".into(), turn("d"));
        assert_eq!(store.len(), 3);
        assert!(store.get("b").is_none());
        for id in ["a", "c", "d"] {
            assert_eq!(store.get(id), Some(turn(id)), "{id}");
        }
    }

    #[test]
    fn the_store_keeps_within_its_bytes() {
        let one = Value::Array(turn(&"x".repeat(100))).to_string().len();
        let mut store = ResponseStore::new(100, 2 * one + one / 2);
        for id in ["a", "b", "c"] {
            store.insert(id.into(), turn(&"x".repeat(100)));
        }
        assert_eq!(store.len(), 2);
        assert!(store.get("a").is_none());
        assert!(store.bytes <= 2 * one + one / 2);
        // A conversation larger than the whole bound is not kept, and evicts nothing.
        store.insert("huge".into(), turn(&"y".repeat(10 * one)));
        assert!(store.get("huge").is_none());
        assert_eq!(store.len(), 2);
    }
}
