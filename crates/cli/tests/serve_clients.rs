//! `oxibonsai serve` with real JavaScript clients on loopback (SmolLM2-135M): the npm `openai`
//! package streaming through the SDK, and the chat page at `/` in headless Chromium driven by
//! playwright-core. Node, the npm packages (`OXIBONSAI_TEST_NODE_MODULES`) and Chromium
//! (`OXIBONSAI_TEST_CHROMIUM`) are installed by `.ci/run`; without them the tests fail and say so.

mod serve_common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use serve_common::{node_modules, smollm2, Server};

fn script(name: &str) -> String {
    format!("{}/tests/clients/{name}", env!("CARGO_MANIFEST_DIR"))
}

/// Runs a client script with `node` and returns the JSON line it prints last.
fn node(args: &[&str]) -> Value {
    let modules = node_modules();
    assert!(
        Path::new(&modules).join("openai").is_dir() && Path::new(&modules).join("playwright-core").is_dir(),
        "OXIBONSAI_TEST_NODE_MODULES={modules} lacks the npm packages `openai` and `playwright-core` \
         (.ci/run installs them)"
    );
    let out = Command::new("node")
        .args(args)
        .env("OXIBONSAI_TEST_NODE_MODULES", &modules)
        .output()
        .unwrap_or_else(|e| panic!("cannot run `node` (Node.js, needed for the npm clients): {e}"));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "node {args:?} failed ({}):\n{stdout}\n{stderr}",
        out.status
    );
    let last = stdout.lines().last().unwrap_or_default();
    serde_json::from_str(last)
        .unwrap_or_else(|e| panic!("node {args:?} printed no JSON line ({e}):\n{stdout}\n{stderr}"))
}

fn wait_healthy(server: &Server) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while server.get("/health").0 != 200 {
        assert!(Instant::now() < deadline, "never loaded:\n{}", server.log());
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// POSTs JSON and returns the response's JSON body (the request must succeed).
fn post_json(server: &Server, path: &str, body: &Value) -> Value {
    let (status, response) = server.post(path, &body.to_string());
    assert_eq!(status, 200, "POST {path} {body}: {response}");
    let json = response
        .split_once("\r\n\r\n")
        .map(|(_, b)| b)
        .unwrap_or_default();
    serde_json::from_str(json).unwrap_or_else(|e| panic!("POST {path}: {e}: {response}"))
}

#[test]
fn the_npm_openai_client_streams_the_same_text_as_the_non_stream_answer() {
    let server = Server::start(&smollm2(), &["--parallel", "2", "--ctx", "1024"], &[]);
    wait_healthy(&server);
    let chat = json!({
        "model": "smollm2",
        "messages": [{"role": "user", "content": "Name three colors of the rainbow."}],
        "max_tokens": 40,
        "temperature": 0,
    });
    let completion = json!({
        "model": "smollm2",
        "prompt": "The three primary colors are",
        "max_tokens": 24,
        "temperature": 0,
    });
    // A first request leaves its prompt in a slot, so the compared requests below all reuse it
    // and compute the same way (a fresh prompt runs through the matrix-matrix kernels, a reused
    // one feeds its last token alone: the float sums differ in order, which can flip a greedy
    // near-tie; the engine is not batch-invariant, like the reference).
    post_json(&server, "/v1/chat/completions", &chat);
    post_json(&server, "/v1/completions", &completion);
    let chat_full = post_json(&server, "/v1/chat/completions", &chat);
    let completion_full = post_json(&server, "/v1/completions", &completion);

    let request = json!({"chat": chat, "completion": completion}).to_string();
    let out = node(&[
        &script("openai_stream.mjs"),
        &server.base,
        "no-key",
        &request,
    ]);
    println!("{out:#}");

    for (name, full, text) in [
        (
            "chat",
            &chat_full,
            &chat_full["choices"][0]["message"]["content"],
        ),
        (
            "completion",
            &completion_full,
            &completion_full["choices"][0]["text"],
        ),
    ] {
        let streamed = &out[name];
        assert!(
            text.as_str().is_some_and(|t| !t.is_empty()),
            "{name}: empty non-stream answer {full}"
        );
        assert_eq!(
            streamed["text"], *text,
            "{name}: stream vs non-stream (greedy)"
        );
        assert_eq!(
            streamed["finish"], full["choices"][0]["finish_reason"],
            "{name}: finish_reason"
        );
        assert_eq!(
            streamed["usage"]["completion_tokens"], full["usage"]["completion_tokens"],
            "{name}: usage of the include_usage chunk"
        );
        // Streamed means several chunks, not the whole answer in one.
        let tokens = full["usage"]["completion_tokens"].as_u64().unwrap_or(0);
        assert!(
            tokens < 3 || streamed["chunks"].as_u64().unwrap_or(0) >= 2,
            "{name}: {tokens} tokens arrived in {} chunk(s)",
            streamed["chunks"]
        );
    }
    assert_eq!(
        out["abort"]["seen"], 2,
        "the aborted stream: {}",
        out["abort"]
    );

    // The aborted stream's slot is released, not left generating its 64 tokens.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let metrics = server.get("/metrics").1;
        let cancelled = metric(&metrics, "oxibonsai_requests_cancelled_total");
        let active = metric(&metrics, "oxibonsai_active_slots");
        if cancelled == Some(1.0) && active == Some(0.0) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the aborted request was not cancelled:\n{metrics}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// A Prometheus sample's value by its exact name.
fn metric(text: &str, name: &str) -> Option<f64> {
    text.lines()
        .filter_map(|l| l.strip_prefix(name)?.strip_prefix(' '))
        .find_map(|v| v.trim().parse().ok())
}

fn chromium() -> String {
    let path = std::env::var("OXIBONSAI_TEST_CHROMIUM").unwrap_or_else(|_| {
        panic!(
            "OXIBONSAI_TEST_CHROMIUM is not set: it must name a Chromium binary (.ci/run installs \
             Debian's `chromium` as /usr/bin/chromium)"
        )
    });
    assert!(
        Path::new(&path).is_file(),
        "OXIBONSAI_TEST_CHROMIUM={path} does not exist (Debian package `chromium`)"
    );
    path
}

#[test]
fn the_chat_page_streams_answers_and_keeps_the_conversation_in_headless_chromium() {
    let chromium = chromium();
    // The script bounds each answer to 96 tokens: two turns fit in a slot.
    let server = Server::start(&smollm2(), &["--parallel", "2", "--ctx", "1024"], &[]);
    wait_healthy(&server);
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("serve_clients");
    std::fs::create_dir_all(&dir).expect("creating the screenshot folder");
    let screenshot = dir.join("chat-page.png");
    let _ = std::fs::remove_file(&screenshot);
    let out = node(&[
        &script("chat_page.mjs"),
        &server.base,
        &chromium,
        screenshot.to_str().expect("UTF-8 path"),
    ]);
    println!("{out:#}\nscreenshot: {}", screenshot.display());

    assert_eq!(
        out["pageErrors"],
        json!([]),
        "JavaScript errors on the page"
    );
    assert_eq!(
        out["failedResponses"],
        json!([]),
        "failed requests from the page"
    );
    let models = get_json(&server, "/v1/models");
    assert_eq!(
        out["model"], models["data"][0]["id"],
        "the page shows the served model"
    );
    let turns = out["turns"].as_array().expect("turns");
    assert_eq!(turns.len(), 2);
    assert_eq!(
        out["users"],
        json!(["Hello! What is the capital of France?", "And of Italy?"]),
        "two user bubbles"
    );
    assert_eq!(out["assistants"], 2, "two answers");
    for (i, turn) in turns.iter().enumerate() {
        let answer = turn["answer"].as_str().unwrap_or_default();
        assert!(!answer.trim().is_empty(), "turn {i}: empty answer: {turn}");
        assert_eq!(
            turn["error"], 0,
            "turn {i}: the page shows an error: {turn}"
        );
        let stats = turn["stats"].as_str().unwrap_or_default();
        let (tokens, rate) = parse_stats(stats).unwrap_or_else(|| {
            panic!("turn {i}: no 'N tokens, R tokens/s' on the page: {stats:?}")
        });
        assert!(tokens > 0 && rate > 0.0, "turn {i}: {stats:?}");
        let lengths = turn["lengths"].as_array().map(Vec::len).unwrap_or(0);
        assert!(
            tokens < 4 || lengths >= 2,
            "turn {i}: a {tokens}-token answer appeared in {lengths} step(s), not streamed: {turn}"
        );
    }
    // The second request carries the conversation: the first exchange as the page showed it.
    let sent = out["sent"].as_array().expect("sent requests");
    assert_eq!(sent.len(), 2, "{sent:?}");
    let first_answer = turns[0]["answer"].as_str().unwrap_or_default();
    assert_eq!(
        sent[1]["messages"],
        json!([
            {"role": "user", "content": "Hello! What is the capital of France?"},
            {"role": "assistant", "content": first_answer},
            {"role": "user", "content": "And of Italy?"},
        ]),
        "the second request's conversation"
    );
    let png = std::fs::read(&screenshot).expect("the screenshot was saved");
    assert!(png.starts_with(b"\x89PNG"), "the screenshot is a PNG");
}

fn get_json(server: &Server, path: &str) -> Value {
    let (status, response) = server.get(path);
    assert_eq!(status, 200, "GET {path}: {response}");
    let body = response
        .split_once("\r\n\r\n")
        .map(|(_, b)| b)
        .unwrap_or_default();
    serde_json::from_str(body).unwrap_or_else(|e| panic!("GET {path}: {e}: {response}"))
}

/// "35 tokens, 31.0 tokens/s" → (35, 31.0).
fn parse_stats(stats: &str) -> Option<(u64, f64)> {
    let (tokens, rate) = stats.split_once(" tokens, ")?;
    Some((
        tokens.trim().parse().ok()?,
        rate.strip_suffix(" tokens/s")?.trim().parse().ok()?,
    ))
}
