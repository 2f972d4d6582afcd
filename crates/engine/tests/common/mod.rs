//! Helpers shared by the sampling tests.

use oxibonsai_engine::sampling::{Sampler, SamplingParams};

/// Temperature 1 and no truncation: the draw follows the plain softmax.
pub fn plain(seed: u64) -> SamplingParams {
    SamplingParams {
        temperature: 1.0,
        top_k: 0,
        top_p: 1.0,
        min_p: 0.0,
        seed: Some(seed),
        ..SamplingParams::default()
    }
}

pub fn sampler(params: SamplingParams, n_vocab: usize) -> Sampler {
    Sampler::new(params, n_vocab).expect("valid parameters")
}
