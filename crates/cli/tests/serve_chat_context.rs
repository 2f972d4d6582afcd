//! What llama-server puts around a chat template and its answer, checked over HTTP (SmolLM2-135M
//! with a small template of our own): today's date as `date_string` / `datetime` against the
//! system's `date` (glibc's strftime, as llama.cpp formats them); `--reasoning auto` leaving a
//! QwQ-style `<think>` open; `__verbose` (`--verbose`, or the request's `verbose`) against
//! `/apply-template`'s prompt and the answer's usage; the assistant prefill (a final assistant
//! message is continued) against `continue_final_message`; Anthropic thinking history counted by
//! `count_tokens` against `/tokenize` of the prompt written out by hand; an empty Anthropic
//! `messages` answered, an empty OpenAI one refused. Also the server's names and addresses as
//! llama-server takes them (`--alias`, `--tags`, `--host A,B`).

mod serve_common;

use serde_json::{json, Value};
use serve_common::{smollm2, Server};

fn post(server: &Server, path: &str, body: &Value) -> (u16, Value) {
    let (status, response) = server.post(path, &body.to_string());
    let text = response.split_once("\r\n\r\n").map_or("", |(_, b)| b);
    let value = serde_json::from_str(text)
        .unwrap_or_else(|e| panic!("{path}: not JSON ({e}): {response}\n{}", server.log()));
    (status, value)
}

fn ok(server: &Server, path: &str, body: Value) -> Value {
    let (status, answer) = post(server, path, &body);
    assert_eq!(status, 200, "{path} {body}: {answer}");
    answer
}

fn wait_healthy(server: &Server) {
    for _ in 0..600 {
        if server.get("/health").0 == 200 {
            return;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    panic!("the server did not load the model:\n{}", server.log());
}

/// `date +FORMAT` in the C locale: the system's own strftime of the local time.
fn system_date(format: &str) -> String {
    let out = std::process::Command::new("date")
        .arg(format!("+{format}"))
        .env("LC_ALL", "C")
        .output()
        .expect("the `date` command is needed by this test");
    assert!(out.status.success(), "date +{format} failed");
    String::from_utf8(out.stdout).unwrap().trim_end().to_owned()
}

const TEMPLATE: &str = "{{ date_string }}|{{ datetime }}|\
    {% if tools %}<tools>{% for t in tools %}{{ t.function.name }};{% endfor %}</tools>{% endif %}\
    {% for m in messages %}[{{ m.role }}] \
    {% if m.reasoning_content %}<think>{{ m.reasoning_content }}</think>{% endif %}\
    {{ m.content }}\n{% endfor %}\
    {% if add_generation_prompt %}>><think>\n{% if not enable_thinking %}</think>{% endif %}{% endif %}";

#[test]
fn llama_server_template_context_verbose_and_prefill() {
    let dir = std::env::temp_dir().join(format!("oxibonsai-chat-context-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let template = dir.join("template.jinja");
    std::fs::write(&template, TEMPLATE).unwrap();
    let server = Server::start(
        &smollm2(),
        &[
            "--verbose",
            "--chat-template-file",
            template.to_str().unwrap(),
        ],
        &[],
    );
    wait_healthy(&server);
    let dates = format!("{}|{}|", system_date("%d %b %Y"), system_date("%b %d %Y"));
    let hi = json!([{"role": "user", "content": "hi"}]);

    // The dates, and `--reasoning auto` (the default) asks this template to think, so its
    // `<think>` stays open as llama-server leaves it.
    let shown = ok(&server, "/apply-template", json!({"messages": hi}));
    let prompt = shown["prompt"].as_str().unwrap().to_owned();
    assert_eq!(prompt, format!("{dates}[user] hi\n>><think>\n"));
    // The tools reach the template as they do for a chat completion (llama-server parses both
    // bodies the same way), and the count of input tokens is that prompt's.
    let tool = json!({"type": "function", "function": {"name": "get_weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}});
    let with_tools = ok(
        &server,
        "/apply-template",
        json!({"messages": hi, "tools": [tool]}),
    );
    assert_eq!(
        with_tools["prompt"].as_str().unwrap(),
        format!("{dates}<tools>get_weather;</tools>[user] hi\n>><think>\n"),
    );
    // The request's kwargs win over the server's variables.
    let mine = ok(
        &server,
        "/apply-template",
        json!({"messages": hi, "chat_template_kwargs": {"date_string": "D", "enable_thinking": false}}),
    );
    assert!(
        mine["prompt"].as_str().unwrap().starts_with("D|")
            && mine["prompt"]
                .as_str()
                .unwrap()
                .ends_with("<think>\n</think>"),
        "{mine}"
    );

    // `--verbose`: `__verbose` is the native answer, its prompt the rendered one; the
    // request's `verbose: false` leaves it out.
    let answer = ok(
        &server,
        "/v1/chat/completions",
        json!({"messages": hi, "max_tokens": 2}),
    );
    let verbose = &answer["__verbose"];
    assert_eq!(verbose["prompt"], prompt, "{answer}");
    assert_eq!(
        verbose["tokens_evaluated"], answer["usage"]["prompt_tokens"],
        "{answer}"
    );
    assert_eq!(
        verbose["content"], answer["choices"][0]["message"]["content"],
        "{answer}"
    );
    let quiet = ok(
        &server,
        "/v1/chat/completions",
        json!({"messages": hi, "max_tokens": 2, "verbose": false}),
    );
    assert!(quiet.get("__verbose").is_none(), "{quiet}");

    // A final assistant message is continued (llama-server's prefill), the same prompt as
    // `continue_final_message`; text parts of the continued message are joined by a blank line.
    let prefill =
        json!([{"role": "user", "content": "hi"}, {"role": "assistant", "content": "Once upon"}]);
    let prefilled = ok(
        &server,
        "/v1/chat/completions",
        json!({"messages": prefill, "max_tokens": 2}),
    );
    let continued = ok(
        &server,
        "/v1/chat/completions",
        json!({"messages": prefill, "max_tokens": 2, "continue_final_message": true,
               "add_generation_prompt": false}),
    );
    assert_eq!(
        prefilled["__verbose"]["prompt"],
        format!("{dates}[user] hi\n[assistant] Once upon")
    );
    assert_eq!(
        prefilled["__verbose"]["prompt"],
        continued["__verbose"]["prompt"]
    );
    let parts = json!([{"role": "user", "content": "hi"}, {"role": "assistant", "content": [
        {"type": "text", "text": "Once"}, {"type": "text", "text": "upon"}]}]);
    let joined = ok(
        &server,
        "/v1/chat/completions",
        json!({"messages": parts, "max_tokens": 2}),
    );
    assert_eq!(
        joined["__verbose"]["prompt"],
        format!("{dates}[user] hi\n[assistant] Once\n\nupon")
    );

    // Anthropic: earlier thinking is the turn's reasoning, which this template prints; the
    // count is the hand-written prompt's.
    let history = json!([
        {"role": "user", "content": "Fix it"},
        {"role": "assistant", "content": [
            {"type": "thinking", "thinking": "Look first.", "signature": ""},
            {"type": "text", "text": "Done."}]},
        {"role": "user", "content": "Thanks"},
    ]);
    let counted = ok(
        &server,
        "/v1/messages/count_tokens",
        json!({"messages": history}),
    );
    let by_hand = format!(
        "{dates}[user] Fix it\n[assistant] <think>Look first.</think>Done.\n[user] Thanks\n>><think>\n"
    );
    let tokens = ok(&server, "/tokenize", json!({"content": by_hand}));
    assert_eq!(
        counted["input_tokens"].as_u64(),
        Some(tokens["tokens"].as_array().unwrap().len() as u64),
        "{counted}"
    );

    // Empty messages: llama-server's Anthropic route answers; OpenAI's chat route refuses.
    let empty = ok(
        &server,
        "/v1/messages",
        json!({"max_tokens": 2, "messages": []}),
    );
    assert_eq!(empty["type"], "message", "{empty}");
    let (status, refused) = post(
        &server,
        "/v1/chat/completions",
        &json!({"messages": [], "max_tokens": 2}),
    );
    assert_eq!(status, 400, "{refused}");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// llama-server's `--alias a,b` (every name listed as `aliases`, the first in sorted order the
/// id, as its `std::set` gives), `--tags`, and `--host A,B` (one server on both addresses, the
/// same port): `/v1/models` over IPv4 and `/health` over IPv6 loopback.
#[test]
fn aliases_tags_and_several_addresses() {
    let server = Server::start(
        &smollm2(),
        &[
            "--host",
            "127.0.0.1,::1",
            "--alias",
            "tiny, fim,code,fim",
            "--tags",
            "small,chat",
        ],
        &[],
    );
    assert!(
        server.base.starts_with("http://127.0.0.1:"),
        "{}",
        server.base
    );
    let (status, body) = server.get("/v1/models");
    assert_eq!(status, 200, "{body}");
    let body = body
        .split_once("\r\n\r\n")
        .map_or(body.as_str(), |(_, b)| b);
    let models: Value = serde_json::from_str(body).unwrap();
    let model = &models["data"][0];
    assert_eq!(model["id"], "code", "{models}");
    assert_eq!(model["aliases"], json!(["code", "fim", "tiny"]), "{models}");
    assert_eq!(model["tags"], json!(["chat", "small"]), "{models}");
    let (status, _) = server.get("/v1/models/tiny");
    assert_eq!(status, 200);

    let port = server.addr().rsplit(':').next().unwrap().to_owned();
    let mut stream = std::net::TcpStream::connect(format!("[::1]:{port}"))
        .expect("the server listens on IPv6 loopback too");
    use std::io::Write;
    stream
        .write_all(b"GET /v1/models HTTP/1.1\r\nHost: [::1]\r\nConnection: close\r\n\r\n")
        .unwrap();
    let (status, _, body) =
        serve_common::read_answer(&mut std::io::BufReader::new(stream)).expect("an answer");
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("\"code\""), "{body}");
}
