//! Speculative sampling: checking a drafted token against the target's distribution so that the
//! tokens kept are distributed exactly as [`Sampler::sample`] would draw them (Leviathan et al.
//! 2023, Chen et al. 2023). A token `x` drafted with probability `q(x)` is kept with probability
//! `min(1, p(x) / q(x))`; a rejected one is replaced by a draw from `normalize(max(0, p − q))`.
//! A deterministic draft (prompt lookup, or any greedy drafter) has `q` one-hot at `x`, which the
//! same rule covers: keep with probability `p(x)`, else draw from `p` without `x`.
//!
//! `p` is the distribution the plain sampler draws from (bias, penalties, top-k, top-p, min-p,
//! temperature); greedy (`temperature <= 0`) keeps `x` exactly when it is the argmax, so greedy
//! output does not depend on the draft.

use rand_chacha::rand_core::RngCore;

use super::{unit_interval, Sampler, SamplingError, TokenProb};

/// What verification made of one drafted token.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// The drafted token stands.
    Accept,
    /// The drafted token is replaced by this one; the rest of the draft is dropped.
    Reject(u32),
}

/// The probability of `id` in a distribution listed as (token, probability) pairs.
fn prob_of(dist: &[TokenProb], id: u32) -> f64 {
    dist.iter()
        .find(|t| t.id == id)
        .map_or(0.0, |t| f64::from(t.prob))
}

impl Sampler {
    /// Draws a token and returns it with the distribution it was drawn from (`None`: greedy, the
    /// argmax with certainty). A draft model drafts with this, so verification knows `q`.
    pub fn sample_with_probs(
        &mut self,
        logits: &[f32],
    ) -> Result<(u32, Option<&[TokenProb]>), SamplingError> {
        if let Some(best) = self.prepare(logits)? {
            return Ok((best.id, None));
        }
        self.candidates
            .probabilities(self.params.temperature, &mut self.probabilities);
        let uniform = unit_interval(self.rng.next_u64());
        let token = draw(&self.probabilities, uniform, |t| f64::from(t.prob));
        Ok((token, Some(&self.probabilities)))
    }

    /// Verifies `drafted`, proposed with distribution `q` (`None`: deterministically), against the
    /// target's `logits` for the same position. Does not [`Sampler::accept`] anything.
    pub fn verify(
        &mut self,
        logits: &[f32],
        drafted: u32,
        q: Option<&[TokenProb]>,
    ) -> Result<Verdict, SamplingError> {
        if let Some(best) = self.prepare(logits)? {
            return Ok(if best.id == drafted {
                Verdict::Accept
            } else {
                Verdict::Reject(best.id)
            });
        }
        self.candidates
            .probabilities(self.params.temperature, &mut self.probabilities);
        let p = &self.probabilities;
        let q_of = |id: u32| match q {
            Some(q) => prob_of(q, id),
            None => f64::from(u8::from(id == drafted)),
        };
        let (p_x, q_x) = (prob_of(p, drafted), q_of(drafted));
        let uniform = unit_interval(self.rng.next_u64());
        if q_x > 0.0 && uniform * q_x < p_x {
            return Ok(Verdict::Accept);
        }
        // The residual lives on p's support: where p is 0, max(0, p − q) is 0 too.
        let residual = |t: &TokenProb| (f64::from(t.prob) - q_of(t.id)).max(0.0);
        let total: f64 = p.iter().map(residual).sum();
        let uniform = unit_interval(self.rng.next_u64());
        let token = if total > 0.0 {
            draw(p, uniform, residual)
        } else {
            // p ≤ q everywhere means p = q: the rejection had probability 0 and only rounding
            // got here; p itself is then the residual's limit.
            draw(p, uniform, |t| f64::from(t.prob))
        };
        Ok(Verdict::Reject(token))
    }
}

/// One token drawn from `items` with weights `weight` (not necessarily normalised).
fn draw(items: &[TokenProb], uniform: f64, weight: impl Fn(&TokenProb) -> f64) -> u32 {
    let total: f64 = items.iter().map(&weight).sum();
    let target = uniform * total;
    let mut cumulative = 0.0;
    for t in items {
        let w = weight(t);
        cumulative += w;
        if w > 0.0 && cumulative > target {
            return t.id;
        }
    }
    // `uniform * total` rounded up to `total`: the last token with weight takes it.
    items
        .iter()
        .rev()
        .find(|t| weight(t) > 0.0)
        .map_or(items.first().map_or(0, |t| t.id), |t| t.id)
}
