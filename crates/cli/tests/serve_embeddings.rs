//! `oxibonsai serve`'s `/v1/embeddings` and `/v1/rerank` / `/rerank`: the official `openai` Python
//! client (`tests/clients/embeddings.py`: float and base64, every input shape, the errors, beside a
//! chat stream); the server's SmolLM2 embeddings against the reference engine's (the fixture of
//! `embed_parity.rs`); rerank over plain HTTP on a synthetic reranker, its scores those of
//! `oxibonsai embed --pooling rank` for the prompt llama.cpp's server builds (query then document).

mod common;
mod serve_common;

use std::time::{Duration, Instant};

use common::{oxibonsai, path_str};
use serde_json::{json, Value};
use serve_common::{run_python_client, smollm2, Server};

fn wait_healthy(server: &Server) {
    let deadline = Instant::now() + Duration::from_secs(120);
    while server.get("/health").0 != 200 {
        assert!(Instant::now() < deadline, "never loaded:\n{}", server.log());
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn post(server: &Server, path: &str, body: &Value) -> (u16, Value) {
    let (status, response) = server.post(path, &body.to_string());
    let text = response
        .split_once("\r\n\r\n")
        .map(|(_, b)| b)
        .unwrap_or_default();
    let value =
        serde_json::from_str(text).unwrap_or_else(|e| panic!("POST {path}: {e}: {response}"));
    (status, value)
}

fn floats(v: &Value) -> Vec<f64> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_f64().unwrap())
        .collect()
}

#[test]
fn the_openai_client_gets_embeddings_that_match_the_reference() {
    let server = Server::start(
        &smollm2(),
        &["--pooling", "mean", "--ctx", "2048", "--parallel", "2"],
        &[],
    );
    wait_healthy(&server);
    let stdout = run_python_client("embeddings.py", &[&server.base, "576"], &server);
    assert!(stdout.contains("all embedding checks passed"));

    // The reference's SmolLM2 embeddings of the same token ids, normalized as the server does.
    let fixture: Value = serde_json::from_str(
        &std::fs::read_to_string(oxibonsai_testkit::fixture("embedding/reference.json")).unwrap(),
    )
    .unwrap();
    let case = fixture["cases"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "smollm2-mean")
        .expect("the fixture's SmolLM2 case");
    let (status, answer) = post(&server, "/v1/embeddings", &json!({"input": case["inputs"]}));
    assert_eq!(status, 200, "{answer}");
    let own_cos = ["batch_vs_single", "f16_vs_f32_kv", "flash_on_vs_off"]
        .iter()
        .map(|k| case["spread"][format!("{k}_min_cos")].as_f64().unwrap())
        .fold(1.0, f64::min);
    let bound = 0.9999f64.min(1.0 - 2.0 * (1.0 - own_cos));
    for (d, e) in answer["data"]
        .as_array()
        .unwrap()
        .iter()
        .zip(case["embeddings"].as_array().unwrap())
    {
        let ours = floats(&d["embedding"]);
        let reference = floats(&e[0]);
        let norm = reference.iter().map(|x| x * x).sum::<f64>().sqrt();
        let cos: f64 = ours.iter().zip(&reference).map(|(a, b)| a * b / norm).sum();
        assert!(
            cos >= bound,
            "cosine {cos} to the reference (bound {bound})"
        );
    }

    // Errors keep the server's shape; a rank-less model does not rerank.
    let (status, answer) = post(
        &server,
        "/v1/rerank",
        &json!({"query": "q", "documents": ["d"]}),
    );
    assert_eq!(status, 400, "{answer}");
    assert_eq!(answer["error"]["param"], "query");
    let raw = "POST /v1/embeddings HTTP/1.1\r\nHost: x\r\nContent-Type: text/plain\r\n\
               Content-Length: 2\r\nConnection: close\r\n\r\nhi";
    let (status, _, body) = server.raw(raw.as_bytes());
    assert_eq!(status, 415, "{body}");
}

#[test]
fn rerank_answers_as_llama_cpp_with_the_rank_pooling_scores() {
    let dir = tempfile::tempdir().unwrap();
    let model = dir.path().join("rank.gguf");
    let golden = oxibonsai_testkit::golden("models/qwen3-f16.gguf");
    let run = oxibonsai([
        "synth",
        "--from",
        path_str(&golden),
        "--pooling",
        "rank",
        "--classifier-tokens",
        "100,200",
        "-o",
        path_str(&model),
    ]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let server = Server::start(&model, &["--ctx", "1024"], &[]);
    wait_healthy(&server);
    let query = "which one";
    let documents = ["first text", "a second, longer text", "third"];
    let (status, answer) = post(
        &server,
        "/v1/rerank",
        &json!({"query": query, "documents": documents, "top_n": 2, "model": "m"}),
    );
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["object"], "list");
    assert_eq!(answer["model"], "m");
    let results = answer["results"].as_array().unwrap();
    assert_eq!(results.len(), 2, "top_n");
    let scores: Vec<f64> = results
        .iter()
        .map(|r| r["relevance_score"].as_f64().unwrap())
        .collect();
    assert!(scores[0] >= scores[1], "sorted by score: {scores:?}");
    // Each score is the rank pooling of query tokens then document tokens (no BOS or EOS in this
    // vocabulary), the first classifier output.
    let tokens = |text: &str| -> Vec<u64> {
        let (s, v) = post(
            &server,
            "/tokenize",
            &json!({"content": text, "add_special": false}),
        );
        assert_eq!(s, 200);
        v["tokens"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t.as_u64().unwrap())
            .collect()
    };
    let q = tokens(query);
    let mut all = Vec::new();
    for doc in documents {
        let ids: Vec<String> = q.iter().chain(&tokens(doc)).map(u64::to_string).collect();
        let run = oxibonsai([
            "embed",
            "-m",
            path_str(&model),
            "--embd-normalize",
            "-1",
            "--json",
            "--tokens",
            &ids.join(","),
        ]);
        assert_eq!(run.code, 0, "{}", run.stderr);
        let out: Value = serde_json::from_str(run.stdout.trim()).unwrap();
        all.push(out["data"][0]["embedding"][0].as_f64().unwrap());
    }
    for r in results {
        let i = r["index"].as_u64().unwrap() as usize;
        let s = r["relevance_score"].as_f64().unwrap();
        assert!(
            (s - all[i]).abs() < 1e-5,
            "document {i}: {s} vs embed's {}",
            all[i]
        );
    }
    let mut best = all.clone();
    best.sort_by(|a, b| b.total_cmp(a));
    assert!((scores[0] - best[0]).abs() < 1e-5 && (scores[1] - best[1]).abs() < 1e-5);
    // TEI's shape on /rerank: a bare list with `score` (and the text when asked).
    let (status, answer) = post(
        &server,
        "/rerank",
        &json!({"query": query, "texts": documents, "return_text": true}),
    );
    assert_eq!(status, 200, "{answer}");
    let list = answer.as_array().unwrap();
    assert_eq!(list.len(), 3);
    assert!(list
        .iter()
        .all(|r| r["score"].is_f64() && r["text"].is_string()));
    for (body, param) in [
        (json!({"documents": ["d"]}), "query"),
        (json!({"query": "q", "documents": []}), "documents"),
        (json!({"query": "q", "documents": [1]}), "documents"),
        (
            json!({"query": "q", "documents": ["d"], "top_n": -1}),
            "top_n",
        ),
    ] {
        let (status, answer) = post(&server, "/v1/rerank", &body);
        assert_eq!(status, 400, "{body}: {answer}");
        assert_eq!(answer["error"]["param"], param, "{body}: {answer}");
    }
}

/// A model that cannot serve what was asked (rank pooling without a classifier head) stops the
/// server with exit code 1 and the reason, as llama-server exits on a failed load, instead of
/// leaving it up answering 500 on every route.
#[test]
fn serve_exits_when_the_model_does_not_load() {
    let model = smollm2();
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_oxibonsai"))
        .args([
            "serve",
            "-m",
            path_str(&model),
            "--port",
            "0",
            "--pooling",
            "rank",
        ])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("the oxibonsai binary runs");
    let deadline = Instant::now() + Duration::from_secs(60);
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait") {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("serve kept running after its model failed to load");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut stderr).unwrap();
    assert_eq!(status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("failed to load"), "{stderr}");
    assert!(stderr.contains("rank"), "{stderr}");
}
