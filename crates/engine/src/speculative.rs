//! Speculative decoding: a cheap drafter proposes the next few tokens, the model checks them all
//! in one batched forward pass (the last accepted token and the drafted ones, logits for every
//! row), and the longest prefix the model agrees with is kept, plus one token of the model's own
//! (the correction at the first disagreement, or a bonus after a fully accepted draft). The
//! weights are read once for the whole run instead of once per token.
//!
//! Agreement is [`Sampler::verify`](crate::sampling::Sampler::verify): greedy keeps a drafted token
//! exactly when it is the argmax, so greedy output is the same as without a drafter; with sampling
//! the speculative-sampling rule keeps the output distribution the model's own.
//!
//! Three drafters: [`PromptLookup`] (n-gram matches in the prompt and the output so far, no second
//! model), [`DraftModel`] (a smaller model with the same vocabulary, its own sequence kept in
//! step) and [`MtpDrafter`] (the model's own multi-token-prediction head). How many tokens to draft follows the recent acceptance rate ([`Lookahead`]).

mod draft_model;
mod mtp;
mod ngram;

pub use draft_model::{check_same_vocabulary, DraftModel};
pub use mtp::MtpDrafter;
pub use ngram::PromptLookup;

use crate::error::EngineError;
use crate::sampling::{Sampler, TokenProb};

/// The tokens a drafter proposes, and for each the distribution it was drawn from (`None`:
/// proposed deterministically — a lookup, or a greedy draft).
#[derive(Clone, Debug, Default)]
pub struct Draft {
    pub tokens: Vec<u32>,
    pub probs: Vec<Option<Vec<TokenProb>>>,
}

impl Draft {
    pub fn clear(&mut self) {
        self.tokens.clear();
        self.probs.clear();
    }

    pub fn len(&self) -> usize {
        self.tokens.len()
    }

    pub fn is_empty(&self) -> bool {
        self.tokens.is_empty()
    }

    /// Keeps the first `n` tokens.
    pub fn truncate(&mut self, n: usize) {
        self.tokens.truncate(n);
        self.probs.truncate(n);
    }
}

/// Proposes tokens to continue a sequence.
pub trait Drafter: Send {
    /// Proposes at most `max` tokens continuing `context` (the prompt and every token generated
    /// so far, the last one included) into `out` (cleared first). `sampler` is the draft's own,
    /// with the generation's sampling parameters: a drafter that samples draws with it.
    fn draft(
        &mut self,
        context: &[u32],
        max: usize,
        sampler: &mut Sampler,
        out: &mut Draft,
    ) -> Result<(), EngineError>;

    /// Whether the drafter reads the target's last hidden state at each position (a
    /// multi-token-prediction head): the caller then keeps them
    /// ([`Sequence::keep_hidden`](crate::Sequence::keep_hidden)) and drafts with
    /// [`Drafter::draft_with_hidden`].
    fn reads_hidden(&self) -> bool {
        false
    }

    /// [`Drafter::draft`] given the target sequence's kept hidden states
    /// ([`Sequence::hidden`](crate::Sequence::hidden)): the sequence holds every token of
    /// `context` but the last.
    fn draft_with_hidden(
        &mut self,
        context: &[u32],
        _hidden: Option<(usize, &[f32])>,
        max: usize,
        sampler: &mut Sampler,
        out: &mut Draft,
    ) -> Result<(), EngineError> {
        self.draft(context, max, sampler, out)
    }

    /// Takes in `context` (the prompt) before generation starts, so that the first draft does
    /// not pay for it: a draft model runs it as one batch, counted with the prompt's time as
    /// llama.cpp's speculative example counts it. Nothing to do for a lookup.
    fn prefill(&mut self, _context: &[u32]) -> Result<(), EngineError> {
        Ok(())
    }

    /// A short name for logs and statistics.
    fn name(&self) -> &'static str;

    /// Whether the drafter judges each draft's length itself (a lookup knows how far its match
    /// goes): it is then asked for up to `--draft-max` tokens instead of the [`Lookahead`]'s
    /// guess from the acceptance rate.
    fn sizes_own_drafts(&self) -> bool {
        false
    }

    /// A drafter of the same kind for another sequence of `n_ctx` positions (a server slot's),
    /// sharing what can be shared (a draft model's weights).
    fn fork(&self, n_ctx: usize) -> Result<Box<dyn Drafter>, EngineError>;
}

/// How much to draft: llama.cpp's `--draft-max` / `--draft-min`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DraftLimits {
    /// Tokens drafted at most per step.
    pub max: usize,
    /// A draft shorter than this is not verified (the step decodes one token as usual).
    pub min: usize,
}

impl Default for DraftLimits {
    fn default() -> Self {
        DraftLimits { max: 16, min: 0 }
    }
}

/// The adaptive lookahead: the expected run of accepted tokens at the recent per-token
/// acceptance rate `a` is `a / (1 − a)`; drafting about twice that (plus one) rarely leaves
/// acceptable tokens undrafted and wastes little verification when drafts go wrong. The rate is
/// an exponential average over recent drafted tokens, so the length follows the text.
#[derive(Clone, Debug)]
pub struct Lookahead {
    limits: DraftLimits,
    rate: f64,
}

/// Weight of the newest verification in the average acceptance rate.
const RATE_WEIGHT: f64 = 0.25;

impl Lookahead {
    pub fn new(limits: DraftLimits) -> Lookahead {
        // Optimistic start: the first draft is long, and the rate settles within a few steps.
        Lookahead { limits, rate: 0.8 }
    }

    /// The most `drafter` is asked for next: its own judgement up to `--draft-max`, or the
    /// length the acceptance rate suggests.
    pub fn next_for(&self, drafter: &dyn Drafter) -> usize {
        if drafter.sizes_own_drafts() {
            self.limits.max.max(1)
        } else {
            self.next()
        }
    }

    pub fn limits(&self) -> DraftLimits {
        self.limits
    }

    /// Tokens to draft next for a drafter that does not size its own drafts.
    pub fn next(&self) -> usize {
        let rate = self.rate.min(0.99);
        let run = 2.0 * rate / (1.0 - rate) + 1.0;
        (run.round() as usize).clamp(self.limits.min.max(1), self.limits.max.max(1))
    }

    /// Records a verification: `accepted` of `drafted` tokens kept.
    pub fn record(&mut self, drafted: usize, accepted: usize) {
        if drafted > 0 {
            let step = accepted as f64 / drafted as f64;
            self.rate += RATE_WEIGHT * (step - self.rate);
        }
    }
}

/// A drafter and its state across one generation (or a chat, turn after turn): the lookahead
/// and the counts.
pub struct Speculation<'d> {
    pub drafter: &'d mut dyn Drafter,
    pub lookahead: Lookahead,
    /// Drafted tokens sent to verification, and how many of them were kept.
    pub drafted: usize,
    pub accepted: usize,
    /// Positions computed again to drop rejected ones (recurrent layers only; 0 otherwise).
    pub recomputed: usize,
}

impl<'d> Speculation<'d> {
    pub fn new(drafter: &'d mut dyn Drafter, limits: DraftLimits) -> Speculation<'d> {
        Speculation {
            drafter,
            lookahead: Lookahead::new(limits),
            drafted: 0,
            accepted: 0,
            recomputed: 0,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lookahead_follows_the_acceptance_rate_within_the_limits() {
        let mut l = Lookahead::new(DraftLimits { max: 16, min: 2 });
        for _ in 0..20 {
            l.record(8, 8);
        }
        assert_eq!(l.next(), 16);
        for _ in 0..20 {
            l.record(8, 0);
        }
        assert_eq!(l.next(), 2);
        for _ in 0..40 {
            l.record(4, 2);
        }
        assert_eq!(l.next(), 3);
    }
}
