//! llama-server's native API on `oxibonsai serve` (SmolLM2-135M, greedy): `/completion` against
//! the OpenAI route's answer to the same prompt (the existing, client-tested path) and against
//! `/tokenize` / `/detokenize`; streamed against whole; `/infill` refused for a vocabulary
//! without FIM tokens (its layout is tested in the server crate); `/props`,
//! `/apply-template` against the golden chat-template rendering; `/slots`, the aliases; CORS
//! and the API key as llama-server answers them.

mod serve_common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use oxibonsai_testkit::golden;
use serde_json::{json, Value};
use serve_common::{smollm2, Server};

fn wait_healthy(server: &Server) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while server.get("/health").0 != 200 {
        assert!(Instant::now() < deadline, "never loaded:\n{}", server.log());
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// One request on its own connection, read to its end: (status, head in lower case, body with
/// any chunked transfer coding removed).
fn http(
    server: &Server,
    method: &str,
    path: &str,
    headers: &[&str],
    body: &str,
) -> (u16, String, String) {
    let mut stream = TcpStream::connect(server.addr()).expect("connecting");
    stream
        .set_read_timeout(Some(Duration::from_secs(120)))
        .unwrap();
    let mut text = format!(
        "{method} {path} HTTP/1.1\r\nhost: {}\r\nconnection: close\r\n",
        server.addr()
    );
    for h in headers {
        text.push_str(h);
        text.push_str("\r\n");
    }
    text.push_str(&format!("content-length: {}\r\n\r\n{body}", body.len()));
    stream.write_all(text.as_bytes()).unwrap();
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw).expect("reading the answer");
    let raw = String::from_utf8_lossy(&raw).into_owned();
    let (head, rest) = raw.split_once("\r\n\r\n").expect("a head");
    let head = head.to_ascii_lowercase();
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let body = if head.contains("transfer-encoding: chunked") {
        let mut out = String::new();
        let mut rest = rest;
        while let Some((size, after)) = rest.split_once("\r\n") {
            let n = usize::from_str_radix(size.trim(), 16).expect("a chunk size");
            if n == 0 {
                break;
            }
            out.push_str(&after[..n]);
            rest = &after[n + 2..];
        }
        out
    } else {
        rest.to_owned()
    };
    (status, head, body)
}

const JSON: &str = "content-type: application/json";

fn post(server: &Server, path: &str, body: &Value) -> (u16, Value) {
    let (status, head, text) = http(server, "POST", path, &[JSON], &body.to_string());
    let v = serde_json::from_str(&text)
        .unwrap_or_else(|e| panic!("{path}: {status} not JSON ({e}):\n{head}{text}"));
    (status, v)
}

fn ok(server: &Server, path: &str, body: Value) -> Value {
    let (status, v) = post(server, path, &body);
    assert_eq!(status, 200, "{path} {body}: {v}\n{}", server.log());
    v
}

/// A 400 whose error names `param`.
fn refused(server: &Server, path: &str, body: Value, param: &str) {
    let (status, v) = post(server, path, &body);
    assert_eq!(status, 400, "{body}: {v}");
    assert_eq!(v["error"]["param"], param, "{body}: {v}");
}

/// The `data:` events of a stream, and whether it ended with `[DONE]`.
fn events(body: &str) -> (Vec<Value>, bool) {
    let mut out = Vec::new();
    let mut done = false;
    for line in body.lines() {
        if let Some(data) = line.strip_prefix("data: ") {
            if data == "[DONE]" {
                done = true;
            } else {
                out.push(serde_json::from_str(data).expect("a JSON event"));
            }
        }
    }
    (out, done)
}

fn tokens(server: &Server, text: &str, add_special: bool) -> Vec<u64> {
    let v = ok(
        server,
        "/tokenize",
        json!({"content": text, "add_special": add_special, "parse_special": true}),
    );
    v["tokens"]
        .as_array()
        .expect("tokens")
        .iter()
        .map(|t| t.as_u64().unwrap())
        .collect()
}

const PROMPT: &str = "The capital of France is";

#[test]
fn native_completions_agree_with_the_openai_route_and_the_tokenizer() {
    let server = Server::start(&smollm2(), &["--parallel", "2", "--ctx", "1024"], &[]);
    wait_healthy(&server);
    let greedy = json!({"prompt": PROMPT, "n_predict": 12, "temperature": 0});
    let native = ok(&server, "/completion", greedy.clone());
    let openai = ok(
        &server,
        "/v1/completions",
        json!({"prompt": PROMPT, "max_tokens": 12, "temperature": 0}),
    );
    assert_eq!(native["content"], openai["choices"][0]["text"], "{native}");
    let prompt_ids = tokens(&server, PROMPT, true);
    let t = &native["timings"];
    assert_eq!(
        t["prompt_n"].as_u64().unwrap() + t["cache_n"].as_u64().unwrap(),
        prompt_ids.len() as u64,
        "{native}"
    );
    assert_eq!(t["predicted_n"], 12);
    // llama-server's rates are over the 11 decode steps: the first token came with the prompt.
    let ms = t["predicted_ms"].as_f64().unwrap();
    let rate = t["predicted_per_second"].as_f64().unwrap();
    assert!((rate - 11.0 * 1e3 / ms).abs() <= 1e-9 * rate, "{t}");
    let per = t["predicted_per_token_ms"].as_f64().unwrap();
    assert!((per - ms / 11.0).abs() <= 1e-9 * per, "{t}");
    let one = ok(
        &server,
        "/completion",
        json!({"prompt": PROMPT, "n_predict": 1}),
    );
    assert_eq!(one["timings"]["predicted_per_second"], 0.0, "{one}");
    assert_eq!(one["timings"]["predicted_per_token_ms"], 0.0, "{one}");
    assert_eq!(native["tokens_predicted"], 12);
    assert_eq!(native["tokens_evaluated"], prompt_ids.len());
    assert_eq!(native["stop_type"], "limit");
    assert_eq!(native["stop"], true);
    assert_eq!(native["truncated"], false);
    assert_eq!(native["generation_settings"]["n_predict"], 12);
    assert_eq!(native["generation_settings"]["temperature"], 0.0);
    assert!(native["has_new_line"].is_boolean());
    assert_eq!(native["tokens"], json!([]));
    let content = native["content"].as_str().unwrap().to_owned();

    // `/completions` is the same handler; token ids and a mixed list give the same prompt.
    let same = |body: Value| ok(&server, "/completions", body)["content"].clone();
    assert_eq!(same(greedy.clone()), content);
    assert_eq!(
        same(json!({"prompt": prompt_ids, "n_predict": 12, "temperature": 0})),
        content
    );
    let (head, tail) = PROMPT.split_at(10);
    let tail_ids = tokens(&server, tail, false);
    let mut mixed = vec![json!(head)];
    mixed.extend(tail_ids.iter().map(|&t| json!(t)));
    let mixed_answer = ok(
        &server,
        "/completion",
        json!({"prompt": mixed, "n_predict": 12, "temperature": 0}),
    );
    assert_eq!(
        mixed_answer["tokens_evaluated"],
        tokens(&server, head, true).len() + tail_ids.len()
    );
    // Several prompts: a list of answers, in order.
    let several = ok(
        &server,
        "/completion",
        json!({"prompt": [PROMPT, prompt_ids], "n_predict": 12, "temperature": 0}),
    );
    let list = several.as_array().expect("a list for two prompts");
    assert_eq!(list.len(), 2);
    assert_eq!(
        (&list[0]["content"], &list[1]["content"]),
        (&json!(content), &json!(content))
    );
    assert_eq!(
        (&list[0]["index"], &list[1]["index"]),
        (&json!(0), &json!(1))
    );

    // The generated ids detokenize to the content; `n_probs`: the greedy choice is the top one.
    let with = ok(
        &server,
        "/completion",
        json!({"prompt": PROMPT, "n_predict": 12, "temperature": 0, "return_tokens": true, "n_probs": 3}),
    );
    let ids = with["tokens"].clone();
    assert_eq!(ids.as_array().unwrap().len(), 12, "{with}");
    assert_eq!(
        ok(&server, "/detokenize", json!({"tokens": ids}))["content"],
        json!(content)
    );
    let probs = with["completion_probabilities"]
        .as_array()
        .expect("probabilities");
    assert_eq!(probs.len(), 12);
    for (p, id) in probs.iter().zip(with["tokens"].as_array().unwrap()) {
        assert_eq!(&p["id"], id, "{p}");
        let top = p["top_logprobs"].as_array().unwrap();
        assert_eq!(top.len(), 3);
        assert_eq!(top[0]["id"], p["id"], "{p}");
        assert!(top
            .windows(2)
            .all(|w| w[0]["logprob"].as_f64() >= w[1]["logprob"].as_f64()));
        assert!(p["logprob"].as_f64().unwrap() <= 0.0 && p["bytes"].is_array());
    }

    // A stop word from the greedy answer ends it there.
    let word = content
        .split_whitespace()
        .nth(1)
        .expect("two words")
        .to_owned();
    let stopped = ok(
        &server,
        "/completion",
        json!({"prompt": PROMPT, "n_predict": 12, "temperature": 0, "stop": [word]}),
    );
    assert_eq!(stopped["stop_type"], "word");
    assert_eq!(stopped["stopping_word"], json!(word));
    assert_eq!(
        stopped["content"],
        json!(&content[..content.find(&word).unwrap()])
    );

    // Streamed: the same text, the last event the whole answer's counts, no `[DONE]`.
    let body = json!({"prompt": PROMPT, "n_predict": 12, "temperature": 0, "stream": true, "return_tokens": true});
    let (status, head, text) = http(&server, "POST", "/completion", &[JSON], &body.to_string());
    assert_eq!(status, 200, "{head}{text}");
    assert!(head.contains("text/event-stream"), "{head}");
    let (chunks, done) = events(&text);
    assert!(!done, "a native stream ends without [DONE]");
    let last = chunks.last().expect("events");
    assert_eq!(last["stop"], true);
    assert_eq!(last["stop_type"], "limit");
    assert_eq!(last["timings"]["predicted_n"], 12);
    assert!(chunks[..chunks.len() - 1]
        .iter()
        .all(|c| c["stop"] == false));
    let streamed: String = chunks
        .iter()
        .map(|c| c["content"].as_str().unwrap_or_default())
        .collect();
    assert_eq!(streamed, content);
    let streamed_ids: Vec<Value> = chunks
        .iter()
        .flat_map(|c| c["tokens"].as_array().cloned().unwrap_or_default())
        .collect();
    assert_eq!(Value::Array(streamed_ids), with["tokens"]);

    // `response_fields` reduces the answer to those paths.
    let few = ok(
        &server,
        "/completion",
        json!({"prompt": PROMPT, "n_predict": 4, "response_fields": ["content", "generation_settings/n_predict"]}),
    );
    assert_eq!(few.as_object().unwrap().len(), 2, "{few}");
    assert_eq!(few["generation_settings/n_predict"], 4);

    // Bad fields: 400 naming each.
    refused(
        &server,
        "/completion",
        json!({"prompt": PROMPT, "top_p": 2}),
        "top_p",
    );
    refused(
        &server,
        "/completion",
        json!({"prompt": PROMPT, "mirostat": 2}),
        "mirostat",
    );
    refused(
        &server,
        "/completion",
        json!({"prompt": PROMPT, "n_predict": -5}),
        "n_predict",
    );
    refused(
        &server,
        "/completion",
        json!({"prompt": PROMPT, "n_probs": 1000}),
        "n_probs",
    );
    refused(
        &server,
        "/completion",
        json!({"prompt": {"a": 1}}),
        "prompt",
    );
    refused(
        &server,
        "/completion",
        json!({"prompt": [1, 99999999]}),
        "prompt",
    );
    refused(&server, "/completion", json!({"n_predict": 3}), "prompt");
    refused(
        &server,
        "/completion",
        json!({"prompt": PROMPT, "logit_bias": [[99999999, -1]]}),
        "logit_bias",
    );
    refused(
        &server,
        "/completion",
        json!({"prompt": PROMPT, "logit_bias": [[1]]}),
        "logit_bias",
    );
    refused(
        &server,
        "/completion",
        json!({"prompt": PROMPT, "id_slot": -2}),
        "id_slot",
    );
    refused(
        &server,
        "/completion",
        json!({"prompt": vec![1; 600]}),
        "prompt",
    );
    // A banned text never appears: every token of " Paris" biased away.
    let banned = ok(
        &server,
        "/completion",
        json!({"prompt": PROMPT, "n_predict": 12, "temperature": 0, "logit_bias": [[" Paris", false]]}),
    );
    assert!(
        !banned["content"].as_str().unwrap().contains("Paris"),
        "{banned}"
    );
}

#[test]
fn infill_needs_the_models_fim_tokens() {
    // SmolLM2-135M's vocabulary has no FIM tokens (its layout is tested in the server crate,
    // over Qwen3's vocabulary): llama-server's 501 naming them.
    let server = Server::start(&smollm2(), &["--parallel", "1", "--ctx", "512"], &[]);
    wait_healthy(&server);
    let (status, v) = post(
        &server,
        "/infill",
        &json!({"input_prefix": "def f(", "input_suffix": ")\n"}),
    );
    assert_eq!(status, 501, "{v}");
    assert_eq!(v["error"]["type"], "not_supported_error");
    let message = v["error"]["message"].as_str().unwrap();
    assert!(message.contains("prefix token is missing"), "{message}");
    // A malformed request is a 400 naming the field before the model's tokens are looked at.
    for extra in [
        json!("x"),
        json!([{"filename": "a.py"}]),
        json!([{"text": "x", "filename": 3}]),
    ] {
        let (status, v) = post(
            &server,
            "/infill",
            &json!({"input_prefix": "def f(", "input_suffix": ")\n", "input_extra": extra}),
        );
        assert_eq!(status, 400, "{extra}: {v}");
        assert_eq!(v["error"]["param"], "input_extra", "{v}");
    }
}

#[test]
fn props_slots_templates_and_aliases() {
    let model = smollm2();
    let server = Server::start(&model, &["--parallel", "3", "--ctx", "1152"], &[]);
    wait_healthy(&server);
    let (status, text) = server.get("/props");
    assert_eq!(status, 200, "{text}");
    let (head, body) = text.split_once("\r\n\r\n").unwrap();
    // Header names as llama-server writes them (clients reading them into a plain dictionary).
    assert!(
        head.contains("\r\nContent-Type: application/json"),
        "{head}"
    );
    let props: Value = serde_json::from_str(body).unwrap();
    assert_eq!(props["total_slots"], 3);
    assert_eq!(props["default_generation_settings"]["n_ctx"], 384);
    assert_eq!(props["default_generation_settings"]["params"]["top_k"], 40);
    assert_eq!(props["model_path"], json!(model.display().to_string()));
    let template = std::fs::read_to_string(golden("chat_template/smollm2/template.jinja")).unwrap();
    assert_eq!(
        props["chat_template"].as_str().unwrap().trim(),
        template.trim()
    );
    assert_eq!(props["eos_token"], "<|im_end|>");
    assert_eq!(props["endpoint_slots"], true);
    // POST /props: 501 unless --props.
    let (status, v) = post(&server, "/props", &json!({}));
    assert_eq!(
        (status, &v["error"]["type"]),
        (501, &json!("not_supported_error")),
        "{v}"
    );

    let (status, text) = server.get("/slots");
    assert_eq!(status, 200, "{text}");
    let slots: Value = serde_json::from_str(text.split_once("\r\n\r\n").unwrap().1).unwrap();
    assert_eq!(slots.as_array().unwrap().len(), 3);
    assert_eq!(slots[0]["n_ctx"], 384);
    assert_eq!(slots[0]["is_processing"], false);

    // The template's rendering is the golden one (llama.cpp's output for the same messages).
    let case: Value = serde_json::from_str(
        &std::fs::read_to_string(golden("chat_template/smollm2/single_user.json")).unwrap(),
    )
    .unwrap();
    let rendered =
        std::fs::read_to_string(golden("chat_template/smollm2/single_user.txt")).unwrap();
    let applied = ok(
        &server,
        "/apply-template",
        json!({"messages": case["messages"]}),
    );
    assert_eq!(applied["prompt"], json!(rendered));
    let counted = ok(
        &server,
        "/chat/completions/input_tokens",
        json!({"messages": case["messages"]}),
    );
    assert_eq!(
        counted["input_tokens"],
        tokens(&server, &rendered, true).len()
    );
    refused(
        &server,
        "/apply-template",
        json!({"messages": "hi"}),
        "messages",
    );

    // The un-prefixed OpenAI aliases answer as the /v1 routes.
    let chat = json!({"messages": case["messages"], "max_tokens": 6, "temperature": 0});
    let a = ok(&server, "/chat/completions", chat.clone());
    let b = ok(&server, "/v1/chat/completions", chat);
    assert_eq!(a["choices"][0]["message"], b["choices"][0]["message"]);
    assert_eq!(server.get("/models").0, 200);

    let off = Server::start(
        &model,
        &["--parallel", "1", "--ctx", "256", "--no-slots", "--props"],
        &[],
    );
    wait_healthy(&off);
    let (status, text) = off.get("/slots");
    assert_eq!(status, 501, "{text}");
    assert!(text.contains("not_supported_error"), "{text}");
    assert_eq!(
        post(&off, "/props", &json!({})),
        (200, json!({"success": true}))
    );
}

#[test]
fn cors_and_the_api_key_as_llama_server() {
    let model = smollm2();
    let server = Server::start(
        &model,
        &["--parallel", "1", "--ctx", "256", "--api-key", "k3y"],
        &[],
    );
    wait_healthy(&server);
    let preflight = |s: &Server, origin: &str| {
        http(
            s,
            "OPTIONS",
            "/completions",
            &[
                &format!("origin: {origin}"),
                "access-control-request-method: POST",
                "access-control-request-headers: Authorization",
            ],
            "",
        )
    };
    // By default any origin is answered, preflights without the key.
    let (status, head, _) = preflight(&server, "http://web.example");
    assert_eq!(status, 200, "{head}");
    for line in [
        "access-control-allow-origin: http://web.example",
        "access-control-allow-credentials: true",
        "access-control-allow-methods: get, post, delete, options",
        "access-control-allow-headers: *",
    ] {
        assert!(head.contains(line), "{line}:\n{head}");
    }
    let body = json!({"prompt": PROMPT, "n_predict": 2}).to_string();
    let (status, head, _) = http(
        &server,
        "POST",
        "/completion",
        &[JSON, "origin: http://web.example", "x-api-key: k3y"],
        &body,
    );
    assert_eq!(status, 200, "{head}");
    assert!(
        head.contains("access-control-allow-origin: http://web.example"),
        "{head}"
    );
    for (key, expected) in [
        ("x-api-key: k3y", 200),
        ("x-api-key: k3", 401),
        ("authorization: Bearer k3y", 200),
        ("x-nothing: 1", 401),
    ] {
        let (status, _, text) = http(&server, "POST", "/completion", &[JSON, key], &body);
        assert_eq!(status, expected, "{key}: {text}");
        if expected == 401 {
            assert!(text.contains("authentication_error"), "{text}");
        }
    }
    // `--cors-origins localhost`: pages on the loopback host only.
    let local = Server::start(
        &model,
        &[
            "--parallel",
            "1",
            "--ctx",
            "256",
            "--cors-origins",
            "localhost",
        ],
        &[],
    );
    wait_healthy(&local);
    let (status, head, _) = preflight(&local, "http://localhost:3000");
    assert_eq!(status, 200);
    assert!(
        head.contains("access-control-allow-origin: http://localhost:3000"),
        "{head}"
    );
    let (status, head, _) = preflight(&local, "http://localhost.evil.com");
    assert_eq!(status, 403, "{head}");
}

#[test]
fn a_saved_slot_restores_into_another_and_its_prefix_is_reused() {
    let model = smollm2();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().to_str().unwrap();
    let server = Server::start(
        &model,
        &["--parallel", "2", "--ctx", "512", "--slot-save-path", path],
        &[],
    );
    wait_healthy(&server);
    let prompt_len = tokens(&server, PROMPT, true).len();
    let ask = |slot: usize| {
        ok(
            &server,
            "/completion",
            json!({"prompt": PROMPT, "n_predict": 8, "temperature": 0, "id_slot": slot}),
        )
    };
    let first = ask(1);
    assert_eq!(first["id_slot"], 1);
    assert_eq!(first["timings"]["cache_n"], 0, "{first}");
    // The slot holds the prompt and the generated tokens but the last (sampled, not fed).
    let held = prompt_len + 8 - 1;
    let saved = ok(
        &server,
        "/slots/1?action=save",
        json!({"filename": "s1.bin"}),
    );
    assert_eq!(saved["n_saved"], held, "{saved}");
    let size = std::fs::metadata(dir.path().join("s1.bin")).unwrap().len();
    assert_eq!(saved["n_written"], size);
    let erased = ok(&server, "/slots/1?action=erase", json!({}));
    assert_eq!(erased["n_erased"], held);
    // Nothing cached anywhere now: slot 0 computes the whole prompt.
    let (status, text) = server.get("/slots");
    assert_eq!(status, 200);
    let slots: Value = serde_json::from_str(text.split_once("\r\n\r\n").unwrap().1).unwrap();
    assert_eq!(
        (&slots[0]["n_past"], &slots[1]["n_past"]),
        (&json!(0), &json!(0)),
        "{slots}"
    );

    let restored = ok(
        &server,
        "/slots/0?action=restore",
        json!({"filename": "s1.bin"}),
    );
    assert_eq!(
        (&restored["n_restored"], &restored["n_read"]),
        (&json!(held), &json!(size))
    );
    let again = ask(0);
    assert_eq!(again["id_slot"], 0);
    // All of the prompt but its last token (whose logits start the answer) came from the file.
    assert_eq!(again["timings"]["cache_n"], prompt_len - 1, "{again}");
    assert_eq!(again["timings"]["prompt_n"], 1);
    assert_eq!(again["content"], first["content"]);

    for name in ["../s1.bin", "a/b", "..", ".hidden", ""] {
        refused(
            &server,
            "/slots/0?action=save",
            json!({"filename": name}),
            "filename",
        );
    }
    refused(
        &server,
        "/slots/0?action=restore",
        json!({"filename": "missing.bin"}),
        "filename",
    );
    refused(
        &server,
        "/slots/0?action=nothing",
        json!({"filename": "x"}),
        "action",
    );
    refused(
        &server,
        "/slots/7?action=save",
        json!({"filename": "x"}),
        "id_slot",
    );
    refused(
        &server,
        "/completion",
        json!({"prompt": PROMPT, "id_slot": 2}),
        "id_slot",
    );
    // A file of another shape is refused, and leaves the slot empty.
    std::fs::write(dir.path().join("junk.bin"), b"OXBS junk").unwrap();
    refused(
        &server,
        "/slots/0?action=restore",
        json!({"filename": "junk.bin"}),
        "filename",
    );

    let plain = Server::start(&model, &["--parallel", "1", "--ctx", "256"], &[]);
    wait_healthy(&plain);
    let (status, v) = post(&plain, "/slots/0?action=save", &json!({"filename": "x"}));
    assert_eq!(
        (status, &v["error"]["type"]),
        (501, &json!("not_supported_error")),
        "{v}"
    );
}
