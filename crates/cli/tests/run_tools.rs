//! `run --chat --tools FILE --json` through the binary, on the random-weight Qwen3 model with the
//! Qwen3.5 template (XML calls) and with its own Qwen3 template (JSON calls): forced calls must
//! come out as OpenAI `tool_calls` entries to declared tools whose arguments validate against
//! their schemas, and, for XML, equal the parameters read independently out of the raw text of
//! the same generation (the same seed without `--json`).

mod common;

use common::{oxibonsai, path_str, qwen35_template, with_chat_template};
use oxibonsai_testkit::golden;
use serde_json::{json, Value};

fn tools() -> Value {
    json!([
        {"type": "function", "function": {"name": "get_weather", "parameters": {
            "type": "object", "properties": {
                "city": {"type": "string", "maxLength": 12},
                "days": {"type": "integer", "minimum": 1, "maximum": 9},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
                "alerts": {"type": "boolean"}},
            "required": ["city", "days", "unit", "alerts"], "additionalProperties": false}}},
        {"type": "function", "function": {"name": "book", "parameters": {
            "type": "object", "properties": {
                "guest": {"type": "object", "properties": {"name": {"type": "string", "maxLength": 8}},
                          "required": ["name"], "additionalProperties": false},
                "dishes": {"type": "array", "items": {"enum": ["soup", "fish"]}, "minItems": 1, "maxItems": 2}},
            "required": ["guest", "dishes"], "additionalProperties": false}}}
    ])
}

/// `run` on `model` with the tools file and `extra`; stdout without the final newline.
fn run(model: &std::path::Path, tools_file: &std::path::Path, seed: u64, extra: &[&str]) -> String {
    let seed = seed.to_string();
    let mut args = vec![
        "run",
        "-m",
        path_str(model),
        "--chat",
        "-p",
        "Weather in Oslo? Book a table.",
        "--chat-template-kwargs",
        r#"{"enable_thinking": false}"#,
        "-c",
        "4096",
        "-n",
        "400",
        "--seed",
        &seed,
        "--temp",
        "1.0",
        "--tools",
        path_str(tools_file),
    ];
    args.extend_from_slice(extra);
    let out = oxibonsai(&args);
    assert_eq!(out.code, 0, "{}", out.stderr);
    out.stdout
        .strip_suffix('\n')
        .unwrap_or_else(|| panic!("no final newline: {:?}", out.stdout))
        .to_owned()
}

/// The complete calls of a `--json` answer, each checked against the declared tools: (name,
/// arguments); and how many calls it announced. Parallel calls are allowed, so a random model may
/// call until the length limit cuts its last call (as in `clients/tools_conformance.py`).
fn the_calls(answer: &str) -> (Vec<(String, Value)>, usize) {
    let answer: Value = serde_json::from_str(answer).unwrap_or_else(|e| panic!("{e}: {answer}"));
    assert_eq!(answer["message"]["role"], "assistant", "{answer}");
    let calls = answer["message"]["tool_calls"]
        .as_array()
        .expect("tool_calls");
    let complete = match answer["finish_reason"].as_str() {
        Some("tool_calls") => calls.len(),
        Some("length") => calls.len() - 1,
        other => panic!("finish_reason {other:?}: {answer}"),
    };
    assert!(complete > 0, "{answer}");
    (
        calls[..complete].iter().map(checked_call).collect(),
        calls.len(),
    )
}

fn checked_call(call: &Value) -> (String, Value) {
    assert_eq!(call["type"], "function");
    assert!(
        call["id"]
            .as_str()
            .is_some_and(|id| id.starts_with("call_")),
        "{call}"
    );
    let name = call["function"]["name"]
        .as_str()
        .expect("a name")
        .to_owned();
    let arguments: Value =
        serde_json::from_str(call["function"]["arguments"].as_str().expect("a string"))
            .unwrap_or_else(|e| panic!("arguments are not JSON ({e}): {call}"));
    let schema = tools()
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["function"]["name"] == name)
        .unwrap_or_else(|| panic!("undeclared tool {name}"))["function"]["parameters"]
        .clone();
    let validator = jsonschema::validator_for(&schema).unwrap();
    assert!(
        validator.is_valid(&arguments),
        "{name}: {arguments} against {schema}"
    );
    (name, arguments)
}

/// The XML calls in `text`, read with plain string splitting: the function name and each
/// `<parameter=K>\nV\n</parameter>` as (K, V).
fn xml_calls(text: &str) -> Vec<(String, Vec<(String, String)>)> {
    text.split("<tool_call>\n").skip(1).map(xml_call).collect()
}

fn xml_call(call: &str) -> (String, Vec<(String, String)>) {
    let name = call
        .strip_prefix("<function=")
        .and_then(|c| c.split_once(">\n"))
        .expect("<function=NAME>")
        .0
        .to_owned();
    let params = call
        .split("<parameter=")
        .skip(1)
        .map(|p| {
            let (key, rest) = p.split_once(">\n").expect("<parameter=K>");
            let value = rest.split("\n</parameter>").next().expect("a value");
            (key.to_owned(), value.to_owned())
        })
        .collect();
    (name, params)
}

#[test]
fn forced_xml_calls_with_the_qwen35_template() {
    let dir = tempfile::tempdir().unwrap();
    let model = dir.path().join("qwen35-template.gguf");
    with_chat_template(
        &golden("models/qwen3-q1_0.gguf"),
        &qwen35_template(),
        &model,
    );
    let tools_file = dir.path().join("tools.json");
    std::fs::write(&tools_file, tools().to_string()).unwrap();
    for (seed, choice) in [
        (1, "required"),
        (2, "required"),
        (3, "book"),
        (4, "get_weather"),
    ] {
        let answer = run(
            &model,
            &tools_file,
            seed,
            &["--tool-choice", choice, "--json"],
        );
        let (calls, announced) = the_calls(&answer);
        if choice != "required" {
            assert_eq!(calls.len(), 1, "{answer}");
            assert_eq!(calls[0].0, choice);
        }
        // The same generation as text: the XML the model wrote.
        let text = run(&model, &tools_file, seed, &["--tool-choice", choice]);
        let xml = xml_calls(&text);
        assert_eq!(xml.len(), announced, "{text}\n{answer}");
        for ((name, arguments), (xml_name, params)) in calls.iter().zip(xml) {
            assert_eq!(xml_name, *name, "{text}");
            let object = arguments.as_object().expect("an object");
            assert_eq!(object.len(), params.len(), "{text}\n{arguments}");
            for (key, raw) in params {
                match &object[&key] {
                    Value::String(s) => assert_eq!(*s, raw, "{key}: {text}"),
                    typed => assert_eq!(
                        *typed,
                        serde_json::from_str::<Value>(raw.trim()).unwrap(),
                        "{key}: {text}"
                    ),
                }
            }
        }
    }
}

#[test]
fn forced_json_calls_with_the_qwen3_template() {
    let dir = tempfile::tempdir().unwrap();
    let tools_file = dir.path().join("tools.json");
    std::fs::write(&tools_file, tools().to_string()).unwrap();
    let model = golden("models/qwen3-q1_0.gguf");
    for seed in [1, 2] {
        let answer = run(
            &model,
            &tools_file,
            seed,
            &["--tool-choice", "required", "--json"],
        );
        the_calls(&answer);
    }
}

#[test]
fn bad_tool_files_are_refused_naming_the_field() {
    let dir = tempfile::tempdir().unwrap();
    let model = golden("models/qwen3-q1_0.gguf");
    let write = |name: &str, text: &str| {
        let path = dir.path().join(name);
        std::fs::write(&path, text).unwrap();
        path
    };
    let cases = [
        (write("not.json", "[{"), "auto", "is not JSON"),
        (write("obj.json", "{}"), "auto", "'tools' must be a list"),
        (
            write(
                "name.json",
                r#"[{"type": "function", "function": {"name": "a b"}}]"#,
            ),
            "auto",
            "tools[0].function.name",
        ),
        (
            write(
                "ok.json",
                r#"[{"type": "function", "function": {"name": "f"}}]"#,
            ),
            "g",
            "'g', which is not in 'tools'",
        ),
    ];
    for (file, choice, needle) in cases {
        let out = oxibonsai([
            "run",
            "-m",
            path_str(&model),
            "--chat",
            "-p",
            "x",
            "-n",
            "2",
            "--tools",
            path_str(&file),
            "--tool-choice",
            choice,
        ]);
        assert_eq!(out.code, 1, "{}: {}", file.display(), out.stderr);
        assert!(
            out.stderr.contains(needle),
            "{}: {}",
            file.display(),
            out.stderr
        );
    }
}
