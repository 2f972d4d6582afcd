//! `oxibonsai serve --sleep-idle-seconds` (llama-server's flag), on SmolLM2-135M: after the idle
//! delay the model file is no longer mapped into the process (read from `/proc/PID/maps`, the
//! kernel's account), read-only routes answer without waking it and `/props` says
//! `is_sleeping`; a generation or a tokenization loads it again, and the reloaded model gives
//! the answer the first load gave.

mod serve_common;

use std::time::{Duration, Instant};

use serde_json::{json, Value};
use serve_common::{smollm2, Server};

fn body_of(response: &str) -> Value {
    serde_json::from_str(response.split_once("\r\n\r\n").unwrap().1).unwrap()
}

fn sleeping(server: &Server) -> bool {
    let (status, response) = server.get("/props");
    assert_eq!(status, 200, "{response}");
    body_of(&response)["is_sleeping"].as_bool().unwrap()
}

fn wait_for(server: &Server, what: &str, done: impl Fn() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !done() {
        assert!(Instant::now() < deadline, "never {what}:\n{}", server.log());
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Whether the model file is mapped into the server's memory.
fn mapped(server: &Server, model: &std::path::Path) -> bool {
    let maps = std::fs::read_to_string(format!("/proc/{}/maps", server.pid())).unwrap();
    let file = model.canonicalize().unwrap();
    maps.lines().any(|l| l.ends_with(file.to_str().unwrap()))
}

fn complete(server: &Server) -> String {
    let body = json!({"prompt": "The capital of France is", "n_predict": 12, "temperature": 0});
    let (status, response) = server.post("/completion", &body.to_string());
    assert_eq!(status, 200, "{response}\n{}", server.log());
    body_of(&response)["content"].as_str().unwrap().to_owned()
}

#[test]
fn an_idle_server_unloads_the_model_and_a_request_loads_it_again() {
    let model = smollm2();
    let server = Server::start(
        &model,
        &[
            "--parallel",
            "1",
            "--ctx",
            "256",
            "--sleep-idle-seconds",
            "1",
            "--metrics",
        ],
        &[],
    );
    wait_for(&server, "healthy", || server.get("/health").0 == 200);
    let first = complete(&server);
    assert!(
        mapped(&server, &model),
        "the model file is not mapped while awake"
    );
    assert!(!sleeping(&server));

    wait_for(&server, "asleep", || sleeping(&server));
    assert!(!mapped(&server, &model), "still mapped while asleep");
    // The routes llama-server exempts from waking it.
    for path in ["/health", "/v1/models", "/models", "/metrics", "/props"] {
        assert_eq!(server.get(path).0, 200, "{path}");
    }
    assert!(sleeping(&server), "a read-only route woke the server");

    assert_eq!(
        complete(&server),
        first,
        "the reloaded model answers differently"
    );
    assert!(!sleeping(&server));
    assert!(mapped(&server, &model));

    wait_for(&server, "asleep again", || sleeping(&server));
    let (status, response) = server.post("/tokenize", &json!({"content": "Hello"}).to_string());
    assert_eq!(status, 200, "{response}");
    assert!(!sleeping(&server), "/tokenize did not wake the server");
}

#[test]
fn sleep_idle_seconds_is_checked() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_oxibonsai"))
        .args(["serve", "-m", "smollm2", "--sleep-idle-seconds", "0"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--sleep-idle-seconds"), "{err}");
}
