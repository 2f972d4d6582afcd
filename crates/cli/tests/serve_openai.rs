//! `oxibonsai serve` with real clients: the official `openai` Python package runs the conformance
//! suite in `clients/openai_conformance.py` against the real binary on loopback (SmolLM2-135M).
//! The Python with `openai` installed comes from `OXIBONSAI_TEST_PYTHON` (`.ci/run` creates it);
//! without it the test fails and says so.

mod serve_common;

use std::time::{Duration, Instant};

use serve_common::{run_python_client, smollm2, Server};

#[test]
fn the_openai_python_client_passes_the_conformance_suite() {
    let model = smollm2();
    let main = Server::start(
        &model,
        &["--parallel", "4", "--api-key", "test-key", "--ctx", "1024"],
        &[],
    );
    let small = Server::start(
        &model,
        &["--parallel", "1", "--max-queue", "0", "--ctx", "1024"],
        &[],
    );
    let stdout = run_python_client(
        "openai_conformance.py",
        &[&main.base, "test-key", &small.base],
        &main,
    );
    assert!(stdout.contains("all conformance checks passed"));
}

#[test]
fn requests_get_503_while_the_model_loads_then_200() {
    let model = smollm2();
    let server = Server::start(
        &model,
        &["--parallel", "1"],
        &[("OXIBONSAI_TEST_LOAD_DELAY_MS", "3000")],
    );
    let health = server.get("/health");
    assert_eq!(health.0, 503, "{health:?}");
    assert!(health.1.contains("loading"), "{health:?}");
    let chat = server.post(
        "/v1/chat/completions",
        r#"{"messages":[{"role":"user","content":"hi"}]}"#,
    );
    assert_eq!(chat.0, 503, "{chat:?}");
    assert!(chat.1.contains("\"code\":\"model_loading\""), "{chat:?}");
    let deadline = Instant::now() + Duration::from_secs(60);
    while server.get("/health").0 != 200 {
        assert!(Instant::now() < deadline, "never loaded:\n{}", server.log());
        std::thread::sleep(Duration::from_millis(100));
    }
}
