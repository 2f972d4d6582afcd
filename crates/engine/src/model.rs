//! The transformer, read top to bottom: embedding row → per layer norm, QKV (+bias, +per-head norm),
//! RoPE, KV write, attention, output + residual, SwiGLU + residual → final norm → logits.
//! Written once against [`Backend`]; weights are shared and immutable, a [`Sequence`] holds
//! everything that changes.

use std::sync::Arc;

use oxibonsai_gguf::{GgufFile, TensorInfo};

use crate::backend::{grown, rope_angles, AttentionShape, Backend, Segment};
use crate::config::{Architecture, ModelConfig};
use crate::error::EngineError;
use crate::kv_cache::KvCache;

/// Weights of one block. Shapes in `[n_out][n_in]` order.
pub struct LayerWeights<W> {
    pub attn_norm: Vec<f32>,      // (n_embd)
    pub wq: W,                    // (n_head * head_dim, n_embd)
    pub wk: W,                    // (n_head_kv * head_dim, n_embd)
    pub wv: W,                    // (n_head_kv * head_dim_v, n_embd)
    pub bq: Option<Vec<f32>>,     // qwen2
    pub bk: Option<Vec<f32>>,     // qwen2
    pub bv: Option<Vec<f32>>,     // qwen2
    pub q_norm: Option<Vec<f32>>, // qwen3 (head_dim)
    pub k_norm: Option<Vec<f32>>, // qwen3 (head_dim)
    pub wo: W,                    // (n_embd, n_head * head_dim_v)
    pub ffn_norm: Vec<f32>,       // (n_embd)
    pub w_gate: W,                // (n_ff, n_embd)
    pub w_up: W,                  // (n_ff, n_embd)
    pub w_down: W,                // (n_embd, n_ff)
}

pub struct Model<B: Backend> {
    pub config: ModelConfig,
    pub backend: B,
    pub file: Arc<GgufFile>,
    token_embd: B::Weight, // (n_vocab, n_embd), stays in its stored format
    layers: Vec<LayerWeights<B::Weight>>,
    output_norm: Vec<f32>,
    /// `None` when the embedding is tied: the LM head is `token_embd` itself.
    output: Option<B::Weight>,
}

/// Which rows of logits a forward pass returns.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Logits {
    /// Every token of the batch (teacher forcing).
    All,
    /// Only the last token (generation).
    Last,
}

/// Everything that belongs to one sequence: its KV cache, how far it has got, and scratch buffers
/// reused from call to call.
pub struct Sequence<B: Backend> {
    pub cache: KvCache,
    pub n_past: usize,
    work: Workspace<B>,
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

/// One sequence's part of a batched forward pass: its tokens go in at `seq.n_past`.
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
    gate: Vec<f32>,
    up: Vec<f32>,
    logits: Vec<f32>,
    positions: Vec<usize>,
    /// RoPE's (cos, sin) pairs of this pass's positions, `[token][n_rot / 2]`.
    rope: Vec<(f32, f32)>,
    tokens: Vec<u32>,
}

impl<B: Backend> Sequence<B> {
    /// Forgets every position: the next forward pass starts at position 0 (the cache's memory is kept).
    pub fn clear(&mut self) {
        self.n_past = 0;
    }

    /// Continues at position `n` with the KV of positions `n_past..n` taken from `src`, a
    /// sequence of the same model that holds the same tokens at positions `0..n` as this one will
    /// (a shared prompt prefix): as if this sequence had computed them itself. At most `n_past`
    /// positions of its own are kept (fewer when `n` is smaller).
    pub fn extend_from(&mut self, src: &Sequence<B>, n: usize) -> Result<(), EngineError> {
        let start = self.n_past.min(n);
        if n > src.n_past {
            return Err(EngineError::KvCopy {
                start,
                end: n,
                reason: format!("the source sequence holds {} positions", src.n_past),
            });
        }
        self.cache.copy_positions(&src.cache, start..n)?;
        self.n_past = n;
        Ok(())
    }
}

/// Reads a small f32 vector (norm weights, biases) of the expected length, whatever its format.
fn load_vector(file: &GgufFile, name: &str, len: usize) -> Result<Vec<f32>, EngineError> {
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

fn load_optional_vector(
    file: &GgufFile,
    name: &str,
    len: usize,
) -> Result<Option<Vec<f32>>, EngineError> {
    match file.tensor(name) {
        Some(_) => load_vector(file, name, len).map(Some),
        None => Ok(None),
    }
}

fn matrix<'a>(
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

impl<B: Backend> Model<B> {
    /// Builds the model from a validated file: configuration from metadata, each weight prepared
    /// once by the backend, every shape checked against the configuration.
    pub fn load(file: Arc<GgufFile>, backend: B) -> Result<Model<B>, EngineError> {
        let config = ModelConfig::from_gguf(&file)?;
        backend.check_config(&config)?;
        let c = &config;
        let prepare = |name: &str, n_in: usize, n_out: usize| -> Result<B::Weight, EngineError> {
            backend.prepare(&file, matrix(&file, name, n_in, n_out)?)
        };
        let token_embd = prepare("token_embd.weight", c.n_embd, c.n_vocab)?;
        let mut layers = Vec::with_capacity(c.n_layer);
        for i in 0..c.n_layer {
            let p = |suffix: &str| format!("blk.{i}.{suffix}");
            let q_out = c.n_head * c.head_dim;
            let k_out = c.n_head_kv * c.head_dim;
            let v_out = c.n_head_kv * c.head_dim_v;
            let qk_norm = c.arch == Architecture::Qwen3;
            layers.push(LayerWeights {
                attn_norm: load_vector(&file, &p("attn_norm.weight"), c.n_embd)?,
                wq: prepare(&p("attn_q.weight"), c.n_embd, q_out)?,
                wk: prepare(&p("attn_k.weight"), c.n_embd, k_out)?,
                wv: prepare(&p("attn_v.weight"), c.n_embd, v_out)?,
                bq: load_optional_vector(&file, &p("attn_q.bias"), q_out)?,
                bk: load_optional_vector(&file, &p("attn_k.bias"), k_out)?,
                bv: load_optional_vector(&file, &p("attn_v.bias"), v_out)?,
                q_norm: if qk_norm {
                    Some(load_vector(&file, &p("attn_q_norm.weight"), c.head_dim)?)
                } else {
                    None
                },
                k_norm: if qk_norm {
                    Some(load_vector(&file, &p("attn_k_norm.weight"), c.head_dim)?)
                } else {
                    None
                },
                wo: prepare(&p("attn_output.weight"), c.n_head * c.head_dim_v, c.n_embd)?,
                ffn_norm: load_vector(&file, &p("ffn_norm.weight"), c.n_embd)?,
                w_gate: prepare(&p("ffn_gate.weight"), c.n_embd, c.n_ff)?,
                w_up: prepare(&p("ffn_up.weight"), c.n_embd, c.n_ff)?,
                w_down: prepare(&p("ffn_down.weight"), c.n_ff, c.n_embd)?,
            });
        }
        let output_norm = load_vector(&file, "output_norm.weight", c.n_embd)?;
        let output = match file.tensor("output.weight") {
            Some(_) => Some(prepare("output.weight", c.n_embd, c.n_vocab)?),
            None => None,
        };
        Ok(Model {
            config,
            backend,
            file,
            token_embd,
            layers,
            output_norm,
            output,
        })
    }

    /// A new sequence with a KV cache for `n_ctx` positions (see [`Sequence::clear`] to reuse one).
    pub fn new_sequence(&self, n_ctx: usize) -> Result<Sequence<B>, EngineError> {
        let c = &self.config;
        Ok(Sequence {
            cache: KvCache::new(c.n_layer, n_ctx, c.n_head_kv, c.head_dim, c.head_dim_v)?,
            n_past: 0,
            work: Workspace::default(),
        })
    }

    /// Runs `tokens` (at positions `n_past..n_past + len`) through the model as one batch and
    /// returns the logits asked for (`[rows][n_vocab]`).
    pub fn forward<'s>(
        &self,
        seq: &'s mut Sequence<B>,
        tokens: &[u32],
        want: Logits,
    ) -> Result<&'s [f32], EngineError> {
        let c = &self.config;
        let n = tokens.len();
        self.check_batch(seq, tokens)?;
        let Sequence {
            cache,
            n_past,
            work,
        } = seq;
        let mut segments = [Segment {
            cache,
            start: *n_past,
            len: n,
        }];
        let rows = self
            .backend
            .run(|| self.forward_checked(&mut segments, tokens, want, work));
        *n_past += n;
        Ok(&work.buffers.logits[..rows * c.n_vocab])
    }

    /// Runs several sequences' tokens through the model in one pass — every weight matrix is read
    /// once for all of them — and returns the logits of each entry's last token
    /// (`[entries][n_vocab]`, in entry order; writable, e.g. for a constraint's mask). Each entry is checked as [`Model::forward`] checks
    /// its batch; nothing runs if one fails.
    pub fn forward_batch<'w>(
        &self,
        entries: &mut [BatchEntry<'_, B>],
        work: &'w mut Workspace<B>,
    ) -> Result<&'w mut [f32], EngineError> {
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
        let mut segments: Vec<Segment<'_>> = entries
            .iter_mut()
            .map(|e| Segment {
                start: e.seq.n_past,
                len: e.tokens.len(),
                cache: &mut e.seq.cache,
            })
            .collect();
        let rows = self
            .backend
            .run(|| self.forward_checked(&mut segments, &tokens, Logits::Last, work));
        drop(segments);
        work.buffers.tokens = tokens;
        for e in entries.iter_mut() {
            e.seq.n_past += e.tokens.len();
        }
        Ok(&mut work.buffers.logits[..rows * self.config.n_vocab])
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
        if seq.n_past + n > seq.cache.n_ctx {
            return Err(EngineError::ContextExceeded {
                position: seq.n_past + n - 1,
                n_ctx: seq.cache.n_ctx,
            });
        }
        Ok(())
    }

    /// The layers, on validated segments whose tokens are concatenated in `tokens`; returns how
    /// many rows of logits it wrote (`Logits::Last`: the last row of each segment).
    fn forward_checked(
        &self,
        segments: &mut [Segment<'_>],
        tokens: &[u32],
        want: Logits,
        work: &mut Workspace<B>,
    ) -> usize {
        let c = &self.config;
        let n = tokens.len();
        let be = &self.backend;
        let Workspace {
            scratch,
            buffers: b,
        } = work;
        b.positions.clear();
        for s in segments.iter() {
            b.positions.extend(s.start..s.start + s.len);
        }
        let (q_len, k_len, v_len) = (
            c.n_head * c.head_dim,
            c.n_head_kv * c.head_dim,
            c.n_head_kv * c.head_dim_v,
        );
        rope_angles(&b.positions, c.n_rot, c.rope_freq_base, &mut b.rope);
        let x = grown(&mut b.x, n * c.n_embd);
        be.embed(&self.token_embd, tokens, x);
        let shape = AttentionShape {
            n_head: c.n_head,
            n_head_kv: c.n_head_kv,
            head_dim: c.head_dim,
            head_dim_v: c.head_dim_v,
            scale: 1.0 / (c.head_dim as f32).sqrt(),
        };
        for (li, layer) in self.layers.iter().enumerate() {
            let xn = grown(&mut b.xn, n * c.n_embd);
            be.rms_norm(x, &layer.attn_norm, c.rms_norm_eps, xn);
            let q = grown(&mut b.q, n * q_len);
            let k = grown(&mut b.k, n * k_len);
            let v = grown(&mut b.v, n * v_len);
            be.matmuls(
                &mut [
                    (&layer.wq, &mut *q),
                    (&layer.wk, &mut *k),
                    (&layer.wv, &mut *v),
                ],
                xn,
                n,
                scratch,
            );
            for (buf, bias) in [
                (&mut *q, &layer.bq),
                (&mut *k, &layer.bk),
                (&mut *v, &layer.bv),
            ] {
                if let Some(bias) = bias {
                    for row in buf.chunks_exact_mut(bias.len()) {
                        be.add(row, bias);
                    }
                }
            }
            for (buf, norm) in [(&mut *q, &layer.q_norm), (&mut *k, &layer.k_norm)] {
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
                    &mut s.cache.layers[li],
                    &k[rows.start * k_len..rows.end * k_len],
                    &v[rows.start * v_len..rows.end * v_len],
                    &b.positions[rows.clone()],
                );
                first += s.len;
            }
            let attn = grown(&mut b.attn, n * c.n_head * c.head_dim_v);
            be.attention(q, segments, li, &b.positions, shape, attn, scratch);
            let proj = grown(&mut b.proj, n * c.n_embd);
            be.matmul(&layer.wo, attn, n, proj, scratch);
            be.add(x, proj);

            let xn = grown(&mut b.xn, n * c.n_embd);
            be.rms_norm(x, &layer.ffn_norm, c.rms_norm_eps, xn);
            let gate = grown(&mut b.gate, n * c.n_ff);
            let up = grown(&mut b.up, n * c.n_ff);
            be.matmuls(
                &mut [(&layer.w_gate, &mut *gate), (&layer.w_up, &mut *up)],
                xn,
                n,
                scratch,
            );
            be.swiglu(gate, up);
            let proj = grown(&mut b.proj, n * c.n_embd);
            be.matmul(&layer.w_down, gate, n, proj, scratch);
            be.add(x, proj);
        }
        // The rows whose logits are wanted, gathered (normed) into `xn`.
        let rows = match want {
            Logits::All => n,
            Logits::Last => segments.len(),
        };
        let xn = grown(&mut b.xn, rows * c.n_embd);
        match want {
            Logits::All => be.rms_norm(x, &self.output_norm, c.rms_norm_eps, xn),
            Logits::Last => {
                let mut end = 0;
                for (s, dst) in segments.iter().zip(xn.chunks_exact_mut(c.n_embd)) {
                    end += s.len;
                    let last = &x[(end - 1) * c.n_embd..end * c.n_embd];
                    be.rms_norm(last, &self.output_norm, c.rms_norm_eps, dst);
                }
            }
        }
        let logits = grown(&mut b.logits, rows * c.n_vocab);
        let head = self.output.as_ref().unwrap_or(&self.token_embd);
        be.matmul(head, xn, rows, logits, scratch);
        rows
    }
}
