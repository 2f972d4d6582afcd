//! The chat template as a model file carries it (`tokenizer.chat_template` in GGUF metadata) is
//! the text transformers renders, and renders the reference's output.

use oxibonsai_gguf::GgufFile;
use oxibonsai_tokenizer::chat_template::{ChatRequest, ChatTemplate, SpecialTokens};

fn check(model: &str, gguf: &str, case: &str) {
    let file =
        GgufFile::open(oxibonsai_testkit::golden(gguf)).unwrap_or_else(|e| panic!("{gguf}: {e}"));
    let from_gguf = file
        .metadata()
        .get_str("tokenizer.chat_template")
        .unwrap_or_else(|e| panic!("{gguf}: {e}"));
    let reference = String::from_utf8(oxibonsai_testkit::read_golden(&format!(
        "chat_template/{model}/template.jinja"
    )))
    .expect("template is UTF-8");
    assert_eq!(from_gguf, reference, "{gguf}: tokenizer.chat_template");

    let template = ChatTemplate::new(from_gguf).expect("the model's template compiles");
    let request: ChatRequest = serde_json::from_slice(&oxibonsai_testkit::read_golden(&format!(
        "chat_template/{model}/{case}.json"
    )))
    .expect("request parses");
    let expected = String::from_utf8(oxibonsai_testkit::read_golden(&format!(
        "chat_template/{model}/{case}.txt"
    )))
    .expect("rendering is UTF-8");
    assert_eq!(
        template
            .render(&request, &SpecialTokens::default())
            .unwrap(),
        expected,
        "{model}/{case}"
    );
}

#[test]
fn qwen3_gguf_template_is_the_reference_template() {
    check(
        "qwen3",
        "tokenizer/qwen3/qwen3-vocab.gguf",
        "tool_call_and_result",
    );
}

#[test]
fn smollm2_gguf_template_is_the_reference_template() {
    check(
        "smollm2",
        "tokenizer/smollm2/smollm2-vocab.gguf",
        "system_user",
    );
}
