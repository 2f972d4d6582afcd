//! The conversation handed to a chat template, and the one conversion a server must make first.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::TemplateError;

/// What a template renders: the shape of the golden `NAME.json` requests. Messages stay JSON as
/// given (content may be a string, null, absent or a list of parts; `reasoning_content`,
/// `tool_calls`, `tool_call_id`, `name` pass through), so templates see exactly what
/// transformers would hand them.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ChatRequest {
    pub messages: Vec<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tools: Option<Vec<Value>>,
    #[serde(default)]
    pub add_generation_prompt: bool,
    /// Further template variables, e.g. `enable_thinking`.
    #[serde(default, skip_serializing_if = "Map::is_empty")]
    pub extra_kwargs: Map<String, Value>,
}

impl ChatRequest {
    /// Parses every tool call's `arguments` string into the object templates expect; see
    /// [`parse_tool_call_arguments`].
    pub fn parse_tool_call_arguments(&mut self) -> Result<(), TemplateError> {
        parse_in_messages(&mut self.messages)
    }
}

/// The OpenAI API sends a tool call's `arguments` as a string holding JSON, while chat templates
/// expect an object (Qwen3's writes `arguments | tojson`; given a string it would print it
/// as-is and the model would see a differently spaced object than it was trained on). This
/// replaces each such string in `request["messages"]` by the object it holds, both in the OpenAI
/// shape (`tool_calls[j].function.arguments`) and the flat one (`tool_calls[j].arguments`).
/// A string that is not a JSON object is an error naming the message and tool call.
pub fn parse_tool_call_arguments(request: &mut Value) -> Result<(), TemplateError> {
    let Some(messages) = request.get_mut("messages") else {
        return Err(bad("messages", "missing"));
    };
    match messages {
        Value::Array(messages) => parse_in_messages(messages),
        other => Err(bad(
            "messages",
            format!("expected an array, found {}", json_kind(other)),
        )),
    }
}

fn parse_in_messages(messages: &mut [Value]) -> Result<(), TemplateError> {
    for (m, message) in messages.iter_mut().enumerate() {
        let Some(tool_calls) = message.get_mut("tool_calls") else {
            continue;
        };
        let tool_calls = match tool_calls {
            Value::Null => continue,
            Value::Array(calls) => calls,
            other => {
                return Err(bad(
                    format!("messages[{m}].tool_calls"),
                    format!("expected an array, found {}", json_kind(other)),
                ))
            }
        };
        for (t, call) in tool_calls.iter_mut().enumerate() {
            let (arguments, location) = match call.get_mut("function") {
                Some(function @ Value::Object(_)) => (
                    function.get_mut("arguments"),
                    format!("messages[{m}].tool_calls[{t}].function.arguments"),
                ),
                _ => (
                    call.get_mut("arguments"),
                    format!("messages[{m}].tool_calls[{t}].arguments"),
                ),
            };
            let Some(arguments) = arguments else {
                continue;
            };
            if let Value::String(text) = arguments {
                let parsed: Value = serde_json::from_str(text)
                    .map_err(|e| bad(&location, format!("not valid JSON: {e}")))?;
                if !parsed.is_object() {
                    return Err(bad(
                        &location,
                        format!("expected a JSON object, found {}", json_kind(&parsed)),
                    ));
                }
                *arguments = parsed;
            }
        }
    }
    Ok(())
}

fn bad(location: impl Into<String>, problem: impl Into<String>) -> TemplateError {
    TemplateError::BadRequest {
        location: location.into(),
        problem: problem.into(),
    }
}

fn json_kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}
