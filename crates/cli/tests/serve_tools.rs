//! Tool calling and structured output through `oxibonsai serve`, with the official `openai` Python
//! package and LangChain (`clients/tools_conformance.py`): on a random-weight Qwen3 model whose
//! own chat template renders the tools (what the grammar guarantees is checked: every forced
//! call is to a declared tool with schema-valid arguments), and on SmolLM2, whose template has no
//! tools (the server states them in the system message); and on the random Qwen3 model given the
//! Qwen3.5 template, whose calls are XML (`<function=…><parameter=…>`): the same client checks,
//! so the forced XML calls parse into OpenAI `tool_calls` whose arguments validate (integers,
//! booleans, objects and arrays typed by the schema), streamed and whole alike, and the reasoning
//! opened by the generation prompt streams before them. `OXIBONSAI_TEST_PYTHON` names the
//! Python with the clients (`.ci/run` creates it); without it the test fails and says so.

mod common;
mod serve_common;

use common::{qwen35_template, with_chat_template};
use oxibonsai_testkit::golden;
use serve_common::{run_python_client, smollm2, Server};

fn run_suite(server: &Server, label: &str, thinks: &str) {
    let stdout = run_python_client(
        "tools_conformance.py",
        &[&server.base, label, thinks],
        server,
    );
    assert!(stdout.contains(&format!("[{label}] all tool checks passed")));
}

#[test]
fn tools_with_the_models_own_template_random_qwen3() {
    // The golden model's context is 256; the tool declarations alone take more with its small
    // vocabulary, and a random model's rope does not care.
    let model = golden("models/qwen3-q1_0.gguf");
    let server = Server::start(&model, &["--parallel", "2", "--ctx", "16384"], &[]);
    run_suite(&server, "qwen3", "thinks");
}

#[test]
fn tools_stated_in_the_system_prompt_smollm2() {
    let server = Server::start(&smollm2(), &["--parallel", "2", "--ctx", "8192"], &[]);
    run_suite(&server, "smollm2", "plain");
}

#[test]
fn xml_tool_calls_with_the_qwen35_template() {
    let dir = tempfile::tempdir().expect("a temporary folder");
    let model = dir.path().join("qwen3-with-qwen35-template.gguf");
    with_chat_template(
        &golden("models/qwen3-q1_0.gguf"),
        &qwen35_template(),
        &model,
    );
    let server = Server::start(&model, &["--parallel", "2", "--ctx", "16384"], &[]);
    run_suite(&server, "qwen35", "thinks");
}
