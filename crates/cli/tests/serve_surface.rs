//! llama-server's surface beside generation, against the real binary (SmolLM2-135M): the CORS
//! proxy checked at a raw TCP target that records what reached it; Vertex AI's `/predict`
//! compared with the routes it dispatches to; `post_sampling_probs` compared with the model's own
//! log-probabilities renormalized over what top-k keeps; `{"prompt_string": …}` compared with the
//! same text as a plain prompt.

mod serve_common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use serve_common::{smollm2, Server};

fn wait_healthy(server: &Server) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while server.get("/health").0 != 200 {
        assert!(Instant::now() < deadline, "never loaded:\n{}", server.log());
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// One request on its own connection: (status, head in lower case, body with any chunked framing
/// removed).
fn exchange(
    server: &Server,
    method: &str,
    path: &str,
    headers: &[&str],
    body: &str,
) -> (u16, String, String) {
    let mut stream = TcpStream::connect(server.addr()).expect("connecting to the server");
    stream
        .set_read_timeout(Some(Duration::from_secs(120)))
        .unwrap();
    let mut head = format!(
        "{method} {path} HTTP/1.1\r\nHost: {}\r\nConnection: close\r\n",
        server.addr()
    );
    for h in headers {
        head.push_str(h);
        head.push_str("\r\n");
    }
    head.push_str(&format!("Content-Length: {}\r\n\r\n{body}", body.len()));
    stream.write_all(head.as_bytes()).unwrap();
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw).unwrap();
    let text = String::from_utf8_lossy(&raw).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").expect("an HTTP answer");
    let head = head.to_ascii_lowercase();
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let body = if head.contains("transfer-encoding: chunked") {
        dechunk(body)
    } else {
        body.to_owned()
    };
    (status, head, body)
}

fn dechunk(mut body: &str) -> String {
    let mut out = String::new();
    while let Some((size, rest)) = body.split_once("\r\n") {
        let n = usize::from_str_radix(size.trim(), 16).expect("a chunk size");
        if n == 0 {
            break;
        }
        out.push_str(&rest[..n]);
        body = &rest[n + 2..];
    }
    out
}

fn json_of(what: &str, status: u16, body: &str) -> Value {
    assert_eq!(status, 200, "{what}: {body}");
    serde_json::from_str(body).unwrap_or_else(|e| panic!("{what}: not JSON ({e}): {body}"))
}

/// A one-shot HTTP target on loopback: it answers `status` (with `body`) to one request and sends
/// back the request's head lines, lower-cased, and its body.
fn target(status: u16, body: &'static str) -> (u16, mpsc::Receiver<(Vec<String>, String)>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let (stream, _) = listener.accept().unwrap();
        let mut reader = BufReader::new(stream);
        let mut lines = Vec::new();
        loop {
            let mut line = String::new();
            reader.read_line(&mut line).unwrap();
            if line == "\r\n" || line.is_empty() {
                break;
            }
            lines.push(line.trim_end().to_ascii_lowercase());
        }
        let length = lines
            .iter()
            .find_map(|l| l.strip_prefix("content-length:"))
            .map_or(0, |v| v.trim().parse().unwrap());
        let mut got = vec![0; length];
        reader.read_exact(&mut got).unwrap();
        let reason = if status == 204 { "No Content" } else { "OK" };
        let answer = if status == 204 {
            format!("HTTP/1.1 204 {reason}\r\nX-Target: yes\r\n\r\n")
        } else {
            format!(
                "HTTP/1.1 {status} {reason}\r\nContent-Type: text/plain\r\nX-Target: yes\r\nAccess-Control-Allow-Origin: *\r\nContent-Length: {}\r\n\r\n{body}",
                body.len()
            )
        };
        reader.get_mut().write_all(answer.as_bytes()).unwrap();
        tx.send((lines, String::from_utf8_lossy(&got).into_owned()))
            .unwrap();
    });
    (port, rx)
}

#[test]
fn the_cors_proxy_forwards_only_what_is_addressed_to_the_target() {
    let model = smollm2();
    let off = Server::start(&model, &["--parallel", "1", "--ctx", "256"], &[]);
    wait_healthy(&off);
    let (status, _, body) = exchange(&off, "GET", "/cors-proxy?url=http://127.0.0.1:1/", &[], "");
    assert_eq!(status, 403, "{body}");
    let v: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["error"]["type"], "feature_disabled", "{v}");
    drop(off);

    let server = Server::start(
        &model,
        &[
            "--parallel",
            "1",
            "--ctx",
            "256",
            "--ui-mcp-proxy",
            "--api-key",
            "k3y",
        ],
        &[],
    );
    wait_healthy(&server);
    let (port, seen) = target(200, "from the target");
    let (status, head, body) = exchange(
        &server,
        "GET",
        &format!("/cors-proxy?url=http%3A%2F%2F127.0.0.1%3A{port}%2Fcapture%3Fa%3D1"),
        &[
            "Authorization: Bearer k3y",
            "X-Api-Key: k3y",
            "Cookie: session=secret",
            "Proxy-Authorization: Basic secret",
            "X-Llama-Server-Proxy-Header-Accept: application/json",
            "X-Llama-Server-Proxy-Header-Authorization: Bearer explicit",
        ],
        "",
    );
    assert_eq!(status, 200, "{head}{body}");
    assert_eq!(body, "from the target");
    assert!(head.contains("x-target: yes"), "{head}");
    assert!(head.contains("content-type: text/plain"), "{head}");
    assert!(!head.contains("access-control-allow-origin: *"), "{head}");
    let (lines, _) = seen.recv_timeout(Duration::from_secs(30)).unwrap();
    assert_eq!(lines[0], "get /capture?a=1 http/1.1", "{lines:?}");
    assert!(
        lines.contains(&"accept: application/json".to_owned()),
        "{lines:?}"
    );
    assert!(
        lines.contains(&"authorization: bearer explicit".to_owned()),
        "{lines:?}"
    );
    for secret in [
        "x-api-key",
        "cookie",
        "proxy-authorization",
        "x-llama-server-proxy",
    ] {
        assert!(
            !lines.iter().any(|l| l.starts_with(secret)),
            "{secret} reached the target: {lines:?}"
        );
    }

    // A POST body goes through as it is; a 204 comes back empty.
    let (port, seen) = target(204, "");
    let (status, head, body) = exchange(
        &server,
        "POST",
        &format!("/cors-proxy?url=http://127.0.0.1:{port}/"),
        &[
            "Authorization: Bearer k3y",
            "Content-Type: application/json",
        ],
        r#"{"jsonrpc":"2.0"}"#,
    );
    assert_eq!(status, 204, "{head}{body}");
    assert!(body.is_empty(), "{body:?}");
    let (lines, sent) = seen.recv_timeout(Duration::from_secs(30)).unwrap();
    assert_eq!(lines[0], "post / http/1.1");
    assert_eq!(sent, r#"{"jsonrpc":"2.0"}"#);

    // The key guards the proxy like the API; a URL it cannot use is the caller's error.
    let (status, ..) = exchange(
        &server,
        "GET",
        "/cors-proxy?url=http://127.0.0.1:1/",
        &[],
        "",
    );
    assert_eq!(status, 401);
    for bad in ["ftp://127.0.0.1/", "http://user:pw@127.0.0.1/", "nothing"] {
        let (status, _, body) = exchange(
            &server,
            "GET",
            &format!("/cors-proxy?url={bad}"),
            &["Authorization: Bearer k3y"],
            "",
        );
        assert_eq!(status, 400, "{bad}: {body}");
    }
}

#[test]
fn vertex_predictions_are_the_answers_of_the_routes_they_name() {
    let server = Server::start(
        &smollm2(),
        &["--parallel", "2", "--ctx", "512"],
        &[
            ("AIP_MODE", "PREDICTION"),
            ("AIP_HTTP_PORT", "0"),
            ("AIP_HEALTH_ROUTE", "ready"),
        ],
    );
    wait_healthy(&server);
    assert_eq!(server.get("/ready").0, 200);
    let chat = json!({"messages": [{"role": "user", "content": "Say hello"}], "max_tokens": 8, "temperature": 0});
    let (status, _, body) = exchange(
        &server,
        "POST",
        "/v1/chat/completions",
        &["Content-Type: application/json"],
        &chat.to_string(),
    );
    let direct = json_of("chat", status, &body);
    let (status, _, body) = exchange(
        &server,
        "POST",
        "/tokenize",
        &["Content-Type: application/json"],
        r#"{"content":"hello world"}"#,
    );
    let tokens = json_of("tokenize", status, &body);

    let mut instance = chat.clone();
    instance["@requestFormat"] = json!("chatCompletions");
    instance["stream"] = json!(true);
    let request = json!({"instances": [
        instance,
        {"@requestFormat": "/tokenize", "content": "hello world"},
        {"@requestFormat": "tokenize", "content": "hello world"},
        {"@requestFormat": "noSuchRoute"},
        {"content": "no format"},
        {"@requestFormat": "completion", "prompt": "x", "n_probs": -5},
    ]});
    let (status, _, body) = exchange(
        &server,
        "POST",
        "/predict",
        &["Content-Type: application/json"],
        &request.to_string(),
    );
    let predictions = json_of("predict", status, &body)["predictions"].clone();
    assert_eq!(
        predictions.as_array().map(Vec::len),
        Some(6),
        "{predictions}"
    );
    assert_eq!(
        predictions[0]["choices"][0]["message"]["content"],
        direct["choices"][0]["message"]["content"],
        "{predictions}"
    );
    assert_eq!(predictions[1], tokens);
    assert_eq!(predictions[2], tokens);
    for (i, needle) in [(3, "noSuchRoute"), (4, "@requestFormat"), (5, "n_probs")] {
        assert!(
            predictions[i]["error"]["message"]
                .as_str()
                .is_some_and(|m| m.contains(needle)),
            "prediction {i}: {}",
            predictions[i]
        );
    }
    let (status, _, body) = exchange(
        &server,
        "POST",
        "/predict",
        &["Content-Type: application/json"],
        r#"{"instances": 3}"#,
    );
    assert_eq!(status, 400, "{body}");
}

/// The completion's per-token report of `n` alternatives, as (id, value) pairs.
fn report(v: &Value, list: &str, value: &str) -> Vec<(u64, f64)> {
    v["completion_probabilities"][0][list]
        .as_array()
        .unwrap_or_else(|| panic!("no {list}: {v}"))
        .iter()
        .map(|t| (t["id"].as_u64().unwrap(), t[value].as_f64().unwrap()))
        .collect()
}

#[test]
fn post_sampling_probabilities_are_the_models_renormalized_over_what_the_chain_keeps() {
    let server = Server::start(&smollm2(), &["--parallel", "1", "--ctx", "512"], &[]);
    wait_healthy(&server);
    let prompt = "Today was the day. Today I would finally become a";
    let ask = |body: Value| {
        let (status, _, text) = exchange(
            &server,
            "POST",
            "/completion",
            &["Content-Type: application/json"],
            &body.to_string(),
        );
        json_of("completion", status, &text)
    };
    let model = ask(json!({"prompt": prompt, "n_predict": 1, "n_probs": 5, "temperature": 0}));
    let model = report(&model, "top_logprobs", "logprob");
    // Top-k 3, no other truncation, temperature 1: the draw is over the three most likely
    // tokens with their model probabilities renormalized.
    let after = ask(
        json!({"prompt": prompt, "n_predict": 1, "n_probs": 5, "temperature": 1.0,
        "top_k": 3, "top_p": 1.0, "min_p": 0.0, "post_sampling_probs": true, "seed": 7}),
    );
    assert_eq!(after["generation_settings"]["post_sampling_probs"], true);
    let first = &after["completion_probabilities"][0];
    assert!(
        first.get("logprob").is_none() && first.get("top_logprobs").is_none(),
        "{first}"
    );
    let chosen = (
        first["id"].as_u64().unwrap(),
        first["prob"].as_f64().unwrap(),
    );
    let after = report(&after, "top_probs", "prob");
    assert_eq!(after.len(), 3, "only what top-k kept: {after:?}");
    let z: f64 = model[..3].iter().map(|(_, lp)| lp.exp()).sum();
    for ((id, p), (want_id, lp)) in after.iter().zip(&model) {
        assert_eq!(id, want_id);
        let want = lp.exp() / z;
        assert!(
            (p - want).abs() < 1e-4,
            "token {id}: {p} after the chain, {want} from the model"
        );
    }
    assert!(
        after
            .iter()
            .any(|t| t.0 == chosen.0 && (t.1 - chosen.1).abs() < 1e-12),
        "{chosen:?} {after:?}"
    );
}

#[test]
fn a_prompt_string_object_is_its_text() {
    let server = Server::start(&smollm2(), &["--parallel", "1", "--ctx", "512"], &[]);
    wait_healthy(&server);
    let ask = |prompt: Value| {
        let body = json!({"prompt": prompt, "n_predict": 6, "temperature": 0});
        let (status, _, text) = exchange(
            &server,
            "POST",
            "/completion",
            &["Content-Type: application/json"],
            &body.to_string(),
        );
        (status, text)
    };
    let (status, plain) = ask(json!("The capital of France is"));
    let plain = json_of("plain", status, &plain);
    let (status, object) = ask(json!({"prompt_string": "The capital of France is"}));
    let object = json_of("object", status, &object);
    assert_eq!(object["content"], plain["content"]);
    assert_eq!(object["tokens_evaluated"], plain["tokens_evaluated"]);
    let (status, body) = ask(json!({"prompt_string": "x", "multimodal_data": ["AAAA"]}));
    assert_eq!(status, 400, "{body}");
    assert!(body.contains("multimodal_data"), "{body}");
}
