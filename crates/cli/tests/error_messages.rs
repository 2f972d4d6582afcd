//! What a user sees when a command fails: exit code 1 and one line, `error: …`, in which each
//! layer of the error chain adds context instead of restating its source (a sampling error used to
//! print its message twice; an unreadable model its path twice and its I/O error twice).

mod common;

use std::path::Path;

use common::{oxibonsai, path_str};
use oxibonsai_testkit::golden;

/// The first clause or name that a message says twice, if any. Clauses are the parts between
/// `": "`; a clause of 12+ characters that stands again inside another is a restatement, and so is a
/// path, spec or key (a word of 8+ characters with `/`, `:`, `.` or `=`) named in two clauses.
fn restated(message: &str) -> Option<String> {
    let clauses: Vec<&str> = message.split(": ").map(str::trim).collect();
    for (i, a) in clauses.iter().enumerate() {
        for b in &clauses[i + 1..] {
            let (short, long) = if a.len() <= b.len() { (a, b) } else { (b, a) };
            if short.len() >= 12 && long.contains(short) {
                return Some(short.to_string());
            }
        }
    }
    let names = |clause: &str| -> Vec<String> {
        clause
            .split_whitespace()
            .map(|w| {
                w.trim_matches(|c: char| "'\"`(),;[]".contains(c))
                    .to_owned()
            })
            .filter(|w| w.len() >= 8 && w.contains(['/', ':', '.', '=']))
            .collect()
    };
    for (i, a) in clauses.iter().enumerate() {
        for b in &clauses[i + 1..] {
            let later = names(b);
            if let Some(name) = names(a).into_iter().find(|n| later.contains(n)) {
                return Some(name);
            }
        }
    }
    None
}

#[test]
fn the_detector_finds_what_the_chains_used_to_say_twice() {
    let sampling = "sampling: sampling parameter `top_p` must be between 0 and 1 (1 disables it), \
                    found 7: sampling parameter `top_p` must be between 0 and 1 (1 disables it), found 7";
    assert!(restated(sampling).is_some());
    let io = "cannot open model '/tmp': cannot read /tmp: No such device (os error 19): No such \
              device (os error 19)";
    assert!(restated(io).is_some());
    let spec = "cannot find model 'pypi:nope==1.0': pypi:nope==1.0 is not in the cache";
    assert_eq!(restated(spec).as_deref(), Some("pypi:nope==1.0"));
    let fine = "--logit-bias '5=abc': 'abc' is not a number: invalid float literal";
    assert_eq!(restated(fine), None);
}

struct Case {
    name: &'static str,
    args: Vec<String>,
    /// A word the message must contain (case-insensitive): it names what was wrong.
    names: &'static str,
}

fn case(name: &'static str, args: &[&str], names: &'static str) -> Case {
    Case {
        name,
        args: args.iter().map(|a| a.to_string()).collect(),
        names,
    }
}

fn write(dir: &Path, name: &str, text: &str) -> String {
    let path = dir.join(name);
    std::fs::write(&path, text).expect("writing a test file");
    path_str(&path).to_owned()
}

#[test]
fn every_failure_is_one_line_that_says_each_thing_once() {
    let dir = tempfile::tempdir().expect("a temporary folder");
    let model = golden("models/qwen3-q1_0.gguf");
    let model = path_str(&model);
    let vocab = golden("tokenizer/qwen3/qwen3-vocab.gguf");
    let vocab = path_str(&vocab);
    let not_gguf = write(dir.path(), "not.gguf", "hello, not a model\n");
    let not_json = write(dir.path(), "not.json", "{ this is not json");
    let bad_schema = write(
        dir.path(),
        "schema.json",
        r#"{"type": "string", "pattern": "(("}"#,
    );
    let bad_gbnf = write(dir.path(), "bad.gbnf", "root ::= \"a\n");
    let truncated = dir.path().join("truncated.gguf");
    let bytes = std::fs::read(golden("models/qwen3-q1_0.gguf")).expect("the golden model");
    std::fs::write(&truncated, &bytes[..100]).expect("writing a truncated copy");
    let truncated = path_str(&truncated).to_owned();
    let folder = dir.path().join("folder.gguf");
    std::fs::create_dir(&folder).expect("a folder named like a model");
    let folder = path_str(&folder).to_owned();
    let hf_dir = dir.path().join("hf");
    std::fs::create_dir(&hf_dir).expect("a checkpoint folder");
    write(&hf_dir, "config.json", "{}");
    let hf_dir = path_str(&hf_dir).to_owned();
    let out = path_str(&dir.path().join("out.gguf")).to_owned();
    let missing = path_str(&dir.path().join("absent").join("model.gguf")).to_owned();
    let unwritable = path_str(&dir.path().join("absent").join("logits.f32")).to_owned();

    let cases = [
        case(
            "top_p out of range",
            &["run", "-m", model, "-p", "Hi", "--top-p", "7"],
            "top_p",
        ),
        case(
            "a missing model file",
            &["run", "-m", &missing, "-p", "Hi", "--offline"],
            "does not exist",
        ),
        case(
            "a folder given as the model",
            &["run", "-m", &folder, "-p", "Hi", "--offline"],
            "not a file",
        ),
        case(
            "a folder given to info",
            &["info", &folder],
            "cannot open model",
        ),
        case("not a GGUF file", &["info", &not_gguf], "GGUF"),
        case(
            "a truncated file",
            &["run", "-m", &truncated, "-p", "Hi"],
            "truncated",
        ),
        case(
            "a vocabulary without weights",
            &["run", "-m", vocab, "-p", "Hi"],
            "token_embd.weight",
        ),
        case(
            "a token id out of range",
            &["logits", "-m", model, "--tokens", "999999", "-n", "1"],
            "out of range",
        ),
        case(
            "a schema that is not JSON",
            &["run", "-m", model, "-p", "Hi", "--json-schema", &not_json],
            "not JSON",
        ),
        case(
            "a schema with a bad pattern",
            &["run", "-m", model, "-p", "Hi", "--json-schema", &bad_schema],
            "JSON schema",
        ),
        case(
            "a bad GBNF grammar",
            &["run", "-m", model, "-p", "Hi", "--grammar", &bad_gbnf],
            "GBNF",
        ),
        case(
            "a bad chat request",
            &["template", "-m", model, &not_json],
            "chat request",
        ),
        case(
            "an unknown quantization type",
            &["quantize", model, &out, "q9_9"],
            "q9_9",
        ),
        case(
            "a checkpoint without architectures",
            &["convert", &hf_dir, &out],
            "architectures",
        ),
        case(
            "an unwritable --raw file",
            &[
                "logits",
                "-m",
                model,
                "--tokens",
                "1",
                "-n",
                "0",
                "--raw",
                &unwritable,
            ],
            "cannot write",
        ),
        case(
            "a zero context",
            &["run", "-m", model, "-p", "Hi", "-c", "0"],
            "ctx",
        ),
        case(
            "a logit bias that is not a number",
            &["run", "-m", model, "-p", "Hi", "--logit-bias", "5=abc"],
            "not a number",
        ),
        case(
            "an uncached pypi spec offline",
            &[
                "run",
                "-m",
                "pypi:no-such-package-zz==1.0",
                "-p",
                "Hi",
                "--offline",
            ],
            "offline",
        ),
        case(
            "an uncached hf spec offline",
            &[
                "run",
                "-m",
                "hf:no-org/no-name/x.gguf",
                "-p",
                "Hi",
                "--offline",
            ],
            "offline",
        ),
        case(
            "a vocabulary that is not GGUF",
            &[
                "synth",
                "--shape",
                "bonsai-1.7b",
                "--format",
                "q1_0",
                "--vocab",
                &not_gguf,
                "-o",
                &out,
            ],
            "GGUF",
        ),
        case(
            "a tokenizer file that is not GGUF",
            &["tokenize", "-m", &not_gguf, "Hi"],
            "GGUF",
        ),
    ];
    let mut failures = Vec::new();
    for case in &cases {
        let run = oxibonsai(&case.args);
        let message = run.stderr.trim_end();
        let line = message.strip_prefix("error: ").unwrap_or("");
        if run.code != 1 || line.is_empty() || message.lines().count() != 1 {
            failures.push(format!(
                "{}: expected exit code 1 and one line 'error: …', got code {} and {message:?}",
                case.name, run.code
            ));
        } else if !line.to_lowercase().contains(&case.names.to_lowercase()) {
            failures.push(format!(
                "{}: {line:?} does not name {:?}",
                case.name, case.names
            ));
        } else if let Some(twice) = restated(line) {
            failures.push(format!("{}: {line:?} says {twice:?} twice", case.name));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
