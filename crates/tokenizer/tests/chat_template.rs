//! Chat templates rendered against independent references: transformers' renderings (the
//! golden folders, copied as fixtures), Jinja2 renderings made with transformers' setup (the
//! `jinja2_*` folders, see `generate_jinja2.py`), and the request conversions a server needs.

use std::fs;
use std::path::{Path, PathBuf};

use oxibonsai_tokenizer::chat_template::{
    parse_tool_call_arguments, ChatRequest, ChatTemplate, SpecialTokens, TemplateError,
};
use serde_json::{json, Value};

fn fixture_dir() -> PathBuf {
    oxibonsai_testkit::fixture("chat_template")
}

fn read_text(path: &Path) -> String {
    fs::read_to_string(path).unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()))
}

fn read_json<T: serde::de::DeserializeOwned>(path: &Path) -> T {
    serde_json::from_str(&read_text(path))
        .unwrap_or_else(|e| panic!("cannot parse {}: {e}", path.display()))
}

/// The golden folders hold no special tokens (their templates use none); the Jinja2 folders
/// record the ones they were rendered with.
fn folder_specials(folder: &Path) -> SpecialTokens {
    let path = folder.join("specials.json");
    if !path.exists() {
        return SpecialTokens::default();
    }
    let value: Value = read_json(&path);
    let field = |name: &str| {
        value[name]
            .as_str()
            .unwrap_or_else(|| panic!("{} lacks {name}", path.display()))
            .to_owned()
    };
    SpecialTokens {
        bos_token: field("bos_token"),
        eos_token: field("eos_token"),
    }
}

/// Renders every `NAME.json` of a folder and compares with `NAME.txt`; returns the case count.
fn check_folder(folder: &Path, failures: &mut Vec<String>) -> usize {
    let template = ChatTemplate::new(&read_text(&folder.join("template.jinja")))
        .unwrap_or_else(|e| panic!("{}: {e}", folder.display()));
    let specials = folder_specials(folder);
    let mut cases: Vec<PathBuf> = fs::read_dir(folder)
        .unwrap_or_else(|e| panic!("cannot list {}: {e}", folder.display()))
        .map(|entry| entry.expect("directory entry").path())
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .filter(|p| p.file_name().is_some_and(|n| n != "specials.json"))
        .collect();
    cases.sort();
    for case in &cases {
        let expected_path = case.with_extension("txt");
        let expected = read_text(&expected_path);
        let request: ChatRequest = read_json(case);
        match template.render(&request, &specials) {
            Ok(rendered) if rendered == expected => {}
            Ok(rendered) => failures.push(format!(
                "{}: rendering differs\n--- expected\n{expected}\n--- got\n{rendered}\n---",
                case.display()
            )),
            Err(e) => failures.push(format!("{}: {e}", case.display())),
        }
    }
    cases.len()
}

#[test]
fn every_fixture_folder_renders_byte_identical() {
    let root = fixture_dir();
    let mut folders: Vec<PathBuf> = fs::read_dir(&root)
        .expect("fixture folder lists")
        .map(|entry| entry.expect("directory entry").path())
        .filter(|p| p.join("template.jinja").exists())
        .collect();
    folders.sort();
    let names: Vec<String> = folders
        .iter()
        .map(|f| f.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    for required in [
        "qwen3",
        "smollm2",
        "jinja2_qwen3",
        "jinja2_qwen35",
        "jinja2_features",
    ] {
        assert!(
            names.iter().any(|n| n == required),
            "fixture folder {required} missing under {}",
            root.display()
        );
    }
    let mut failures = Vec::new();
    for folder in &folders {
        let n = check_folder(folder, &mut failures);
        assert!(n > 0, "{} holds no NAME.json cases", folder.display());
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

/// The fixture copies must stay the reference's bytes.
#[test]
fn golden_fixtures_are_unchanged_copies() {
    for model in ["qwen3", "smollm2"] {
        let golden_folder = oxibonsai_testkit::golden(&format!("chat_template/{model}"));
        let mut n = 0;
        for entry in fs::read_dir(&golden_folder).expect("golden folder lists") {
            let golden_path = entry.expect("directory entry").path();
            let name = golden_path
                .file_name()
                .unwrap()
                .to_string_lossy()
                .into_owned();
            let copy = fixture_dir().join(model).join(&name);
            assert!(
                copy.exists(),
                "fixture copy of {} missing",
                golden_path.display()
            );
            assert_eq!(
                fs::read(&copy).unwrap(),
                fs::read(&golden_path).unwrap(),
                "{} differs from the golden file",
                copy.display()
            );
            n += 1;
        }
        assert!(n > 1, "golden folder {} is empty", golden_folder.display());
    }
}

fn qwen3() -> ChatTemplate {
    ChatTemplate::new(&read_text(&fixture_dir().join("qwen3/template.jinja"))).expect("compiles")
}

fn golden_case(name: &str) -> (Value, String) {
    let folder = fixture_dir().join("qwen3");
    (
        read_json(&folder.join(format!("{name}.json"))),
        read_text(&folder.join(format!("{name}.txt"))),
    )
}

/// A server receives OpenAI-style `arguments` strings; once parsed, the rendering is the
/// reference's (which was made from objects).
#[test]
fn string_tool_call_arguments_become_objects() {
    let (mut request, expected) = golden_case("tool_call_and_result");
    let function = &mut request["messages"][1]["tool_calls"][0]["function"];
    let object = function["arguments"].clone();
    assert!(object.is_object(), "golden request carries an object");
    function["arguments"] = Value::String(serde_json::to_string(&object).unwrap());

    // Left as a string, the template prints it verbatim: compact, unlike training data.
    let unparsed: ChatRequest = serde_json::from_value(request.clone()).unwrap();
    let rendered = qwen3()
        .render(&unparsed, &SpecialTokens::default())
        .unwrap();
    assert_ne!(rendered, expected);
    assert!(rendered.contains(r#""arguments": {"city":"Paris"}}"#));

    parse_tool_call_arguments(&mut request).expect("valid JSON arguments");
    assert_eq!(
        request["messages"][1]["tool_calls"][0]["function"]["arguments"],
        object
    );
    let parsed: ChatRequest = serde_json::from_value(request).unwrap();
    assert_eq!(
        qwen3().render(&parsed, &SpecialTokens::default()).unwrap(),
        expected
    );

    // The same conversion on the typed request, on the flat tool-call shape.
    let mut typed = ChatRequest {
        messages: vec![json!({"role": "assistant", "tool_calls": [
            {"name": "f", "arguments": "{\"b\": 1, \"a\": [true, null]}"},
            {"name": "g", "arguments": {"already": "object"}},
            {"name": "h"}
        ]})],
        ..ChatRequest::default()
    };
    typed.parse_tool_call_arguments().unwrap();
    let calls = &typed.messages[0]["tool_calls"];
    assert_eq!(
        serde_json::to_string(&calls[0]["arguments"]).unwrap(),
        r#"{"b":1,"a":[true,null]}"#,
        "key order kept"
    );
    assert_eq!(calls[1]["arguments"], json!({"already": "object"}));
    assert!(calls[2].get("arguments").is_none());
}

#[test]
fn invalid_tool_call_arguments_name_the_message() {
    let (mut request, _) = golden_case("tool_call_and_result");
    request["messages"][1]["tool_calls"][0]["function"]["arguments"] =
        Value::String("{\"city\": \"Paris\"".into());
    match parse_tool_call_arguments(&mut request) {
        Err(TemplateError::BadRequest { location, problem }) => {
            assert_eq!(location, "messages[1].tool_calls[0].function.arguments");
            assert!(problem.contains("not valid JSON"), "{problem}");
        }
        other => panic!("expected BadRequest, got {other:?}"),
    }

    request["messages"][1]["tool_calls"][0]["function"]["arguments"] = Value::String("[1]".into());
    match parse_tool_call_arguments(&mut request) {
        Err(TemplateError::BadRequest { location, problem }) => {
            assert_eq!(location, "messages[1].tool_calls[0].function.arguments");
            assert!(
                problem.contains("expected a JSON object, found an array"),
                "{problem}"
            );
        }
        other => panic!("expected BadRequest, got {other:?}"),
    }

    let mut not_a_list = json!({"messages": [{"role": "user", "content": "x"}, {"role": "assistant", "tool_calls": "f()"}]});
    match parse_tool_call_arguments(&mut not_a_list) {
        Err(TemplateError::BadRequest { location, .. }) => {
            assert_eq!(location, "messages[1].tool_calls")
        }
        other => panic!("expected BadRequest, got {other:?}"),
    }
    let mut no_messages = json!({"prompt": "x"});
    assert!(matches!(
        parse_tool_call_arguments(&mut no_messages),
        Err(TemplateError::BadRequest { ref location, .. }) if location == "messages"
    ));
}

#[test]
fn raise_exception_comes_back_with_its_message() {
    // The check Qwen3's later templates make before rendering anything.
    let template = ChatTemplate::new(
        "{%- set ns = namespace(found=false) %}\n\
         {%- for m in messages %}{% if m.role == 'user' %}{% set ns.found = true %}{% endif %}{% endfor %}\n\
         {%- if not ns.found %}\n    {{- raise_exception('No user query found in messages.') }}\n{%- endif %}\n\
         ok",
    )
    .unwrap();
    let only_system = ChatRequest {
        messages: vec![json!({"role": "system", "content": "hi"})],
        ..ChatRequest::default()
    };
    match template.render(&only_system, &SpecialTokens::default()) {
        Err(TemplateError::Raised { message }) => {
            assert_eq!(message, "No user query found in messages.")
        }
        other => panic!("expected Raised, got {other:?}"),
    }
    let err = template
        .render(&only_system, &SpecialTokens::default())
        .unwrap_err();
    assert!(err.to_string().contains("No user query found in messages."));

    let with_user = ChatRequest {
        messages: vec![json!({"role": "user", "content": "hi"})],
        ..ChatRequest::default()
    };
    assert_eq!(
        template
            .render(&with_user, &SpecialTokens::default())
            .unwrap(),
        "ok"
    );
}

#[test]
fn syntax_error_names_the_line() {
    let source = "{% for m in messages %}\n{{ m.content }}\n{% endif %}\n";
    match ChatTemplate::new(source) {
        Err(TemplateError::Syntax { line, message }) => {
            assert_eq!(line, 3, "{message}");
            assert!(
                message.contains("endif") || message.contains("endfor"),
                "{message}"
            );
        }
        other => panic!("expected Syntax, got {other:?}"),
    }
    match ChatTemplate::new("ok\n\n{{ messages[0 }}") {
        Err(TemplateError::Syntax { line, .. }) => assert_eq!(line, 3),
        other => panic!("expected Syntax, got {other:?}"),
    }
}

/// What transformers' Jinja2 does with these inputs, rendered the same way here.
#[test]
fn render_errors_are_reported_not_panics() {
    // Qwen3 strips an assistant's content after the last query: null content cannot be.
    let request = ChatRequest {
        messages: vec![
            json!({"role": "user", "content": "x"}),
            json!({"role": "assistant", "content": null, "reasoning_content": "r"}),
        ],
        ..ChatRequest::default()
    };
    match qwen3().render(&request, &SpecialTokens::default()) {
        Err(TemplateError::Render { line, message }) => {
            assert_eq!(line, Some(41), "{message}");
        }
        other => panic!("expected Render, got {other:?}"),
    }
    let template = ChatTemplate::new("{{ messages | no_such_filter }}").unwrap();
    assert!(matches!(
        template.render(&ChatRequest::default(), &SpecialTokens::default()),
        Err(TemplateError::Render { .. })
    ));
    let counting = ChatTemplate::new("{{ messages[0].content.count('') }}").unwrap();
    let request = ChatRequest {
        messages: vec![json!({"role": "user", "content": "héllo"})],
        ..ChatRequest::default()
    };
    assert_eq!(
        counting
            .render(&request, &SpecialTokens::default())
            .unwrap(),
        "6"
    );
}

#[test]
fn variables_are_set_as_transformers_sets_them() {
    let template = ChatTemplate::new(
        "{{ bos_token }}|{{ eos_token }}|{{ tools is none }}|{{ documents is defined }}|\
         {{ documents is none }}|{{ add_generation_prompt }}|{{ enable_thinking is defined }}|\
         {{ custom }}",
    )
    .unwrap();
    let specials = SpecialTokens {
        bos_token: "<s>".into(),
        eos_token: "</s>".into(),
    };
    let mut request = ChatRequest::default();
    assert_eq!(
        template.render(&request, &specials).unwrap(),
        "<s>|</s>|True|True|True|False|False|"
    );
    request.add_generation_prompt = true;
    request.tools = Some(vec![]);
    request
        .extra_kwargs
        .insert("custom".into(), json!([1, "a"]));
    request
        .extra_kwargs
        .insert("eos_token".into(), json!("<eos>"));
    assert_eq!(
        template.render(&request, &specials).unwrap(),
        "<s>|<eos>|False|True|True|True|False|[1, 'a']"
    );
    request.extra_kwargs.insert("messages".into(), json!([]));
    match template.render(&request, &specials) {
        Err(TemplateError::BadRequest { location, .. }) => {
            assert_eq!(location, "extra_kwargs.messages")
        }
        other => panic!("expected BadRequest, got {other:?}"),
    }
}

/// transformers' `{% generation %}` tag renders its body unchanged when no assistant mask is
/// asked for; the tagged template must render exactly as the untagged one.
#[test]
fn generation_blocks_render_their_body() {
    let tagged = "{%- for m in messages %}\n  {%- if m.role == 'assistant' %}\n    {% generation %}\n{{ m.content }}\n    {% endgeneration %}\n  {%- else %}\n{{ m.content }}\n  {%- endif %}\n{%- endfor %}";
    let plain = "{%- for m in messages %}\n  {%- if m.role == 'assistant' %}\n    {% if true %}\n{{ m.content }}\n    {% endif %}\n  {%- else %}\n{{ m.content }}\n  {%- endif %}\n{%- endfor %}";
    let request = ChatRequest {
        messages: vec![
            json!({"role": "user", "content": "q"}),
            json!({"role": "assistant", "content": "a"}),
        ],
        ..ChatRequest::default()
    };
    let specials = SpecialTokens::default();
    let out = ChatTemplate::new(tagged)
        .unwrap()
        .render(&request, &specials)
        .unwrap();
    assert_eq!(
        out,
        ChatTemplate::new(plain)
            .unwrap()
            .render(&request, &specials)
            .unwrap()
    );
    // Jinja2's rendering of `plain`.
    assert_eq!(out, "qa\n");
    let dashed = "{%- generation -%} x {%- endgeneration -%}";
    assert_eq!(
        ChatTemplate::new(dashed)
            .unwrap()
            .render(&request, &specials)
            .unwrap(),
        "x"
    );
}

/// `strftime_now` is Python's `datetime.now().strftime`, which calls the C library; `date`
/// calls the same C function.
#[test]
fn strftime_now_matches_c_strftime() {
    let format = "%d %b %Y, %A %B %j %H";
    let template = ChatTemplate::new(&format!("{{{{ strftime_now('{format}') }}}}")).unwrap();
    let from_date = || {
        let out = std::process::Command::new("date")
            .arg(format!("+{format}"))
            .env("LC_ALL", "C")
            .output()
            .expect("the date command runs");
        String::from_utf8(out.stdout).unwrap().trim_end().to_owned()
    };
    // Two attempts, in case the hour turns between the two clocks being read.
    let mut last = (String::new(), String::new());
    for _ in 0..2 {
        let before = from_date();
        let ours = template
            .render(&ChatRequest::default(), &SpecialTokens::default())
            .unwrap();
        if ours == before {
            return;
        }
        last = (before, ours);
    }
    panic!(
        "date printed {:?}, strftime_now printed {:?}",
        last.0, last.1
    );
}

/// Python's `datetime.now()` is naive: `strftime('[%Z%z]')` gives `'[]'` (checked with python3).
#[test]
fn strftime_now_has_no_time_zone() {
    let template = ChatTemplate::new("{{ strftime_now('[%Z%z]') }}").unwrap();
    let out = template
        .render(&ChatRequest::default(), &SpecialTokens::default())
        .unwrap();
    assert_eq!(out, "[]");
}

/// One compiled template serves every request of a server's threads.
#[test]
fn chat_template_is_shareable_across_threads() {
    fn shareable<T: Send + Sync>(_: &T) {}
    let template = qwen3();
    shareable(&template);
    let (request, expected) = golden_case("single_user");
    let request: ChatRequest = serde_json::from_value(request).unwrap();
    let renderings: Vec<String> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..2)
            .map(|_| {
                scope.spawn(|| {
                    template
                        .render(&request, &SpecialTokens::default())
                        .unwrap()
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    assert!(renderings.iter().all(|r| *r == expected));
}

/// llama.cpp's built-in templates by name against the outputs llama.cpp's own test expects of
/// them (tests/test-chat-template.cpp, `expected_output` of the legacy formatter, for its
/// six-message conversation; the assistant's padded "   I am an assistant   " shows which names
/// trim).
#[test]
fn builtin_templates_match_llama_cpp() {
    use oxibonsai_tokenizer::chat_template::{builtin_names, builtin_template};
    let messages = json!([
        {"role": "system", "content": "You are a helpful assistant"},
        {"role": "user", "content": "Hello"},
        {"role": "assistant", "content": "Hi there"},
        {"role": "user", "content": "Who are you"},
        {"role": "assistant", "content": "   I am an assistant   "},
        {"role": "user", "content": "Another question"},
    ]);
    let expected = [
        ("chatml", "<|im_start|>system\nYou are a helpful assistant<|im_end|>\n<|im_start|>user\nHello<|im_end|>\n<|im_start|>assistant\nHi there<|im_end|>\n<|im_start|>user\nWho are you<|im_end|>\n<|im_start|>assistant\n   I am an assistant   <|im_end|>\n<|im_start|>user\nAnother question<|im_end|>\n<|im_start|>assistant\n"),
        ("command-r", "<|START_OF_TURN_TOKEN|><|SYSTEM_TOKEN|>You are a helpful assistant<|END_OF_TURN_TOKEN|><|START_OF_TURN_TOKEN|><|USER_TOKEN|>Hello<|END_OF_TURN_TOKEN|><|START_OF_TURN_TOKEN|><|CHATBOT_TOKEN|>Hi there<|END_OF_TURN_TOKEN|><|START_OF_TURN_TOKEN|><|USER_TOKEN|>Who are you<|END_OF_TURN_TOKEN|><|START_OF_TURN_TOKEN|><|CHATBOT_TOKEN|>I am an assistant<|END_OF_TURN_TOKEN|><|START_OF_TURN_TOKEN|><|USER_TOKEN|>Another question<|END_OF_TURN_TOKEN|><|START_OF_TURN_TOKEN|><|CHATBOT_TOKEN|>"),
        ("llama3", "<|start_header_id|>system<|end_header_id|>\n\nYou are a helpful assistant<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nHello<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\nHi there<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nWho are you<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\nI am an assistant<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nAnother question<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n"),
        ("phi3", "<|system|>\nYou are a helpful assistant<|end|>\n<|user|>\nHello<|end|>\n<|assistant|>\nHi there<|end|>\n<|user|>\nWho are you<|end|>\n<|assistant|>\n   I am an assistant   <|end|>\n<|user|>\nAnother question<|end|>\n<|assistant|>\n"),
        ("phi4", "<|im_start|>system<|im_sep|>You are a helpful assistant<|im_end|><|im_start|>user<|im_sep|>Hello<|im_end|><|im_start|>assistant<|im_sep|>Hi there<|im_end|><|im_start|>user<|im_sep|>Who are you<|im_end|><|im_start|>assistant<|im_sep|>   I am an assistant   <|im_end|><|im_start|>user<|im_sep|>Another question<|im_end|><|im_start|>assistant<|im_sep|>"),
    ];
    let mut names: Vec<&str> = builtin_names().collect();
    names.sort_unstable();
    assert_eq!(
        names,
        expected.iter().map(|(n, _)| *n).collect::<Vec<_>>(),
        "every built-in has its llama.cpp output here"
    );
    for (name, want) in expected {
        let template = ChatTemplate::new(builtin_template(name).unwrap()).unwrap();
        let request = ChatRequest {
            messages: messages.as_array().unwrap().clone(),
            tools: None,
            add_generation_prompt: true,
            extra_kwargs: Default::default(),
        };
        let got = template
            .render(&request, &SpecialTokens::default())
            .unwrap();
        assert_eq!(got, want, "--chat-template {name}");
    }
    assert!(builtin_template("no-such-template").is_none());
}
