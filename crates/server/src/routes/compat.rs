//! What the Responses and Messages routes share. Both APIs are a different dress for a chat
//! completion: each handler writes its request as a chat body, hands it to the chat route's own
//! preparation ([`super::prepare_chat`]: template, tools, grammar) and the same engine job, and
//! reads the answer through the same [`AnswerSplitter`]. What differs is the shape of the answer:
//! both split it into typed blocks (text, reasoning, a tool call) that open, grow and close —
//! [`Blocks`] turns the splitter's deltas into those — and both stream named server-sent events
//! ([`event_stream`]).

use std::convert::Infallible;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use futures_util::stream::{self, StreamExt};
use serde_json::Value;
use tokio::sync::mpsc::UnboundedReceiver;
use tokio_stream::wrappers::UnboundedReceiverStream;

use super::generate::InFlight;
use crate::answer::AnswerSplitter;
use crate::error::ApiError;
use crate::scheduler::{Event, Finish, TokenLogprob, Usage};
use crate::AppState;

/// One part of an answer.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Block {
    Text(String),
    Reasoning(String),
    Call {
        id: String,
        name: String,
        arguments: String,
    },
}

/// A change to the answer's blocks, by block index.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum BlockEvent {
    Open(usize),
    /// Text appended to the block (a tool call's: a piece of its arguments' JSON).
    Delta(usize, String),
    Close(usize),
}

/// The answer as blocks: a new block opens whenever the kind of text changes (or a call starts),
/// and closes the one before it. A whole answer is the same pushes as a stream, so both give the
/// same blocks.
pub(super) struct Blocks {
    answer: AnswerSplitter,
    pub blocks: Vec<Block>,
    open: Option<usize>,
    /// The block of each tool call, by the parser's call index.
    calls: Vec<usize>,
}

impl Blocks {
    pub fn new(answer: AnswerSplitter) -> Blocks {
        Blocks {
            answer,
            blocks: Vec::new(),
            open: None,
            calls: Vec::new(),
        }
    }

    /// Whether the answer called a tool.
    pub fn called(&self) -> bool {
        self.answer.called()
    }

    pub fn push(&mut self, text: &str, last: bool) -> Vec<BlockEvent> {
        let mut out = Vec::new();
        for delta in self.answer.push(text, last) {
            if let Some(r) = delta.get("reasoning_content").and_then(Value::as_str) {
                self.grow(Block::Reasoning(String::new()), r, &mut out);
            }
            if let Some(c) = delta.get("content").and_then(Value::as_str) {
                self.grow(Block::Text(String::new()), c, &mut out);
            }
            let calls = delta.get("tool_calls").and_then(Value::as_array);
            for call in calls.into_iter().flatten() {
                let function = call.get("function");
                let fragment = function
                    .and_then(|f| f.get("arguments"))
                    .and_then(Value::as_str)
                    .unwrap_or_default();
                if let Some(id) = call.get("id").and_then(Value::as_str) {
                    let name = function
                        .and_then(|f| f.get("name"))
                        .and_then(Value::as_str)
                        .unwrap_or_default();
                    self.close(&mut out);
                    self.blocks.push(Block::Call {
                        id: id.to_owned(),
                        name: name.to_owned(),
                        arguments: String::new(),
                    });
                    let at = self.blocks.len() - 1;
                    self.calls.push(at);
                    self.open = Some(at);
                    out.push(BlockEvent::Open(at));
                }
                let index = call.get("index").and_then(Value::as_u64).unwrap_or(0) as usize;
                if let (Some(&at), false) = (self.calls.get(index), fragment.is_empty()) {
                    if let Some(Block::Call { arguments, .. }) = self.blocks.get_mut(at) {
                        arguments.push_str(fragment);
                        out.push(BlockEvent::Delta(at, fragment.to_owned()));
                    }
                }
            }
        }
        if last {
            self.close(&mut out);
        }
        out
    }

    /// Appends text to the open block if it is of `kind`, else opens a new one.
    fn grow(&mut self, kind: Block, text: &str, out: &mut Vec<BlockEvent>) {
        if text.is_empty() {
            return;
        }
        let same = self
            .open
            .and_then(|at| self.blocks.get(at))
            .is_some_and(|b| std::mem::discriminant(b) == std::mem::discriminant(&kind));
        if !same {
            self.close(out);
            self.blocks.push(kind);
            self.open = Some(self.blocks.len() - 1);
            out.push(BlockEvent::Open(self.blocks.len() - 1));
        }
        let Some(at) = self.open else { return };
        if let Some(Block::Text(t) | Block::Reasoning(t)) = self.blocks.get_mut(at) {
            t.push_str(text);
        }
        out.push(BlockEvent::Delta(at, text.to_owned()));
    }

    fn close(&mut self, out: &mut Vec<BlockEvent>) {
        if let Some(at) = self.open.take() {
            out.push(BlockEvent::Close(at));
        }
    }
}

/// How one API writes the engine's events as named server-sent events: each value's `type` is
/// its event name.
pub(super) trait EventWriter: Send + 'static {
    fn token(&mut self, text: String, logprob: Option<TokenLogprob>) -> Vec<Value>;
    fn done(&mut self, finish: Finish, text: String, usage: &Usage) -> Vec<Value>;
    fn error(&mut self, error: ApiError) -> Vec<Value>;
}

/// The job's events as named server-sent events: `first` at once, then each event's, and the
/// writer's error if the engine drops the job without an end (the server is shutting down).
pub(super) fn event_stream(
    rx: UnboundedReceiver<Event>,
    guard: InFlight,
    state: Arc<AppState>,
    first: Vec<Value>,
    writer: impl EventWriter,
) -> Response {
    let writer = Arc::new(std::sync::Mutex::new(writer));
    let tail_writer = Arc::clone(&writer);
    let mut guard = Some(guard);
    let ended = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let seen_end = Arc::clone(&ended);
    let events = UnboundedReceiverStream::new(rx).flat_map(move |event| {
        let last = !matches!(event, Event::Token { .. });
        let values = match writer.lock() {
            Ok(mut w) => match event {
                Event::Token { text, logprob } => w.token(text, logprob),
                Event::Done {
                    finish,
                    text,
                    usage,
                } => w.done(finish, text, &usage),
                Event::Error(message) => w.error(ApiError::internal(message)),
            },
            Err(_) => Vec::new(),
        };
        if last {
            guard.take();
            seen_end.store(true, Ordering::Relaxed);
        }
        stream::iter(values.into_iter().map(named).collect::<Vec<_>>())
    });
    let tail = stream::once(async move {
        if ended.load(Ordering::Relaxed) {
            return Vec::new();
        }
        let error = if state.closing.load(Ordering::Relaxed) {
            ApiError::ShuttingDown
        } else {
            ApiError::internal("the engine dropped the request")
        };
        match tail_writer.lock() {
            Ok(mut w) => w.error(error).into_iter().map(named).collect(),
            Err(_) => Vec::new(),
        }
    })
    .flat_map(stream::iter);
    let first = stream::iter(first.into_iter().map(named).collect::<Vec<_>>());
    Sse::new(first.chain(events).chain(tail))
        .keep_alive(KeepAlive::default())
        .into_response()
}

fn named(v: Value) -> Result<SseEvent, Infallible> {
    let name = v
        .get("type")
        .and_then(Value::as_str)
        .unwrap_or("message")
        .to_owned();
    Ok(SseEvent::default().event(name).data(v.to_string()))
}

/// A list of text parts (`{"type": T, "text": …}` with T among `text_types`) or a string, as one
/// string; `at` names the field for errors.
pub(super) fn joined_text(
    content: &Value,
    text_types: &[&str],
    at: &str,
) -> Result<String, ApiError> {
    match content {
        Value::String(s) => Ok(s.clone()),
        Value::Array(parts) => {
            let mut text = String::new();
            for (j, part) in parts.iter().enumerate() {
                let p = format!("{at}[{j}]");
                match part.get("type").and_then(Value::as_str) {
                    Some(t) if text_types.contains(&t) => {
                        let piece = part.get("text").and_then(Value::as_str).ok_or_else(|| {
                            ApiError::invalid(&p, format!("'{p}.text' must be a string"))
                        })?;
                        text.push_str(piece);
                    }
                    Some("image" | "image_url" | "input_image") => {
                        return Err(ApiError::media_unsupported("image"))
                    }
                    Some("input_audio") => return Err(ApiError::media_unsupported("audio")),
                    Some(other) => {
                        return Err(ApiError::unsupported(
                            &format!("{p}.type"),
                            &format!("content of type '{other}' here"),
                        ))
                    }
                    None => {
                        return Err(ApiError::invalid(
                            &format!("{p}.type"),
                            format!("'{p}.type' is required"),
                        ))
                    }
                }
            }
            Ok(text)
        }
        _ => Err(ApiError::invalid(
            at,
            format!("'{at}' must be a string or a list of text parts"),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tools::parse::{ToolCallParser, ToolCallStyle};

    fn fixed_id() -> String {
        "call_x".to_owned()
    }

    fn blocks() -> Blocks {
        Blocks::new(AnswerSplitter::new(
            Some(oxibonsai_tokenizer::reasoning::ThinkSplitter::default()),
            Some(ToolCallParser::new(ToolCallStyle::Json, true)),
            fixed_id,
        ))
    }

    #[test]
    fn streamed_pieces_give_the_blocks_of_the_whole_answer() {
        let text = "<think>\nhm\n</think>\n\nSure.\n<tool_call>\n{\"name\": \"w\", \"arguments\": {\"c\": \"P\"}}\n</tool_call>";
        let mut whole = blocks();
        let events = whole.push(text, true);
        assert!(whole.called());
        assert_eq!(
            whole.blocks,
            vec![
                Block::Reasoning("\nhm\n".into()),
                Block::Text("Sure.".into()),
                Block::Call {
                    id: "call_x".into(),
                    name: "w".into(),
                    arguments: "{\"c\": \"P\"}".into()
                },
            ]
        );
        // Every block opens once and closes once, in order.
        let opens: Vec<usize> = events
            .iter()
            .filter_map(|e| match e {
                BlockEvent::Open(i) => Some(*i),
                _ => None,
            })
            .collect();
        let closes: Vec<usize> = events
            .iter()
            .filter_map(|e| match e {
                BlockEvent::Close(i) => Some(*i),
                _ => None,
            })
            .collect();
        assert_eq!(opens, vec![0, 1, 2]);
        assert_eq!(closes, vec![0, 1, 2]);
        let mut piecewise = blocks();
        let chars: Vec<char> = text.chars().collect();
        let mut rebuilt: Vec<String> = Vec::new();
        for (i, c) in chars.iter().enumerate() {
            for e in piecewise.push(&c.to_string(), i + 1 == chars.len()) {
                match e {
                    BlockEvent::Open(_) => rebuilt.push(String::new()),
                    BlockEvent::Delta(at, d) => rebuilt[at].push_str(&d),
                    BlockEvent::Close(_) => {}
                }
            }
        }
        assert_eq!(piecewise.blocks, whole.blocks);
        assert_eq!(rebuilt, vec!["\nhm\n", "Sure.", "{\"c\": \"P\"}"]);
    }
}
