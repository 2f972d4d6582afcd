//! Prompt lookup: when the last `n` tokens occurred earlier (in the prompt or the output so far),
//! propose what followed them there. Input-grounded tasks (rewriting, summarising, editing code)
//! copy long runs of their input, which this drafts for free. As llama-cpp-python's
//! `LlamaPromptLookupDecoding`, the longest n-gram is tried first, down to the shortest; unlike it,
//! the latest earlier occurrence is taken, which follows the text being rewritten.

use super::{Draft, Drafter};
use crate::error::EngineError;
use crate::sampling::Sampler;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PromptLookup {
    /// The longest n-gram matched.
    pub ngram_max: usize,
    /// The shortest n-gram matched.
    pub ngram_min: usize,
}

impl Default for PromptLookup {
    fn default() -> Self {
        PromptLookup {
            ngram_max: 3,
            ngram_min: 1,
        }
    }
}

impl PromptLookup {
    /// The continuation of the latest earlier occurrence of `context`'s last n tokens (n from
    /// `ngram_max` down to `ngram_min`), at most `max` tokens; empty when none occurs.
    pub fn lookup<'c>(&self, context: &'c [u32], max: usize) -> &'c [u32] {
        let len = context.len();
        for n in (self.ngram_min.max(1)..=self.ngram_max.min(len.saturating_sub(1))).rev() {
            let tail = &context[len - n..];
            // Start positions of earlier occurrences, latest first; one ending at `len` is the
            // tail itself and has nothing after it.
            for start in (0..len - n).rev() {
                if &context[start..start + n] == tail {
                    let from = start + n;
                    return &context[from..(from + max).min(len)];
                }
            }
        }
        &[]
    }
}

impl Drafter for PromptLookup {
    fn draft(
        &mut self,
        context: &[u32],
        max: usize,
        _sampler: &mut Sampler,
        out: &mut Draft,
    ) -> Result<(), EngineError> {
        out.clear();
        let found = self.lookup(context, max);
        out.tokens.extend_from_slice(found);
        out.probs.resize(found.len(), None);
        Ok(())
    }

    fn name(&self) -> &'static str {
        "prompt lookup"
    }

    fn fork(&self, _n_ctx: usize) -> Result<Box<dyn Drafter>, EngineError> {
        Ok(Box::new(*self))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn longest_latest_match_and_its_continuation() {
        let l = PromptLookup::default();
        // "1 2 3" occurs at 0 and at 5; the latest (5) is followed by 9 9.
        let ctx = [1, 2, 3, 4, 5, 1, 2, 3, 9, 9, 7, 1, 2, 3];
        assert_eq!(l.lookup(&ctx, 4), &[9, 9, 7, 1]);
        assert_eq!(l.lookup(&ctx, 1), &[9]);
        // Only a 1-gram matches (8 ... 8): what followed the earlier 8.
        assert_eq!(l.lookup(&[8, 6, 5, 8], 8), &[6, 5, 8]);
        // No earlier occurrence.
        assert!(l.lookup(&[1, 2, 3], 4).is_empty());
        assert!(l.lookup(&[1], 4).is_empty());
        assert!(l.lookup(&[], 4).is_empty());
        // A 2-gram minimum ignores single-token matches.
        let strict = PromptLookup {
            ngram_max: 3,
            ngram_min: 2,
        };
        assert!(strict.lookup(&[8, 6, 5, 8], 8).is_empty());
    }
}
