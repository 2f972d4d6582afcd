//! The request parsers under arbitrary JSON (proptest, the bounded stand-in for a fuzz target):
//! a chat or completion body → the job's parts, through the same steps the handlers take before
//! the model is involved (`tools`, the constraint fields, the messages and their tool calls,
//! sampling and stopping, log-probabilities). Whatever the body, each step either succeeds or is
//! a 400 naming a field — never a panic, never another status. `PROPTEST_CASES` sets the length
//! (`.ci/run` runs the default 256 per property); failures found are kept as regression cases
//! below.

use proptest::prelude::*;
use serde_json::{json, Map, Value};

use crate::api::{self, Fields};
use crate::error::ApiError;
use crate::tools::{self, ThinkStart};

/// The fields the handlers read, so that generated bodies hit them often.
const FIELDS: &[&str] = &[
    "messages", "prompt", "tools", "tool_choice", "parallel_tool_calls", "temperature", "top_p",
    "top_k", "min_p", "presence_penalty", "frequency_penalty", "repeat_penalty",
    "repetition_penalty", "seed", "logit_bias", "stop", "stream", "stream_options",
    "max_tokens", "max_completion_tokens", "n", "best_of", "logprobs", "top_logprobs",
    "response_format", "json_schema", "guided_json", "guided_regex", "grammar",
    "guided_grammar", "guided_choice", "chat_template_kwargs", "functions", "function_call",
    "echo", "suffix", "role", "content", "type", "text", "function", "name", "arguments",
    "tool_calls", "tool_call_id", "reasoning_content", "include_usage", "schema", "properties",
];

fn key() -> impl Strategy<Value = String> {
    prop_oneof![
        3 => proptest::sample::select(FIELDS).prop_map(str::to_owned),
        1 => "\\PC{0,8}",
    ]
}

fn leaf() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(|n| json!(n)),
        (-3i64..300).prop_map(|n| json!(n)),
        any::<f64>().prop_map(|x| json!(x)),
        (-5.0f64..5.0).prop_map(|x| json!(x)),
        any::<u64>().prop_map(|n| json!(n)),
        "\\PC{0,16}".prop_map(Value::String),
        proptest::sample::select(&[
            "user", "assistant", "system", "tool", "developer", "text", "json_object",
            "json_schema", "function", "required", "none", "auto", "x", "{}", "[1,2]",
            "{\"type\":\"object\"}", "a+", "(", "root ::= \"a\"", "start: \"a\"", "((a{1,9}){1,9})",
            "-100", "49151", "1e400", "<|im_end|>", "<tool_call>",
        ][..])
        .prop_map(|s| Value::String(s.to_owned())),
    ]
}

fn value() -> impl Strategy<Value = Value> {
    leaf().prop_recursive(4, 48, 5, |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..5).prop_map(Value::Array),
            proptest::collection::vec((key(), inner), 0..6)
                .prop_map(|pairs| Value::Object(pairs.into_iter().collect::<Map<_, _>>())),
        ]
    })
}

/// A body: mostly an object of the handlers' fields, sometimes anything at all.
fn body() -> impl Strategy<Value = Value> {
    prop_oneof![
        1 => value(),
        6 => proptest::collection::vec((key(), value()), 0..10)
            .prop_map(|pairs| Value::Object(pairs.into_iter().collect::<Map<_, _>>())),
    ]
}

/// A parser's error must be a 400 naming a field.
fn check(step: &str, result: Result<(), ApiError>) -> Result<(), TestCaseError> {
    if let Err(err) = result {
        let body = err.body();
        prop_assert_eq!(err.status().as_u16(), 400, "{}: {}", step, body);
        prop_assert!(body["error"]["param"].is_string(), "{}: no param: {}", step, body);
    }
    Ok(())
}

/// The chat handler's parsing steps, in its order, up to the template.
fn chat(body: &Value, renders_tools: bool) -> Result<(), ApiError> {
    let f = Fields::new(body)?;
    let tools = tools::tool_request(&f)?;
    api::constraint(&f)?;
    let messages = tools::prepare_messages(api::messages(&f)?, tools.as_ref(), renders_tools)?;
    serde_json::to_string(&messages).map_err(|e| ApiError::invalid("messages", e.to_string()))?;
    api::generation(&f, &["max_completion_tokens", "max_tokens"], 1000)?;
    api::chat_logprobs(&f)?;
    if let Some(t) = &tools {
        for think in [ThinkStart::None, ThinkStart::Inside, ThinkStart::Optional] {
            tools::forced_call_grammar(t, think);
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

proptest! {
    #[test]
    fn chat_bodies_parse_or_are_400s(body in body(), renders_tools in any::<bool>()) {
        check("chat", chat(&body, renders_tools))?;
    }

    #[test]
    fn completion_bodies_parse_or_are_400s(body in body()) {
        check("completion", completion(&body))?;
    }
}

/// Bodies the properties found wrong once, kept as cases.
#[test]
fn regressions() {
    let cases = [
        json!({"logit_bias": {"0": -100}}),
        json!({"messages": [{"role": "assistant", "tool_calls": [{"function": {"arguments": "{"}}]}]}),
    ];
    for body in &cases {
        check("chat", chat(body, false)).unwrap();
        check("chat", chat(body, true)).unwrap();
        check("completion", completion(body)).unwrap();
    }
}
