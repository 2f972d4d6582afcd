//! Turning a row of logits into the next token, with llama.cpp's default sampler chain and
//! defaults, and cutting generated text at stop strings.
//!
//! The chain, in llama.cpp's order (`common/sampling.cpp`: logit bias first, then the default
//! sampler list, then `dist`):
//!
//! 1. logit bias — added to the named tokens; `-inf` bans one;
//! 2. penalties — over the last `repeat_last_n` accepted tokens: the repeat penalty divides a
//!    positive logit and multiplies a non-positive one, then `count × frequency + presence` is
//!    subtracted;
//! 3. top-k — the `k` most likely tokens (ties: lowest ids);
//! 4. top-p — the smallest most-likely-first set whose probability reaches `p`;
//! 5. min-p — tokens with probability ≥ `min_p` × the most likely one's;
//! 6. temperature — logits divided by it;
//! 7. the draw — one token from the softmax, with a seeded ChaCha20 generator.
//!
//! Top-p and min-p see the probabilities *before* temperature, as in llama.cpp. With
//! `temperature <= 0` the result is the argmax after steps 1–2 (ties: lowest id), which is what
//! llama.cpp's chain yields too since no truncation removes the most likely token.
//! DRY, typical-p, XTC and top-n-σ are disabled by llama.cpp's defaults and not implemented.

mod candidates;
mod params;
mod penalties;
mod speculative;
mod stop;

use rand_chacha::rand_core::{OsRng, RngCore, SeedableRng, TryRngCore};
use rand_chacha::ChaCha20Rng;

pub use candidates::TokenProb;
use candidates::{Candidate, Candidates};
pub use params::{SamplingError, SamplingParams};
use penalties::PenaltyWindow;
pub use speculative::Verdict;
pub use stop::StopStrings;

/// A sampler for one sequence: it owns the random generator and the penalty history.
///
/// The generation loop feeds it every token of the sequence through [`Sampler::accept`] —
/// the prompt's too, as llama.cpp's CLI and server do, so a prompt's words count for the
/// penalties — and [`Sampler::sample`] does not accept the token it returns: the loop accepts
/// what it actually appends.
///
/// ```
/// use oxibonsai_engine::sampling::{Sampler, SamplingParams};
/// let params = SamplingParams { seed: Some(42), ..SamplingParams::default() };
/// let mut sampler = Sampler::new(params, 4)?;
/// for &token in &[1, 2] {
///     sampler.accept(token); // the prompt
/// }
/// let next = sampler.sample(&[0.5, 2.0, 1.0, -1.0])?;
/// sampler.accept(next);
/// assert!(next < 4);
/// # Ok::<(), oxibonsai_engine::sampling::SamplingError>(())
/// ```
#[derive(Clone)]
pub struct Sampler {
    params: SamplingParams,
    n_vocab: usize,
    seed: u64,
    rng: ChaCha20Rng,
    window: PenaltyWindow,
    candidates: Candidates,
    probabilities: Vec<TokenProb>,
}

impl std::fmt::Debug for Sampler {
    // The buffers hold a whole vocabulary: show only what identifies the sampler.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sampler")
            .field("params", &self.params)
            .field("n_vocab", &self.n_vocab)
            .field("seed", &self.seed)
            .finish_non_exhaustive()
    }
}

impl Sampler {
    /// Validates `params` against a vocabulary of `n_vocab` tokens.
    pub fn new(params: SamplingParams, n_vocab: usize) -> Result<Sampler, SamplingError> {
        params.validate(n_vocab)?;
        let seed = params.seed.unwrap_or_else(random_seed);
        Ok(Sampler {
            window: PenaltyWindow::new(params.repeat_last_n),
            params,
            n_vocab,
            seed,
            rng: ChaCha20Rng::seed_from_u64(seed),
            candidates: Candidates::default(),
            probabilities: Vec::new(),
        })
    }

    pub fn params(&self) -> &SamplingParams {
        &self.params
    }

    /// The seed in use: the one asked for, or the one drawn from the OS (log it to replay a run).
    pub fn seed(&self) -> u64 {
        self.seed
    }

    /// Records a token of the sequence (prompt or generated) for the penalties.
    pub fn accept(&mut self, token: u32) {
        self.window.accept(token);
    }

    /// Forgets the history and restarts the random sequence: from the same seed when one was
    /// given, from a fresh OS seed otherwise (as llama.cpp's `dist` sampler does).
    pub fn reset(&mut self) {
        self.window.clear();
        self.seed = self.params.seed.unwrap_or_else(random_seed);
        self.rng = ChaCha20Rng::seed_from_u64(self.seed);
    }

    /// Runs the chain on `logits` (one per vocabulary entry) and returns the chosen token.
    pub fn sample(&mut self, logits: &[f32]) -> Result<u32, SamplingError> {
        if let Some(best) = self.prepare(logits)? {
            return Ok(best.id);
        }
        if self.candidates.len() == 1 {
            if let Some(only) = self.candidates.first() {
                return Ok(only.id);
            }
        }
        let uniform = unit_interval(self.rng.next_u64());
        Ok(self.candidates.draw(self.params.temperature, uniform))
    }

    /// The distribution [`Sampler::sample`] would draw from, most likely first, without drawing
    /// (for `logprobs` / `n_probs`-style reports). Greedy leaves one token with probability 1.
    pub fn candidates(&mut self, logits: &[f32]) -> Result<&[TokenProb], SamplingError> {
        match self.prepare(logits)? {
            Some(best) => {
                self.probabilities.clear();
                self.probabilities.push(TokenProb {
                    id: best.id,
                    logit: best.logit,
                    prob: 1.0,
                });
            }
            None => self
                .candidates
                .probabilities(self.params.temperature, &mut self.probabilities),
        }
        Ok(&self.probabilities)
    }

    /// Steps 1–5 of the chain. Returns the token outright when greedy.
    fn prepare(&mut self, logits: &[f32]) -> Result<Option<Candidate>, SamplingError> {
        if logits.len() != self.n_vocab {
            return Err(SamplingError::LogitCount {
                expected: self.n_vocab,
                found: logits.len(),
            });
        }
        self.candidates.load(logits);
        let by_id = self.candidates.logits_mut();
        for &(token, bias) in &self.params.logit_bias {
            // `new` checked every id against `n_vocab`, which `logits` has just matched.
            if let Some(logit) = by_id.get_mut(token as usize) {
                *logit += bias;
            }
        }
        self.window.apply(&self.params, by_id);
        if self.params.temperature <= 0.0 {
            return self.candidates.checked_argmax().map(Some);
        }
        self.candidates.check()?;
        self.candidates.gather_top_k(self.params.top_k);
        self.candidates.top_p(self.params.top_p);
        self.candidates.min_p(self.params.min_p);
        Ok(None)
    }
}

/// The top 53 bits as a double in [0, 1): every value equally likely, the same on every platform.
fn unit_interval(bits: u64) -> f64 {
    (bits >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
}

fn random_seed() -> u64 {
    OsRng.try_next_u64().unwrap_or_else(|_| {
        // No OS entropy (rare sandboxes): the clock still gives a different seed per run.
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64)
    })
}

#[cfg(test)]
mod tests {
    use super::unit_interval;

    #[test]
    fn unit_interval_spans_zero_to_just_below_one() {
        assert_eq!(unit_interval(0), 0.0);
        assert_eq!(unit_interval(u64::MAX), 1.0 - f64::EPSILON / 2.0);
        assert_eq!(unit_interval(1 << 63), 0.5);
    }
}
