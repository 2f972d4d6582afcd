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
    GatedDeltaNet(GdnWeights<W>),
}

/// Gated DeltaNet (qwen35's linear attention). Shapes in `[n_out][n_in]` order; S = d_state,
/// key_dim = S·H_k, value_dim = S·H_v, conv_dim = 2·key_dim + value_dim.
pub struct GdnWeights<W> {
    pub w_qkv: W,           // (conv_dim, n_embd): rows [q | k | v]
    pub w_gate: W,          // (value_dim, n_embd): z, the output gate
    pub w_beta: W,          // (H_v, n_embd)
    pub w_alpha: W,         // (H_v, n_embd)
    pub conv1d: Vec<f32>,   // (conv_dim, d_conv)
    pub dt_bias: Vec<f32>,  // (H_v)
    pub ssm_a: Vec<f32>,    // (H_v), −exp(A_log)
    pub ssm_norm: Vec<f32>, // (S), shared by the heads
    pub w_out: W,           // (n_embd, value_dim)
    /// `1/√S` S times: the L2 norm of a q / k head is an RMS norm with ε/S times these.
    pub l2_weight: Vec<f32>,
    /// Per-tensor scales of qkv, gate, beta, alpha, out (`<name>.scale`).
    pub scales: [Option<f32>; 5],
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
    /// qwen35: `wq` also gives a gate per query value (rows `2 · n_head · head_dim`, each head's
    /// query then its gate), and the output is multiplied by its sigmoid.
    pub output_gate: bool,
    /// Per-tensor scales of wq, wk, wv, wo (`<name>.scale`).
    pub scales: [Option<f32>; 4],
}

/// The dense SwiGLU feed-forward network.
pub struct Ffn<W> {
    pub w_gate: W, // (n_ff, n_embd)
    pub w_up: W,   // (n_ff, n_embd)
    pub w_down: W, // (n_embd, n_ff)
    /// Per-tensor scales of w_gate, w_up, w_down (`<name>.scale`).
    pub scales: [Option<f32>; 3],
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

    /// The per-tensor scale of the matrix `name` (`blk.N.attn_q.weight` → `blk.N.attn_q.scale`,
    /// one value), which multiplies its products, as llama.cpp's loader looks it up for any
    /// architecture.
    pub fn scale(&self, name: &str) -> Result<Option<f32>, EngineError> {
        let name = format!("{}.scale", name.trim_end_matches(".weight"));
        Ok(load_optional_vector(self.file, &name, 1)?.map(|v| v[0]))
    }

    /// Layer `i` of the trunk.
    pub fn block(&self, i: usize) -> Result<Block<B::Weight>, EngineError> {
        self.block_of(i, self.config.layers[i])
    }

    /// Layer `i` of the file with a mixer of `kind` (a multi-token-prediction layer after the
    /// trunk is one of attention).
    pub fn block_of(&self, i: usize, kind: LayerKind) -> Result<Block<B::Weight>, EngineError> {
        let c = self.config;
        let p = |suffix: &str| format!("blk.{i}.{suffix}");
        let mixer = match kind {
            LayerKind::Attention => Mixer::Attention(self.attention(i)?),
            LayerKind::GatedDeltaNet => Mixer::GatedDeltaNet(self.gated_delta_net(i)?),
        };
        // qwen35 names the norm before the feed-forward network after HF's
        // `post_attention_layernorm`.
        let ffn_norm = match c.arch {
            Architecture::Qwen35 => "post_attention_norm.weight",
            _ => "ffn_norm.weight",
        };
        Ok(Block {
            attn_norm: self.vector(&p("attn_norm.weight"), c.n_embd)?,
            mixer,
            ffn_norm: self.vector(&p(ffn_norm), c.n_embd)?,
            ffn: Ffn {
                w_gate: self.matrix(&p("ffn_gate.weight"), c.n_embd, c.n_ff)?,
                w_up: self.matrix(&p("ffn_up.weight"), c.n_embd, c.n_ff)?,
                w_down: self.matrix(&p("ffn_down.weight"), c.n_ff, c.n_embd)?,
                scales: [
                    self.scale(&p("ffn_gate.weight"))?,
                    self.scale(&p("ffn_up.weight"))?,
                    self.scale(&p("ffn_down.weight"))?,
                ],
            },
        })
    }

    fn gated_delta_net(&self, i: usize) -> Result<GdnWeights<B::Weight>, EngineError> {
        let c = self.config;
        let p = |suffix: &str| format!("blk.{i}.{suffix}");
        let ssm = c.ssm.ok_or_else(|| EngineError::BadHyperParameter {
            key: format!("{}.ssm.state_size", c.arch.name()),
            reason: format!("layer {i} is recurrent but the file has no ssm.* keys"),
        })?;
        let (s, h_v) = (ssm.d_state, ssm.n_v_head);
        let (conv_dim, value_dim) = (ssm.conv_dim(), ssm.value_dim());
        // The convolution kernel is read as f32 values; llama.cpp requires it stored as F32.
        let conv_name = p("ssm_conv1d.weight");
        let conv = matrix(self.file, &conv_name, ssm.d_conv, conv_dim)?;
        if conv.format.name != "f32" {
            return Err(EngineError::TensorFormat {
                name: conv_name,
                format: conv.format.name,
                role: "the convolution kernel (F32 only, as llama.cpp)",
            });
        }
        let mut conv1d = vec![0.0; conv_dim * ssm.d_conv];
        (conv.format.dequantize)(self.file.tensor_data(conv), &mut conv1d);
        Ok(GdnWeights {
            w_qkv: self.matrix(&p("attn_qkv.weight"), c.n_embd, conv_dim)?,
            w_gate: self.matrix(&p("attn_gate.weight"), c.n_embd, value_dim)?,
            w_beta: self.matrix(&p("ssm_beta.weight"), c.n_embd, h_v)?,
            w_alpha: self.matrix(&p("ssm_alpha.weight"), c.n_embd, h_v)?,
            conv1d,
            dt_bias: self.vector(&p("ssm_dt.bias"), h_v)?,
            ssm_a: self.vector(&p("ssm_a"), h_v)?,
            ssm_norm: self.vector(&p("ssm_norm.weight"), s)?,
            w_out: self.matrix(&p("ssm_out.weight"), value_dim, c.n_embd)?,
            l2_weight: vec![1.0 / (s as f32).sqrt(); s],
            scales: [
                self.scale(&p("attn_qkv.weight"))?,
                self.scale(&p("attn_gate.weight"))?,
                self.scale(&p("ssm_beta.weight"))?,
                self.scale(&p("ssm_alpha.weight"))?,
                self.scale(&p("ssm_out.weight"))?,
            ],
        })
    }

    fn attention(&self, i: usize) -> Result<AttentionWeights<B::Weight>, EngineError> {
        let (c, file) = (self.config, self.file);
        let p = |suffix: &str| format!("blk.{i}.{suffix}");
        let output_gate = c.arch == Architecture::Qwen35;
        let q_out = c.n_head * c.head_dim;
        let wq_out = if output_gate { 2 * q_out } else { q_out };
        let k_out = c.n_head_kv * c.head_dim;
        let v_out = c.n_head_kv * c.head_dim_v;
        let qk_norm = matches!(c.arch, Architecture::Qwen3 | Architecture::Qwen35);
        let head_norm = |name: &str| -> Result<Option<Vec<f32>>, EngineError> {
            if qk_norm {
                self.vector(&p(name), c.head_dim).map(Some)
            } else {
                Ok(None)
            }
        };
        Ok(AttentionWeights {
            wq: self.matrix(&p("attn_q.weight"), c.n_embd, wq_out)?,
            wk: self.matrix(&p("attn_k.weight"), c.n_embd, k_out)?,
            wv: self.matrix(&p("attn_v.weight"), c.n_embd, v_out)?,
            bq: load_optional_vector(file, &p("attn_q.bias"), q_out)?,
            bk: load_optional_vector(file, &p("attn_k.bias"), k_out)?,
            bv: load_optional_vector(file, &p("attn_v.bias"), v_out)?,
            q_norm: head_norm("attn_q_norm.weight")?,
            k_norm: head_norm("attn_k_norm.weight")?,
            wo: self.matrix(&p("attn_output.weight"), c.n_head * c.head_dim_v, c.n_embd)?,
            output_gate,
            scales: [
                self.scale(&p("attn_q.weight"))?,
                self.scale(&p("attn_k.weight"))?,
                self.scale(&p("attn_v.weight"))?,
                self.scale(&p("attn_output.weight"))?,
            ],
        })
    }
}
