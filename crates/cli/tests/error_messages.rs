//! What a user sees when a command fails: exit code 1 and one line, `error: …`, in which each
//! layer of the error chain adds context instead of restating its source (a sampling error used to
//! print its message twice; an unreadable model its path twice and its I/O error twice).

mod common;

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

/// The inputs the failing commands are given: bad files of every kind, in a temporary folder.
struct Inputs {
    _dir: tempfile::TempDir,
    model: String,
    vocab: String,
    not_gguf: String,
    not_json: String,
    bad_schema: String,
    bad_gbnf: String,
    truncated: String,
    folder: String,
    hf_dir: String,
    out: String,
    missing: String,
    unwritable: String,
}

impl Inputs {
    fn new() -> Inputs {
        let dir = tempfile::tempdir().expect("a temporary folder");
        let at = |name: &str| path_str(&dir.path().join(name)).to_owned();
        let write = |name: &str, bytes: &[u8]| {
            std::fs::write(dir.path().join(name), bytes).expect("writing a test file");
            at(name)
        };
        let model = golden("models/qwen3-q1_0.gguf");
        let bytes = std::fs::read(&model).expect("the golden model");
        std::fs::create_dir(dir.path().join("folder.gguf")).expect("a folder named like a model");
        std::fs::create_dir(dir.path().join("hf")).expect("a checkpoint folder");
        Inputs {
            model: path_str(&model).to_owned(),
            vocab: path_str(&golden("tokenizer/qwen3/qwen3-vocab.gguf")).to_owned(),
            not_gguf: write("not.gguf", b"hello, not a model\n"),
            not_json: write("not.json", b"{ this is not json"),
            bad_schema: write("schema.json", br#"{"type": "string", "pattern": "(("}"#),
            bad_gbnf: write("bad.gbnf", b"root ::= \"a\n"),
            truncated: write("truncated.gguf", &bytes[..100]),
            folder: at("folder.gguf"),
            hf_dir: {
                write("hf/config.json", b"{}");
                at("hf")
            },
            out: at("out.gguf"),
            missing: at("absent/model.gguf"),
            unwritable: at("absent/logits.f32"),
            _dir: dir,
        }
    }
}

/// (what is wrong, the command line, a word the message must contain — case-insensitive).
#[rustfmt::skip]
fn cases(i: &Inputs) -> Vec<(&'static str, Vec<&str>, &'static str)> {
    let (m, v) = (i.model.as_str(), i.vocab.as_str());
    vec![
        ("top_p out of range", vec!["run", "-m", m, "-p", "Hi", "--top-p", "7"], "top_p"),
        ("a missing model file", vec!["run", "-m", &i.missing, "-p", "Hi", "--offline"], "does not exist"),
        ("a folder given as the model", vec!["run", "-m", &i.folder, "-p", "Hi", "--offline"], "not a file"),
        ("a folder given to info", vec!["info", &i.folder], "cannot open model"),
        ("not a GGUF file", vec!["info", &i.not_gguf], "GGUF"),
        ("a truncated file", vec!["run", "-m", &i.truncated, "-p", "Hi"], "truncated"),
        ("a vocabulary without weights", vec!["run", "-m", v, "-p", "Hi"], "token_embd.weight"),
        ("a token id out of range", vec!["logits", "-m", m, "--tokens", "999999", "-n", "1"], "out of range"),
        ("a schema that is not JSON", vec!["run", "-m", m, "-p", "Hi", "--json-schema", &i.not_json], "not JSON"),
        ("a schema with a bad pattern", vec!["run", "-m", m, "-p", "Hi", "--json-schema", &i.bad_schema], "JSON schema"),
        ("a bad GBNF grammar", vec!["run", "-m", m, "-p", "Hi", "--grammar", &i.bad_gbnf], "GBNF"),
        ("a bad chat request", vec!["template", "-m", m, &i.not_json], "chat request"),
        ("an unknown quantization type", vec!["quantize", m, &i.out, "q9_9"], "q9_9"),
        ("a checkpoint without architectures", vec!["convert", &i.hf_dir, &i.out], "architectures"),
        ("an unwritable --raw file", vec!["logits", "-m", m, "--tokens", "1", "-n", "0", "--raw", &i.unwritable], "cannot write"),
        ("a zero context", vec!["run", "-m", m, "-p", "Hi", "-c", "0"], "ctx"),
        ("a logit bias that is not a number", vec!["run", "-m", m, "-p", "Hi", "--logit-bias", "5=abc"], "not a number"),
        ("an uncached pypi spec offline", vec!["run", "-m", "pypi:no-such-package-zz==1.0", "-p", "Hi", "--offline"], "offline"),
        ("an uncached hf spec offline", vec!["run", "-m", "hf:no-org/no-name/x.gguf", "-p", "Hi", "--offline"], "offline"),
        ("a vocabulary that is not GGUF", vec!["synth", "--shape", "bonsai-1.7b", "--format", "q1_0", "--vocab", &i.not_gguf, "-o", &i.out], "GGUF"),
        ("a tokenizer file that is not GGUF", vec!["tokenize", "-m", &i.not_gguf, "Hi"], "GGUF"),
    ]
}

#[test]
fn every_failure_is_one_line_that_says_each_thing_once() {
    let inputs = Inputs::new();
    let mut failures = Vec::new();
    for (name, args, names) in cases(&inputs) {
        let run = oxibonsai(&args);
        let message = run.stderr.trim_end();
        let line = message.strip_prefix("error: ").unwrap_or("");
        if run.code != 1 || line.is_empty() || message.lines().count() != 1 {
            failures.push(format!(
                "{name}: expected exit code 1 and one line 'error: …', got code {} and {message:?}",
                run.code
            ));
        } else if !line.to_lowercase().contains(&names.to_lowercase()) {
            failures.push(format!("{name}: {line:?} does not name {names:?}"));
        } else if let Some(twice) = restated(line) {
            failures.push(format!("{name}: {line:?} says {twice:?} twice"));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
