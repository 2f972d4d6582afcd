//! Fair prefill in `oxibonsai serve` (SmolLM2-135M, 2 threads): a long prompt is computed in
//! chunks between a running stream's tokens, and chunking changes nothing in what is computed.
//! The stream's worst token gap while a ~4k-token prompt is prefilled is printed (BENCHMARKS.md
//! has the numbers); `OXIBONSAI_TEST_PREFILL_CHUNK` and `OXIBONSAI_TEST_STEP_TARGET_MS` run it
//! with another `--prefill-chunk` / `--step-target-ms`.

mod serve_common;

use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use serve_common::{smollm2, Server};

fn wait_healthy(server: &Server) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while server.get("/health").0 != 200 {
        assert!(Instant::now() < deadline, "never loaded:\n{}", server.log());
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn completion(server: &Server, body: &Value) -> Value {
    let (status, response) = server.post("/v1/completions", &body.to_string());
    assert_eq!(status, 200, "{response}");
    serde_json::from_str(response.split_once("\r\n\r\n").unwrap().1).unwrap()
}

/// A prompt of about `n` tokens of ordinary text.
fn long_prompt(n: usize) -> String {
    let sentence = "The committee met again on Tuesday to review the harbour's plans. ";
    // ~14 tokens per sentence for SmolLM2's vocabulary.
    sentence.repeat(n / 14)
}

#[test]
fn chunked_prefill_computes_what_a_whole_prefill_does() {
    let model = smollm2();
    let prompt = long_prompt(600);
    let body = json!({"prompt": prompt, "max_tokens": 8, "temperature": 0, "logprobs": 1});
    let answers: Vec<Value> = ["7", "100000"]
        .iter()
        .map(|chunk| {
            let server = Server::start(
                &model,
                &["--parallel", "1", "--ctx", "1024", "--prefill-chunk", chunk],
                &[],
            );
            wait_healthy(&server);
            completion(&server, &body)
        })
        .collect();
    let (chunked, whole) = (&answers[0]["choices"][0], &answers[1]["choices"][0]);
    assert_eq!(chunked["text"], whole["text"]);
    let lps = |c: &Value| -> Vec<f64> {
        c["logprobs"]["token_logprobs"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_f64().unwrap())
            .collect()
    };
    // The same tokens, attention computed over different splits of the prompt: float sums in
    // another order only.
    for (a, b) in lps(chunked).iter().zip(lps(whole)) {
        assert!(
            (a - b).abs() < 1e-2,
            "{:?} vs {:?}",
            lps(chunked),
            lps(whole)
        );
    }
}

#[test]
fn a_running_stream_keeps_streaming_while_a_long_prompt_is_prefilled() {
    let model = smollm2();
    let chunk = std::env::var("OXIBONSAI_TEST_PREFILL_CHUNK").ok();
    let target = std::env::var("OXIBONSAI_TEST_STEP_TARGET_MS").ok();
    let mut args = vec!["--parallel", "2", "--ctx", "9216"];
    if let Some(c) = &chunk {
        args.extend(["--prefill-chunk", c.as_str()]);
    }
    if let Some(t) = &target {
        args.extend(["--step-target-ms", t.as_str()]);
    }
    let server = Server::start(&model, &args, &[]);
    wait_healthy(&server);

    // The stream: the end tokens banned, so it runs through the whole prefill.
    let body = json!({"prompt": "Once upon a time", "max_tokens": 3000, "stream": true,
        "temperature": 0, "logit_bias": {"0": -100, "1": -100, "2": -100}})
    .to_string();
    let mut s = TcpStream::connect(server.addr()).unwrap();
    write!(
        s,
        "POST /v1/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let arrivals = Arc::new(Mutex::new(Vec::<Instant>::new()));
    let reader = {
        let arrivals = Arc::clone(&arrivals);
        std::thread::spawn(move || {
            let mut lines = BufReader::new(s);
            let mut line = String::new();
            while lines.read_line(&mut line).is_ok_and(|n| n > 0) {
                if line.starts_with("data: {") {
                    arrivals.lock().unwrap().push(Instant::now());
                }
                if line.starts_with("data: [DONE]") {
                    break;
                }
                line.clear();
            }
        })
    };
    while arrivals.lock().unwrap().len() < 30 {
        std::thread::sleep(Duration::from_millis(5));
    }
    let prompt = long_prompt(4000);
    let sent = Instant::now();
    let answer = completion(&server, &json!({"prompt": prompt, "max_tokens": 1}));
    let answered = Instant::now();
    let prompt_tokens = answer["usage"]["prompt_tokens"].as_u64().unwrap();
    let times = arrivals.lock().unwrap().clone();
    let before: Vec<f64> = times
        .windows(2)
        .filter(|w| w[1] < sent)
        .map(|w| (w[1] - w[0]).as_secs_f64() * 1e3)
        .collect();
    let during: Vec<Instant> = times
        .iter()
        .copied()
        .filter(|&t| t >= sent && t <= answered)
        .collect();
    // Gaps from the last token before the prompt arrived to the first after it was answered.
    let last_before = times.iter().copied().rfind(|&t| t < sent).unwrap();
    let first_after = times.iter().copied().find(|&t| t > answered);
    let mut marks = vec![last_before];
    marks.extend(&during);
    marks.extend(first_after);
    let worst = marks
        .windows(2)
        .map(|w| (w[1] - w[0]).as_secs_f64() * 1e3)
        .fold(0.0, f64::max);
    let median_before = {
        let mut b = before.clone();
        b.sort_by(f64::total_cmp);
        b[b.len() / 2]
    };
    println!(
        "prefill chunk {}, step target {} ms: {prompt_tokens}-token prompt answered in {:.2} s; the \
         stream's gap median {median_before:.1} ms before, worst {worst:.1} ms during ({} tokens \
         streamed meanwhile)",
        chunk.as_deref().unwrap_or("default"),
        target.as_deref().unwrap_or("default"),
        (answered - sent).as_secs_f64(),
        during.len()
    );
    assert!(prompt_tokens > 3500, "{prompt_tokens}");
    // The mechanism, not its speed: the stream was served between the prompt's chunks.
    assert!(
        !during.is_empty(),
        "no token was streamed during the prefill"
    );
    drop(server);
    let _ = reader.join();
}
