//! Tool calling, the request side: the `tools` / `tool_choice` / `parallel_tool_calls` fields, the
//! prompt (the model's own template when it renders tools, otherwise the same Hermes-style block
//! in a system message), and the constraint that enforces `tool_choice: "required"` or a named
//! function. The model answers a call as `<tool_call>{"name": …, "arguments": {…}}</tool_call>`
//! (Qwen2.5 / Qwen3 / Hermes); [`crate::tool_parse`] reads that back out.

use oxibonsai_engine::Grammar;
use serde_json::{json, Map, Value};

use crate::api::Fields;
use crate::error::ApiError;

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
        let at = format!("tools[{i}]");
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
        names.push(name);
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
    }
    let choice = match f.get("tool_choice") {
        None => Some(ToolChoice::Auto),
        Some(Value::String(s)) => match s.as_str() {
            "none" => None,
            "auto" => Some(ToolChoice::Auto),
            "required" => Some(ToolChoice::Required),
            other => {
                return Err(ApiError::invalid(
                    "tool_choice",
                    format!(
                        "'tool_choice' must be none, auto, required or a function, got '{other}'"
                    ),
                ))
            }
        },
        Some(Value::Object(o)) => {
            // `{"type": "function", "function": {"name": N}}`, or the flat `{"type": "function", "name": N}`.
            let name = o
                .get("function")
                .and_then(|f| f.get("name"))
                .or_else(|| o.get("name"))
                .and_then(Value::as_str);
            match (o.get("type").and_then(Value::as_str), name) {
                (Some("function"), Some(name)) => {
                    if !names.contains(&name) {
                        return Err(ApiError::invalid(
                            "tool_choice",
                            format!("'tool_choice' names the function '{name}', which is not in 'tools'"),
                        ));
                    }
                    Some(ToolChoice::Named(name.to_owned()))
                }
                _ => {
                    return Err(ApiError::invalid(
                        "tool_choice",
                        "'tool_choice' must be none, auto, required or {\"type\": \"function\", \"function\": {\"name\": …}}",
                    ))
                }
            }
        }
        Some(v) => {
            return Err(ApiError::invalid(
                "tool_choice",
                format!("'tool_choice' must be a string or an object, got {v}"),
            ))
        }
    };
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

/// OpenAI's rule for function names.
fn valid_name(name: &str) -> bool {
    (1..=64).contains(&name.len())
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'))
}

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

/// Where the generation starts relative to a `<think>` block, read off the rendered prompt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ThinkStart {
    /// The model has no `<think>` tags, or the prompt closed an (empty) block already.
    None,
    /// The model may open a block first.
    Optional,
    /// The prompt opened the block: the output starts inside it.
    Inside,
}

/// The grammar of an answer that must call tools (`required` / a named function): an optional
/// reasoning block as the prompt allows, then one call (or, with `parallel`, one or more), each
/// `<tool_call>` + a JSON object `{"name": <declared name>, "arguments": <its parameters>}` +
/// `</tool_call>`, and nothing after.
pub fn forced_call_grammar(t: &ToolRequest, think: ThinkStart) -> Option<Grammar> {
    let allowed: Vec<&Value> = match &t.choice {
        ToolChoice::Auto => return None,
        ToolChoice::Required => t.tools.iter().collect(),
        ToolChoice::Named(name) => t
            .tools
            .iter()
            .filter(|tool| function_name(tool) == Some(name.as_str()))
            .collect(),
    };
    let mut defs = Map::new();
    let variants: Vec<Value> = allowed
        .iter()
        .enumerate()
        .map(|(i, tool)| {
            let name = function_name(tool).unwrap_or_default();
            let mut params = tool
                .get("function")
                .and_then(|f| f.get("parameters"))
                .filter(|p| p.is_object())
                .cloned()
                .unwrap_or_else(|| json!({"type": "object"}));
            hoist_definitions(&mut params, &format!("tool{i}_"), &mut defs);
            json!({
                "type": "object",
                "properties": {"name": {"const": name}, "arguments": params},
                "required": ["name", "arguments"],
                "additionalProperties": false,
            })
        })
        .collect();
    let mut schema = json!({"anyOf": variants});
    if !defs.is_empty() {
        schema["$defs"] = Value::Object(defs);
    }
    schema["x-guidance"] =
        json!({"whitespace_pattern": oxibonsai_engine::constraint::JSON_WHITESPACE});
    let calls = if t.parallel && t.choice == ToolChoice::Required {
        "call (NL? call)*"
    } else {
        "call"
    };
    let start = match think {
        ThinkStart::None => format!("start: NL? {calls} NL?"),
        ThinkStart::Optional => format!("start: (THINK NL?)? NL? {calls} NL?"),
        ThinkStart::Inside => format!("start: THINK_REST NL? {calls} NL?"),
    };
    Some(Grammar::Lark(format!(
        "{start}\n\
         call: \"<tool_call>\" NL? %json {schema} NL? \"</tool_call>\"\n\
         NL: /[ \\n]{{1,3}}/\n\
         THINK: \"<think>\" THINK_BODY \"</think>\"\n\
         THINK_REST: THINK_BODY \"</think>\"\n\
         THINK_BODY: /(?s:.*)/ & ~/(?s:.*)<\\/think>(?s:.*)/\n"
    )))
}

/// Moves a parameters schema's `$defs` / `definitions` to the root of the call schema under
/// `prefix`-ed names and rewrites its `$ref`s to match, so references still resolve once the
/// schema is nested inside the call object.
fn hoist_definitions(schema: &mut Value, prefix: &str, defs: &mut Map<String, Value>) {
    let Some(obj) = schema.as_object_mut() else {
        return;
    };
    let mut moved = Vec::new();
    for key in ["$defs", "definitions"] {
        if let Some(Value::Object(d)) = obj.remove(key) {
            moved.push((key, d));
        }
    }
    rewrite_refs(schema, prefix);
    for (_, d) in moved {
        for (name, mut def) in d {
            rewrite_refs(&mut def, prefix);
            defs.insert(format!("{prefix}{name}"), def);
        }
    }
}

fn rewrite_refs(v: &mut Value, prefix: &str) {
    match v {
        Value::Object(map) => {
            for (key, value) in map.iter_mut() {
                if key == "$ref" {
                    if let Value::String(r) = value {
                        for root in ["#/$defs/", "#/definitions/"] {
                            if let Some(name) = r.strip_prefix(root) {
                                *r = format!("#/$defs/{prefix}{name}");
                                break;
                            }
                        }
                        if r == "#" {
                            // A recursive reference to the parameters themselves cannot be kept.
                            *value = json!({"type": "object"});
                        }
                    }
                } else {
                    rewrite_refs(value, prefix);
                }
            }
        }
        Value::Array(items) => items.iter_mut().for_each(|i| rewrite_refs(i, prefix)),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn definitions_move_to_the_root_and_references_follow() {
        let mut params = json!({
            "type": "object",
            "properties": {"p": {"$ref": "#/$defs/Point"}, "q": {"$ref": "#/definitions/Q"}},
            "$defs": {"Point": {"type": "object", "properties": {"next": {"$ref": "#/$defs/Point"}}}},
            "definitions": {"Q": {"type": "integer"}},
        });
        let mut defs = Map::new();
        hoist_definitions(&mut params, "tool3_", &mut defs);
        assert_eq!(params["properties"]["p"]["$ref"], "#/$defs/tool3_Point");
        assert_eq!(params["properties"]["q"]["$ref"], "#/$defs/tool3_Q");
        assert!(params.get("$defs").is_none() && params.get("definitions").is_none());
        assert_eq!(
            defs["tool3_Point"]["properties"]["next"]["$ref"],
            "#/$defs/tool3_Point"
        );
        assert_eq!(defs["tool3_Q"], json!({"type": "integer"}));
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

/// The forcing grammar against the full Qwen3 vocabulary (where `<tool_call>` is one token),
/// with random logits standing in for a model: whatever is sampled, the answer parses into calls
/// to declared tools whose arguments validate against their schemas. Also prints the mask's cost
/// per token (never asserted).
#[cfg(test)]
mod grammar_tests {
    use std::sync::Arc;
    use std::time::{Duration, Instant};

    use oxibonsai_engine::sampling::{Sampler, SamplingParams};
    use oxibonsai_engine::{Constraint, ConstraintVocab};
    use oxibonsai_gguf::GgufFile;
    use oxibonsai_tokenizer::Tokenizer;
    use serde_json::{json, Value};

    use super::*;
    use crate::tool_parse::{ToolCallParser, ToolEvent};

    fn tools() -> Vec<Value> {
        vec![
            json!({"type": "function", "function": {"name": "get_weather", "parameters": {
                "type": "object", "properties": {
                    "city": {"type": "string", "maxLength": 12},
                    "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
                "required": ["city", "unit"], "additionalProperties": false}}}),
            json!({"type": "function", "function": {"name": "plot", "parameters": {
                "type": "object", "$defs": {"P": {"type": "object", "properties": {
                    "x": {"type": "integer", "minimum": -9, "maximum": 9}},
                    "required": ["x"], "additionalProperties": false}},
                "properties": {"points": {"type": "array", "items": {"$ref": "#/$defs/P"},
                    "minItems": 1, "maxItems": 3}},
                "required": ["points"], "additionalProperties": false}}}),
            json!({"type": "function", "function": {"name": "now"}}),
        ]
    }

    #[test]
    fn forced_calls_are_valid_whatever_is_sampled() {
        let file = GgufFile::open(oxibonsai_testkit::golden(
            "tokenizer/qwen3/qwen3-vocab.gguf",
        ))
        .expect("the Qwen3 vocabulary");
        let tokenizer = Arc::new(Tokenizer::from_gguf(&file).expect("tokenizer"));
        let vocab = ConstraintVocab::new(Arc::clone(&tokenizer)).expect("vocabulary");
        let n_vocab = tokenizer.vocab_size();
        let tool_call = tokenizer
            .token_id("<tool_call>")
            .expect("<tool_call> is a token");
        let mut logits = vec![0.0f32; n_vocab];
        let mut times: Vec<Duration> = Vec::new();
        let mut state = 0x9e37_79b9_7f4a_7c15u64;
        let mut single_token_opens = 0;
        for (case, (choice, parallel, think)) in [
            (ToolChoice::Required, false, ThinkStart::None),
            (ToolChoice::Required, true, ThinkStart::None),
            (ToolChoice::Named("plot".into()), true, ThinkStart::None),
            (ToolChoice::Required, false, ThinkStart::Inside),
        ]
        .into_iter()
        .enumerate()
        {
            let request = ToolRequest {
                tools: tools(),
                choice: choice.clone(),
                parallel,
            };
            let grammar = forced_call_grammar(&request, think).expect("a grammar");
            for seed in 0..3u64 {
                let mut constraint = Constraint::new(&vocab, &grammar).expect("compiles");
                let params = SamplingParams {
                    temperature: 1.0,
                    seed: Some(seed),
                    ..SamplingParams::default()
                };
                let mut sampler = Sampler::new(params, n_vocab).expect("sampler");
                let mut tokens = Vec::new();
                let mut ended = false;
                for step in 0..600 {
                    for l in logits.iter_mut() {
                        state ^= state << 13;
                        state ^= state >> 7;
                        state ^= state << 17;
                        *l = (state >> 40) as f32 / (1u64 << 24) as f32 * 10.0 - 5.0;
                    }
                    // A model that knows the format prefers `<tool_call>` as one token, and a
                    // thinking model closes its block soon.
                    let between_calls = tokens.last().is_none_or(|&last| {
                        let piece = tokenizer.token_to_piece(last, false).unwrap_or_default();
                        let piece = String::from_utf8_lossy(piece);
                        piece.contains("</tool_call>") || piece.trim().is_empty()
                    });
                    if between_calls {
                        logits[tool_call as usize] += 12.0;
                    }
                    if step > 20 && think == ThinkStart::Inside {
                        if let Some(end) = tokenizer.token_id("</think>") {
                            logits[end as usize] += 12.0;
                        }
                    }
                    // With parallel calls allowed, a model stops calling by choosing to end.
                    if step > 150 {
                        for &eog in tokenizer.eog_ids() {
                            logits[eog as usize] += 12.0;
                        }
                    }
                    let t = Instant::now();
                    constraint.mask(&mut logits).expect("mask");
                    times.push(t.elapsed());
                    let token = sampler.sample(&logits).expect("sample");
                    if tokenizer.is_eog(token) {
                        ended = true;
                        break;
                    }
                    constraint.accept(token).expect("accept");
                    tokens.push(token);
                }
                let text = tokenizer.decode(&tokens, false).expect("decode");
                let what = format!("case {case}, seed {seed}: {text:?}");
                assert!(ended, "no end in 600 tokens: {what}");
                single_token_opens += tokens.iter().filter(|&&t| t == tool_call).count();
                let content = if think == ThinkStart::Inside {
                    let end = text.find("</think>").expect("the block closes");
                    &text[end + "</think>".len()..]
                } else {
                    &text[..]
                };
                let mut parser = ToolCallParser::new(true);
                let mut events = parser.push(content);
                events.extend(parser.finish());
                let mut calls: Vec<(String, String)> = Vec::new();
                for e in events {
                    match e {
                        ToolEvent::Content(c) => panic!("text {c:?} outside calls: {what}"),
                        ToolEvent::CallStart { name, .. } => calls.push((name, String::new())),
                        ToolEvent::Arguments { index, fragment } => {
                            calls[index].1.push_str(&fragment)
                        }
                    }
                }
                assert!(!calls.is_empty(), "no call: {what}");
                if !parallel || matches!(choice, ToolChoice::Named(_)) {
                    assert_eq!(calls.len(), 1, "{what}");
                }
                for (name, arguments) in calls {
                    if let ToolChoice::Named(n) = &choice {
                        assert_eq!(&name, n, "{what}");
                    }
                    let tool = tools()
                        .into_iter()
                        .find(|t| function_name(t) == Some(name.as_str()))
                        .unwrap_or_else(|| panic!("undeclared tool {name}: {what}"));
                    let schema = tool["function"]
                        .get("parameters")
                        .cloned()
                        .unwrap_or(json!({"type": "object"}));
                    let args: Value = serde_json::from_str(&arguments)
                        .unwrap_or_else(|e| panic!("arguments {arguments:?}: {e}: {what}"));
                    let validator = jsonschema::validator_for(&schema).expect("schema");
                    assert!(validator.is_valid(&args), "{args} invalid: {what}");
                }
            }
        }
        assert!(
            single_token_opens > 0,
            "the one-token <tool_call> was never allowed"
        );
        times.sort_unstable();
        println!(
            "tool-call grammar mask on {n_vocab} tokens: median {:?}, p95 {:?}, max {:?} over {} steps",
            times[times.len() / 2],
            times[times.len() * 95 / 100],
            times[times.len() - 1],
            times.len()
        );
    }
}
