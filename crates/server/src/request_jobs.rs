//! [`JobChecker`] (the handlers' code from a body to the engine's job, the fuzz target's entry)
//! against independent answers: the chat prompt is the golden rendering (llama.cpp's template
//! output) tokenized on its own; the context and vocabulary limits computed here; the fuzz
//! target's committed seeds all give jobs; and each input the fuzzer found to fail stays a case.

use std::path::Path;

use oxibonsai_gguf::GgufFile;
use oxibonsai_testkit::golden;
use oxibonsai_tokenizer::Tokenizer;
use serde_json::{json, Value};

use crate::request_check::JobChecker;

const N_CTX: usize = 256;

fn vocab(name: &str) -> GgufFile {
    let path = golden(&format!("tokenizer/{name}/{name}-vocab.gguf"));
    GgufFile::open(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn checker(name: &str) -> JobChecker {
    JobChecker::new(&vocab(name), N_CTX).expect("the golden vocabulary loads")
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

#[test]
fn chat_prompts_are_the_golden_renderings_tokenized() {
    for name in ["smollm2", "qwen3"] {
        let tokenizer = Tokenizer::from_gguf(&vocab(name)).expect("the tokenizer");
        let checker = checker(name);
        for case in [
            "single_user",
            "system_user",
            "multi_turn",
            "unicode_content",
        ] {
            let dir = golden(&format!("chat_template/{name}"));
            let request: Value = serde_json::from_str(&read(&dir.join(format!("{case}.json"))))
                .expect("golden JSON");
            let rendered = read(&dir.join(format!("{case}.txt")));
            let body = json!({"messages": request["messages"], "max_tokens": 7});
            let job = checker
                .chat(body.to_string().as_bytes())
                .unwrap_or_else(|e| panic!("{name}/{case}: {}", e.body()));
            let expected = tokenizer
                .encode(&rendered, true, true)
                .expect("the golden text tokenizes");
            assert_eq!(job.prompt, expected, "{name}/{case}");
            assert_eq!(job.max_tokens, 7, "{name}/{case}");
        }
    }
}

#[test]
fn completion_jobs_keep_to_the_vocabulary_and_the_context() {
    let checker = checker("smollm2");
    let n_vocab = Tokenizer::from_gguf(&vocab("smollm2"))
        .expect("the tokenizer")
        .vocab_size();
    assert_eq!(checker.n_vocab(), n_vocab);
    let completion = |body: Value| checker.completion(body.to_string().as_bytes());
    // max_tokens is cut to the room left in the context; the legacy default is 16.
    let ids: Vec<u32> = (0..100).collect();
    let job = completion(json!({"prompt": ids, "max_tokens": 1000})).expect("a job");
    assert_eq!((job.prompt, job.max_tokens), (ids.clone(), N_CTX - 100));
    assert_eq!(
        completion(json!({"prompt": ids}))
            .expect("a job")
            .max_tokens,
        16
    );
    let refused = |body: Value, param: &str| {
        let Err(err) = completion(body.clone()) else {
            panic!("accepted: {body}");
        };
        assert_eq!(err.status().as_u16(), 400, "{}", err.body());
        assert_eq!(err.body()["error"]["param"], param, "{}", err.body());
    };
    refused(json!({"prompt": [n_vocab]}), "prompt");
    refused(json!({"prompt": vec![1; N_CTX]}), "prompt");
    refused(
        json!({"prompt": "a", "logit_bias": {n_vocab.to_string(): 1}}),
        "logit_bias",
    );
    refused(json!({"prompt": "a", "max_tokens": 0}), "max_tokens");
}

#[test]
fn the_fuzz_seeds_give_jobs() {
    let dir = oxibonsai_testkit::crate_dir(env!("CARGO_MANIFEST_DIR")).join("fuzz/seeds/request");
    let checkers = [checker("smollm2"), checker("qwen3")];
    let mut seen = 0;
    for entry in std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        let path = entry.expect("a seed").path();
        let data = std::fs::read(&path).expect("the seed");
        let (&pick, body) = data.split_first().expect("a non-empty seed");
        let checker = &checkers[usize::from(pick & 1)];
        let job = if pick & 2 == 0 {
            checker.chat(body)
        } else {
            checker.completion(body)
        };
        let job = job.unwrap_or_else(|e| panic!("{}: {}", path.display(), e.body()));
        assert!(
            job.prompt.len() < N_CTX && job.max_tokens >= 1,
            "{}",
            path.display()
        );
        seen += 1;
    }
    assert_eq!(seen, 6, "seeds in {}", dir.display());
}
