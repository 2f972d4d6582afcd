//! The transformer, read top to bottom: embedding row → per block: norm, mixer (attention: QKV
//! (+bias, +per-head norm), RoPE, KV write, attention, output) + residual, norm, SwiGLU + residual
//! → final norm → logits.
//! Written once against [`Backend`]; weights are shared and immutable, a [`Sequence`] holds
//! everything that changes.

mod block;
mod mtp;
mod pool;
mod rotate;
mod sequence;
mod state_file;

use std::sync::Arc;

use oxibonsai_gguf::GgufFile;

use crate::backend::{grown, rope_angles, AttentionShape, Backend, DeltaShape, Segment, StepView};
use crate::config::ModelConfig;
use crate::embed::{ClassifierHead, Pooling};
use crate::error::EngineError;
use crate::kv_cache::CacheTypes;
use crate::state::{new_layer_states, CheckpointPolicy, Checkpoints};

use block::{load_vector, Loader};
pub use block::{AttentionWeights, Block, Ffn, GdnWeights, Mixer};
use mtp::HiddenRows;
pub use mtp::{MtpHead, MtpOutput};
pub use sequence::{common_prefix, Restore, Sequence};

pub struct Model<B: Backend> {
    pub config: ModelConfig,
    pub backend: B,
    pub file: Arc<GgufFile>,
    token_embd: B::Weight, // (n_vocab, n_embd), stays in its stored format
    blocks: Vec<Block<B::Weight>>,
    output_norm: Vec<f32>,
    /// `None` when the embedding is tied: the LM head is `token_embd` itself.
    output: Option<B::Weight>,
    /// The `prism.hadamard` rotation the file's weights are folded with, if any.
    rotated: Option<rotate::Rotated>,
    /// The file's `<arch>.pooling_type`, the default of [`Model::embed_batch`]'s callers.
    pub pooling: Option<Pooling>,
    /// `cls.output`: what rank pooling scores with; `None` for a generation-only model.
    classifier: Option<ClassifierHead<B::Weight>>,
    /// The types new sequences store their keys and values in ([`Model::set_cache_types`]).
    cache_types: CacheTypes,
    /// The multi-token-prediction head, once [`Model::load_mtp`] loaded it.
    mtp: Option<MtpHead<B::Weight>>,
}

/// Which rows of logits a forward pass returns.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Logits {
    /// Every token of the batch (teacher forcing).
    All,
    /// Only the last token (generation).
    Last,
    /// The batch's tokens from this index on (perplexity scores only a chunk's second half; the
    /// LM head, a fifth of a small model's work per token, runs only for these rows).
    From(usize),
}

/// The activations and backend scratch of a forward pass: reused from call to call, grown to the
/// largest batch seen. A sequence carries one for [`Model::forward`]; a scheduler running many
/// sequences together keeps one for [`Model::forward_batch`].
pub struct Workspace<B: Backend> {
    scratch: B::Scratch,
    buffers: Buffers,
}

impl<B: Backend> Default for Workspace<B> {
    fn default() -> Self {
        Workspace {
            scratch: B::Scratch::default(),
            buffers: Buffers::default(),
        }
    }
}

/// One sequence's part of a batched forward pass: its tokens go in at `seq.n_past()`.
pub struct BatchEntry<'a, B: Backend> {
    pub seq: &'a mut Sequence<B>,
    pub tokens: &'a [u32],
}

#[derive(Default)]
struct Buffers {
    x: Vec<f32>,
    xn: Vec<f32>,
    q: Vec<f32>,
    k: Vec<f32>,
    v: Vec<f32>,
    attn: Vec<f32>,
    proj: Vec<f32>,
    /// A rotated copy of `xn` for the folded weights that read it (`prism.hadamard`).
    xr: Vec<f32>,
    gate: Vec<f32>,
    up: Vec<f32>,
    logits: Vec<f32>,
    positions: Vec<usize>,
    /// RoPE's (cos, sin) pairs of this pass's positions, `[token][n_rot / 2]`.
    rope: Vec<(f32, f32)>,
    tokens: Vec<u32>,
    /// Rows of logits per segment for [`Model::forward_batch_rows`] (empty: one each).
    tails: Vec<usize>,
    /// The tokens whose logits a pass returns, for a backend that runs it whole.
    step_rows: Vec<usize>,
    /// The logits of a single-sequence batch split at checkpoints, collected part by part.
    gathered: Vec<f32>,
    /// The multi-token-prediction head's input rows `[embedding ‖ hidden]` and its last
    /// hidden state.
    mtp_in: Vec<f32>,
    mtp_h: Vec<f32>,
    /// The pooled rows of an embedding pass.
    pooled: Vec<f32>,
    /// Gated attention's query-and-gate rows and its gates; Gated DeltaNet's projections.
    qg: Vec<f32>,
    attn_gate: Vec<f32>,
    qkv: Vec<f32>,
    z: Vec<f32>,
    alpha: Vec<f32>,
    beta: Vec<f32>,
}

/// `out *= scale` when the weight that made `out` has a per-tensor scale.
fn apply_scale<B: Backend>(be: &B, out: &mut [f32], scale: Option<f32>) {
    if let Some(s) = scale {
        be.scale(out, s);
    }
}

impl<B: Backend> Model<B> {
    /// Builds the model from a validated file: configuration from metadata, each weight prepared
    /// once by the backend, every shape checked against the configuration.
    pub fn load(file: Arc<GgufFile>, backend: B) -> Result<Model<B>, EngineError> {
        let config = ModelConfig::from_gguf(&file)?;
        backend.check_config(&config)?;
        let c = &config;
        let loader = Loader {
            file: &file,
            backend: &backend,
            config: c,
        };
        let token_embd = loader.matrix("token_embd.weight", c.n_embd, c.n_vocab)?;
        let blocks = (0..c.n_layer)
            .map(|i| loader.block(i))
            .collect::<Result<Vec<_>, _>>()?;
        let output_norm = load_vector(&file, "output_norm.weight", c.n_embd)?;
        let output = match file.tensor("output.weight") {
            Some(_) => Some(loader.matrix("output.weight", c.n_embd, c.n_vocab)?),
            None => None,
        };
        let rotated = rotate::Rotated::load(&file, c, output.is_none())?;
        let pooling = Pooling::from_gguf(&file)?;
        let classifier = pool::load_classifier(&loader, &file, c)?;
        Ok(Model {
            config,
            backend,
            file,
            token_embd,
            blocks,
            output_norm,
            output,
            rotated,
            pooling,
            classifier,
            cache_types: CacheTypes::default(),
            mtp: None,
        })
    }

    /// The types the caches of sequences made from now on store keys and values in; refused
    /// (naming the flag and the head dimension) when a head is not whole blocks of its type.
    pub fn set_cache_types(&mut self, types: CacheTypes) -> Result<(), EngineError> {
        crate::kv_cache::cache_row_bytes("--cache-type-k", types.k, self.config.head_dim)?;
        crate::kv_cache::cache_row_bytes("--cache-type-v", types.v, self.config.head_dim_v)?;
        self.cache_types = types;
        Ok(())
    }

    pub fn cache_types(&self) -> CacheTypes {
        self.cache_types
    }

    /// The layers of the trunk.
    pub fn blocks(&self) -> &[Block<B::Weight>] {
        &self.blocks
    }

    /// A new sequence with room for `n_ctx` positions: a KV cache per attention layer, a zeroed
    /// recurrent state per recurrent layer (see [`Sequence::clear`] to reuse one).
    pub fn new_sequence(&self, n_ctx: usize) -> Result<Sequence<B>, EngineError> {
        Ok(Sequence {
            layers: new_layer_states(&self.config, n_ctx, self.cache_types)?,
            n_ctx,
            tokens: Vec::new(),
            checkpoints: Checkpoints::default(),
            policy: CheckpointPolicy::default(),
            recurrent: self.config.has_recurrent_layers(),
            work: Workspace::default(),
            hidden: None,
        })
    }

    /// Runs `tokens` (at positions `n_past..n_past + len`) through the model and returns the
    /// logits asked for (`[rows][n_vocab]`). A sequence with recurrent layers saves a checkpoint
    /// at each multiple of its checkpoint interval (the batch is split there) and at the end of a
    /// batch of more than one token.
    pub fn forward<'s>(
        &self,
        seq: &'s mut Sequence<B>,
        tokens: &[u32],
        want: Logits,
    ) -> Result<&'s [f32], EngineError> {
        let n_vocab = self.config.n_vocab;
        self.check_batch(seq, tokens)?;
        let interval = seq.policy.interval.max(1);
        let split = seq.recurrent && seq.policy.max > 0;
        let mut done = 0;
        let mut gathered = std::mem::take(&mut seq.work.buffers.gathered);
        gathered.clear();
        let mut rows = 0;
        let keep_x = seq.hidden.is_some();
        while done < tokens.len() {
            let start = seq.n_past();
            let len = if split {
                (interval - start % interval).min(tokens.len() - done)
            } else {
                tokens.len() - done
            };
            let part = &tokens[done..done + len];
            let Sequence { layers, work, .. } = &mut *seq;
            let mut segments = [Segment { layers, start, len }];
            // A part split off before the first wanted row asks for none of it.
            let part_want = match want {
                Logits::From(k) => Logits::From(k.saturating_sub(done)),
                w => w,
            };
            rows = self
                .backend
                .run(|| self.forward_checked(&mut segments, part, part_want, keep_x, work));
            if let Some(keep) = seq.hidden.as_mut() {
                self.keep_hidden_rows(&seq.work.buffers.x[..len * self.config.n_embd], keep);
            }
            done += len;
            seq.advance(part, done == tokens.len() && tokens.len() > 1);
            if want != Logits::Last && done < tokens.len() {
                gathered.extend_from_slice(&seq.work.buffers.logits[..rows * n_vocab]);
            }
        }
        let logits = &mut seq.work.buffers.logits;
        if want != Logits::Last && !gathered.is_empty() {
            gathered.extend_from_slice(&logits[..rows * n_vocab]);
            rows = gathered.len() / n_vocab;
            std::mem::swap(logits, &mut gathered);
        }
        seq.work.buffers.gathered = gathered;
        Ok(&seq.work.buffers.logits[..rows * n_vocab])
    }

    /// Runs several sequences' tokens through the model in one pass — every weight matrix is read
    /// once for all of them — and returns the logits of each entry's last token
    /// (`[entries][n_vocab]`, in entry order; writable, e.g. for a constraint's mask). Each entry
    /// is checked as [`Model::forward`] checks its batch; nothing runs if one fails. A sequence
    /// with recurrent layers saves a checkpoint when its batch passed a multiple of its interval
    /// or held more than one token.
    pub fn forward_batch<'w>(
        &self,
        entries: &mut [BatchEntry<'_, B>],
        work: &'w mut Workspace<B>,
    ) -> Result<&'w mut [f32], EngineError> {
        let floats = self.run_batch(entries, work, |segments, tokens, keep_x, work| {
            self.forward_checked(segments, tokens, Logits::Last, keep_x, work) * self.config.n_vocab
        })?;
        Ok(&mut work.buffers.logits[..floats])
    }

    /// [`Model::forward_batch`] returning the logits of each entry's last `rows[i]` tokens (at
    /// least one, at most its batch), entry after entry (`[Σ rows][n_vocab]`): speculative
    /// decoding verifies several drafted tokens of each sequence in the same pass.
    pub fn forward_batch_rows<'w>(
        &self,
        entries: &mut [BatchEntry<'_, B>],
        rows: &[usize],
        work: &'w mut Workspace<B>,
    ) -> Result<&'w mut [f32], EngineError> {
        if rows.len() != entries.len() {
            return Err(EngineError::BatchRows {
                entries: entries.len(),
                rows: rows.len(),
            });
        }
        work.buffers.tails.clear();
        work.buffers.tails.extend(
            entries
                .iter()
                .zip(rows)
                .map(|(e, &r)| r.clamp(1, e.tokens.len().max(1))),
        );
        let result = self.run_batch(entries, work, |segments, tokens, keep_x, work| {
            self.forward_checked(segments, tokens, Logits::Last, keep_x, work) * self.config.n_vocab
        });
        work.buffers.tails.clear();
        let floats = result?;
        Ok(&mut work.buffers.logits[..floats])
    }

    /// Checks the entries, runs `pass` on their concatenated tokens, advances each sequence;
    /// returns what `pass` returned (how many floats it wrote to the workspace's outputs).
    fn run_batch<R: Send>(
        &self,
        entries: &mut [BatchEntry<'_, B>],
        work: &mut Workspace<B>,
        pass: impl FnOnce(&mut [Segment<'_>], &[u32], bool, &mut Workspace<B>) -> R + Send,
    ) -> Result<R, EngineError> {
        if entries.is_empty() {
            return Err(EngineError::EmptyPrompt);
        }
        for e in entries.iter() {
            self.check_batch(e.seq, e.tokens)?;
        }
        let tokens = &mut work.buffers.tokens;
        tokens.clear();
        for e in entries.iter() {
            tokens.extend_from_slice(e.tokens);
        }
        let tokens = std::mem::take(tokens);
        let keep_x = entries.iter().any(|e| e.seq.hidden.is_some());
        let mut segments: Vec<Segment<'_>> = entries
            .iter_mut()
            .map(|e| Segment {
                start: e.seq.n_past(),
                len: e.tokens.len(),
                layers: &mut e.seq.layers,
            })
            .collect();
        let floats = self
            .backend
            .run(|| pass(&mut segments, &tokens, keep_x, work));
        drop(segments);
        work.buffers.tokens = tokens;
        let mut first = 0;
        for e in entries.iter_mut() {
            let rows = first..first + e.tokens.len();
            if let Some(keep) = e.seq.hidden.as_mut() {
                let d = self.config.n_embd;
                self.keep_hidden_rows(&work.buffers.x[rows.start * d..rows.end * d], keep);
            }
            first = rows.end;
        }
        for e in entries.iter_mut() {
            e.seq.advance(e.tokens, e.tokens.len() > 1);
        }
        Ok(floats)
    }

    fn check_batch(&self, seq: &Sequence<B>, tokens: &[u32]) -> Result<(), EngineError> {
        let c = &self.config;
        let n = tokens.len();
        if n == 0 {
            return Err(EngineError::EmptyPrompt);
        }
        if let Some(&id) = tokens.iter().find(|&&id| id as usize >= c.n_vocab) {
            return Err(EngineError::TokenOutOfRange {
                id,
                n_vocab: c.n_vocab,
            });
        }
        if seq.n_past() + n > seq.n_ctx() {
            return Err(EngineError::ContextExceeded {
                position: seq.n_past() + n - 1,
                n_ctx: seq.n_ctx(),
            });
        }
        Ok(())
    }

    /// The layers and the LM head, on validated segments whose tokens are concatenated in
    /// `tokens`; returns how many rows of logits it wrote (`Logits::Last`: the last row of each
    /// segment; `From(k)`: rows `k..`, none when `k` is past the batch). The backend may run the
    /// whole pass itself ([`Backend::forward_step`]); `keep_x`: a sequence keeps its hidden
    /// states, which only the op path leaves in the workspace's `x`.
    fn forward_checked(
        &self,
        segments: &mut [Segment<'_>],
        tokens: &[u32],
        want: Logits,
        keep_x: bool,
        work: &mut Workspace<B>,
    ) -> usize {
        self.set_positions(segments, &mut work.buffers);
        if let Some(rows) = self.whole_step(segments, tokens, want, keep_x, &mut work.buffers) {
            return rows;
        }
        self.layers(segments, tokens, work);
        self.head(segments, want, work)
    }

    /// [`Backend::forward_step`] on this pass (positions set); `None`: run it op by op.
    fn whole_step(
        &self,
        segments: &mut [Segment<'_>],
        tokens: &[u32],
        want: Logits,
        keep_x: bool,
        b: &mut Buffers,
    ) -> Option<usize> {
        let n = tokens.len();
        let rows = &mut b.step_rows;
        rows.clear();
        match want {
            Logits::All => rows.extend(0..n),
            Logits::From(k) => rows.extend(k.min(n)..n),
            Logits::Last => {
                let mut end = 0;
                for (i, s) in segments.iter().enumerate() {
                    end += s.len;
                    let tail = b.tails.get(i).copied().unwrap_or(1);
                    rows.extend(end - tail..end);
                }
            }
        }
        let refused = if self.rotated.is_some() {
            Some("a rotated model")
        } else if keep_x {
            Some("hidden states kept")
        } else {
            None
        };
        let view = StepView {
            config: &self.config,
            token_embd: &self.token_embd,
            blocks: &self.blocks,
            output_norm: &self.output_norm,
            output: self.output.as_ref().unwrap_or(&self.token_embd),
            positions: &b.positions,
            rope: &b.rope,
            rows: &b.step_rows,
            refused,
        };
        self.backend
            .forward_step(&view, segments, tokens, &mut b.logits)
    }

    /// The positions of the segments' tokens and their RoPE angles, into `b`.
    fn set_positions(&self, segments: &[Segment<'_>], b: &mut Buffers) {
        let c = &self.config;
        b.positions.clear();
        for s in segments.iter() {
            b.positions.extend(s.start..s.start + s.len);
        }
        rope_angles(&b.positions, c.n_rot, c.rope_freq_base, &mut b.rope);
        if c.rope_sections.is_some() {
            // qwen35's sections: a pair outside t / h / w keeps position 0 (no rotation).
            let pairs = c.n_rot / 2;
            for token in b.rope.chunks_exact_mut(pairs.max(1)) {
                for (i, cs) in token.iter_mut().enumerate() {
                    if !c.rope_pair_rotates(i) {
                        *cs = (1.0, 0.0);
                    }
                }
            }
        }
    }

    /// The embedding and the layers: the residual stream of every token ends in `b.x`.
    fn trunk(&self, segments: &mut [Segment<'_>], tokens: &[u32], work: &mut Workspace<B>) {
        self.set_positions(segments, &mut work.buffers);
        self.layers(segments, tokens, work);
    }

    /// [`Model::trunk`] once the positions are set.
    fn layers(&self, segments: &mut [Segment<'_>], tokens: &[u32], work: &mut Workspace<B>) {
        let c = &self.config;
        let n = tokens.len();
        let be = &self.backend;
        let Workspace {
            scratch,
            buffers: b,
        } = work;
        let e = n * c.n_embd;
        be.embed(&self.token_embd, tokens, grown(&mut b.x, e));
        if let Some(r) = &self.rotated {
            r.rotation
                .inverse_embedding(&r.kernels, c.n_embd, &mut b.x[..e]);
        }
        for (li, block) in self.blocks.iter().enumerate() {
            be.rms_norm(
                &b.x[..e],
                &block.attn_norm,
                c.rms_norm_eps,
                grown(&mut b.xn, e),
            );
            match &block.mixer {
                Mixer::Attention(a) => self.attention(a, li, segments, b, scratch),
                Mixer::GatedDeltaNet(g) => self.gated_delta_net(g, li, segments, b, scratch),
            }
            be.add(&mut b.x[..e], &b.proj[..e]);
            be.rms_norm(
                &b.x[..e],
                &block.ffn_norm,
                c.rms_norm_eps,
                grown(&mut b.xn, e),
            );
            self.ffn(&block.ffn, li, n, b, scratch);
            be.add(&mut b.x[..e], &b.proj[..e]);
        }
    }

    /// The output norm and the LM head on the rows `want` names; returns how many rows of logits
    /// it wrote.
    fn head(&self, segments: &[Segment<'_>], want: Logits, work: &mut Workspace<B>) -> usize {
        let c = &self.config;
        let be = &self.backend;
        let Workspace {
            scratch,
            buffers: b,
        } = work;
        let n = b.positions.len();
        let x = &b.x[..n * c.n_embd];
        // The rows whose logits are wanted, gathered (normed) into `xn`.
        let rows = match want {
            Logits::All => n,
            Logits::From(k) => n.saturating_sub(k),
            // One row per segment, or the tails asked for by `forward_batch_rows`.
            Logits::Last if b.tails.is_empty() => segments.len(),
            Logits::Last => b.tails.iter().sum(),
        };
        if rows == 0 {
            return 0;
        }
        let xn = grown(&mut b.xn, rows * c.n_embd);
        match want {
            Logits::All => be.rms_norm(x, &self.output_norm, c.rms_norm_eps, xn),
            Logits::From(k) => {
                be.rms_norm(&x[k * c.n_embd..], &self.output_norm, c.rms_norm_eps, xn)
            }
            Logits::Last => {
                let (mut end, mut row) = (0, 0);
                for (i, s) in segments.iter().enumerate() {
                    end += s.len;
                    let tail = b.tails.get(i).copied().unwrap_or(1);
                    let from = (end - tail) * c.n_embd;
                    let dst = &mut xn[row * c.n_embd..(row + tail) * c.n_embd];
                    be.rms_norm(
                        &x[from..end * c.n_embd],
                        &self.output_norm,
                        c.rms_norm_eps,
                        dst,
                    );
                    row += tail;
                }
            }
        }
        if let Some(r) = &self.rotated {
            r.in_place(r.head, xn, c.n_embd);
        }
        let logits = grown(&mut b.logits, rows * c.n_vocab);
        let head = self.output.as_ref().unwrap_or(&self.token_embd);
        be.matmul(head, xn, rows, logits, scratch);
        rows
    }

    /// Softmax attention of the normed rows in `b.xn` over each segment's KV cache of layer `li`;
    /// the projected output goes to `b.proj`.
    fn attention(
        &self,
        a: &AttentionWeights<B::Weight>,
        li: usize,
        segments: &mut [Segment<'_>],
        b: &mut Buffers,
        scratch: &mut B::Scratch,
    ) {
        let c = &self.config;
        let be = &self.backend;
        let n = b.positions.len();
        let (q_len, k_len, v_len) = (
            c.n_head * c.head_dim,
            c.n_head_kv * c.head_dim,
            c.n_head_kv * c.head_dim_v,
        );
        let shape = AttentionShape {
            n_head: c.n_head,
            n_head_kv: c.n_head_kv,
            head_dim: c.head_dim,
            head_dim_v: c.head_dim_v,
            scale: 1.0 / (c.head_dim as f32).sqrt(),
        };
        let xn = &b.xn[..n * c.n_embd];
        let xn = match &self.rotated {
            Some(r) => r.input(r.layers[li].mixer_in, xn, &mut b.xr, c.n_embd),
            None => xn,
        };
        let q = grown(&mut b.q, n * q_len);
        let k = grown(&mut b.k, n * k_len);
        let v = grown(&mut b.v, n * v_len);
        if a.output_gate {
            // Each head's query then its gate, side by side in wq's rows: split them.
            let qg = grown(&mut b.qg, 2 * n * q_len);
            be.matmuls(
                &mut [(&a.wq, &mut *qg), (&a.wk, &mut *k), (&a.wv, &mut *v)],
                xn,
                n,
                scratch,
            );
            // The scale multiplies the whole product, gates included.
            apply_scale(be, qg, a.scales[0]);
            let gate = grown(&mut b.attn_gate, n * q_len);
            let d = c.head_dim;
            for ((both, q), g) in qg
                .chunks_exact(2 * d)
                .zip(q.chunks_exact_mut(d))
                .zip(gate.chunks_exact_mut(d))
            {
                q.copy_from_slice(&both[..d]);
                g.copy_from_slice(&both[d..]);
            }
        } else {
            be.matmuls(
                &mut [(&a.wq, &mut *q), (&a.wk, &mut *k), (&a.wv, &mut *v)],
                xn,
                n,
                scratch,
            );
            apply_scale(be, q, a.scales[0]);
        }
        apply_scale(be, k, a.scales[1]);
        apply_scale(be, v, a.scales[2]);
        for (buf, bias) in [(&mut *q, &a.bq), (&mut *k, &a.bk), (&mut *v, &a.bv)] {
            if let Some(bias) = bias {
                for row in buf.chunks_exact_mut(bias.len()) {
                    be.add(row, bias);
                }
            }
        }
        for (buf, norm) in [(&mut *q, &a.q_norm), (&mut *k, &a.k_norm)] {
            if let Some(norm) = norm {
                // Per-head RMS norm: every head is a row of head_dim values.
                let copy = grown(&mut b.proj, buf.len());
                copy.copy_from_slice(buf);
                be.rms_norm(copy, norm, c.rms_norm_eps, buf);
            }
        }
        let style = c.arch.rope_style();
        be.rope(q, c.n_head, c.head_dim, &b.rope, style);
        be.rope(k, c.n_head_kv, c.head_dim, &b.rope, style);
        let mut first = 0;
        for s in segments.iter_mut() {
            let rows = first..first + s.len;
            be.store_kv(
                s.layers[li].kv_mut(),
                &k[rows.start * k_len..rows.end * k_len],
                &v[rows.start * v_len..rows.end * v_len],
                &b.positions[rows.clone()],
            );
            first += s.len;
        }
        let attn = grown(&mut b.attn, n * c.n_head * c.head_dim_v);
        be.attention(q, segments, li, &b.positions, shape, attn, scratch);
        if a.output_gate {
            be.sigmoid_mul(attn, &b.attn_gate[..n * q_len]);
        }
        if let Some(r) = &self.rotated {
            r.in_place(r.layers[li].mixer_out, attn, c.n_head * c.head_dim_v);
        }
        let proj = grown(&mut b.proj, n * c.n_embd);
        be.matmul(&a.wo, attn, n, proj, scratch);
        apply_scale(be, proj, a.scales[3]);
    }

    /// Gated DeltaNet over the normed rows in `b.xn`, each segment through its own recurrent
    /// state of layer `li`, in order; the projected output goes to `b.proj`.
    fn gated_delta_net(
        &self,
        g: &GdnWeights<B::Weight>,
        li: usize,
        segments: &mut [Segment<'_>],
        b: &mut Buffers,
        scratch: &mut B::Scratch,
    ) {
        let c = &self.config;
        let be = &self.backend;
        let ssm = c
            .ssm
            .expect("a Gated DeltaNet layer comes with its ssm config");
        let n = b.positions.len();
        let (s, h_v) = (ssm.d_state, ssm.n_v_head);
        let (key_dim, value_dim, conv_dim) = (ssm.key_dim(), ssm.value_dim(), ssm.conv_dim());
        let xn = &b.xn[..n * c.n_embd];
        let qkv = grown(&mut b.qkv, n * conv_dim);
        let z = grown(&mut b.z, n * value_dim);
        let beta = grown(&mut b.beta, n * h_v);
        let alpha = grown(&mut b.alpha, n * h_v);
        match self.rotated.as_ref().filter(|r| r.layers[li].mixer_in) {
            // qkv and z are folded; β and α read the same rows unrotated.
            Some(r) => {
                let xr = r.input(true, xn, &mut b.xr, c.n_embd);
                be.matmuls(
                    &mut [(&g.w_qkv, &mut *qkv), (&g.w_gate, &mut *z)],
                    xr,
                    n,
                    scratch,
                );
                be.matmuls(
                    &mut [(&g.w_beta, &mut *beta), (&g.w_alpha, &mut *alpha)],
                    xn,
                    n,
                    scratch,
                );
            }
            None => be.matmuls(
                &mut [
                    (&g.w_qkv, &mut *qkv),
                    (&g.w_gate, &mut *z),
                    (&g.w_beta, &mut *beta),
                    (&g.w_alpha, &mut *alpha),
                ],
                xn,
                n,
                scratch,
            ),
        }
        for (buf, scale) in [
            (&mut *qkv, g.scales[0]),
            (&mut *z, g.scales[1]),
            (&mut *beta, g.scales[2]),
            (&mut *alpha, g.scales[3]),
        ] {
            apply_scale(be, buf, scale);
        }
        be.gdn_gates(alpha, beta, &g.dt_bias, &g.ssm_a);
        let mut first = 0;
        for seg in segments.iter_mut() {
            let state = seg.layers[li].recurrent_mut();
            let rows = first * conv_dim..(first + seg.len) * conv_dim;
            be.conv1d_silu(&mut qkv[rows], &mut state.conv, &g.conv1d, ssm.d_conv);
            first += seg.len;
        }
        // L2 norm of every query and key head (each row's first 2·key_dim values).
        let normed = grown(&mut b.proj, n * 2 * key_dim);
        for (row, dst) in qkv
            .chunks_exact(conv_dim)
            .zip(normed.chunks_exact_mut(2 * key_dim))
        {
            be.rms_norm(
                &row[..2 * key_dim],
                &g.l2_weight,
                c.rms_norm_eps / s as f32,
                dst,
            );
        }
        for (row, src) in qkv
            .chunks_exact_mut(conv_dim)
            .zip(normed.chunks_exact(2 * key_dim))
        {
            row[..2 * key_dim].copy_from_slice(src);
        }
        let out = grown(&mut b.attn, n * value_dim);
        let shape = DeltaShape {
            d_state: s,
            n_k_head: ssm.n_group,
            n_v_head: h_v,
        };
        let mut first = 0;
        for seg in segments.iter_mut() {
            let state = seg.layers[li].recurrent_mut();
            let (t0, t1) = (first, first + seg.len);
            be.delta_rule(
                &mut state.ssm,
                &qkv[t0 * conv_dim..t1 * conv_dim],
                &alpha[t0 * h_v..t1 * h_v],
                &beta[t0 * h_v..t1 * h_v],
                shape,
                &mut out[t0 * value_dim..t1 * value_dim],
            );
            first = t1;
        }
        // Gated RMS norm per head: norm(o) · ssm_norm, times silu(z).
        let normed = grown(&mut b.proj, n * value_dim);
        be.rms_norm(out, &g.ssm_norm, c.rms_norm_eps, normed);
        be.swiglu(z, normed);
        if let Some(r) = &self.rotated {
            r.ssm_out_in_place(r.layers[li].mixer_out, z, value_dim, &mut b.xr);
        }
        let proj = grown(&mut b.proj, n * c.n_embd);
        be.matmul(&g.w_out, z, n, proj, scratch);
        apply_scale(be, proj, g.scales[4]);
    }

    /// SwiGLU of the normed rows in `b.xn`; the output goes to `b.proj`.
    fn ffn(
        &self,
        f: &Ffn<B::Weight>,
        li: usize,
        n: usize,
        b: &mut Buffers,
        scratch: &mut B::Scratch,
    ) {
        let c = &self.config;
        let be = &self.backend;
        let xn = &b.xn[..n * c.n_embd];
        let xn = match &self.rotated {
            Some(r) => r.input(r.layers[li].ffn_in, xn, &mut b.xr, c.n_embd),
            None => xn,
        };
        let gate = grown(&mut b.gate, n * c.n_ff);
        let up = grown(&mut b.up, n * c.n_ff);
        be.matmuls(
            &mut [(&f.w_gate, &mut *gate), (&f.w_up, &mut *up)],
            xn,
            n,
            scratch,
        );
        apply_scale(be, gate, f.scales[0]);
        apply_scale(be, up, f.scales[1]);
        be.swiglu(gate, up);
        if let Some(r) = &self.rotated {
            r.in_place(r.layers[li].ffn_down, gate, c.n_ff);
        }
        let proj = grown(&mut b.proj, n * c.n_embd);
        be.matmul(&f.w_down, gate, n, proj, scratch);
        apply_scale(be, proj, f.scales[2]);
    }
}
