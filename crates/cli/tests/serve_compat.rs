//! OpenAI's Responses API (`/v1/responses`) and Anthropic's Messages API (`/v1/messages`,
//! `/v1/messages/count_tokens`) of `oxibonsai serve` with SmolLM2-135M: the official `openai` and
//! `anthropic` Python packages, unchanged (`clients/compat_clients.py`: every answer compared with
//! the chat completion of the same conversation, every stream with the whole answer, a function
//! tool round trip in each API), and the refusals each API gives a bad request, in its own shape,
//! naming the field. `OXIBONSAI_TEST_PYTHON` names the Python with the clients (`.ci/run`
//! creates it); without it the test fails and says so.

mod serve_common;

use std::time::{Duration, Instant};

use serde_json::{json, Value};
use serve_common::{run_python_client, smollm2, Server};

#[test]
fn the_openai_and_anthropic_python_clients_pass_unchanged() {
    let server = Server::start(
        &smollm2(),
        &["--parallel", "1", "--ctx", "4096", "--api-key", "sekret"],
        &[],
    );
    let out = run_python_client("compat_clients.py", &[&server.base, "sekret"], &server);
    assert!(out.contains("all compat checks passed"));
}

/// POSTs `body` and returns the status and the JSON body of the answer.
fn post(server: &Server, path: &str, body: &Value) -> (u16, Value) {
    let (status, response) = server.post(path, &body.to_string());
    let json = response
        .split_once("\r\n\r\n")
        .map(|(_, b)| b)
        .unwrap_or_default();
    let json = serde_json::from_str(json)
        .unwrap_or_else(|e| panic!("POST {path} {body}: not JSON ({e}): {response}"));
    (status, json)
}

/// An Anthropic error: the status, the error's type, and its message.
fn anthropic_error(server: &Server, body: Value) -> (u16, String, String) {
    let (status, answer) = post(server, "/v1/messages", &body);
    assert_eq!(answer["type"], "error", "{answer}");
    let kind = answer["error"]["type"].as_str().unwrap_or_default();
    let message = answer["error"]["message"].as_str().unwrap_or_default();
    (status, kind.to_owned(), message.to_owned())
}

#[test]
fn bad_requests_are_refused_naming_the_field() {
    let server = Server::start(&smollm2(), &["--ctx", "4096"], &[]);
    let deadline = Instant::now() + Duration::from_secs(60);
    while server.get("/health").0 != 200 {
        assert!(Instant::now() < deadline, "never loaded:\n{}", server.log());
        std::thread::sleep(Duration::from_millis(100));
    }
    let hi = json!([{"role": "user", "content": "hi"}]);

    // Messages: Anthropic's shape.
    let (status, kind, message) = anthropic_error(&server, json!({"messages": hi}));
    assert_eq!((status, kind.as_str()), (400, "invalid_request_error"));
    assert!(message.contains("max_tokens"), "{message}");
    let wrong_block = json!({"max_tokens": 4, "messages": [{"role": "assistant", "content": [
        {"type": "tool_result", "tool_use_id": "x", "content": "y"}]}]});
    let (status, kind, message) = anthropic_error(&server, wrong_block);
    assert_eq!((status, kind.as_str()), (400, "invalid_request_error"));
    assert!(message.contains("messages[0].content[0].type"), "{message}");
    let unknown_block = json!({"max_tokens": 4, "messages": [{"role": "user", "content": [
        {"type": "text", "text": "a"}, {"type": "sparkles"}]}]});
    let (status, _, message) = anthropic_error(&server, unknown_block);
    assert_eq!(status, 400);
    assert!(message.contains("messages[0].content[1].type"), "{message}");
    let image = json!({"max_tokens": 4, "messages": [{"role": "user", "content": [
        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": ""}}]}]});
    // llama-server without a projector: 500 and its message (tests/unit/test_compat_anthropic.py).
    let (status, _, message) = anthropic_error(&server, image);
    assert_eq!(status, 500);
    assert!(
        message.contains("image input is not supported"),
        "{message}"
    );
    let bad_choice = json!({"max_tokens": 4, "messages": hi, "tool_choice": {"type": "tool"},
        "tools": [{"name": "f", "input_schema": {"type": "object"}}]});
    let (status, _, message) = anthropic_error(&server, bad_choice);
    assert_eq!(status, 400);
    assert!(message.contains("tool_choice.name"), "{message}");
    let (status, _, message) = anthropic_error(&server, json!({"max_tokens": 0, "messages": hi}));
    assert_eq!(status, 400);
    assert!(message.contains("max_tokens"), "{message}");
    // count_tokens needs no max_tokens, and counts what a message would be given.
    let (status, counted) = post(
        &server,
        "/v1/messages/count_tokens",
        &json!({"messages": hi}),
    );
    assert_eq!(status, 200, "{counted}");
    let (_, answered) = post(
        &server,
        "/v1/messages",
        &json!({"max_tokens": 1, "messages": hi}),
    );
    let usage = &answered["usage"];
    assert_eq!(
        counted["input_tokens"].as_u64(),
        Some(
            usage["input_tokens"].as_u64().unwrap_or(0)
                + usage["cache_read_input_tokens"].as_u64().unwrap_or(0)
        ),
        "{counted} vs {answered}"
    );
    // A body that is not JSON is still answered in Anthropic's shape.
    let (status, raw) = server.post("/v1/messages", "{not json");
    assert_eq!(status, 400);
    assert!(raw.contains("\"type\":\"error\""), "{raw}");

    // Responses: OpenAI's shape.
    let (status, answer) = post(
        &server,
        "/v1/responses",
        &json!({"input": "hi", "previous_response_id": "resp_nope"}),
    );
    assert_eq!(status, 404, "{answer}");
    assert_eq!(answer["error"]["param"], "previous_response_id");
    assert_eq!(answer["error"]["code"], "previous_response_not_found");
    let (status, answer) = post(
        &server,
        "/v1/responses",
        &json!({"input": [{"type": "computer_call_output", "call_id": "c"}]}),
    );
    assert_eq!(status, 400, "{answer}");
    assert_eq!(answer["error"]["param"], "input[0].type");
    let (status, answer) = post(
        &server,
        "/v1/responses",
        &json!({"input": "hi", "tools": [{"type": "web_search"}]}),
    );
    assert_eq!(status, 400, "{answer}");
    assert_eq!(answer["error"]["param"], "tools[0].type");
    let (status, answer) = post(&server, "/v1/responses", &json!({"model": "m"}));
    assert_eq!(status, 400, "{answer}");
    assert_eq!(answer["error"]["param"], "input");

    // A stored response continues through either spelling of the route; one kept out does not.
    let (status, first) = post(
        &server,
        "/responses",
        &json!({"input": "hi", "max_output_tokens": 2}),
    );
    assert_eq!(status, 200, "{first}");
    let (status, next) = post(
        &server,
        "/v1/responses",
        &json!({"input": "and?", "max_output_tokens": 2, "previous_response_id": first["id"]}),
    );
    assert_eq!(status, 200, "{next}");
    // The earlier turns are in the prompt.
    assert!(
        next["usage"]["input_tokens"].as_u64() > first["usage"]["input_tokens"].as_u64(),
        "{first} then {next}"
    );
}
