//! `oxibonsai serve`'s llama-server extensions on the OpenAI routes and the text routes, checked
//! over HTTP against independent answers (SmolLM2-135M, greedy): `/tokenize`'s `with_pieces`
//! against the plain ids and the content, `continue_final_message` against `/v1/completions` on
//! the prompt written out by hand in SmolLM2's ChatML, `response_format` `json_object` with a
//! `schema`, several prompts times `n` on `/v1/completions`, the refusals llama-server gives, and
//! the `llamacpp:*` metrics against the usage the answers reported. (The OpenAI-client side —
//! `system_fingerprint`, `timings`, the streamed first chunk, `n`, the context error — is in
//! `clients/openai_conformance.py`.)

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

fn ok(server: &Server, path: &str, body: Value, completion_tokens: &mut u64) -> Value {
    let (status, answer) = post(server, path, &body);
    assert_eq!(status, 200, "{path} {body}: {answer}");
    *completion_tokens += answer["usage"]["completion_tokens"].as_u64().unwrap_or(0);
    answer
}

fn refused(server: &Server, path: &str, body: Value, param: &str) {
    let (status, answer) = post(server, path, &body);
    assert_eq!(status, 400, "{body}: {answer}");
    assert_eq!(answer["error"]["param"], param, "{body}: {answer}");
}

/// Waits for the model to load (`/health` 200).
fn wait_healthy(server: &Server) {
    for _ in 0..600 {
        if server.get("/health").0 == 200 {
            return;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    panic!("the server did not load the model:\n{}", server.log());
}

#[test]
fn llama_server_fields_on_the_openai_and_text_routes() {
    let server = Server::start(
        &smollm2(),
        &["--parallel", "2", "--ctx", "2048", "--metrics"],
        &[],
    );
    wait_healthy(&server);
    let mut predicted = 0u64;

    // with_pieces: the same ids as without, each with its text; the texts make the content.
    let content = "Pieces of text, unicode 媽 and emoji 🤗";
    let (_, plain) = post(&server, "/tokenize", &json!({"content": content}));
    let (status, pieces) = post(
        &server,
        "/tokenize",
        &json!({"content": content, "with_pieces": true}),
    );
    assert_eq!(status, 200, "{pieces}");
    let list = pieces["tokens"].as_array().expect("a token list");
    let ids: Vec<&Value> = list.iter().map(|t| &t["id"]).collect();
    assert_eq!(
        ids,
        plain["tokens"]
            .as_array()
            .unwrap()
            .iter()
            .collect::<Vec<_>>()
    );
    let mut bytes = Vec::new();
    for t in list {
        match &t["piece"] {
            Value::String(s) => bytes.extend_from_slice(s.as_bytes()),
            // Part of a character: the raw bytes.
            Value::Array(b) => bytes.extend(b.iter().map(|x| x.as_u64().unwrap() as u8)),
            other => panic!("piece {other}"),
        }
    }
    assert_eq!(String::from_utf8(bytes).unwrap(), content);
    assert!(list.iter().any(|t| t["piece"].is_array()), "{pieces}");

    // continue_final_message: the answer continues the assistant's text, exactly as a completion
    // of the hand-written ChatML prompt ending in that text.
    let messages = json!([
        {"role": "system", "content": "You are a helpful assistant."},
        {"role": "user", "content": "Name a colour."},
        {"role": "assistant", "content": "My favourite colour is"},
    ]);
    let chat = ok(
        &server,
        "/v1/chat/completions",
        json!({"messages": messages, "continue_final_message": true, "add_generation_prompt": false,
               "max_tokens": 6, "temperature": 0}),
        &mut predicted,
    );
    let by_hand = "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\n\
                   Name a colour.<|im_end|>\n<|im_start|>assistant\nMy favourite colour is";
    let text = ok(
        &server,
        "/v1/completions",
        json!({"prompt": by_hand, "max_tokens": 6, "temperature": 0}),
        &mut predicted,
    );
    assert_eq!(
        chat["choices"][0]["message"]["content"], text["choices"][0]["text"],
        "{chat} {text}"
    );
    assert_eq!(
        chat["usage"]["prompt_tokens"],
        text["usage"]["prompt_tokens"]
    );
    refused(
        &server,
        "/v1/chat/completions",
        json!({"messages": messages, "continue_final_message": true, "add_generation_prompt": true}),
        "continue_final_message",
    );
    refused(
        &server,
        "/v1/chat/completions",
        json!({"messages": [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"},
                            {"role": "assistant", "content": "c"}]}),
        "messages",
    );

    // response_format json_object with a schema (llama-server's extension) holds the answer to it.
    let user = json!([{"role": "user", "content": "Write an example"}]);
    let answer = ok(
        &server,
        "/v1/chat/completions",
        json!({"messages": user, "max_tokens": 6,
               "response_format": {"type": "json_object", "schema": {"const": "42"}}}),
        &mut predicted,
    );
    assert_eq!(
        answer["choices"][0]["message"]["content"], "\"42\"",
        "{answer}"
    );
    refused(
        &server,
        "/v1/chat/completions",
        json!({"messages": user, "response_format": {"type": "json_object", "schema": 123}}),
        "response_format.schema",
    );

    // Several prompts (text and ids) times n: choices by prompt, then by choice; greedy choices of
    // one prompt agree; each prompt's tokens count once.
    let (_, ids) = post(
        &server,
        "/tokenize",
        &json!({"content": "The capital of France"}),
    );
    let answer = ok(
        &server,
        "/v1/completions",
        json!({"prompt": ["Once upon a time", ids["tokens"]], "n": 2, "max_tokens": 4, "temperature": 0}),
        &mut predicted,
    );
    let choices = answer["choices"].as_array().unwrap();
    let index: Vec<u64> = choices
        .iter()
        .map(|c| c["index"].as_u64().unwrap())
        .collect();
    assert_eq!(index, [0, 1, 2, 3], "{answer}");
    assert_eq!(choices[0]["text"], choices[1]["text"]);
    assert_eq!(choices[2]["text"], choices[3]["text"]);
    assert_ne!(choices[0]["text"], choices[2]["text"]);
    let (_, first) = post(
        &server,
        "/tokenize",
        &json!({"content": "Once upon a time"}),
    );
    let prompt_tokens =
        first["tokens"].as_array().unwrap().len() + ids["tokens"].as_array().unwrap().len();
    assert_eq!(answer["usage"]["prompt_tokens"], prompt_tokens, "{answer}");
    assert_eq!(answer["usage"]["completion_tokens"], 16, "{answer}");

    // llama-server's metric series count what the answers reported.
    let (status, metrics) = server.get("/metrics");
    assert_eq!(status, 200);
    assert!(
        metrics
            .to_ascii_lowercase()
            .contains("\r\nprocess-start-time-unix: "),
        "{metrics}"
    );
    let value = |name: &str| -> f64 {
        metrics
            .lines()
            .find_map(|l| l.strip_prefix(&format!("{name} ")))
            .unwrap_or_else(|| panic!("{name} missing:\n{metrics}"))
            .parse()
            .unwrap()
    };
    assert_eq!(value("llamacpp:tokens_predicted_total"), predicted as f64);
    assert!(value("llamacpp:n_decode_total") >= predicted as f64 / 2.0);
    assert!(value("llamacpp:tokens_predicted_seconds_total") > 0.0);
    // The last answer has been read; its slot is let go just after (poll, bounded).
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    loop {
        let (_, metrics) = server.get("/metrics");
        let processing = metrics
            .lines()
            .find_map(|l| l.strip_prefix("llamacpp:requests_processing "))
            .map(|v| v.trim().to_owned());
        if processing.as_deref() == Some("0") {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "llamacpp:requests_processing stays {processing:?}"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// llama-server's launch flags: `--temp`, `--seed` and `-n` fill what requests leave out,
/// `--chat-template-file` replaces the model's template (the prompt counted against `/tokenize`
/// of the text it renders, written out here), `--no-webui` drops the page; `--ctx-shift` and a
/// template name that is not one of llama.cpp's built-ins known here are refused at start naming
/// the flag.
#[test]
fn llama_server_launch_flags() {
    let dir = std::env::temp_dir().join(format!("oxibonsai-flags-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let template = dir.join("template.jinja");
    std::fs::write(
        &template,
        "{% for m in messages %}[{{ m.role }}] {{ m.content }}\n{% endfor %}{% if add_generation_prompt %}>>{% endif %}",
    )
    .unwrap();
    let server = Server::start(
        &smollm2(),
        &[
            "--temp",
            "0",
            "--seed",
            "7",
            "-n",
            "3",
            "--no-webui",
            "--no-context-shift",
            "--chat-template-file",
            template.to_str().unwrap(),
        ],
        &[],
    );
    wait_healthy(&server);
    assert_eq!(server.get("/").0, 404);
    // The native endpoint's defaults follow the flags too.
    let (_, props) = server.get("/props");
    let props: Value = serde_json::from_str(props.split_once("\r\n\r\n").unwrap().1).unwrap();
    let params = &props["default_generation_settings"]["params"];
    assert_eq!(params["seed"], 7, "{params}");
    assert_eq!(params["temperature"], 0.0, "{params}");
    assert_eq!(params["n_predict"], 3, "{params}");
    let mut predicted = 0;
    let body = json!({"messages": [{"role": "user", "content": "Tell me a story."}]});
    let a = ok(
        &server,
        "/v1/chat/completions",
        body.clone(),
        &mut predicted,
    );
    let b = ok(&server, "/v1/chat/completions", body, &mut predicted);
    assert_eq!(a["usage"]["completion_tokens"], 3, "{a}");
    // Greedy by the server's default: the same answer twice.
    assert_eq!(a["choices"][0]["message"], b["choices"][0]["message"]);
    let (_, rendered) = post(
        &server,
        "/tokenize",
        &json!({"content": "[user] Tell me a story.\n>>"}),
    );
    assert_eq!(
        a["usage"]["prompt_tokens"],
        rendered["tokens"].as_array().unwrap().len(),
        "{a}"
    );
    let text = ok(
        &server,
        "/v1/completions",
        json!({"prompt": "Once"}),
        &mut predicted,
    );
    assert_eq!(text["usage"]["completion_tokens"], 3, "{text}");
    drop(server);
    std::fs::remove_dir_all(&dir).unwrap();

    for (flags, says) in [
        (&["--ctx-shift"][..], "context shift is not implemented"),
        (
            &["--chat-template", "no-such-template"][..],
            "built-in template names",
        ),
    ] {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_oxibonsai"))
            .args(["serve", "-m"])
            .arg(smollm2())
            .args(["--port", "0"])
            .args(flags)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            !out.status.success() && stderr.contains(says),
            "{flags:?}: {stderr}"
        );
    }
}

/// llama-server's `--reasoning on|off|auto`: the template's `enable_thinking` for requests that do
/// not set it (`auto`: true, since this template's generation prompt answers to it — llama.cpp's
/// `enable_reasoning != 0 && template_supports_thinking`), and with `off` a `<think>` the template
/// opens anyway is closed; the chat prompt is
/// the text `/apply-template` shows (counted against `/tokenize`). `--reasoning-format
/// deepseek-legacy` is refused at start.
#[test]
fn llama_server_reasoning_flags() {
    let dir = std::env::temp_dir().join(format!("oxibonsai-reasoning-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let template = dir.join("template.jinja");
    std::fs::write(
        &template,
        "{% for m in messages %}[{{ m.role }}] {{ m.content }}\n{% endfor %}\
         {% if add_generation_prompt %}>>{% if enable_thinking is defined %}\
         {% if enable_thinking %}THINK{% else %}NOTHINK{% endif %}{% endif %}<think>\n{% endif %}",
    )
    .unwrap();
    let messages = json!([{"role": "user", "content": "hi"}]);
    for (mode, expected, with_kwargs) in [
        (
            "auto",
            "[user] hi\n>>THINK<think>\n",
            "[user] hi\n>>THINK<think>\n",
        ),
        (
            "on",
            "[user] hi\n>>THINK<think>\n",
            "[user] hi\n>>THINK<think>\n",
        ),
        (
            "off",
            "[user] hi\n>>NOTHINK<think>\n</think>",
            "[user] hi\n>>THINK<think>\n</think>",
        ),
    ] {
        let server = Server::start(
            &smollm2(),
            &[
                "--reasoning",
                mode,
                "--chat-template-file",
                template.to_str().unwrap(),
            ],
            &[],
        );
        wait_healthy(&server);
        let (status, shown) = post(&server, "/apply-template", &json!({"messages": messages}));
        assert_eq!(status, 200, "{mode}: {shown}");
        assert_eq!(shown["prompt"], expected, "--reasoning {mode}");
        // The request's own `enable_thinking` wins over the flag.
        let (_, asked) = post(
            &server,
            "/apply-template",
            &json!({"messages": messages, "chat_template_kwargs": {"enable_thinking": true}}),
        );
        assert_eq!(
            asked["prompt"], with_kwargs,
            "--reasoning {mode} with kwargs"
        );
        let mut predicted = 0;
        let answer = ok(
            &server,
            "/v1/chat/completions",
            json!({"messages": messages, "max_tokens": 1}),
            &mut predicted,
        );
        let (_, tokens) = post(&server, "/tokenize", &json!({"content": expected}));
        assert_eq!(
            answer["usage"]["prompt_tokens"],
            tokens["tokens"].as_array().unwrap().len(),
            "--reasoning {mode}: {answer}"
        );
    }
    std::fs::remove_dir_all(&dir).unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_oxibonsai"))
        .args(["serve", "-m"])
        .arg(smollm2())
        .args(["--port", "0", "--reasoning-format", "deepseek-legacy"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && stderr.contains("deepseek-legacy"),
        "{stderr}"
    );
}
