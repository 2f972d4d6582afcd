//! The candidate list and the truncation steps of the chain (top-k, top-p, min-p), then
//! temperature and the categorical draw. Semantics are llama.cpp's samplers of the same names.
//!
//! Ties in logit are broken by lowest token id everywhere an order is needed, so every step is a
//! deterministic function of its input (llama.cpp's unstable partial sort leaves that open).

use std::cmp::Ordering;
use std::collections::BinaryHeap;

use super::params::SamplingError;

/// Token `id` with its logit (after bias and penalties).
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) struct Candidate {
    pub(super) id: u32,
    pub(super) logit: f32,
}

/// One token of the distribution the draw would use.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TokenProb {
    pub id: u32,
    /// After logit bias and penalties, before temperature.
    pub logit: f32,
    /// After truncation and temperature; the probabilities of a list sum to 1.
    pub prob: f32,
}

/// Most likely first; equal logits by ascending id. No NaN ever reaches this (rejected when the
/// list is built), so `partial_cmp` is total here; -0.0 and +0.0 compare equal, as in `>`.
fn most_likely_first(a: &Candidate, b: &Candidate) -> Ordering {
    b.logit
        .partial_cmp(&a.logit)
        .unwrap_or(Ordering::Equal)
        .then(a.id.cmp(&b.id))
}

/// First guess at how many of the best tokens top-p needs (llama.cpp starts at 256 too): with a
/// real model's peaked distribution the cut almost always falls inside, sparing a full sort.
const TOP_P_FIRST_GUESS: usize = 256;

/// Heap entry ordered so that the heap's top is the *least* likely token kept so far.
#[derive(Debug, Clone, Copy, PartialEq)]
struct LeastLikelyOnTop(Candidate);

impl Eq for LeastLikelyOnTop {}

impl PartialOrd for LeastLikelyOnTop {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for LeastLikelyOnTop {
    fn cmp(&self, other: &Self) -> Ordering {
        most_likely_first(&self.0, &other.0)
    }
}

/// The adjusted logits and the tokens still in the running. Buffers are kept between calls, so
/// after the first token nothing is allocated.
#[derive(Debug, Clone, Default)]
pub(super) struct Candidates {
    /// Every vocabulary entry's logit by id, after bias and penalties.
    logits: Vec<f32>,
    items: Vec<Candidate>,
    /// `items[..sorted_len]` are the `sorted_len` most likely tokens, in order.
    sorted_len: usize,
    /// Scratch for the draw's unnormalised weights.
    weights: Vec<f64>,
    /// Scratch for top-k.
    heap: BinaryHeap<LeastLikelyOnTop>,
}

impl Candidates {
    /// Takes a fresh row of logits; [`Self::logits_mut`] then adjusts them by id.
    pub(super) fn load(&mut self, logits: &[f32]) {
        self.logits.clear();
        self.logits.extend_from_slice(logits);
        self.items.clear();
        self.sorted_len = 0;
    }

    pub(super) fn logits_mut(&mut self) -> &mut [f32] {
        &mut self.logits
    }

    /// Rejects NaN / +inf, which no later step could handle, and a row where every token is
    /// banned (-inf).
    pub(super) fn check(&self) -> Result<(), SamplingError> {
        self.check_and_max().map(|_| ())
    }

    /// The checks of [`Candidates::check`], and the largest logit: one pass in `LANES` running
    /// maxima without an early exit (so it vectorizes: a vocabulary is ~10⁵ logits, per sequence
    /// and step), then the rare error's token looked up only when there is one.
    fn check_and_max(&self) -> Result<f32, SamplingError> {
        const LANES: usize = 16;
        let (mut bad, mut all_banned) = (false, true);
        let mut max = [f32::NEG_INFINITY; LANES];
        let mut visit = |max: &mut [f32; LANES], values: &[f32]| {
            for (m, &l) in max.iter_mut().zip(values) {
                bad |= l.is_nan() | (l == f32::INFINITY);
                all_banned &= l == f32::NEG_INFINITY;
                *m = if l > *m { l } else { *m };
            }
        };
        let chunks = self.logits.chunks_exact(LANES);
        let tail = chunks.remainder();
        for chunk in chunks {
            visit(&mut max, chunk);
        }
        visit(&mut max, tail);
        if bad {
            if let Some((id, &value)) = (0u32..)
                .zip(&self.logits)
                .find(|(_, l)| l.is_nan() || **l == f32::INFINITY)
            {
                return Err(SamplingError::InvalidLogit { token: id, value });
            }
        }
        if all_banned {
            return Err(SamplingError::NoCandidates);
        }
        Ok(max.into_iter().fold(f32::NEG_INFINITY, f32::max))
    }

    /// The checks of [`Candidates::check`], then the most likely candidate (ties: the lowest id).
    pub(super) fn checked_argmax(&self) -> Result<Candidate, SamplingError> {
        let max = self.check_and_max()?;
        // The checks passed: some logit is finite, and `max` is the largest of them.
        let id = self.logits.iter().position(|&l| l == max).unwrap_or(0);
        Ok(Candidate {
            id: id as u32,
            logit: self.logits[id],
        })
    }

    /// Every token that is not banned, in id order.
    pub(super) fn gather_all(&mut self) {
        self.items.clear();
        self.items.extend(
            (0u32..)
                .zip(&self.logits)
                .filter(|(_, &l)| l != f32::NEG_INFINITY)
                .map(|(id, &logit)| Candidate { id, logit }),
        );
        self.sorted_len = 0;
    }

    /// Keeps exactly the `k` most likely tokens (ties at the boundary: lowest ids), sorted; 0
    /// (or a `k` past the vocabulary) keeps every token. One pass with a size-`k` heap: a token costs one comparison against
    /// the worst kept one, which beats partitioning the whole vocabulary for the usual small k.
    pub(super) fn gather_top_k(&mut self, k: usize) {
        if k == 0 || k >= self.logits.len() {
            self.gather_all();
            return;
        }
        self.heap.clear();
        for (id, &logit) in (0u32..).zip(&self.logits) {
            if logit == f32::NEG_INFINITY {
                continue;
            }
            let candidate = Candidate { id, logit };
            if self.heap.len() < k {
                self.heap.push(LeastLikelyOnTop(candidate));
            } else if let Some(mut worst) = self.heap.peek_mut() {
                // Ids arrive in increasing order, so an equal logit loses the tie: strictly greater.
                if logit > worst.0.logit {
                    *worst = LeastLikelyOnTop(candidate);
                }
            }
        }
        self.items.clear();
        self.items.extend(self.heap.drain().map(|entry| entry.0));
        self.items.sort_unstable_by(most_likely_first);
        self.sorted_len = self.items.len();
    }

    pub(super) fn len(&self) -> usize {
        self.items.len()
    }

    pub(super) fn first(&self) -> Option<Candidate> {
        self.items.first().copied()
    }

    /// Makes `items[..k]` the `k` most likely tokens in order, sorting only what is new.
    fn sort_prefix(&mut self, k: usize) {
        let k = k.min(self.items.len());
        if k <= self.sorted_len {
            return;
        }
        // Everything past the sorted prefix is no more likely than it, so the next tokens in
        // order are the best of the tail.
        let tail = &mut self.items[self.sorted_len..];
        let wanted = k - self.sorted_len;
        if wanted < tail.len() {
            tail.select_nth_unstable_by(wanted - 1, most_likely_first);
        }
        tail[..wanted].sort_unstable_by(most_likely_first);
        self.sorted_len = k;
    }

    /// Keeps the smallest most-likely-first prefix whose softmax probability sums to at least
    /// `p` (at least one token); `p >= 1` disables.
    pub(super) fn top_p(&mut self, p: f32) {
        if p >= 1.0 {
            return;
        }
        let p = f64::from(p);
        let max = self.max_logit();
        let total: f64 = self
            .items
            .iter()
            .map(|c| (f64::from(c.logit) - max).exp())
            .sum();
        let mut cumulative = 0.0;
        let mut i = 0;
        while i < self.items.len() {
            if i == self.sorted_len {
                // Every token past the sorted prefix is at most as likely as its last one, so at
                // least (p - cumulative) / that probability more are needed: on a flat
                // distribution this jumps close to the cut instead of doubling towards it.
                let next = if i == 0 {
                    TOP_P_FIRST_GUESS
                } else {
                    let last = (f64::from(self.items[i - 1].logit) - max).exp() / total;
                    let needed = ((p - cumulative) / last).ceil();
                    // Float-to-int `as` saturates, so a huge or infinite estimate is harmless.
                    i.saturating_add((needed as usize).max(i))
                };
                self.sort_prefix(next);
            }
            cumulative += (f64::from(self.items[i].logit) - max).exp() / total;
            i += 1;
            if cumulative >= p {
                break;
            }
        }
        // Rounding can leave the total just under p at the end: then everything stays.
        self.items.truncate(i);
        self.sorted_len = self.sorted_len.min(i);
    }

    /// Keeps tokens with probability at least `p` times the most likely one's, i.e. with logit
    /// at least `max + ln p`; `p <= 0` disables. The most likely token always stays.
    pub(super) fn min_p(&mut self, p: f32) {
        if p <= 0.0 {
            return;
        }
        let min_gap = f64::from(p).ln();
        let max = self.max_logit();
        let was_sorted = self.sorted_len == self.items.len();
        self.items.retain(|c| f64::from(c.logit) - max >= min_gap);
        // Filtering keeps relative order, so a fully sorted list stays sorted.
        self.sorted_len = if was_sorted { self.items.len() } else { 0 };
    }

    /// Softmax of `logit / temperature` (temperature > 0) into the weights scratch; returns the
    /// normaliser. Subtracting the max first keeps every exponent <= 0.
    fn weigh(&mut self, temperature: f32) -> f64 {
        let max = self.max_logit();
        let temperature = f64::from(temperature);
        self.weights.clear();
        self.weights.extend(
            self.items
                .iter()
                .map(|c| ((f64::from(c.logit) - max) / temperature).exp()),
        );
        self.weights.iter().sum()
    }

    /// Scales by `temperature` and draws one token; `uniform` is a sample of U[0, 1).
    pub(super) fn draw(&mut self, temperature: f32, uniform: f64) -> u32 {
        let total = self.weigh(temperature);
        let target = uniform * total;
        let mut cumulative = 0.0;
        for (c, &w) in self.items.iter().zip(&self.weights) {
            cumulative += w;
            // Strictly greater: a token whose weight underflowed to 0 is never picked.
            if cumulative > target {
                return c.id;
            }
        }
        // `uniform * total` can round up to `total`; the last token with weight takes it.
        self.items
            .iter()
            .zip(&self.weights)
            .rev()
            .find(|(_, &w)| w > 0.0)
            .map_or(self.items[0].id, |(c, _)| c.id)
    }

    /// The final distribution (after temperature), most likely first.
    pub(super) fn probabilities(&mut self, temperature: f32, out: &mut Vec<TokenProb>) {
        let len = self.items.len();
        self.sort_prefix(len);
        let total = self.weigh(temperature);
        out.clear();
        out.extend(
            self.items
                .iter()
                .zip(&self.weights)
                .map(|(c, &w)| TokenProb {
                    id: c.id,
                    logit: c.logit,
                    prob: (w / total) as f32,
                }),
        );
    }

    fn max_logit(&self) -> f64 {
        if self.sorted_len > 0 {
            return f64::from(self.items[0].logit);
        }
        self.items
            .iter()
            .map(|c| f64::from(c.logit))
            .fold(f64::NEG_INFINITY, f64::max)
    }
}
