//! Drafting with the model's own multi-token-prediction head (qwen35's `nextn_predict_layers`),
//! as llama.cpp's `draft-mtp` does for a single head: the head's KV cache holds, at each position
//! p of the target's sequence, what it computed from the token x_p and the target's hidden state
//! h_{p−1}. A draft starts from the last token (not yet fed to the target) paired with the
//! target's last hidden state, and goes on from the head's own: each drafted token is fed back
//! with the hidden state the head produced for it.
//!
//! Only positions paired with the target's own hidden states are kept: after each draft the
//! head's sequence is cut back to the context, and before the next one it is cut to what it
//! shares with the context (the target's rewinds drop the same positions) and fed the rest, the
//! target's kept hidden states ([`crate::Sequence::keep_hidden`]) alongside.

use std::sync::Arc;

use super::draft_model::top_probability;
use super::{Draft, Drafter};
use crate::backend::Backend;
use crate::error::EngineError;
use crate::model::{common_prefix, Model, Sequence};
use crate::sampling::Sampler;

pub struct MtpDrafter<B: Backend> {
    /// The target model itself, its head loaded ([`Model::load_mtp`]).
    model: Arc<Model<B>>,
    /// The head's KV cache.
    seq: Sequence<B>,
    /// Drafting stops when the head's most likely token has a probability below this.
    p_min: f32,
    /// The hidden states fed with a batch of tokens.
    fed: Vec<f32>,
}

impl<B: Backend> MtpDrafter<B> {
    /// A drafter for a target sequence of `n_ctx` positions; refused, naming
    /// `nextn_predict_layers`, when the model's head is not loaded.
    pub fn new(
        model: Arc<Model<B>>,
        n_ctx: usize,
        p_min: f32,
    ) -> Result<MtpDrafter<B>, EngineError> {
        if !model.has_mtp() {
            return Err(EngineError::NoMtpLayers {
                what: "MTP drafting (Model::load_mtp first)",
                key: format!("{}.nextn_predict_layers", model.config.arch.name()),
            });
        }
        let seq = model.new_mtp_sequence(n_ctx)?;
        Ok(MtpDrafter {
            model,
            seq,
            p_min,
            fed: Vec::new(),
        })
    }

    /// The positions the head's cache holds.
    pub fn n_past(&self) -> usize {
        self.seq.n_past()
    }
}

impl<B: Backend + 'static> Drafter for MtpDrafter<B> {
    fn draft(
        &mut self,
        _context: &[u32],
        _max: usize,
        _sampler: &mut Sampler,
        _out: &mut Draft,
    ) -> Result<(), EngineError> {
        Err(EngineError::Mtp {
            reason: "MTP drafting needs the target's hidden states (Drafter::draft_with_hidden)"
                .to_owned(),
        })
    }

    fn reads_hidden(&self) -> bool {
        true
    }

    fn draft_with_hidden(
        &mut self,
        context: &[u32],
        hidden: Option<(usize, &[f32])>,
        max: usize,
        sampler: &mut Sampler,
        out: &mut Draft,
    ) -> Result<(), EngineError> {
        out.clear();
        let n = context.len();
        // Room for the last token and the drafted ones fed back (the last one is not).
        if n == 0 || max == 0 || n + max > self.seq.n_ctx() + 1 {
            return Ok(());
        }
        let d = self.model.config.n_embd;
        let (first, rows) = hidden.ok_or_else(|| EngineError::Mtp {
            reason: "the target's sequence does not keep its hidden states".to_owned(),
        })?;
        // The last token is fed again: its logits are where the draft starts.
        let start = self
            .seq
            .truncate(common_prefix(self.seq.tokens(), context).min(n - 1));
        // Position p is fed with the target's hidden state at p − 1 (zeros before the first).
        let kept = first..first + rows.len() / d;
        let needed = start.saturating_sub(1)..n - 1;
        if !needed.is_empty() && (needed.start < kept.start || needed.end > kept.end) {
            return Err(EngineError::Mtp {
                reason: format!(
                    "the target keeps hidden states of positions {kept:?}, the head needs {needed:?}"
                ),
            });
        }
        self.fed.clear();
        for p in start..n {
            match p.checked_sub(1) {
                Some(q) => self
                    .fed
                    .extend_from_slice(&rows[(q - first) * d..(q - first + 1) * d]),
                None => self.fed.resize(self.fed.len() + d, 0.0),
            }
        }
        let MtpDrafter {
            model,
            seq,
            fed,
            p_min,
        } = self;
        let mut step = model.forward_mtp(seq, &context[start..], fed)?;
        loop {
            if top_probability(step.logits) < *p_min {
                break;
            }
            let (token, probs) = sampler.sample_with_probs(step.logits)?;
            out.tokens.push(token);
            out.probs.push(probs.map(<[_]>::to_vec));
            if out.len() >= max {
                break;
            }
            fed.clear();
            fed.extend_from_slice(step.hidden);
            step = model.forward_mtp(seq, &[token], fed)?;
        }
        // The drafted positions were fed the head's own hidden states, not the target's.
        seq.truncate(n);
        Ok(())
    }

    fn name(&self) -> &'static str {
        "mtp"
    }

    fn fork(&self, n_ctx: usize) -> Result<Box<dyn Drafter>, EngineError> {
        Ok(Box::new(MtpDrafter::new(
            Arc::clone(&self.model),
            n_ctx,
            self.p_min,
        )?))
    }
}
