//! `run --json-schema FILE` and `run --grammar FILE` through the binary, on a random-weight model:
//! only the constraint can make the output valid, so valid output shows it was applied.

mod common;

use common::{oxibonsai, path_str};
use oxibonsai_testkit::golden;
use serde_json::{json, Value};

/// `run` on the random-weight Qwen3 model with `extra` arguments; the generated text.
fn run_random_model(extra: &[&str], seed: u64) -> String {
    let model = golden("models/qwen3-q1_0.gguf");
    let seed = seed.to_string();
    let mut args = vec![
        "run",
        "-m",
        path_str(&model),
        "-p",
        "Answer:",
        "-c",
        "256",
        "--seed",
        &seed,
        "--temp",
        "1.0",
    ];
    args.extend_from_slice(extra);
    let run = oxibonsai(&args);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(
        run.stderr.contains("stop: EndOfGeneration"),
        "{}",
        run.stderr
    );
    assert!(!run.stderr.contains("warning"), "{}", run.stderr);
    // `run` ends the output with a newline of its own.
    run.stdout
        .strip_suffix('\n')
        .unwrap_or_else(|| panic!("no final newline: {:?}", run.stdout))
        .to_owned()
}

#[test]
fn json_schema_output_validates() {
    let schema = json!({
        "type": "object",
        "properties": {
            "id": {"type": "integer", "minimum": 1, "maximum": 999},
            "kind": {"enum": ["cat", "dog"]},
            "tags": {"type": "array", "items": {"type": "string", "maxLength": 6}, "minItems": 1, "maxItems": 2}
        },
        "required": ["id", "kind", "tags"],
        "additionalProperties": false
    });
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("schema.json");
    std::fs::write(&file, schema.to_string()).unwrap();
    let validator = jsonschema::validator_for(&schema).unwrap();
    for seed in [1, 2, 3] {
        let text = run_random_model(&["--json-schema", path_str(&file)], seed);
        let value: Value =
            serde_json::from_str(&text).unwrap_or_else(|e| panic!("seed {seed}: {e}: {text:?}"));
        assert!(validator.is_valid(&value), "seed {seed}: {text:?}");
    }
}

/// Recognises `item ("," item)*` with `item` = one to three lower-case letters or digits.
fn is_list(text: &str) -> bool {
    !text.is_empty()
        && text.split(',').all(|item| {
            (1..=3).contains(&item.len())
                && item
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
        })
}

#[test]
fn grammar_output_is_in_the_language_for_each_format() {
    let dir = tempfile::tempdir().unwrap();
    let gbnf = dir.path().join("list.gbnf");
    std::fs::write(
        &gbnf,
        "root ::= item (\",\" item)*\nitem ::= [a-z0-9]{1,3}\n",
    )
    .unwrap();
    let lark = dir.path().join("list.lark");
    std::fs::write(&lark, "start: item (\",\" item)*\nitem: /[a-z0-9]{1,3}/\n").unwrap();
    let regex = dir.path().join("list.txt");
    std::fs::write(&regex, "[a-z0-9]{1,3}(,[a-z0-9]{1,3})*\n").unwrap();
    for (file, format) in [(&gbnf, None), (&lark, None), (&regex, Some("regex"))] {
        let mut extra = vec!["--grammar", path_str(file)];
        if let Some(format) = format {
            extra.extend(["--grammar-format", format]);
        }
        for seed in [1, 2] {
            let text = run_random_model(&extra, seed);
            assert!(is_list(&text), "{}: {text:?}", file.display());
        }
    }
    assert!(!is_list("ab,") && !is_list("abcd") && !is_list("A") && is_list("a,1b,c2d"));
}

#[test]
fn bad_constraints_are_refused_with_a_message() {
    let model = golden("models/qwen3-q1_0.gguf");
    let dir = tempfile::tempdir().unwrap();
    let write = |name: &str, text: &str| {
        let path = dir.path().join(name);
        std::fs::write(&path, text).unwrap();
        path
    };
    let schema = write("bad.json", r#"{"type": "strnig"}"#);
    let not_json = write("not.json", "{type: object");
    let gbnf = write("bad.gbnf", "root ::= \"a\" missing\n");
    let unknown = write("grammar.txt", "start: \"a\"\n");
    let cases: [(&[&str], &str); 5] = [
        (&["--json-schema", path_str(&schema)], "invalid JSON schema"),
        (&["--json-schema", path_str(&not_json)], "is not JSON"),
        (
            &["--grammar", path_str(&gbnf)],
            "'missing' is used but never defined",
        ),
        (&["--grammar", path_str(&unknown)], "--grammar-format"),
        (&["--grammar", "/nonexistent/g.lark"], "cannot read"),
    ];
    for (extra, needle) in cases {
        let mut args = vec!["run", "-m", path_str(&model), "-p", "x", "-n", "4"];
        args.extend_from_slice(extra);
        let run = oxibonsai(&args);
        assert_eq!(run.code, 1, "{extra:?}: {}", run.stderr);
        assert!(run.stderr.contains(needle), "{extra:?}: {}", run.stderr);
    }
}
