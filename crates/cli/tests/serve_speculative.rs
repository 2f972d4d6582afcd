//! Speculative decoding in `oxibonsai serve` (SmolLM2-135M): with `--draft-ngram` or
//! `--model-draft`, the answers of several requests running at once (their drafts verified in
//! the same batched pass) are the answers of a server that does not draft — greedy ones, and
//! sampled ones with a seed (a drafted token stands only where the job's own draw picks it, as
//! llama-server verifies); `/metrics` counts the drafted and accepted tokens and each final
//! response reports them in llama-server's `timings`.

mod serve_common;

use serde_json::Value;
use serve_common::{smollm2, Server};

const PROMPTS: [&str; 3] = [
    "Copy this list: apples, pears, plums, apples, pears, plums, apples, pears,",
    "<|im_start|>user\nRepeat after me: the cat sat on the mat. The cat sat on the mat.<|im_end|>\n<|im_start|>assistant\n",
    "Once upon a time",
];

/// Greedy, and sampled with a seed.
const SAMPLINGS: [(f64, u64); 2] = [(0.0, 0), (0.8, 7)];

/// The three prompts sent at once, once per sampling of [`SAMPLINGS`]: each answer's JSON, in
/// that order.
fn answers(server: &Server) -> Vec<Value> {
    SAMPLINGS
        .iter()
        .flat_map(|&(temperature, seed)| {
            server.completions_at_once(&PROMPTS, 40, (temperature, seed))
        })
        .collect()
}

#[test]
fn answers_with_drafting_are_the_answers_without() {
    let model = smollm2();
    let common = ["--parallel", "3", "--ctx", "4608", "--metrics"];
    let plain = Server::start(&model, &common, &[]);
    plain.wait_healthy();
    let want = answers(&plain);
    // Without a drafter the timings have no draft counts.
    assert!(want.iter().all(|a| a["timings"].get("draft_n").is_none()));
    drop(plain);
    let model_str = model.to_str().unwrap();
    let drafters: [&[&str]; 2] = [&["--draft-ngram"], &["-md", model_str, "--draft-max", "8"]];
    for extra in drafters {
        let args: Vec<&str> = common.iter().chain(extra).copied().collect();
        let server = Server::start(&model, &args, &[]);
        server.wait_healthy();
        let got = answers(&server);
        let (mut drafted, mut accepted) = (0, 0);
        for (g, w) in got.iter().zip(&want) {
            assert_eq!(
                g["choices"][0]["text"], w["choices"][0]["text"],
                "{extra:?}"
            );
            assert_eq!(g["usage"], w["usage"], "{extra:?}");
            let t = &g["timings"];
            drafted += t["draft_n"].as_u64().unwrap_or_else(|| panic!("{g}"));
            accepted += t["draft_n_accepted"].as_u64().unwrap();
        }
        assert!(
            drafted > 0 && accepted > 0,
            "{extra:?}: {drafted} {accepted}"
        );
        assert_eq!(server.metric("draft_tokens_total"), drafted);
        assert_eq!(server.metric("draft_tokens_accepted_total"), accepted);
        eprintln!("{extra:?}: drafted {drafted}, accepted {accepted}");
    }
}
