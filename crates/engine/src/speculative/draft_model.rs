//! A draft model: a smaller (or lower-bit) model with the target's vocabulary drafts token by
//! token on a sequence of its own, kept in step with the target's: before each draft it is cut
//! back to what it shares with the target's tokens and fed the rest.

use std::sync::Arc;

use oxibonsai_tokenizer::Tokenizer;

use super::{Draft, Drafter};
use crate::backend::Backend;
use crate::error::EngineError;
use crate::model::{common_prefix, Logits, Model, Sequence};
use crate::sampling::Sampler;

pub struct DraftModel<B: Backend> {
    /// Shared by the drafters of a server's slots, each with its own sequence.
    model: Arc<Model<B>>,
    seq: Sequence<B>,
    /// Drafting stops when the draft's most likely token has a probability below this.
    p_min: f32,
}

/// Refuses a draft whose vocabulary differs from the target's: a drafted id must mean the same
/// token to both. Compares the sizes, then every token's text, naming the first that differs.
pub fn check_same_vocabulary(target: &Tokenizer, draft: &Tokenizer) -> Result<(), EngineError> {
    let (n_target, n_draft) = (target.vocab_size(), draft.vocab_size());
    if n_target != n_draft {
        return Err(EngineError::DraftVocabulary {
            reason: format!("the target has {n_target} tokens and the draft {n_draft}"),
        });
    }
    for id in 0..n_target as u32 {
        let (t, d) = (target.token_text(id), draft.token_text(id));
        if t != d {
            return Err(EngineError::DraftVocabulary {
                reason: format!(
                    "token {id} is {:?} in the target and {:?} in the draft",
                    t.unwrap_or(""),
                    d.unwrap_or("")
                ),
            });
        }
    }
    Ok(())
}

impl<B: Backend> DraftModel<B> {
    /// A drafter running `model` on a sequence of `n_ctx` positions (the target's context).
    /// The tokenizers are those of the target and the draft files, checked to agree, and the
    /// two models must have as many rows of logits.
    pub fn new(
        model: Model<B>,
        target: &Tokenizer,
        target_n_vocab: usize,
        draft: &Tokenizer,
        n_ctx: usize,
        p_min: f32,
    ) -> Result<DraftModel<B>, EngineError> {
        check_same_vocabulary(target, draft)?;
        if model.config.n_vocab != target_n_vocab {
            return Err(EngineError::DraftVocabulary {
                reason: format!(
                    "the target has {target_n_vocab} rows of logits and the draft {}",
                    model.config.n_vocab
                ),
            });
        }
        let seq = model.new_sequence(n_ctx)?;
        Ok(DraftModel {
            model: Arc::new(model),
            seq,
            p_min,
        })
    }

    /// Another drafter on the same draft model, with a sequence of its own (a server slot's).
    pub fn fork(&self, n_ctx: usize) -> Result<DraftModel<B>, EngineError> {
        Ok(DraftModel {
            model: Arc::clone(&self.model),
            seq: self.model.new_sequence(n_ctx)?,
            p_min: self.p_min,
        })
    }

    pub fn model(&self) -> &Model<B> {
        &self.model
    }
}

/// The largest softmax probability of a row of logits.
pub(super) fn top_probability(logits: &[f32]) -> f32 {
    let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    if !max.is_finite() {
        return 0.0;
    }
    let total: f64 = logits.iter().map(|&l| f64::from(l - max).exp()).sum();
    (1.0 / total) as f32
}

impl<B: Backend> DraftModel<B> {
    /// Cuts the draft's sequence back to what it shares with `context`, keeping out at least
    /// the last token (its logits are where a draft starts); the length kept.
    fn catch_up_to(&mut self, context: &[u32]) -> usize {
        let shared = common_prefix(self.seq.tokens(), context).min(context.len() - 1);
        self.seq.truncate(shared)
    }
}

impl<B: Backend + 'static> Drafter for DraftModel<B> {
    fn prefill(&mut self, context: &[u32]) -> Result<(), EngineError> {
        if context.len() < 2 || context.len() > self.seq.n_ctx() {
            return Ok(());
        }
        let reached = self.catch_up_to(context);
        let rest = &context[reached..context.len() - 1];
        if !rest.is_empty() {
            self.model.forward(&mut self.seq, rest, Logits::Last)?;
        }
        Ok(())
    }

    fn draft(
        &mut self,
        context: &[u32],
        max: usize,
        sampler: &mut Sampler,
        out: &mut Draft,
    ) -> Result<(), EngineError> {
        out.clear();
        // Room for the context and the tokens fed while drafting (the last one is not fed).
        if context.is_empty() || max == 0 || context.len() + max > self.seq.n_ctx() + 1 {
            return Ok(());
        }
        let reached = self.catch_up_to(context);
        let mut logits = self
            .model
            .forward(&mut self.seq, &context[reached..], Logits::Last)?;
        loop {
            if top_probability(logits) < self.p_min {
                break;
            }
            let (token, probs) = sampler.sample_with_probs(logits)?;
            out.tokens.push(token);
            out.probs.push(probs.map(<[_]>::to_vec));
            if out.len() >= max {
                break;
            }
            logits = self.model.forward(&mut self.seq, &[token], Logits::Last)?;
        }
        Ok(())
    }

    fn name(&self) -> &'static str {
        "draft model"
    }

    fn fork(&self, n_ctx: usize) -> Result<Box<dyn Drafter>, EngineError> {
        Ok(Box::new(DraftModel::fork(self, n_ctx)?))
    }
}
