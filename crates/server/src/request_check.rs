//! The request parsers' steps that need no model, in the handlers' order — a chat or completion
//! body → the job's parts (`tools`, the constraint fields, the messages and their tool calls,
//! sampling and stopping, log-probabilities) — for the property tests (`request_props`) and any
//! fuzzer of raw bodies ([`parse`]). Whatever the body, each step either succeeds or is a 400
//! naming a field.

use serde_json::Value;

use crate::api::{self, Fields};
use crate::error::ApiError;
use crate::literal;
use crate::tools::{self, ThinkStart};

/// Which endpoint's body.
#[derive(Debug, Clone, Copy)]
pub enum Endpoint {
    /// `/v1/chat/completions`, for a template that renders `tools` itself or not.
    Chat { renders_tools: bool },
    /// `/v1/completions`.
    Completion,
}

/// The body's bytes through the endpoint's parsing steps.
pub fn parse(endpoint: Endpoint, body: &[u8]) -> Result<(), ApiError> {
    let body: Value = serde_json::from_slice(body).map_err(|e| {
        ApiError::invalid("body", format!("the request body is not valid JSON: {e}"))
    })?;
    parse_value(endpoint, &body)
}

/// [`parse`] of a body already read as JSON.
pub fn parse_value(endpoint: Endpoint, body: &Value) -> Result<(), ApiError> {
    match endpoint {
        Endpoint::Chat { renders_tools } => chat(body, renders_tools),
        Endpoint::Completion => completion(body),
    }
}

/// The chat handler's parsing steps, in its order, up to the template.
fn chat(body: &Value, renders_tools: bool) -> Result<(), ApiError> {
    let f = Fields::new(body)?;
    let tools = tools::tool_request(&f)?;
    api::constraint(&f)?;
    let messages = tools::prepare_messages(api::messages(&f)?, tools.as_ref(), renders_tools)?;
    literal::refuse_marks_in(&messages, "messages")?;
    serde_json::to_string(&messages).map_err(|e| ApiError::invalid("messages", e.to_string()))?;
    api::generation(&f, &["max_completion_tokens", "max_tokens"], 1000)?;
    api::chat_logprobs(&f)?;
    if let Some(t) = &tools {
        for think in [ThinkStart::None, ThinkStart::Inside, ThinkStart::Optional] {
            for format in [tools::ToolCallFormat::Json, tools::ToolCallFormat::Xml] {
                let _ = tools::forced_call_grammar(t, think, format);
            }
        }
    }
    Ok(())
}

/// The completion handler's parsing steps (the prompt's tokens aside).
fn completion(body: &Value) -> Result<(), ApiError> {
    let f = Fields::new(body)?;
    f.bool("echo")?;
    f.string("suffix")?;
    api::generation(&f, &["max_tokens"], 1000)?;
    f.int_in("logprobs", 0, 5)?;
    api::constraint(&f)?;
    Ok(())
}
