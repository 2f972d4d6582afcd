//! `oxibonsai serve` with real clients: the official `openai` Python package runs the conformance
//! suite in `clients/openai_conformance.py` against the real binary on loopback (SmolLM2-135M).
//! The Python with `openai` installed comes from `OXIBONSAI_TEST_PYTHON` (`.ci/run` creates it);
//! without it the test fails and says so. (The 503 answered while the model loads is tested in the
//! server crate, which can hold the load.)

mod serve_common;

use serve_common::{run_python_client, smollm2, Server};

#[test]
fn the_openai_python_client_passes_the_conformance_suite() {
    let model = smollm2();
    let main = Server::start(
        &model,
        &[
            "--parallel",
            "4",
            "--api-key",
            "test-key",
            "--ctx",
            "1024",
            "--metrics",
        ],
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
