//! `POST /v1/messages` and `POST /v1/messages/count_tokens`: Anthropic's Messages API, written
//! as a chat completion (see [`compat`]). `system` (a string or text blocks) becomes the system
//! message; content blocks become turns — `text`, an assistant's `tool_use` (a tool call),
//! a user's `tool_result` (a tool turn); `tools` (`input_schema`) and `tool_choice` (`auto`,
//! `any`, `tool`, `none`) the chat tools. The answer's blocks come back as `text`, `thinking`
//! and `tool_use` content, whole or streamed as Anthropic's events, with `stop_reason`
//! `end_turn`, `max_tokens`, `stop_sequence` or `tool_use`. Errors have Anthropic's shape
//! `{"type": "error", "error": {"type", "message"}}`.

use std::sync::Arc;

use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::{json, Map, Value};

use super::compat::{event_stream, joined_text, Block, BlockEvent, Blocks, EventWriter};
use super::generate::{collect, new_id, submit, Clock};
use super::{prepare_chat, ModelRequest};
use crate::answer::AnswerSplitter;
use crate::api::Fields;
use crate::error::ApiError;
use crate::scheduler::{Finish, TokenLogprob, Usage};

/// An error in Anthropic's shape, with the status the server gives it.
pub(super) struct AnthropicError(ApiError);

impl From<ApiError> for AnthropicError {
    fn from(e: ApiError) -> AnthropicError {
        AnthropicError(e)
    }
}

impl AnthropicError {
    fn body(&self) -> Value {
        let status = self.0.status().as_u16();
        let kind = match status {
            401 => "authentication_error",
            403 => "permission_error",
            404 => "not_found_error",
            413 => "request_too_large",
            429 => "rate_limit_error",
            503 => "overloaded_error",
            s if s >= 500 => "api_error",
            _ => "invalid_request_error",
        };
        json!({"type": "error", "error": {"type": kind, "message": self.0.to_string()}})
    }
}

impl IntoResponse for AnthropicError {
    fn into_response(self) -> Response {
        let body = self.body();
        // The status and headers (Retry-After, Allow) stay; the body takes Anthropic's shape.
        let (parts, _) = self.0.into_response().into_parts();
        Response::from_parts(parts, axum::body::Body::from(body.to_string()))
    }
}

pub(super) async fn messages(
    req: Result<ModelRequest, ApiError>,
) -> Result<Response, AnthropicError> {
    let req = req?;
    let (l, f) = req.parts()?;
    let max_tokens = f.int_in("max_tokens", 1, i64::from(u32::MAX))?;
    if max_tokens.is_none() {
        return Err(ApiError::invalid("max_tokens", "max_tokens: Field required").into());
    }
    let body = chat_body(&f)?;
    let prepared = prepare_chat(l, &Fields::new(&body)?)?;
    let answer = AnswerSplitter::new(
        prepared.splitter,
        prepared.tools.as_ref().map(|t| t.parser(l.tool_format)),
        || new_id("toolu").replacen('-', "_", 1),
    );
    let mut writer = MessageWriter {
        blocks: Blocks::new(answer),
        id: new_id("msg").replacen('-', "_", 1),
        model: req.state.model_id.clone(),
    };
    let input_tokens = prepared.prompt.len();
    let stream = f.bool("stream")?.unwrap_or(false);
    let (rx, guard) = submit(
        &req.state,
        l,
        prepared.prompt,
        &prepared.g,
        prepared.constraint.as_ref(),
    )?;
    if stream {
        let mut start = writer.message(Vec::new(), Value::Null, Value::Null);
        start["usage"] = json!({"input_tokens": input_tokens, "output_tokens": 0});
        let first = vec![
            json!({"type": "message_start", "message": start}),
            json!({"type": "ping"}),
        ];
        return Ok(event_stream(
            rx,
            guard,
            Arc::clone(&req.state),
            first,
            writer,
        ));
    }
    let collected = collect(rx, guard, Clock::start(input_tokens)).await?;
    writer.blocks.push(&collected.text, true);
    let (stop_reason, stop_sequence) = writer.stop_reason(collected.finish, &collected.usage);
    let content = writer.content();
    let mut message = writer.message(content, stop_reason, stop_sequence);
    message["usage"] = usage_json(&collected.usage);
    Ok(Json(message).into_response())
}

pub(super) async fn count_tokens(
    req: Result<ModelRequest, ApiError>,
) -> Result<Response, AnthropicError> {
    let req = req?;
    let (l, f) = req.parts()?;
    let body = chat_body(&f)?;
    let prepared = prepare_chat(l, &Fields::new(&body)?)?;
    Ok(Json(json!({"input_tokens": prepared.prompt.len()})).into_response())
}

fn usage_json(u: &Usage) -> Value {
    json!({
        "input_tokens": u.prompt_tokens - u.cached_tokens,
        "output_tokens": u.completion_tokens,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": u.cached_tokens,
    })
}

/// The chat completion body the request amounts to (`max_tokens` is checked by the caller:
/// `count_tokens` has none).
fn chat_body(f: &Fields<'_>) -> Result<Value, ApiError> {
    let mut messages = Vec::new();
    match f.get("system") {
        None => {}
        Some(system) => {
            let text = joined_text(system, &["text"], "system")?;
            messages.push(json!({"role": "system", "content": text}));
        }
    }
    // An empty list is accepted and rendered as the template renders it, as llama-server does
    // (its Anthropic route is permissive here; Anthropic's own API refuses it). This server is a
    // drop-in for llama-server, so its answer wins.
    let list = match f.get("messages") {
        Some(Value::Array(list)) => list,
        Some(_) => return Err(ApiError::invalid("messages", "messages: must be a list")),
        None => return Err(ApiError::invalid("messages", "messages: Field required")),
    };
    for (i, m) in list.iter().enumerate() {
        turns(i, m, &mut messages)?;
    }
    let mut body = Map::new();
    body.insert("messages".into(), Value::Array(messages));
    for name in ["temperature", "top_p", "top_k"] {
        if let Some(v) = f.get(name) {
            body.insert(name.into(), v.clone());
        }
    }
    if let Some(v) = f.get("max_tokens") {
        body.insert("max_tokens".into(), v.clone());
    }
    if let Some(stops) = f.get("stop_sequences") {
        body.insert("stop".into(), stops.clone());
    }
    if let Some(tools) = f.get("tools") {
        body.insert("tools".into(), chat_tools(tools)?);
    }
    let (choice, parallel) = tool_choice(f)?;
    if let Some(choice) = choice {
        body.insert("tool_choice".into(), choice);
    }
    body.insert("parallel_tool_calls".into(), json!(parallel));
    Ok(Value::Object(body))
}

/// One Anthropic message as chat turns: a user's `tool_result` blocks become tool turns (before
/// the rest of its text), an assistant's `tool_use` blocks its tool calls.
fn turns(i: usize, m: &Value, out: &mut Vec<Value>) -> Result<(), ApiError> {
    let at = format!("messages[{i}]");
    let role = match m.get("role").and_then(Value::as_str) {
        Some(r @ ("user" | "assistant")) => r,
        _ => {
            return Err(ApiError::invalid(
                &format!("{at}.role"),
                format!("{at}.role: must be 'user' or 'assistant'"),
            ))
        }
    };
    let blocks = match m.get("content") {
        Some(Value::String(s)) => {
            out.push(json!({"role": role, "content": s}));
            return Ok(());
        }
        Some(Value::Array(blocks)) => blocks,
        _ => {
            return Err(ApiError::invalid(
                &format!("{at}.content"),
                format!("{at}.content: must be a string or a list of content blocks"),
            ))
        }
    };
    let mut text = String::new();
    let mut thinking = String::new();
    let mut calls = Vec::new();
    for (j, block) in blocks.iter().enumerate() {
        let b = format!("{at}.content[{j}]");
        let kind = block.get("type").and_then(Value::as_str);
        let string = |name: &str| -> Result<&str, ApiError> {
            block.get(name).and_then(Value::as_str).ok_or_else(|| {
                ApiError::invalid(
                    &format!("{b}.{name}"),
                    format!("{b}.{name}: must be a string"),
                )
            })
        };
        match (kind, role) {
            (Some("text"), _) => text.push_str(string("text")?),
            (Some("tool_use"), "assistant") => {
                let input = block
                    .get("input")
                    .filter(|v| v.is_object())
                    .ok_or_else(|| {
                        ApiError::invalid(
                            &format!("{b}.input"),
                            format!("{b}.input: must be an object"),
                        )
                    })?;
                calls.push(json!({
                    "id": string("id")?, "type": "function",
                    "function": {"name": string("name")?, "arguments": input},
                }));
            }
            (Some("tool_result"), "user") => {
                let content = match block.get("content") {
                    None | Some(Value::Null) => String::new(),
                    Some(c) => joined_text(c, &["text"], &format!("{b}.content"))?,
                };
                out.push(json!({
                    "role": "tool", "tool_call_id": string("tool_use_id")?, "content": content,
                }));
            }
            // Earlier reasoning becomes the turn's `reasoning_content` (as llama-server converts
            // it): the chat template decides what the model sees of it.
            (Some("thinking"), "assistant") => thinking.push_str(string("thinking")?),
            (Some("redacted_thinking"), "assistant") => {}
            (Some("image"), _) => return Err(ApiError::media_unsupported("image")),
            (Some(k @ ("document" | "search_result")), _) => {
                return Err(ApiError::unsupported(
                    &format!("{b}.type"),
                    &format!("content block type '{k}'"),
                ))
            }
            (Some(k), _) => {
                return Err(ApiError::invalid(
                    &format!("{b}.type"),
                    format!("{b}.type: '{k}' is not a content block a {role} message may hold"),
                ))
            }
            (None, _) => {
                return Err(ApiError::invalid(
                    &format!("{b}.type"),
                    format!("{b}.type: Field required"),
                ))
            }
        }
    }
    if role == "assistant" {
        let mut turn = json!({"role": "assistant", "content": text});
        if !calls.is_empty() {
            turn["tool_calls"] = Value::Array(calls);
        }
        if !thinking.is_empty() {
            turn["reasoning_content"] = Value::String(thinking);
        }
        out.push(turn);
    } else if !text.is_empty() || !blocks.iter().any(|b| b["type"] == "tool_result") {
        out.push(json!({"role": "user", "content": text}));
    }
    Ok(())
}

/// Anthropic tools (`name`, `description`, `input_schema`) as chat function tools. Server tools
/// (a `type` such as `web_search_20250305`) are not run here.
fn chat_tools(tools: &Value) -> Result<Value, ApiError> {
    let list = tools
        .as_array()
        .ok_or_else(|| ApiError::invalid("tools", "tools: must be a list"))?;
    let mut out = Vec::with_capacity(list.len());
    for (i, tool) in list.iter().enumerate() {
        match tool.get("type").and_then(Value::as_str) {
            None | Some("custom") => {}
            Some(other) => {
                return Err(ApiError::unsupported(
                    &format!("tools[{i}].type"),
                    &format!("tool type '{other}' (only client tools run here)"),
                ))
            }
        }
        let mut function = Map::new();
        for (from, to) in [
            ("name", "name"),
            ("description", "description"),
            ("input_schema", "parameters"),
        ] {
            if let Some(v) = tool.get(from).filter(|v| !v.is_null()) {
                function.insert(to.into(), v.clone());
            }
        }
        out.push(json!({"type": "function", "function": function}));
    }
    Ok(Value::Array(out))
}

/// `tool_choice` as the chat's, and whether calls may come in parallel.
fn tool_choice(f: &Fields<'_>) -> Result<(Option<Value>, bool), ApiError> {
    let Some(choice) = f.get("tool_choice") else {
        return Ok((None, true));
    };
    let parallel = !choice
        .get("disable_parallel_tool_use")
        .and_then(Value::as_bool)
        .unwrap_or(false);
    let chat = match choice.get("type").and_then(Value::as_str) {
        Some("auto") => json!("auto"),
        Some("any") => json!("required"),
        Some("none") => json!("none"),
        Some("tool") => match choice.get("name").and_then(Value::as_str) {
            Some(name) => json!({"type": "function", "function": {"name": name}}),
            None => {
                return Err(ApiError::invalid(
                    "tool_choice.name",
                    "tool_choice.name: Field required for type 'tool'",
                ))
            }
        },
        _ => {
            return Err(ApiError::invalid(
                "tool_choice.type",
                "tool_choice.type: must be one of 'auto', 'any', 'tool', 'none'",
            ))
        }
    };
    Ok((Some(chat), parallel))
}

/// Writes the answer as content blocks, streamed or whole.
struct MessageWriter {
    blocks: Blocks,
    id: String,
    model: String,
}

impl MessageWriter {
    fn message(&self, content: Vec<Value>, stop_reason: Value, stop_sequence: Value) -> Value {
        json!({
            "id": self.id, "type": "message", "role": "assistant", "model": self.model,
            "content": content, "stop_reason": stop_reason, "stop_sequence": stop_sequence,
        })
    }

    /// Anthropic's `stop_reason`, and the stop string the engine matched (`Usage::stop_word`).
    fn stop_reason(&self, finish: Finish, usage: &Usage) -> (Value, Value) {
        if let Some(s) = usage
            .stop_word
            .as_deref()
            .filter(|_| finish == Finish::Stop)
        {
            return (json!("stop_sequence"), json!(s));
        }
        let reason = match finish {
            Finish::Length => "max_tokens",
            Finish::Stop if self.blocks.called() => "tool_use",
            Finish::Stop => "end_turn",
        };
        (json!(reason), Value::Null)
    }

    fn block(&self, at: usize, whole: bool) -> Value {
        match &self.blocks.blocks[at] {
            Block::Text(t) => json!({"type": "text", "text": if whole { t.as_str() } else { "" }}),
            Block::Reasoning(t) => json!({
                "type": "thinking", "thinking": if whole { t.as_str() } else { "" }, "signature": "",
            }),
            Block::Call {
                id,
                name,
                arguments,
            } => {
                let input = if whole {
                    serde_json::from_str::<Value>(arguments)
                        .ok()
                        .filter(Value::is_object)
                        .unwrap_or_else(|| json!({}))
                } else {
                    json!({})
                };
                json!({"type": "tool_use", "id": id, "name": name, "input": input})
            }
        }
    }

    fn content(&self) -> Vec<Value> {
        (0..self.blocks.blocks.len())
            .map(|at| self.block(at, true))
            .collect()
    }

    fn stream_events(&self, events: Vec<BlockEvent>) -> Vec<Value> {
        events
            .into_iter()
            .map(|e| match e {
                BlockEvent::Open(at) => json!({
                    "type": "content_block_start", "index": at, "content_block": self.block(at, false),
                }),
                BlockEvent::Delta(at, text) => {
                    let delta = match &self.blocks.blocks[at] {
                        Block::Text(_) => json!({"type": "text_delta", "text": text}),
                        Block::Reasoning(_) => json!({"type": "thinking_delta", "thinking": text}),
                        Block::Call { .. } => {
                            json!({"type": "input_json_delta", "partial_json": text})
                        }
                    };
                    json!({"type": "content_block_delta", "index": at, "delta": delta})
                }
                BlockEvent::Close(at) => json!({"type": "content_block_stop", "index": at}),
            })
            .collect()
    }
}

impl EventWriter for MessageWriter {
    fn token(&mut self, text: String, _: Option<TokenLogprob>) -> Vec<Value> {
        let events = self.blocks.push(&text, false);
        self.stream_events(events)
    }

    fn done(&mut self, finish: Finish, text: String, usage: &Usage) -> Vec<Value> {
        let events = self.blocks.push(&text, true);
        let mut out = self.stream_events(events);
        let (stop_reason, stop_sequence) = self.stop_reason(finish, usage);
        out.push(json!({
            "type": "message_delta",
            "delta": {"stop_reason": stop_reason, "stop_sequence": stop_sequence},
            "usage": usage_json(usage),
        }));
        out.push(json!({"type": "message_stop"}));
        out
    }

    fn error(&mut self, error: ApiError) -> Vec<Value> {
        vec![AnthropicError(error).body()]
    }
}
