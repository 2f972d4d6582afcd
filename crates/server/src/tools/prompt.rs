//! The tools as the prompt states them. A template that renders a `tools` list gets the
//! messages with call arguments as objects; for one that does not, the server writes the tools
//! into the system message and earlier calls and results into the turns, in the Hermes format
//! the model answers in.

use serde_json::{json, Map, Value};

use super::ToolRequest;
use crate::error::ApiError;

/// The messages as a template sees them. Tool-call `arguments` strings become objects (templates
/// write them with `tojson`). For a template that does not render tools (`renders_tools` false),
/// the tool declarations go into the system message in the Hermes format the output parser
/// reads, earlier calls become `<tool_call>` text of their assistant turn, and tool results
/// become user turns wrapped in `<tool_response>`.
pub fn prepare_messages(
    mut messages: Vec<Value>,
    tools: Option<&ToolRequest>,
    renders_tools: bool,
) -> Result<Vec<Value>, ApiError> {
    parse_call_arguments(&mut messages)?;
    if renders_tools {
        return Ok(messages);
    }
    for m in &mut messages {
        let Some(obj) = m.as_object_mut() else {
            continue;
        };
        match obj.get("role").and_then(Value::as_str) {
            Some("assistant") => {
                if let Some(Value::Array(calls)) = obj.remove("tool_calls") {
                    let mut text = obj
                        .get("content")
                        .and_then(Value::as_str)
                        .unwrap_or_default()
                        .to_owned();
                    for call in &calls {
                        let function = call.get("function").unwrap_or(call);
                        let body = json!({
                            "name": function.get("name").cloned().unwrap_or(Value::Null),
                            "arguments": function.get("arguments").cloned().unwrap_or(json!({})),
                        });
                        if !text.is_empty() {
                            text.push('\n');
                        }
                        text.push_str(&format!("<tool_call>\n{body}\n</tool_call>"));
                    }
                    obj.insert("content".into(), Value::String(text));
                }
            }
            Some("tool") => {
                let content = obj
                    .get("content")
                    .and_then(Value::as_str)
                    .unwrap_or_default();
                let wrapped = format!("<tool_response>\n{content}\n</tool_response>");
                obj.insert("role".into(), Value::String("user".into()));
                obj.insert("content".into(), Value::String(wrapped));
                obj.remove("tool_call_id");
            }
            _ => {}
        }
    }
    if let Some(t) = tools {
        let block = tools_system_text(&t.tools);
        match messages.first_mut().and_then(Value::as_object_mut) {
            Some(first) if first.get("role").and_then(Value::as_str) == Some("system") => {
                let prev = first
                    .get("content")
                    .and_then(Value::as_str)
                    .unwrap_or_default();
                let joined = if prev.is_empty() {
                    block
                } else {
                    format!("{prev}\n\n{block}")
                };
                first.insert("content".into(), Value::String(joined));
            }
            _ => messages.insert(0, json!({"role": "system", "content": block})),
        }
    }
    Ok(messages)
}

/// The tool declarations as the system prompt states them to a model whose template has no
/// place for them.
fn tools_system_text(tools: &[Value]) -> String {
    let mut text = String::from(
        "# Tools\n\nYou can call functions to help answer the user. The available functions are \
         listed inside <tools></tools> as JSON:\n<tools>",
    );
    for tool in tools {
        text.push('\n');
        text.push_str(&tool.to_string());
    }
    text.push_str(
        "\n</tools>\n\nTo call a function, answer with one JSON object holding its name and \
         arguments inside <tool_call></tool_call> tags:\n<tool_call>\n{\"name\": <function name>, \
         \"arguments\": <arguments as a JSON object>}\n</tool_call>",
    );
    text
}

/// Checks assistant `tool_calls` in the history and turns their `arguments` strings into objects.
fn parse_call_arguments(messages: &mut [Value]) -> Result<(), ApiError> {
    for (i, m) in messages.iter_mut().enumerate() {
        let Some(calls) = m.get_mut("tool_calls") else {
            continue;
        };
        let calls = match calls {
            Value::Array(calls) => calls,
            _ => {
                return Err(ApiError::invalid(
                    &format!("messages[{i}].tool_calls"),
                    format!("'messages[{i}].tool_calls' must be a list"),
                ))
            }
        };
        for (j, call) in calls.iter_mut().enumerate() {
            let at = format!("messages[{i}].tool_calls[{j}]");
            let function = call
                .get_mut("function")
                .and_then(Value::as_object_mut)
                .ok_or_else(|| {
                    ApiError::invalid(
                        &format!("{at}.function"),
                        format!("'{at}.function' must be an object"),
                    )
                })?;
            if !function.get("name").is_some_and(Value::is_string) {
                return Err(ApiError::invalid(
                    &format!("{at}.function.name"),
                    format!("'{at}.function.name' must be a string"),
                ));
            }
            let arguments = match function.get("arguments") {
                None | Some(Value::Null) => Value::Object(Map::new()),
                Some(Value::String(s)) => serde_json::from_str::<Value>(s)
                    .ok()
                    .filter(Value::is_object)
                    .ok_or_else(|| {
                        ApiError::invalid(
                            &format!("{at}.function.arguments"),
                            format!("'{at}.function.arguments' must be a JSON object in a string"),
                        )
                    })?,
                Some(v @ Value::Object(_)) => v.clone(),
                Some(_) => {
                    return Err(ApiError::invalid(
                        &format!("{at}.function.arguments"),
                        format!("'{at}.function.arguments' must be a JSON object in a string"),
                    ))
                }
            };
            function.insert("arguments".into(), arguments);
        }
    }
    Ok(())
}
