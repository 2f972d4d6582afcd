//! MTP drafting (`--draft-mtp`) in `chat` and `serve`, on a file written by `synth --arch qwen35
//! --nextn 1` with a real vocabulary and chat template: greedy chat turns print what they print
//! without drafting (the head's cache following the conversation from turn to turn and through a
//! `/reset`), and a server's answers — several requests at once in 2 slots, greedy and sampled
//! with a seed, slots reused, prefixes copied between slots, a stream cancelled mid-answer — are
//! the answers of a server that does not draft; `timings` and `/metrics` count the drafted and
//! accepted tokens, and the model still sleeps and wakes. A file without the head is refused by
//! `serve` and `chat`, naming the key.

#![cfg(unix)]

mod common;
mod serve_common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{oxibonsai, path_str};
use serde_json::{json, Value};
use serve_common::Server;

/// `synth --arch qwen35 --format q8_0 --nextn 1` (head or not) with Qwen3's vocabulary.
fn synth(dir: &Path, name: &str, nextn: bool) -> PathBuf {
    let path = dir.join(format!("{name}.gguf"));
    let vocab = oxibonsai_testkit::golden("models/qwen3-q1_0.gguf");
    let mut args = vec![
        "synth",
        "--arch",
        "qwen35",
        "--format",
        "q8_0",
        "--seed",
        "31",
        "--vocab",
        path_str(&vocab),
        "-o",
        path_str(&path),
    ];
    if nextn {
        args.extend(["--nextn", "1"]);
    }
    let run = oxibonsai(args);
    assert_eq!(run.code, 0, "synth fails: {}", run.stderr);
    path
}

/// `chat --temp 0 --verbose` with `input` piped in: (stdout, stderr).
fn chat(model: &Path, extra: &[&str], input: &str) -> (String, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_oxibonsai"))
        .args(["chat", "-m", path_str(model), "--temp", "0", "--verbose"])
        .args(["-n", "16", "-c", "1024"])
        .args(extra)
        .env_remove("OXIBONSAI_LOG")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(input.as_bytes())
        .unwrap();
    let output = child.wait_with_output().unwrap();
    let stdout = String::from_utf8(output.stdout).unwrap();
    let stderr = String::from_utf8(output.stderr).unwrap();
    assert_eq!(output.status.code(), Some(0), "{stderr}");
    (stdout, stderr)
}

/// The numbers of each `[N tokens, …; drafted D, accepted A (…)]` line: (D, A).
fn draft_counts(stderr: &str) -> Vec<(usize, usize)> {
    stderr
        .lines()
        .filter_map(|l| l.split_once("; drafted ").map(|(_, rest)| rest))
        .map(|rest| {
            let n: Vec<usize> = rest
                .split(|c: char| !c.is_ascii_digit())
                .filter(|s| !s.is_empty())
                .take(2)
                .map(|s| s.parse().unwrap())
                .collect();
            (n[0], n[1])
        })
        .collect()
}

#[test]
fn chat_with_draft_mtp_prints_the_plain_answers_turn_after_turn() {
    let dir = tempfile::tempdir().unwrap();
    let model = synth(dir.path(), "m", true);
    let input = "The cat sat on the mat\nAnd then?\nWhy so?\n/reset\nThe cat sat on a hat\n";
    let (plain, plain_err) = chat(&model, &[], input);
    let (mtp, mtp_err) = chat(&model, &["--draft-mtp", "--draft-max", "4"], input);
    assert_eq!(mtp, plain, "{mtp_err}");
    assert!(!plain.trim().is_empty(), "{plain_err}");
    let counts = draft_counts(&mtp_err);
    assert!(
        counts.iter().map(|c| c.0).sum::<usize>() > 0,
        "nothing drafted: {mtp_err}"
    );
    assert!(counts.iter().all(|&(d, a)| a <= d), "{mtp_err}");
    // Later turns reuse the cache (so the head continues from the kept hidden states).
    let reused: Vec<usize> = mtp_err
        .lines()
        .filter(|l| l.starts_with("[turn "))
        .map(|l| {
            let (_, rest) = l.split_once("tokens, ").unwrap();
            rest.split_whitespace().next().unwrap().parse().unwrap()
        })
        .collect();
    assert_eq!(reused.len(), 4, "{mtp_err}");
    assert!(reused[1] > 0 && reused[2] > reused[1], "{reused:?}");
}

const PROMPTS: [&str; 3] = [
    "The cat sat on the mat. The cat sat on the mat. The cat",
    "<|im_start|>user\nCount: one, two, three, four<|im_end|>\n<|im_start|>assistant\n",
    "Once upon a time",
];

/// Starts a streamed answer to `prompt`, reads its first events, and hangs up.
fn cancel_mid_stream(server: &Server, prompt: &str) {
    let body =
        json!({"prompt": prompt, "max_tokens": 200, "temperature": 0, "stream": true}).to_string();
    let mut stream = TcpStream::connect(server.addr()).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(60)))
        .unwrap();
    write!(
        stream,
        "POST /v1/completions HTTP/1.1\r\nHost: test\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut seen = Vec::new();
    let mut buf = [0u8; 1024];
    while seen.windows(5).filter(|w| w == b"data:").count() < 4 {
        let n = stream.read(&mut buf).unwrap();
        assert!(
            n > 0,
            "the stream ended early: {}",
            String::from_utf8_lossy(&seen)
        );
        seen.extend_from_slice(&buf[..n]);
    }
}

/// What each server is asked, in order: the three prompts at once (two slots: one waits and
/// reuses a slot), greedy then sampled; then — after a stream cancelled mid-answer — the
/// cancelled prompt again and a longer one sharing its start (a prefix kept in a slot or copied
/// from the other). Returns (answers before the cancel, answers after).
fn session(server: &Server) -> (Vec<Value>, Vec<Value>) {
    let prompts: Vec<String> = PROMPTS.iter().map(|p| p.to_string()).collect();
    let mut before = server.completions_at_once(&prompts, 24, (0.0, 0));
    before.extend(server.completions_at_once(&prompts, 24, (0.8, 7)));
    cancel_mid_stream(server, PROMPTS[0]);
    let again = vec![
        PROMPTS[0].to_owned(),
        format!("{} sat on the mat and", PROMPTS[0]),
    ];
    let mut after = server.completions_at_once(&again, 24, (0.0, 0));
    after.extend(server.completions_at_once(&again, 24, (0.8, 3)));
    (before, after)
}

#[test]
fn serve_with_draft_mtp_answers_as_without() {
    let dir = tempfile::tempdir().unwrap();
    let model = synth(dir.path(), "m", true);
    let common = ["--parallel", "2", "--ctx", "1024", "--metrics"];
    let plain = Server::start(&model, &common, &[]);
    plain.wait_healthy();
    let (want_before, want_after) = session(&plain);
    drop(plain);
    for extra in [
        &["--draft-mtp"][..],
        &["--spec-type", "draft-mtp", "--draft-max", "3"],
    ] {
        let args: Vec<&str> = common.iter().chain(extra).copied().collect();
        let server = Server::start(&model, &args, &[]);
        server.wait_healthy();
        let (before, after) = session(&server);
        let (mut drafted, mut accepted) = (0, 0);
        for (g, w) in before.iter().zip(&want_before) {
            assert_eq!(
                g["choices"][0]["text"], w["choices"][0]["text"],
                "{extra:?}"
            );
            assert_eq!(g["usage"], w["usage"], "{extra:?}");
            let t = &g["timings"];
            let n = t["draft_n"].as_u64().unwrap_or_else(|| panic!("{g}"));
            let a = t["draft_n_accepted"].as_u64().unwrap();
            assert!(a <= n, "{g}");
            drafted += n;
            accepted += a;
        }
        assert!(drafted > 0, "{extra:?}: nothing drafted\n{}", server.log());
        for (g, w) in after.iter().zip(&want_after) {
            assert_eq!(
                g["choices"][0]["text"], w["choices"][0]["text"],
                "{extra:?}"
            );
            assert_eq!(
                g["usage"]["completion_tokens"], w["usage"]["completion_tokens"],
                "{extra:?}"
            );
            let t = &g["timings"];
            assert!(
                t["draft_n_accepted"].as_u64() <= t["draft_n"].as_u64(),
                "{g}"
            );
        }
        // Every request's drafts are counted, the cancelled one's too.
        let (total, total_accepted) = (
            server.metric("draft_tokens_total"),
            server.metric("draft_tokens_accepted_total"),
        );
        assert!(
            total >= drafted && total_accepted >= accepted,
            "{total} {total_accepted}"
        );
        assert!(total_accepted <= total);
        assert!(
            !server.log().contains("drafting failed"),
            "{extra:?}: {}",
            server.log()
        );
        eprintln!("{extra:?}: drafted {drafted}, accepted {accepted} (before the cancel)");
    }
}

/// Whether the model file is mapped into the server's memory.
fn mapped(server: &Server, model: &Path) -> bool {
    let maps = std::fs::read_to_string(format!("/proc/{}/maps", server.pid())).unwrap();
    let file = model.canonicalize().unwrap();
    maps.lines().any(|l| l.ends_with(file.to_str().unwrap()))
}

/// The slots' drafters share the model: asleep, nothing holds it (the file is unmapped); awake
/// again, the head is loaded again and drafts.
#[test]
fn serve_draft_mtp_lets_the_model_sleep_and_drafts_after_waking() {
    let dir = tempfile::tempdir().unwrap();
    let model = synth(dir.path(), "m", true);
    let args = ["--parallel", "2", "--ctx", "1024", "--draft-mtp"];
    let sleepy: Vec<&str> = args
        .iter()
        .copied()
        .chain(["--sleep-idle-seconds", "1"])
        .collect();
    let server = Server::start(&model, &sleepy, &[]);
    server.wait_healthy();
    let prompts = [PROMPTS[2].to_owned()];
    let first = server.completions_at_once(&prompts, 24, (0.0, 0));
    let deadline = Instant::now() + Duration::from_secs(60);
    while mapped(&server, &model) {
        assert!(
            Instant::now() < deadline,
            "never unmapped:\n{}",
            server.log()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let again = server.completions_at_once(&prompts, 24, (0.0, 0));
    assert_eq!(again[0]["choices"], first[0]["choices"]);
    for answer in [&first[0], &again[0]] {
        assert!(answer["timings"]["draft_n"].as_u64() > Some(0), "{answer}");
    }
}

#[test]
fn a_file_without_the_head_is_refused_naming_the_key() {
    let dir = tempfile::tempdir().unwrap();
    let model = synth(dir.path(), "plain", false);
    let serve = oxibonsai([
        "serve",
        "-m",
        path_str(&model),
        "--draft-mtp",
        "--port",
        "0",
    ]);
    assert_eq!(serve.code, 1, "{}", serve.stderr);
    assert!(
        serve.stderr.contains("qwen35.nextn_predict_layers"),
        "{}",
        serve.stderr
    );
    let mut child = Command::new(env!("CARGO_BIN_EXE_oxibonsai"))
        .args(["chat", "-m", path_str(&model), "--draft-mtp"])
        .stdin(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stderr = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut stderr)
        .unwrap();
    assert_eq!(child.wait().unwrap().code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("--draft-mtp") && stderr.contains("qwen35.nextn_predict_layers"),
        "{stderr}"
    );
}
