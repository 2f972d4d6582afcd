//! Any bytes as a chat or completion request body, through the handlers' own code to the job the
//! engine would get ([`JobChecker`]): never a panic; an error is a 400 naming a field; a job keeps
//! what the engine relies on. The first byte picks the vocabulary and chat template (SmolLM2's
//! JSON tool calls, Qwen3's thinking and `<tool_call>`s, both from the golden vocabulary-only
//! GGUF files) and the endpoint; the rest is the body.
#![no_main]

use std::path::PathBuf;
use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use oxibonsai_gguf::GgufFile;
use oxibonsai_server::request_check::JobChecker;
use oxibonsai_server::scheduler::Job;

/// Small, so that prompts past the context are reached.
const N_CTX: usize = 256;
const VOCABS: [&str; 2] = [
    "tokenizer/smollm2/smollm2-vocab.gguf",
    "tokenizer/qwen3/qwen3-vocab.gguf",
];

fn checkers() -> &'static [JobChecker] {
    static CHECKERS: OnceLock<Vec<JobChecker>> = OnceLock::new();
    CHECKERS.get_or_init(|| {
        let golden = std::env::var_os("OXIBONSAI_GOLDEN")
            .map(PathBuf::from)
            .expect("OXIBONSAI_GOLDEN must name the golden data (the vocabularies are read there)");
        VOCABS
            .iter()
            .map(|name| {
                let path = golden.join(name);
                let file =
                    GgufFile::open(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
                JobChecker::new(&file, N_CTX).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
            })
            .collect()
    })
}

/// What the engine relies on, checked without the server's code.
fn check(job: &mut Job, n_vocab: usize, n_ctx: usize) {
    assert!(!job.prompt.is_empty(), "empty prompt");
    assert!(
        job.prompt.len() < n_ctx,
        "prompt of {} tokens",
        job.prompt.len()
    );
    assert!(
        job.prompt.iter().all(|&id| (id as usize) < n_vocab),
        "token id past the vocabulary"
    );
    let room = n_ctx - job.prompt.len();
    assert!(
        (1..=room).contains(&job.max_tokens),
        "max_tokens {} with {room} left",
        job.max_tokens
    );
    job.sampling
        .validate(n_vocab)
        .unwrap_or_else(|e| panic!("sampling: {e}"));
    let mut logits = vec![0.0f32; n_vocab];
    for &(id, bias) in &job.sampling.logit_bias {
        let logit = logits
            .get_mut(id as usize)
            .unwrap_or_else(|| panic!("logit_bias id {id}"));
        assert!(!bias.is_nan(), "NaN bias for {id}");
        *logit += bias;
    }
    if let Some(constraint) = &mut job.constraint {
        constraint
            .mask(&mut logits)
            .unwrap_or_else(|e| panic!("the first mask: {e}"));
    }
    assert!(
        logits.iter().any(|l| *l > f32::NEG_INFINITY),
        "no token can be sampled first"
    );
    assert!(job.stop.iter().all(|s| !s.is_empty()), "empty stop string");
    assert!(
        job.logprobs.is_none_or(|n| n <= 20),
        "logprobs {:?}",
        job.logprobs
    );
}

fuzz_target!(|data: &[u8]| {
    let Some((&pick, body)) = data.split_first() else {
        return;
    };
    let checker = &checkers()[usize::from(pick & 1)];
    let answer = if pick & 2 == 0 {
        checker.chat(body)
    } else {
        checker.completion(body)
    };
    match answer {
        Ok(mut job) => check(&mut job, checker.n_vocab(), checker.n_ctx()),
        Err(err) => {
            let wire = err.body();
            assert_eq!(err.status().as_u16(), 400, "{wire}");
            assert!(wire["error"]["param"].is_string(), "no param: {wire}");
        }
    }
});
