//! qwen35's multi-token-prediction head (`nextn_predict_layers`), as llama.cpp's MTP graph
//! (`llama_model_qwen35::graph_mtp`) runs it: at position p it reads the token x_p and the trunk's
//! last hidden state h_{p−1} (after the output norm), and predicts x_{p+1}:
//!
//! ```text
//! x   = eh_proj · [enorm(embed(x_p)) ‖ hnorm(h_{p−1})]
//! x  += attention(attn_norm(x))      (a gated full-attention layer, its own KV cache)
//! x  += ffn(post_attention_norm(x))
//! h'  = shared_head_norm(x)          (or output_norm)  — fed back as h for the next draft
//! logits = shared_head_head · h'     (or the model's LM head)
//! ```
//!
//! Its KV cache is a one-layer [`Sequence`] of its own ([`Model::new_mtp_sequence`]).

use super::block::{load_optional_vector, Block, Loader};
use super::{apply_scale, Mixer, Model, Segment, Sequence, Workspace};
use crate::backend::{grown, Backend};
use crate::config::{Architecture, LayerKind};
use crate::error::EngineError;
use crate::kv_cache::LayerCache;
use crate::state::{CheckpointPolicy, Checkpoints, LayerState};

/// The weights of the (first) multi-token-prediction layer, `blk.{n_layer}.*`.
pub struct MtpHead<W> {
    block: Block<W>,
    /// (n_embd, 2·n_embd): the normed embedding and hidden state, concatenated, to a residual.
    eh_proj: W,
    eh_proj_scale: Option<f32>,
    enorm: Vec<f32>,
    hnorm: Vec<f32>,
    /// `nextn.embed_tokens`; `None`: the model's `token_embd`.
    embed_tokens: Option<W>,
    /// `nextn.shared_head_norm`, else the model's `output_norm`.
    head_norm: Vec<f32>,
    /// `nextn.shared_head_head` and its scale; `None`: the model's LM head.
    head: Option<(W, Option<f32>)>,
}

impl<B: Backend> Loader<'_, B> {
    /// The layer after the trunk and its `nextn.*` tensors, with llama.cpp's shapes and its
    /// fallbacks for the optional ones.
    fn mtp_head(&self, output_norm: &[f32]) -> Result<MtpHead<B::Weight>, EngineError> {
        let c = self.config;
        let il = c.n_layer;
        let p = |suffix: &str| format!("blk.{il}.nextn.{suffix}");
        let optional_matrix = |name: &str, n_in, n_out| match self.file.tensor(name) {
            Some(_) => self.matrix(name, n_in, n_out).map(Some),
            None => Ok(None),
        };
        let head = match optional_matrix(&p("shared_head_head.weight"), c.n_embd, c.n_vocab)? {
            Some(w) => Some((w, self.scale(&p("shared_head_head.weight"))?)),
            None => None,
        };
        Ok(MtpHead {
            block: self.block_of(il, LayerKind::Attention)?,
            eh_proj: self.matrix(&p("eh_proj.weight"), 2 * c.n_embd, c.n_embd)?,
            eh_proj_scale: self.scale(&p("eh_proj.weight"))?,
            enorm: self.vector(&p("enorm.weight"), c.n_embd)?,
            hnorm: self.vector(&p("hnorm.weight"), c.n_embd)?,
            embed_tokens: optional_matrix(&p("embed_tokens.weight"), c.n_embd, c.n_vocab)?,
            head_norm: load_optional_vector(self.file, &p("shared_head_norm.weight"), c.n_embd)?
                .unwrap_or_else(|| output_norm.to_vec()),
            head,
        })
    }
}

/// What one pass of the head gives for the last token: the logits (`n_vocab`) and the normed
/// hidden state the next draft step reads in place of the trunk's (`n_embd`).
pub struct MtpOutput<'s> {
    pub logits: &'s [f32],
    pub hidden: &'s [f32],
}

impl<B: Backend> Model<B> {
    /// Loads the multi-token-prediction head (not loaded by [`Model::load`]: only a drafter
    /// needs it). Refused, naming the key, when the file has none; refused, naming the tensor,
    /// when one of its tensors is missing or misshapen.
    pub fn load_mtp(&mut self) -> Result<(), EngineError> {
        let c = &self.config;
        if c.n_nextn == 0 {
            return Err(EngineError::NoMtpLayers {
                what: "multi-token-prediction drafting",
                key: format!("{}.nextn_predict_layers", c.arch.name()),
            });
        }
        if c.arch != Architecture::Qwen35 {
            return Err(EngineError::UnsupportedArchitecture {
                arch: format!("{}: no multi-token-prediction head", c.arch.name()),
            });
        }
        if self.rotated.is_some() {
            return Err(EngineError::Mtp {
                reason: "a file folded with prism.hadamard is not supported".to_owned(),
            });
        }
        let loader = Loader {
            file: &self.file,
            backend: &self.backend,
            config: c,
        };
        let head = loader.mtp_head(&self.output_norm)?;
        self.mtp = Some(head);
        Ok(())
    }

    pub fn has_mtp(&self) -> bool {
        self.mtp.is_some()
    }

    /// A sequence for the head's own KV cache: one attention layer of `n_ctx` positions.
    pub fn new_mtp_sequence(&self, n_ctx: usize) -> Result<Sequence<B>, EngineError> {
        let c = &self.config;
        Ok(Sequence {
            layers: vec![LayerState::Kv(LayerCache::with_types(
                n_ctx,
                c.n_head_kv,
                c.head_dim,
                c.head_dim_v,
                self.cache_types,
            )?)],
            n_ctx,
            tokens: Vec::new(),
            checkpoints: Checkpoints::default(),
            policy: CheckpointPolicy::default(),
            recurrent: false,
            work: Workspace::default(),
            hidden: None,
        })
    }

    /// Runs the head on `tokens` at positions `seq.n_past()..` of its sequence (made by
    /// [`Model::new_mtp_sequence`]), token i with the hidden state `hidden[i]` (`n_embd` each: the
    /// trunk's at the position before, or the head's own when drafting on), and returns the last
    /// token's logits and hidden state.
    pub fn forward_mtp<'s>(
        &self,
        seq: &'s mut Sequence<B>,
        tokens: &[u32],
        hidden: &[f32],
    ) -> Result<MtpOutput<'s>, EngineError> {
        let c = &self.config;
        let head = self.mtp.as_ref().ok_or_else(|| EngineError::NoMtpLayers {
            what: "Model::forward_mtp before Model::load_mtp",
            key: format!("{}.nextn_predict_layers", c.arch.name()),
        })?;
        self.check_batch(seq, tokens)?;
        if seq.layers.len() != 1 || hidden.len() != tokens.len() * c.n_embd {
            return Err(EngineError::Mtp {
                reason: format!(
                    "{} tokens came with {} hidden values on a sequence of {} layers",
                    tokens.len(),
                    hidden.len(),
                    seq.layers.len()
                ),
            });
        }
        let start = seq.n_past();
        let Sequence { layers, work, .. } = &mut *seq;
        let mut segments = [Segment {
            layers,
            start,
            len: tokens.len(),
        }];
        self.backend
            .run(|| self.mtp_pass(head, &mut segments, tokens, hidden, work));
        seq.advance(tokens, false);
        let b = &seq.work.buffers;
        Ok(MtpOutput {
            logits: &b.logits[..c.n_vocab],
            hidden: &b.mtp_h[..c.n_embd],
        })
    }

    fn mtp_pass(
        &self,
        head: &MtpHead<B::Weight>,
        segments: &mut [Segment<'_>],
        tokens: &[u32],
        hidden: &[f32],
        work: &mut Workspace<B>,
    ) {
        let c = &self.config;
        let be = &self.backend;
        let (n, d) = (tokens.len(), c.n_embd);
        let Workspace {
            scratch,
            buffers: b,
        } = work;
        self.set_positions(segments, b);
        let e = n * d;
        let embed = head.embed_tokens.as_ref().unwrap_or(&self.token_embd);
        be.embed(embed, tokens, grown(&mut b.x, e));
        // Each row [enorm(embedding) ‖ hnorm(hidden)], as ggml_concat along the row.
        let xn = grown(&mut b.xn, e);
        be.rms_norm(&b.x[..e], &head.enorm, c.rms_norm_eps, xn);
        let h = grown(&mut b.proj, e);
        be.rms_norm(hidden, &head.hnorm, c.rms_norm_eps, h);
        let both = grown(&mut b.mtp_in, 2 * e);
        for ((row, en), hn) in both
            .chunks_exact_mut(2 * d)
            .zip(xn.chunks_exact(d))
            .zip(h.chunks_exact(d))
        {
            row[..d].copy_from_slice(en);
            row[d..].copy_from_slice(hn);
        }
        let x = grown(&mut b.x, e);
        be.matmul(&head.eh_proj, both, n, x, scratch);
        apply_scale(be, x, head.eh_proj_scale);
        let block = &head.block;
        be.rms_norm(
            &b.x[..e],
            &block.attn_norm,
            c.rms_norm_eps,
            grown(&mut b.xn, e),
        );
        match &block.mixer {
            Mixer::Attention(a) => self.attention(a, 0, segments, b, scratch),
            Mixer::GatedDeltaNet(_) => unreachable!("the head's layer is loaded as attention"),
        }
        be.add(&mut b.x[..e], &b.proj[..e]);
        be.rms_norm(
            &b.x[..e],
            &block.ffn_norm,
            c.rms_norm_eps,
            grown(&mut b.xn, e),
        );
        self.ffn(&block.ffn, 0, n, b, scratch);
        be.add(&mut b.x[..e], &b.proj[..e]);
        // Only the last token's prediction is drafted from.
        let last = &b.x[(n - 1) * d..e];
        let h_out = grown(&mut b.mtp_h, d);
        be.rms_norm(last, &head.head_norm, c.rms_norm_eps, h_out);
        let logits = grown(&mut b.logits, c.n_vocab);
        match &head.head {
            Some((w, scale)) => {
                be.matmul(w, h_out, 1, logits, scratch);
                apply_scale(be, logits, *scale);
            }
            None => {
                let w = self.output.as_ref().unwrap_or(&self.token_embd);
                be.matmul(w, h_out, 1, logits, scratch);
            }
        }
    }
}

/// The trunk's last hidden state at each position of a sequence that keeps them
/// ([`Sequence::keep_hidden`]): the output norm applied, `n_embd` per position.
#[derive(Clone, Debug, Default)]
pub(crate) struct HiddenRows {
    /// The position of the first row.
    pub first: usize,
    pub rows: Vec<f32>,
}

impl<B: Backend> Model<B> {
    /// Appends the output-normed rows of the residual stream `x` (`rows × n_embd`) to `keep`.
    pub(super) fn keep_hidden_rows(&self, x: &[f32], keep: &mut HiddenRows) {
        let from = keep.rows.len();
        keep.rows.resize(from + x.len(), 0.0);
        self.backend.rms_norm(
            x,
            &self.output_norm,
            self.config.rms_norm_eps,
            &mut keep.rows[from..],
        );
    }
}
