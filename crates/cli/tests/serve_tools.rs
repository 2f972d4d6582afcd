//! Tool calling and structured output through `oxibonsai serve`, with the official `openai` Python
//! package and LangChain (`clients/tools_conformance.py`): on a random-weight Qwen3 model whose
//! own chat template renders the tools (what the grammar guarantees is checked: every forced
//! call is to a declared tool with schema-valid arguments), and on SmolLM2, whose template has no
//! tools (the server states them in the system message). `OXIBONSAI_TEST_PYTHON` names the
//! Python with the clients (`.ci/run` creates it); without it the test fails and says so.

mod serve_common;

use std::process::Command;

use oxibonsai_testkit::golden;
use serve_common::{client_python, smollm2, Server};

fn run_suite(server: &Server, label: &str) {
    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/clients/tools_conformance.py"
    );
    let out = Command::new(client_python())
        .args([script, &server.base, label])
        .output()
        .expect("running the Python client");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    println!("{stdout}");
    assert!(
        out.status.success(),
        "tool suite on {label} failed:\n{stdout}\n{stderr}\nserver log:\n{}",
        server.log()
    );
    assert!(stdout.contains(&format!("[{label}] all tool checks passed")));
}

#[test]
fn tools_with_the_models_own_template_random_qwen3() {
    // The golden model's context is 256; the tool declarations alone take more with its small
    // vocabulary, and a random model's rope does not care.
    let model = golden("models/qwen3-q1_0.gguf");
    let server = Server::start(&model, &["--parallel", "2", "--ctx", "8192"], &[]);
    run_suite(&server, "qwen3");
}

#[test]
fn tools_stated_in_the_system_prompt_smollm2() {
    let server = Server::start(&smollm2(), &["--parallel", "2", "--ctx", "4096"], &[]);
    run_suite(&server, "smollm2");
}
