//! Tool calling. The request side is here: the `tools` / `tool_choice` / `parallel_tool_calls`
//! fields. [`prompt`] states the tools to the model (its own template when it renders tools,
//! otherwise the same Hermes-style block in a system message); [`grammar`] is the constraint that
//! enforces `tool_choice: "required"` or a named function. The model answers a call inside
//! `<tool_call>…</tool_call>` in its template's [`ToolCallFormat`]: `{"name": …, "arguments":
//! {…}}` (Qwen2.5 / Qwen3 / Hermes) or `<function=…><parameter=…>` (Qwen3-Coder / Qwen3.5);
//! [`parse`] reads either back out.

mod grammar;
pub mod parse;
mod prompt;

use serde_json::Value;

use crate::api::Fields;
use crate::error::ApiError;
pub use grammar::{forced_call_grammar, ThinkStart};
use parse::{ParameterKinds, ToolCallParser, ToolCallStyle};
pub use prompt::prepare_messages;

/// How a model writes a tool call, read off its chat template as llama.cpp does
/// (`common/chat.cpp`: a template holding `<tool_call>`, `<function=` and `<parameter=`, with line
/// breaks between the tags, gets the Qwen3-Coder XML parser).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ToolCallFormat {
    /// `<tool_call>\n{"name": …, "arguments": {…}}\n</tool_call>`.
    Json,
    /// `<tool_call>\n<function=NAME>\n<parameter=ARG>\nVALUE\n</parameter>\n</function>\n</tool_call>`.
    Xml,
}

impl ToolCallFormat {
    pub fn of_template(source: &str) -> ToolCallFormat {
        let xml = source.contains("<tool_call>")
            && source.contains("<function=")
            && source.contains("<parameter=")
            // A variant without line breaks between the tags, which llama.cpp leaves alone.
            && !source.contains("'<tool_call><function=' ~ tool_call.name ~ '>'");
        if xml {
            ToolCallFormat::Xml
        } else {
            ToolCallFormat::Json
        }
    }
}

/// `tool_choice`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ToolChoice {
    /// The model may answer in text or call tools (parsed from its output).
    Auto,
    /// At least one call, to any declared tool: enforced by the grammar.
    Required,
    /// Exactly one call to this function: enforced by the grammar.
    Named(String),
}

/// The tools of a request that may call them (`tool_choice: "none"` or no tools → `None`).
#[derive(Debug, Clone)]
pub struct ToolRequest {
    /// The tools as the client sent them (`{"type": "function", "function": {…}}`).
    pub tools: Vec<Value>,
    pub choice: ToolChoice,
    /// `parallel_tool_calls` (default true): more than one call per answer.
    pub parallel: bool,
}

impl ToolRequest {
    /// The parser of the model's answer to this request.
    pub fn parser(&self, format: ToolCallFormat) -> ToolCallParser {
        let style = match format {
            ToolCallFormat::Json => ToolCallStyle::Json,
            ToolCallFormat::Xml => ToolCallStyle::Xml(ParameterKinds::of_tools(&self.tools)),
        };
        ToolCallParser::new(style, self.parallel)
    }
}

fn function_name(tool: &Value) -> Option<&str> {
    tool.get("function")?.get("name")?.as_str()
}

/// Reads and validates `tools`, `tool_choice` and `parallel_tool_calls`. The legacy
/// `functions` / `function_call` fields are refused with a 400 naming them.
pub fn tool_request(f: &Fields<'_>) -> Result<Option<ToolRequest>, ApiError> {
    for legacy in ["functions", "function_call"] {
        if f.get(legacy).is_some() {
            return Err(ApiError::unsupported(
                legacy,
                "the legacy function-calling field (use 'tools' and 'tool_choice')",
            ));
        }
    }
    let tools = match f.get("tools") {
        None => Vec::new(),
        Some(Value::Array(list)) => list.clone(),
        Some(_) => return Err(ApiError::invalid("tools", "'tools' must be a list")),
    };
    let mut names: Vec<&str> = Vec::with_capacity(tools.len());
    for (i, tool) in tools.iter().enumerate() {
        let name = check_tool(&format!("tools[{i}]"), tool, &names)?;
        names.push(name);
    }
    let choice = tool_choice(f, &names)?;
    let parallel = f.bool("parallel_tool_calls")?.unwrap_or(true);
    let Some(choice) = choice else {
        return Ok(None);
    };
    if tools.is_empty() {
        return match choice {
            ToolChoice::Auto => Ok(None),
            _ => Err(ApiError::invalid(
                "tool_choice",
                "'tool_choice' asks for a tool call but 'tools' is empty",
            )),
        };
    }
    Ok(Some(ToolRequest {
        tools,
        choice,
        parallel,
    }))
}

/// Checks the declared tool at `at` (a function with a valid name not in `names`, parameters
/// that are a schema, a string description); returns its name.
fn check_tool<'v>(at: &str, tool: &'v Value, names: &[&str]) -> Result<&'v str, ApiError> {
    match tool.get("type").and_then(Value::as_str) {
        Some("function") => {}
        Some(other) => {
            return Err(ApiError::unsupported(
                &format!("{at}.type"),
                &format!("tool type '{other}'"),
            ))
        }
        None => {
            return Err(ApiError::invalid(
                &format!("{at}.type"),
                format!("'{at}.type' is required and must be 'function'"),
            ))
        }
    }
    let function = tool
        .get("function")
        .filter(|f| f.is_object())
        .ok_or_else(|| {
            ApiError::invalid(
                &format!("{at}.function"),
                format!("'{at}.function' must be an object"),
            )
        })?;
    let name = function_name(tool)
        .filter(|n| valid_name(n))
        .ok_or_else(|| {
            ApiError::invalid(
                &format!("{at}.function.name"),
                format!(
                    "'{at}.function.name' must be 1 to 64 letters, digits, '_', '-' or '.', got {}",
                    function.get("name").unwrap_or(&Value::Null)
                ),
            )
        })?;
    if names.contains(&name) {
        return Err(ApiError::invalid(
            &format!("{at}.function.name"),
            format!("the tool name '{name}' is declared twice"),
        ));
    }
    match function.get("parameters") {
        None | Some(Value::Null) | Some(Value::Object(_)) => {}
        Some(_) => {
            return Err(ApiError::invalid(
                &format!("{at}.function.parameters"),
                format!("'{at}.function.parameters' must be a JSON schema object"),
            ))
        }
    }
    if function
        .get("description")
        .is_some_and(|d| !d.is_null() && !d.is_string())
    {
        return Err(ApiError::invalid(
            &format!("{at}.function.description"),
            format!("'{at}.function.description' must be a string"),
        ));
    }
    Ok(name)
}

/// `tool_choice`, whose function (if it names one) must be among the declared `names`;
/// `"none"` → `None`.
fn tool_choice(f: &Fields<'_>, names: &[&str]) -> Result<Option<ToolChoice>, ApiError> {
    match f.get("tool_choice") {
        None => Ok(Some(ToolChoice::Auto)),
        Some(Value::String(s)) => match s.as_str() {
            "none" => Ok(None),
            "auto" => Ok(Some(ToolChoice::Auto)),
            "required" => Ok(Some(ToolChoice::Required)),
            other => Err(ApiError::invalid(
                "tool_choice",
                format!("'tool_choice' must be none, auto, required or a function, got '{other}'"),
            )),
        },
        Some(Value::Object(o)) => {
            // `{"type": "function", "function": {"name": N}}`, or the flat `{"type": "function", "name": N}`.
            let name = o
                .get("function")
                .and_then(|f| f.get("name"))
                .or_else(|| o.get("name"))
                .and_then(Value::as_str);
            match (o.get("type").and_then(Value::as_str), name) {
                (Some("function"), Some(name)) if !names.contains(&name) => Err(ApiError::invalid(
                    "tool_choice",
                    format!("'tool_choice' names the function '{name}', which is not in 'tools'"),
                )),
                (Some("function"), Some(name)) => Ok(Some(ToolChoice::Named(name.to_owned()))),
                _ => Err(ApiError::invalid(
                    "tool_choice",
                    "'tool_choice' must be none, auto, required or {\"type\": \"function\", \"function\": {\"name\": …}}",
                )),
            }
        }
        Some(v) => Err(ApiError::invalid(
            "tool_choice",
            format!("'tool_choice' must be a string or an object, got {v}"),
        )),
    }
}

/// OpenAI's rule for function names.
fn valid_name(name: &str) -> bool {
    (1..=64).contains(&name.len())
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_call_format_is_read_off_the_template() {
        let qwen35 =
            std::fs::read_to_string(oxibonsai_testkit::fixture("chat_template/Qwen3.5-4B.jinja"))
                .expect("the Qwen3.5 template fixture");
        assert_eq!(ToolCallFormat::of_template(&qwen35), ToolCallFormat::Xml);
        let qwen3 = std::fs::read_to_string(oxibonsai_testkit::fixture(
            "chat_template/qwen3/template.jinja",
        ))
        .expect("the Qwen3 template fixture");
        assert_eq!(ToolCallFormat::of_template(&qwen3), ToolCallFormat::Json);
    }

    #[test]
    fn function_names_follow_openai_rules() {
        assert!(valid_name("get_weather"));
        assert!(valid_name("a.b-c_9"));
        assert!(!valid_name(""));
        assert!(!valid_name("has space"));
        assert!(!valid_name(&"x".repeat(65)));
    }
}
