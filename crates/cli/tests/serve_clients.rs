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
    format!(
        "{}/tests/clients/{name}",
        oxibonsai_testkit::crate_dir(env!("CARGO_MANIFEST_DIR")).display()
    )
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
    let server = Server::start(
        &smollm2(),
        &["--parallel", "2", "--ctx", "2048", "--metrics"],
        &[],
    );
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
fn the_chat_page_streams_renders_safely_and_keeps_conversations_in_headless_chromium() {
    let chromium = chromium();
    // Every answer is bounded by the page's max-tokens setting (64, 400 for the one that is
    // stopped), so the first conversation's turns fit in a slot.
    let server = Server::start(
        &smollm2(),
        &["--parallel", "2", "--ctx", "4096", "--metrics"],
        &[],
    );
    wait_healthy(&server);
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("serve_clients");
    std::fs::create_dir_all(&dir).expect("creating the screenshot folder");
    let _ = std::fs::remove_file(dir.join("chat-page.png"));
    let started = Instant::now();
    let out = node(&[
        &script("chat_page.mjs"),
        &server.base,
        &chromium,
        dir.to_str().expect("UTF-8 path"),
    ]);
    println!(
        "{out:#}\nscreenshots in {} ({:.0} s)",
        dir.display(),
        started.elapsed().as_secs_f64()
    );

    assert_eq!(
        out["pageErrors"],
        json!([]),
        "JavaScript errors on the page"
    );
    assert_eq!(out["failedResponses"], json!([]), "failed requests");
    assert_eq!(out["dialogs"], json!([]), "alert/confirm/prompt dialogs");
    let models = get_json(&server, "/v1/models");
    assert_eq!(
        out["model"], models["data"][0]["id"],
        "the page shows the served model"
    );
    page_first_load(&out["firstLoad"]);

    // Two turns, streamed, with the settings applied and the conversation carried.
    let turns = out["turns"].as_array().expect("turns");
    assert_eq!(turns.len(), 2);
    let n_ctx = models["data"][0]["meta"]["n_ctx"]
        .as_u64()
        .expect("meta.n_ctx");
    for (i, turn) in turns.iter().enumerate() {
        let answer = turn["answer"].as_str().unwrap_or_default();
        assert!(!answer.trim().is_empty(), "turn {i}: empty answer: {turn}");
        assert_eq!(
            turn["errors"], 0,
            "turn {i}: the page shows an error: {turn}"
        );
        let stats = turn["stats"].as_str().unwrap_or_default();
        let (tokens, rate) = parse_stats(stats).unwrap_or_else(|| {
            panic!("turn {i}: no 'N tokens, R tokens/s' on the page: {stats:?}")
        });
        assert!(
            tokens > 0 && tokens <= 64 && rate > 0.0,
            "turn {i}: {stats:?}"
        );
        // An answer shorter than a few frames can land in one render however it streams (8
        // tokens at 250 t/s is 32 ms): the growth is required of answers that lasted 0.1 s;
        // the stop case below proves streaming whatever the speed (stopped mid-answer).
        let lengths = turn["lengths"].as_array().map(Vec::len).unwrap_or(0);
        let lasted = tokens as f64 / rate;
        assert!(
            tokens < 4 || lasted < 0.1 || lengths >= 2,
            "turn {i}: a {tokens}-token answer appeared in {lengths} step(s), not streamed: {turn}"
        );
        let ctx = turn["ctx"].as_str().unwrap_or_default();
        let (used, of) = ctx
            .strip_prefix("context ")
            .and_then(|c| c.split_once(" / "))
            .and_then(|(u, o)| Some((u.parse::<u64>().ok()?, o.parse::<u64>().ok()?)))
            .unwrap_or_else(|| panic!("turn {i}: no 'context N / M' on the page: {ctx:?}"));
        assert!(
            used > tokens && of == n_ctx,
            "turn {i}: {ctx:?} (n_ctx {n_ctx})"
        );
    }
    let stored = &out["conversation"]["stored"]["messages"];
    let system =
        json!({"role": "system", "content": "You are a helpful assistant. Answer briefly."});
    let user = |t: &str| json!({"role": "user", "content": t});
    let (first, second) = ("Hello! What is the capital of France?", "And of Italy?");
    let sent = out["sent"].as_array().expect("sent requests");
    assert_eq!(
        sent[0]["messages"],
        json!([system, user(first)]),
        "the first request"
    );
    assert_eq!(
        sent[1]["messages"],
        json!([system, user(first), {"role": "assistant", "content": stored[1]["content"]}, user(second)]),
        "the second request carries the conversation as stored"
    );
    for (i, request) in sent[..2].iter().enumerate() {
        assert_eq!(
            (
                &request["temperature"],
                &request["max_tokens"],
                &request["stream"]
            ),
            (&json!(0), &json!(64), &json!(true)),
            "request {i}: the settings"
        );
    }
    assert_eq!(
        out["conversation"]["shown"]["users"],
        json!([first, second]),
        "two user messages"
    );

    // Stop: the answer is kept as far as it came, the server's job is cancelled.
    let stop = &out["stop"];
    assert_eq!(stop["stored"]["stopped"], true, "{stop}");
    assert!(
        stop["stored"]["content"]
            .as_str()
            .is_some_and(|c| !c.is_empty()),
        "{stop}"
    );
    assert!(
        stop["meta"].as_str().is_some_and(|m| m.contains("stopped")),
        "{stop}"
    );
    assert_eq!(stop["button"], "Send", "{stop}");
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let metrics = server.get("/metrics").1;
        let cancelled = metric(&metrics, "oxibonsai_requests_cancelled_total");
        if cancelled >= Some(1.0) && metric(&metrics, "oxibonsai_active_slots") == Some(0.0) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the stopped answer was not cancelled:\n{metrics}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    // Regenerate: the same conversation asked again, the stopped answer replaced.
    let regenerate = &out["regenerate"];
    assert_eq!(regenerate["requests"], 1, "{regenerate}");
    assert_eq!(
        regenerate["again"]["messages"], regenerate["stopped"]["messages"],
        "{regenerate}"
    );
    assert_eq!(regenerate["count"], 6, "{regenerate}");
    let last = &regenerate["last"];
    assert!(
        last["stopped"].is_null() && last["error"].is_null(),
        "{regenerate}"
    );
    assert_eq!(
        out["copied"], last["content"],
        "Copy puts the answer on the clipboard"
    );

    // Markdown: the model's own text (constrained to the sample), rendered and highlighted.
    let markdown = &out["markdown"];
    let asked = |i: usize| sent[i]["guided_choice"][0].as_str().map(str::to_owned);
    let code_request = sent.iter().position(|s| {
        s["guided_choice"][0]
            .as_str()
            .is_some_and(|c| c.contains("```python"))
    });
    let code_text = code_request
        .and_then(asked)
        .expect("the request for the code sample");
    assert_eq!(
        markdown["stored"],
        code_text.as_str(),
        "the model's answer is the sample"
    );
    let class = markdown["codeClass"].as_str().unwrap_or_default();
    assert!(
        class.contains("hljs") && class.contains("language-python"),
        "{markdown}"
    );
    let keywords = markdown["keywords"].as_array().expect("keywords");
    assert!(
        keywords.contains(&json!("def")) && keywords.contains(&json!("return")),
        "{markdown}"
    );
    assert_eq!(
        markdown["code"].as_str().map(str::trim_end),
        Some("def add(a, b):\n    return a + b")
    );
    assert_eq!(
        (&markdown["strong"], &markdown["inlineCode"]),
        (&json!(["5"]), &json!(["add(2, 3)"]))
    );
    assert_eq!(markdown["copyButtons"], 1, "{markdown}");

    // Thinking, collapsed: from <think> in the content or from reasoning_content.
    let think = &out["think"];
    assert_eq!(
        (&think["visible"], &think["open"]),
        (&json!(true), &json!(false)),
        "{think}"
    );
    assert_eq!(
        think["reasoning"].as_str().map(str::trim),
        Some("The user greets me."),
        "{think}"
    );
    assert_eq!(think["answer"], "Hello there!", "{think}");

    // A tool call, as the server parsed it from the model's answer.
    let tool = &out["tool"];
    assert_eq!(tool["request"]["tool_choice"], "required", "{tool}");
    assert_eq!(
        tool["stored"]["tool_calls"][0]["function"]["name"], "get_weather",
        "{tool}"
    );
    assert!(
        tool["summary"][0]
            .as_str()
            .is_some_and(|s| s.contains("get_weather")),
        "{tool}"
    );
    // The arguments as the server streamed them: pretty-printed when they are JSON, as they are
    // when not (SmolLM2 may run out of max_tokens inside them).
    let streamed = tool["stored"]["tool_calls"][0]["function"]["arguments"]
        .as_str()
        .unwrap_or_else(|| panic!("no arguments: {tool}"));
    let shown = tool["arguments"][0].as_str().unwrap_or_default();
    match serde_json::from_str::<Value>(streamed) {
        Ok(value) => assert_eq!(
            serde_json::from_str::<Value>(shown).ok(),
            Some(value),
            "{tool}"
        ),
        Err(_) => assert_eq!(shown, streamed, "{tool}"),
    }

    // Hostile markup from the model and from an edited answer: shown as text, nothing runs, and
    // the sanitizer left the Content-Security-Policy nothing to block.
    let hostile = &out["hostile"];
    let hostile_request = sent.iter().position(|s| {
        s["guided_choice"][0]
            .as_str()
            .is_some_and(|c| c.contains("<script>"))
    });
    let hostile_text = hostile_request
        .and_then(asked)
        .expect("the request for the markup");
    assert_eq!(
        hostile["stored"],
        hostile_text.as_str(),
        "the model's answer is the markup"
    );
    for (what, seen) in [
        ("the answer", hostile),
        ("the edited answer", &out["edited"]),
    ] {
        assert!(seen["pwned"].is_null(), "{what}: script ran: {seen}");
        assert_eq!(
            seen["elements"], 0,
            "{what}: live markup in the page: {seen}"
        );
        assert_eq!(
            seen["csp"],
            json!([]),
            "{what}: the CSP had to block something: {seen}"
        );
        assert!(
            seen["text"]
                .as_str()
                .is_some_and(|t| t.contains("<img src=x onerror=")),
            "{what}: {seen}"
        );
    }
    assert!(hostile["text"]
        .as_str()
        .is_some_and(|t| t.contains("<script>window.pwned='script'</script>")));
    assert!(hostile["links"].as_array().is_some_and(|l| l
        .iter()
        .all(|h| !h.as_str().is_some_and(|h| h.starts_with("javascript")))));
    assert_eq!(
        out["edited"]["strong"],
        json!(["bold"]),
        "the edit is markdown"
    );

    // A reload keeps the conversations, the settings and the edit.
    let reload = &out["reload"];
    assert_eq!(
        reload["before"]["index"], reload["after"]["index"],
        "{reload}"
    );
    assert_eq!(
        reload["before"]["shown"], reload["after"]["shown"],
        "{reload}"
    );
    let titles: Vec<&Value> = reload["after"]["index"]
        .as_array()
        .expect("index")
        .iter()
        .map(|c| &c["title"])
        .collect();
    assert_eq!(
        reload["after"]["sidebar"],
        json!(titles),
        "the sidebar lists the stored conversations"
    );
    assert_eq!(titles.len(), 5, "{reload}");
    assert_eq!(
        out["settings"]["shown"], out["settings"]["set"],
        "settings after a reload"
    );
    let reopened = &out["reopened"];
    assert_eq!(
        reopened["users"],
        json!([
            first,
            second,
            "Tell me a long story about a dragon who learns to paint."
        ]),
        "{reopened}"
    );
    assert_eq!(
        reopened["answers"].as_array().map(Vec::len),
        Some(3),
        "{reopened}"
    );
    let sidebar = &out["sidebar"];
    assert_eq!(sidebar["titles"], sidebar["stored"], "{sidebar}");
    let titles = sidebar["titles"].as_array().expect("titles");
    assert_eq!(titles.len(), 4, "one deleted: {sidebar}");
    assert!(titles.contains(&json!("Code sample")), "renamed: {sidebar}");
    assert!(
        !titles.iter().any(|t| t
            .as_str()
            .is_some_and(|t| t.starts_with("What is the weather"))),
        "deleted: {sidebar}"
    );

    // Light and dark: the system's by default, the toggle overrides it and is kept.
    let theme = &out["theme"];
    assert_eq!(
        (&theme["light"], &theme["dark"]),
        (&json!("rgb(250, 250, 250)"), &json!("rgb(22, 22, 24)")),
        "{theme}"
    );
    assert_eq!(
        (&theme["toggled"], &theme["themeStored"], &theme["back"]),
        (&theme["light"], &json!("light"), &theme["dark"]),
        "{theme}"
    );

    // A phone: nothing wider than the screen, the sidebar off-canvas until asked for.
    let phone = &out["phone"];
    for key in ["overflow", "overflowOpen"] {
        assert_eq!(
            phone[key],
            json!({"page": 0, "body": 0, "log": 0}),
            "{key}: {phone}"
        );
    }
    let right =
        |b: &Value| b["x"].as_f64().unwrap_or(f64::NAN) + b["width"].as_f64().unwrap_or(f64::NAN);
    assert!(
        right(&phone["sidebarClosed"]) <= 0.0 && right(&phone["sidebarAfter"]) <= 0.0,
        "{phone}"
    );
    let open = &phone["sidebarOpen"];
    assert!(
        open["x"].as_f64() == Some(0.0) && right(open) <= 390.0,
        "{phone}"
    );
    assert!(
        right(&phone["send"]) <= 390.0 && phone["input"]["width"].as_f64() > Some(150.0),
        "{phone}"
    );
    for shot in ["chat-page.png", "chat-page-phone.png"] {
        let png = std::fs::read(dir.join(shot)).expect("the screenshot was saved");
        assert!(png.starts_with(b"\x89PNG"), "{shot} is a PNG");
    }
}

/// What the browser fetched on its first visit with an empty cache: under 300 KB in all, each
/// file with its type and the cache policy of its kind.
fn page_first_load(first: &Value) {
    let files = first["files"].as_array().expect("files");
    let bytes = first["bytes"].as_u64().expect("bytes");
    println!("first load: {} files, {bytes} bytes", files.len());
    assert!(bytes < 300_000, "first load is {bytes} bytes: {first:#}");
    let assets = files
        .iter()
        .filter(|f| f["url"].as_str().is_some_and(|u| u.starts_with("/assets/")))
        .count();
    assert!(assets >= 20, "{first:#}");
    for f in files {
        let url = f["url"].as_str().unwrap_or_default();
        let (ty, cache) = (
            f["type"].as_str().unwrap_or_default(),
            f["cache"].as_str().unwrap_or_default(),
        );
        assert_eq!(f["status"], 200, "{f}");
        let want = match url.rsplit('.').next() {
            _ if url == "/" => ("text/html", "no-cache"),
            Some("js") if url.starts_with("/assets/vendor/") => ("text/javascript", "immutable"),
            Some("js") => ("text/javascript", "no-cache"),
            Some("css") => ("text/css", "no-cache"),
            _ => continue,
        };
        assert!(
            ty.starts_with(want.0) && cache.contains(want.1),
            "{url}: {ty}, {cache}, want {want:?}"
        );
    }
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
