//! What one sequence remembers of its past, layer by layer: a KV cache for an attention layer
//! (one entry per position, so it can be cut back to any position), a fixed-size recurrent state
//! for a Gated DeltaNet layer (it folds every position into itself, so it cannot be cut back —
//! only replaced by a copy saved earlier, a [`Checkpoint`]).

use crate::config::{LayerKind, ModelConfig};
use crate::error::EngineError;
use crate::kv_cache::{cache_row_bytes, CacheTypes, LayerCache};

/// A recurrent layer's state after some position.
#[derive(Clone, Debug, PartialEq)]
pub struct RecurrentState {
    /// The convolution's history: `[conv_dim][d_conv - 1]`, time fastest (llama.cpp's layout).
    pub conv: Vec<f32>,
    /// The delta rule's matrices: `[n_v_head][S * S]` with `ssm[h][j * S + i] = M_h[i][j]`
    /// (i the key index, j the value index; llama.cpp's layout).
    pub ssm: Vec<f32>,
}

impl RecurrentState {
    fn zeroed(conv_len: usize, ssm_len: usize) -> RecurrentState {
        RecurrentState {
            conv: vec![0.0; conv_len],
            ssm: vec![0.0; ssm_len],
        }
    }

    /// The state of a sequence that has seen nothing.
    pub fn reset(&mut self) {
        self.conv.fill(0.0);
        self.ssm.fill(0.0);
    }

    pub fn bytes(&self) -> usize {
        (self.conv.len() + self.ssm.len()) * 4
    }
}

pub enum LayerState {
    Kv(LayerCache),
    Recurrent(RecurrentState),
}

impl LayerState {
    /// The layer's KV cache. Layers and states are made together from one configuration, so an
    /// attention layer always has one: anything else is a bug in the engine.
    pub fn kv(&self) -> &LayerCache {
        match self {
            LayerState::Kv(cache) => cache,
            LayerState::Recurrent(_) => panic!("an attention layer was given a recurrent state"),
        }
    }

    pub fn kv_mut(&mut self) -> &mut LayerCache {
        match self {
            LayerState::Kv(cache) => cache,
            LayerState::Recurrent(_) => panic!("an attention layer was given a recurrent state"),
        }
    }

    pub fn recurrent_mut(&mut self) -> &mut RecurrentState {
        match self {
            LayerState::Recurrent(state) => state,
            LayerState::Kv(_) => panic!("a recurrent layer was given a KV cache"),
        }
    }

    pub fn bytes(&self) -> usize {
        match self {
            LayerState::Kv(cache) => cache.bytes(),
            LayerState::Recurrent(state) => state.bytes(),
        }
    }
}

/// Bytes of one sequence's state at `n_ctx` positions with caches of `types`: (per position,
/// fixed) — the KV caches grow with the context, the recurrent states do not. Refused when a head
/// is not whole blocks of its cache type.
pub fn state_bytes(
    config: &ModelConfig,
    n_ctx: usize,
    types: CacheTypes,
) -> Result<(u128, u128), EngineError> {
    let k_row = cache_row_bytes("--cache-type-k", types.k, config.head_dim)?;
    let v_row = cache_row_bytes("--cache-type-v", types.v, config.head_dim_v)?;
    let mut per_position = 0u128;
    let mut fixed = 0u128;
    for kind in &config.layers {
        match kind {
            LayerKind::Attention => {
                per_position += (config.n_head_kv * (k_row + v_row)) as u128;
            }
            LayerKind::GatedDeltaNet => {
                if let Some(ssm) = &config.ssm {
                    fixed += (ssm.conv_state_len() + ssm.ssm_state_len()) as u128 * 4;
                }
            }
        }
    }
    Ok((per_position * n_ctx as u128, fixed))
}

/// One zeroed state per layer for a context of `n_ctx` positions; a context whose state could
/// not be held is refused here, not by an allocation failure.
pub fn new_layer_states(
    config: &ModelConfig,
    n_ctx: usize,
    types: CacheTypes,
) -> Result<Vec<LayerState>, EngineError> {
    let (kv, fixed) = state_bytes(config, n_ctx, types)?;
    if n_ctx == 0 || kv + fixed > (1u128 << 40) {
        return Err(EngineError::BadContext {
            requested: n_ctx,
            reason: format!("the sequence's state would take {} bytes", kv + fixed),
        });
    }
    config
        .layers
        .iter()
        .enumerate()
        .map(|(i, kind)| match kind {
            LayerKind::Attention => Ok(LayerState::Kv(LayerCache::with_types(
                n_ctx,
                config.n_head_kv,
                config.head_dim,
                config.head_dim_v,
                types,
            )?)),
            LayerKind::GatedDeltaNet => {
                let ssm = config.ssm.ok_or_else(|| EngineError::BadHyperParameter {
                    key: format!("{}.ssm.state_size", config.arch.name()),
                    reason: format!("layer {i} is recurrent but the file has no ssm.* keys"),
                })?;
                Ok(LayerState::Recurrent(RecurrentState::zeroed(
                    ssm.conv_state_len(),
                    ssm.ssm_state_len(),
                )))
            }
        })
        .collect()
}

/// The recurrent layers' states after the first `position` tokens of a sequence (attention
/// layers need nothing: their caches keep every position).
#[derive(Clone)]
pub struct Checkpoint {
    pub position: usize,
    /// One per recurrent layer, in layer order.
    pub states: Vec<RecurrentState>,
}

impl Checkpoint {
    /// A copy of the recurrent layers of `layers`, as they stand after `position` tokens.
    pub fn take(layers: &[LayerState], position: usize) -> Checkpoint {
        Checkpoint {
            position,
            states: layers
                .iter()
                .filter_map(|l| match l {
                    LayerState::Recurrent(s) => Some(s.clone()),
                    LayerState::Kv(_) => None,
                })
                .collect(),
        }
    }

    /// Puts the saved states back into `layers`.
    pub fn restore(&self, layers: &mut [LayerState]) {
        let recurrent = layers.iter_mut().filter_map(|l| match l {
            LayerState::Recurrent(s) => Some(s),
            LayerState::Kv(_) => None,
        });
        for (dst, src) in recurrent.zip(&self.states) {
            dst.conv.copy_from_slice(&src.conv);
            dst.ssm.copy_from_slice(&src.ssm);
        }
    }

    pub fn bytes(&self) -> usize {
        self.states.iter().map(RecurrentState::bytes).sum()
    }
}

/// When a sequence with recurrent layers saves its state (llama.cpp's server keeps "context
/// checkpoints" for the same purpose; vLLM saves recurrent state at block boundaries).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CheckpointPolicy {
    /// A checkpoint is taken whenever the sequence passes a multiple of this many positions
    /// (a single-sequence prefill is split there), and at the end of every batch of more than
    /// one token (a prompt's end, where the next turn of a chat starts).
    pub interval: usize,
    /// At most this many are kept per sequence; past it, the one whose loss leaves the smallest
    /// gap goes (the newest always stays). 0 turns checkpoints off: every rewind of a recurrent
    /// sequence then recomputes from the start (and says so).
    pub max: usize,
}

impl Default for CheckpointPolicy {
    fn default() -> Self {
        CheckpointPolicy {
            interval: 128,
            max: 8,
        }
    }
}

/// A sequence's saved checkpoints, oldest first.
#[derive(Clone, Default)]
pub struct Checkpoints {
    saved: Vec<Checkpoint>,
}

impl Checkpoints {
    pub fn clear(&mut self) {
        self.saved.clear();
    }

    pub fn len(&self) -> usize {
        self.saved.len()
    }

    pub fn is_empty(&self) -> bool {
        self.saved.is_empty()
    }

    pub fn positions(&self) -> impl Iterator<Item = usize> + '_ {
        self.saved.iter().map(|c| c.position)
    }

    /// The latest checkpoint at or before `position`.
    pub fn at_or_before(&self, position: usize) -> Option<&Checkpoint> {
        self.saved.iter().rev().find(|c| c.position <= position)
    }

    /// Forgets the checkpoints after `position` (their tokens are no longer the sequence's).
    pub fn truncate(&mut self, position: usize) {
        self.saved.retain(|c| c.position <= position);
    }

    /// Saves `layers`' recurrent states as the checkpoint at `position` (later than every saved
    /// one), then drops checkpoints past `max` as [`CheckpointPolicy::max`] says.
    pub fn push(&mut self, layers: &[LayerState], position: usize, max: usize) {
        if max == 0 || self.saved.last().is_some_and(|c| c.position >= position) {
            return;
        }
        // Reuse the buffers of the checkpoint that is about to be dropped, if any.
        if self.saved.len() >= max {
            let drop = self.least_needed();
            let mut reused = self.saved.remove(drop);
            for (dst, src) in reused
                .states
                .iter_mut()
                .zip(layers.iter().filter_map(|l| match l {
                    LayerState::Recurrent(s) => Some(s),
                    LayerState::Kv(_) => None,
                }))
            {
                dst.conv.copy_from_slice(&src.conv);
                dst.ssm.copy_from_slice(&src.ssm);
            }
            reused.position = position;
            self.saved.push(reused);
        } else {
            self.saved.push(Checkpoint::take(layers, position));
        }
    }

    /// The index of the checkpoint (never the newest) whose removal leaves the smallest gap
    /// between its neighbours, the older one on a tie.
    fn least_needed(&self) -> usize {
        let n = self.saved.len();
        if n < 2 {
            return 0;
        }
        (0..n - 1)
            .min_by_key(|&i| {
                let before = if i == 0 {
                    0
                } else {
                    self.saved[i - 1].position
                };
                self.saved[i + 1].position - before
            })
            .unwrap_or(0)
    }

    pub fn bytes(&self) -> usize {
        self.saved.iter().map(Checkpoint::bytes).sum()
    }
}
