//! A slot's context in `oxibonsai serve` (SmolLM2-135M), as llama-server's: `--ctx` is the
//! context of all the `--parallel` slots together, each getting an equal share; `-n -1` (no
//! limit) generates until the slot is full, and the answer then says `truncated` (llama-server's
//! field for a generation the context cut short) — counted against the tokenizer's own count of
//! the prompt.

mod serve_common;

use std::time::{Duration, Instant};

use serde_json::{json, Value};
use serve_common::{smollm2, Server};

fn body_of(response: &str) -> Value {
    serde_json::from_str(response.split_once("\r\n\r\n").unwrap().1).unwrap()
}

fn post(server: &Server, path: &str, body: Value) -> Value {
    let (status, response) = server.post(path, &body.to_string());
    assert_eq!(status, 200, "{response}\n{}", server.log());
    body_of(&response)
}

#[test]
fn a_generation_without_limit_fills_its_share_of_the_context() {
    const CTX: usize = 96;
    const SLOTS: usize = 2;
    let server = Server::start(
        &smollm2(),
        &["--parallel", "2", "--ctx", "96", "-n", "-1"],
        &[],
    );
    let deadline = Instant::now() + Duration::from_secs(60);
    while server.get("/health").0 != 200 {
        assert!(Instant::now() < deadline, "never loaded:\n{}", server.log());
        std::thread::sleep(Duration::from_millis(100));
    }
    let prompt = "Once upon a time";
    let n_prompt = post(&server, "/tokenize", json!({"content": prompt}))["tokens"]
        .as_array()
        .unwrap()
        .len();
    // EOS is banned so that only the context ends the answer.
    let eos = json!({"0": -100, "2": -100});
    let full = post(
        &server,
        "/completion",
        json!({"prompt": prompt, "temperature": 0, "logit_bias": eos}),
    );
    assert_eq!(full["stop_type"], "limit", "{full}");
    assert_eq!(full["truncated"], true, "{full}");
    let predicted = full["tokens_predicted"].as_u64().unwrap() as usize;
    assert_eq!(n_prompt + predicted, CTX / SLOTS, "{full}");
    let props = body_of(&server.get("/props").1);
    assert_eq!(props["default_generation_settings"]["n_ctx"], CTX / SLOTS);

    let short = post(
        &server,
        "/completion",
        json!({"prompt": prompt, "temperature": 0, "n_predict": 5, "logit_bias": eos}),
    );
    assert_eq!(short["tokens_predicted"], 5);
    assert_eq!(short["stop_type"], "limit");
    assert_eq!(short["truncated"], false, "{short}");
}

#[test]
fn a_context_smaller_than_the_slots_is_refused() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_oxibonsai"))
        .args([
            "serve",
            "-m",
            "smollm2",
            "--port",
            "0",
            "--parallel",
            "4",
            "--ctx",
            "3",
        ])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--ctx 3") && err.contains("4 slots"), "{err}");
}
