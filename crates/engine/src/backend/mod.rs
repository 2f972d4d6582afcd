//! The interface the model is written against. A layer is a sequence of these operations on
//! activation buffers; a backend prepares each weight once at load and may keep it as the mmap view,
//! a repacked copy that replaces it, or a device buffer. Fused kernels are a backend's own business.

pub mod cpu;
pub mod device;
#[cfg(feature = "gpu")]
pub mod gpu;

use std::sync::Arc;

use oxibonsai_gguf::{GgufFile, TensorInfo};

use crate::config::{ModelConfig, RopeStyle};
use crate::error::EngineError;
use crate::kv_cache::LayerCache;
use crate::model::Block;
use crate::state::LayerState;

/// Geometry of one attention call.
#[derive(Clone, Copy, Debug)]
pub struct AttentionShape {
    pub n_head: usize,
    pub n_head_kv: usize,
    pub head_dim: usize,
    pub head_dim_v: usize,
    pub scale: f32,
}

/// Geometry of one Gated DeltaNet layer's delta rule.
#[derive(Clone, Copy, Debug)]
pub struct DeltaShape {
    /// S: the key (= value) dimension of a head.
    pub d_state: usize,
    /// H_k: query / key heads.
    pub n_k_head: usize,
    /// H_v: value heads, each with its own S×S state.
    pub n_v_head: usize,
}

/// One sequence's rows in a forward pass over several sequences: its `len` tokens go in at
/// positions `start..start + len` of its own state (one entry per layer).
pub struct Segment<'a> {
    pub layers: &'a mut [LayerState],
    pub start: usize,
    pub len: usize,
}

/// What a backend that runs a whole forward pass itself ([`Backend::forward_step`]) reads of the
/// model and of the pass: the weights, and the inputs the model computed for the pass.
pub struct StepView<'a, W> {
    pub config: &'a ModelConfig,
    pub token_embd: &'a W,
    pub blocks: &'a [Block<W>],
    pub output_norm: &'a [f32],
    /// The LM head: `output.weight`, or the token embedding when it is tied.
    pub output: &'a W,
    /// The position of each token of the pass, segment after segment.
    pub positions: &'a [usize],
    /// RoPE's (cos θ, sin θ) pairs of each token ([`rope_angles`], `n_rot / 2` a token).
    pub rope: &'a [(f32, f32)],
    /// The tokens (indices into the pass) whose logits are wanted, in the order of the result.
    pub rows: &'a [usize],
    /// Why the model itself cannot let a backend run the pass whole (a rotated model; the
    /// sequence keeps its hidden states, which the op path leaves in the workspace), if so.
    pub refused: Option<&'static str>,
}

/// The first `len` elements of `buffer`, grown (never shrunk) to hold them: scratch reused by
/// operations of different sizes is zero-filled once, not again whenever a larger one follows a
/// smaller one.
pub(crate) fn grown<T: Clone + Default>(buffer: &mut Vec<T>, len: usize) -> &mut [T] {
    if buffer.len() < len {
        buffer.resize(len, T::default());
    }
    &mut buffer[..len]
}

/// The rotation of each of `positions` for RoPE: `n_rot / 2` (cos θ, sin θ) pairs a position, θ
/// starting at the position and advancing by repeated multiplication by `freq_base^(-2/n_rot)`,
/// as the reference computes its table. Computed once per forward pass, for every layer's Q and K.
pub fn rope_angles(positions: &[usize], n_rot: usize, freq_base: f32, out: &mut Vec<(f32, f32)>) {
    let theta_scale = freq_base.powf(-2.0 / n_rot as f32);
    out.clear();
    for &pos in positions {
        let mut theta = pos as f32;
        for _ in 0..n_rot / 2 {
            out.push((theta.cos(), theta.sin()));
            theta *= theta_scale;
        }
    }
}

pub trait Backend: Send + Sync {
    /// A matrix `[n_out rows][n_in values]` ready for `matmul` / `embed`.
    type Weight: Send + Sync;
    /// Scratch a sequence keeps between calls (quantized activations), so the hot path does not allocate.
    type Scratch: Default + Send;

    fn name(&self) -> String;

    /// Refuses a model whose dimensions exceed what this backend can run, naming the dimension
    /// and its GGUF key (called by [`crate::Model::load`] before any weight is prepared).
    fn check_config(&self, _config: &ModelConfig) -> Result<(), EngineError> {
        Ok(())
    }

    /// Runs a whole forward pass in the backend's execution context (the CPU backend: on its
    /// thread pool, so the parallel operations inside do not each hand work across threads).
    fn run<R: Send>(&self, work: impl FnOnce() -> R + Send) -> R {
        work()
    }

    /// Runs a whole forward pass — the embedding of `tokens`, every layer (the keys and values of
    /// each token stored in its segment's caches as [`Backend::store_kv`] stores them), the output
    /// norm and the LM head on `step.rows` — writing the logits of those rows (`[rows][n_vocab]`)
    /// to `logits` (grown to hold them), and returns the number of rows; `None` to have the model
    /// run the pass op by op instead, before anything was changed (the default). Whichever runs,
    /// the results agree within the backends' parity bounds.
    fn forward_step(
        &self,
        _step: &StepView<'_, Self::Weight>,
        _segments: &mut [Segment<'_>],
        _tokens: &[u32],
        _logits: &mut Vec<f32>,
    ) -> Option<usize> {
        None
    }

    /// Prepares a 2-D weight tensor once at load (`dims = [n_in, n_out]` as GGUF stores them).
    fn prepare(
        &self,
        file: &Arc<GgufFile>,
        tensor: &TensorInfo,
    ) -> Result<Self::Weight, EngineError>;

    /// Dequantizes the rows `ids` of `table` into `out` (`ids.len()` rows of `n_in`).
    fn embed(&self, table: &Self::Weight, ids: &[u32], out: &mut [f32]);

    /// `out[t] = W · x[t]` for `n_tokens` rows of `x`. Activations are converted to the weight
    /// format's partner type first, as the reference engine does.
    fn matmul(
        &self,
        weight: &Self::Weight,
        x: &[f32],
        n_tokens: usize,
        out: &mut [f32],
        scratch: &mut Self::Scratch,
    );

    /// Several products of the same `x` (`out = W · x[t]` for each `(W, out)`), as `matmul` each:
    /// a backend may convert the activations once and run the matrices together (the attention's
    /// Q / K / V, the feed-forward's gate / up). Each result equals `matmul`'s.
    fn matmuls(
        &self,
        products: &mut [(&Self::Weight, &mut [f32])],
        x: &[f32],
        n_tokens: usize,
        scratch: &mut Self::Scratch,
    ) {
        for (w, out) in products.iter_mut() {
            self.matmul(w, x, n_tokens, out, scratch);
        }
    }

    /// RMS norm of each row of `x` (rows of `weight.len()`), times `weight`, into `out`.
    fn rms_norm(&self, x: &[f32], weight: &[f32], eps: f32, out: &mut [f32]);

    /// Rotates the first `n_rot` dimensions of each head of each token in place by that token's
    /// angles (`cos_sin[token·n_rot/2 + i]`, from [`rope_angles`]).
    fn rope(
        &self,
        x: &mut [f32],
        n_heads: usize,
        head_dim: usize,
        cos_sin: &[(f32, f32)],
        style: RopeStyle,
    );

    /// Stores the keys and values of the tokens at `positions` in the cache.
    fn store_kv(&self, cache: &mut LayerCache, k: &[f32], v: &[f32], positions: &[usize]);

    /// Causal attention of each query token over its own sequence's cache (layer `layer`) up to
    /// its position, for every segment at once: `q`, `positions` and `out` hold the segments'
    /// rows one after the other, in segment order.
    #[allow(clippy::too_many_arguments)]
    fn attention(
        &self,
        q: &[f32],
        segments: &[Segment<'_>],
        layer: usize,
        positions: &[usize],
        shape: AttentionShape,
        out: &mut [f32],
        scratch: &mut Self::Scratch,
    );

    /// Gated DeltaNet's causal depthwise convolution, then SiLU, of one sequence's rows: `x` holds
    /// its `n` rows of `channels` values (replaced by the result), `history` the `d_conv − 1`
    /// inputs before them, `[channels][d_conv − 1]` time fastest (moved on past the rows), and
    /// `kernel` `[channels][d_conv]` (the oldest input's weight first).
    fn conv1d_silu(&self, x: &mut [f32], history: &mut [f32], kernel: &[f32], d_conv: usize);

    /// Gated DeltaNet's gates in place, rows of `dt_bias.len()` value heads: `alpha ←
    /// softplus(alpha + dt_bias) · ssm_a` (the log of each head's decay), `beta ← sigmoid(beta)`.
    fn gdn_gates(&self, alpha: &mut [f32], beta: &mut [f32], dt_bias: &[f32], ssm_a: &[f32]);

    /// The gated delta rule over one sequence's rows, in order, on its `[n_v_head][S·S]` state
    /// (`ssm[h][j·S + i] = M_h[i][j]`): per token and value head `h` (query / key head
    /// `h mod n_k_head`) `M ← exp(log_decay)·M; M ← M + k⊗β(v − Mᵀk); out = Mᵀq / √S`. `qkv`
    /// rows are `[q (n_k_head·S) | k (n_k_head·S) | v (n_v_head·S)]`, `log_decay` and `beta`
    /// rows of `n_v_head`, `out` rows of `n_v_head·S`.
    fn delta_rule(
        &self,
        ssm: &mut [f32],
        qkv: &[f32],
        log_decay: &[f32],
        beta: &[f32],
        shape: DeltaShape,
        out: &mut [f32],
    );

    /// `x = x · sigmoid(gate)`, element-wise (gated attention's output gate).
    fn sigmoid_mul(&self, x: &mut [f32], gate: &[f32]);

    /// `x = x · by` (a weight's per-tensor scale).
    fn scale(&self, x: &mut [f32], by: f32);

    /// `gate = silu(gate) * up`, element-wise.
    fn swiglu(&self, gate: &mut [f32], up: &[f32]);

    /// `x += y`, element-wise.
    fn add(&self, x: &mut [f32], y: &[f32]);
}
