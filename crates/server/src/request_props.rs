//! The request parsers under arbitrary JSON (proptest, the bounded stand-in for a fuzz target): a
//! chat or completion body through
//! [`request_check`](crate::request_check)'s steps either parses or is a 400 naming a field —
//! never a panic, never another status. `PROPTEST_CASES` sets the length (`.ci/run` runs the
//! default 256 per property).

use proptest::prelude::*;
use serde_json::{json, Map, Value};

use crate::error::ApiError;
use crate::request_check::{parse, parse_value, Endpoint};

/// The fields the handlers read, so that generated bodies hit them often.
const FIELDS: &[&str] = &[
    "messages",
    "prompt",
    "tools",
    "tool_choice",
    "parallel_tool_calls",
    "temperature",
    "top_p",
    "top_k",
    "min_p",
    "presence_penalty",
    "frequency_penalty",
    "repeat_penalty",
    "repetition_penalty",
    "seed",
    "logit_bias",
    "stop",
    "stream",
    "stream_options",
    "max_tokens",
    "max_completion_tokens",
    "n",
    "best_of",
    "logprobs",
    "top_logprobs",
    "response_format",
    "json_schema",
    "guided_json",
    "guided_regex",
    "grammar",
    "guided_grammar",
    "guided_choice",
    "chat_template_kwargs",
    "functions",
    "function_call",
    "echo",
    "suffix",
    "role",
    "content",
    "type",
    "text",
    "function",
    "name",
    "arguments",
    "tool_calls",
    "tool_call_id",
    "reasoning_content",
    "include_usage",
    "schema",
    "properties",
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
        proptest::sample::select(
            &[
                "user",
                "assistant",
                "system",
                "tool",
                "developer",
                "text",
                "json_object",
                "json_schema",
                "function",
                "required",
                "none",
                "auto",
                "x",
                "{}",
                "[1,2]",
                "{\"type\":\"object\"}",
                "a+",
                "(",
                "root ::= \"a\"",
                "start: \"a\"",
                "((a{1,9}){1,9})",
                "-100",
                "49151",
                "1e400",
                "<|im_end|>",
                "<tool_call>",
            ][..]
        )
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
        prop_assert!(
            body["error"]["param"].is_string(),
            "{}: no param: {}",
            step,
            body
        );
    }
    Ok(())
}

proptest! {
    #[test]
    fn chat_bodies_parse_or_are_400s(body in body(), renders_tools in any::<bool>()) {
        check("chat", parse_value(Endpoint::Chat { renders_tools }, &body))?;
    }

    #[test]
    fn completion_bodies_parse_or_are_400s(body in body()) {
        check("completion", parse_value(Endpoint::Completion, &body))?;
    }
}

/// Valid bodies of both endpoints, to be mutated byte by byte as a fuzzer would.
const SEEDS: &[&str] = &[
    r#"{"messages":[{"role":"user","content":"hi"}],"max_tokens":8,"temperature":0.7,"stop":["\n"],"logit_bias":{"1":-100},"stream":true,"stream_options":{"include_usage":true}}"#,
    r#"{"messages":[{"role":"system","content":"s"},{"role":"user","content":[{"type":"text","text":"x"}]},{"role":"assistant","content":null,"tool_calls":[{"id":"c","type":"function","function":{"name":"f","arguments":"{\"a\":1}"}}]},{"role":"tool","tool_call_id":"c","content":"r"}],"tools":[{"type":"function","function":{"name":"f","parameters":{"type":"object","properties":{"a":{"type":"integer"}}}}}],"tool_choice":"required"}"#,
    r#"{"prompt":"a","max_tokens":4,"logprobs":2,"guided_regex":"[a-z]+","seed":3}"#,
    r#"{"prompt":[1,2,3],"response_format":{"type":"json_schema","json_schema":{"name":"x","schema":{"type":"object"}}}}"#,
];

/// A seed with bytes replaced, inserted and removed.
fn mutated() -> impl Strategy<Value = Vec<u8>> {
    (
        proptest::sample::select(SEEDS),
        proptest::collection::vec((any::<prop::sample::Index>(), 0u8..3, any::<u8>()), 1..8),
    )
        .prop_map(|(seed, edits)| {
            let mut bytes = seed.as_bytes().to_vec();
            for (at, kind, byte) in edits {
                let i = at.index(bytes.len() + 1);
                match kind {
                    0 if i < bytes.len() => bytes[i] = byte,
                    1 => bytes.insert(i, byte),
                    _ if i < bytes.len() => {
                        bytes.remove(i);
                    }
                    _ => {}
                }
            }
            bytes
        })
}

proptest! {
    #[test]
    fn mutated_bodies_parse_or_are_400s(bytes in mutated(), renders_tools in any::<bool>()) {
        check("chat", parse(Endpoint::Chat { renders_tools }, &bytes))?;
        check("completion", parse(Endpoint::Completion, &bytes))?;
    }
}
