//! Helpers shared by the engine's tests: sampling parameters, and the kernel tiers to run on.
#![allow(dead_code)]

use oxibonsai_engine::sampling::{Sampler, SamplingParams};
use oxibonsai_formats::kernels::Isa;

/// Every tier this CPU runs, scalar first; fails naming a tier `OXIBONSAI_REQUIRE_ISA` requires
/// that the CPU lacks.
pub fn tiers() -> Vec<Isa> {
    let tiers: Vec<Isa> = Isa::ALL.into_iter().filter(|isa| isa.available()).collect();
    let names: Vec<&str> = tiers.iter().map(|isa| isa.name()).collect();
    oxibonsai_testkit::assert_required_tiers(&names);
    tiers
}

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
