//! One layer of the trunk: a norm, a mixer (what differs between architectures), a norm and the
//! feed-forward network — and how each is read from the file.

use std::sync::Arc;

use oxibonsai_gguf::{GgufFile, TensorInfo};

use crate::backend::Backend;
use crate::config::{Architecture, LayerKind, ModelConfig};
use crate::error::EngineError;

pub struct Block<W> {
    /// RMS norm before the mixer (n_embd).
    pub attn_norm: Vec<f32>,
    pub mixer: Mixer<W>,
    /// RMS norm before the feed-forward network (n_embd).
    pub ffn_norm: Vec<f32>,
    pub ffn: Ffn<W>,
}

/// What mixes information across positions; each kind keeps its own per-sequence state
/// ([`crate::state::LayerState`]).
pub enum Mixer<W> {
    Attention(AttentionWeights<W>),
}

/// Softmax attention. Shapes in `[n_out][n_in]` order.
pub struct AttentionWeights<W> {
    pub wq: W,                    // (n_head * head_dim, n_embd)
    pub wk: W,                    // (n_head_kv * head_dim, n_embd)
    pub wv: W,                    // (n_head_kv * head_dim_v, n_embd)
    pub bq: Option<Vec<f32>>,     // qwen2
    pub bk: Option<Vec<f32>>,     // qwen2
    pub bv: Option<Vec<f32>>,     // qwen2
    pub q_norm: Option<Vec<f32>>, // qwen3 (head_dim)
    pub k_norm: Option<Vec<f32>>, // qwen3 (head_dim)
    pub wo: W,                    // (n_embd, n_head * head_dim_v)
}

/// The dense SwiGLU feed-forward network.
pub struct Ffn<W> {
    pub w_gate: W, // (n_ff, n_embd)
    pub w_up: W,   // (n_ff, n_embd)
    pub w_down: W, // (n_embd, n_ff)
}

/// Reads a small f32 vector (norm weights, biases) of the expected length, whatever its format.
pub(crate) fn load_vector(
    file: &GgufFile,
    name: &str,
    len: usize,
) -> Result<Vec<f32>, EngineError> {
    let tensor = file
        .tensor(name)
        .ok_or_else(|| EngineError::MissingTensor {
            name: name.to_owned(),
        })?;
    if tensor.dims.len() != 1 || tensor.dims[0] != len as u64 {
        return Err(EngineError::TensorShape {
            name: name.to_owned(),
            expected: vec![len as u64],
            found: tensor.dims.clone(),
        });
    }
    let mut out = vec![0.0; len];
    (tensor.format.dequantize)(file.tensor_data(tensor), &mut out);
    Ok(out)
}

pub(crate) fn load_optional_vector(
    file: &GgufFile,
    name: &str,
    len: usize,
) -> Result<Option<Vec<f32>>, EngineError> {
    match file.tensor(name) {
        Some(_) => load_vector(file, name, len).map(Some),
        None => Ok(None),
    }
}

/// The 2-D tensor `name`, checked to be `[n_out][n_in]`.
pub(crate) fn matrix<'a>(
    file: &'a GgufFile,
    name: &str,
    n_in: usize,
    n_out: usize,
) -> Result<&'a TensorInfo, EngineError> {
    let tensor = file
        .tensor(name)
        .ok_or_else(|| EngineError::MissingTensor {
            name: name.to_owned(),
        })?;
    let expected = vec![n_in as u64, n_out as u64];
    if tensor.dims != expected {
        return Err(EngineError::TensorShape {
            name: name.to_owned(),
            expected,
            found: tensor.dims.clone(),
        });
    }
    Ok(tensor)
}

/// Prepares the weights the backend multiplies by.
pub(crate) struct Loader<'a, B: Backend> {
    pub file: &'a Arc<GgufFile>,
    pub backend: &'a B,
    pub config: &'a ModelConfig,
}

impl<B: Backend> Loader<'_, B> {
    pub fn matrix(&self, name: &str, n_in: usize, n_out: usize) -> Result<B::Weight, EngineError> {
        self.backend
            .prepare(self.file, matrix(self.file, name, n_in, n_out)?)
    }

    pub fn vector(&self, name: &str, len: usize) -> Result<Vec<f32>, EngineError> {
        load_vector(self.file, name, len)
    }

    /// Layer `i` of the trunk.
    pub fn block(&self, i: usize) -> Result<Block<B::Weight>, EngineError> {
        let c = self.config;
        let p = |suffix: &str| format!("blk.{i}.{suffix}");
        let mixer = match c.layers[i] {
            LayerKind::Attention => Mixer::Attention(self.attention(i)?),
            LayerKind::GatedDeltaNet => {
                return Err(EngineError::UnsupportedArchitecture {
                    arch: format!("{} (Gated DeltaNet layer {i})", c.arch.name()),
                })
            }
        };
        Ok(Block {
            attn_norm: self.vector(&p("attn_norm.weight"), c.n_embd)?,
            mixer,
            ffn_norm: self.vector(&p("ffn_norm.weight"), c.n_embd)?,
            ffn: Ffn {
                w_gate: self.matrix(&p("ffn_gate.weight"), c.n_embd, c.n_ff)?,
                w_up: self.matrix(&p("ffn_up.weight"), c.n_embd, c.n_ff)?,
                w_down: self.matrix(&p("ffn_down.weight"), c.n_ff, c.n_embd)?,
            },
        })
    }

    fn attention(&self, i: usize) -> Result<AttentionWeights<B::Weight>, EngineError> {
        let (c, file) = (self.config, self.file);
        let p = |suffix: &str| format!("blk.{i}.{suffix}");
        let q_out = c.n_head * c.head_dim;
        let k_out = c.n_head_kv * c.head_dim;
        let v_out = c.n_head_kv * c.head_dim_v;
        let qk_norm = c.arch == Architecture::Qwen3;
        let head_norm = |name: &str| -> Result<Option<Vec<f32>>, EngineError> {
            if qk_norm {
                self.vector(&p(name), c.head_dim).map(Some)
            } else {
                Ok(None)
            }
        };
        Ok(AttentionWeights {
            wq: self.matrix(&p("attn_q.weight"), c.n_embd, q_out)?,
            wk: self.matrix(&p("attn_k.weight"), c.n_embd, k_out)?,
            wv: self.matrix(&p("attn_v.weight"), c.n_embd, v_out)?,
            bq: load_optional_vector(file, &p("attn_q.bias"), q_out)?,
            bk: load_optional_vector(file, &p("attn_k.bias"), k_out)?,
            bv: load_optional_vector(file, &p("attn_v.bias"), v_out)?,
            q_norm: head_norm("attn_q_norm.weight")?,
            k_norm: head_norm("attn_k_norm.weight")?,
            wo: self.matrix(&p("attn_output.weight"), c.n_head * c.head_dim_v, c.n_embd)?,
        })
    }
}
