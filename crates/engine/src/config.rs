//! Model hyper-parameters, read only from GGUF metadata (llama.cpp's key names).

mod qwen35;

use oxibonsai_gguf::GgufFile;

use crate::error::EngineError;

/// The architectures the forward pass knows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Architecture {
    Llama,
    Qwen2,
    Qwen3,
    /// Qwen3.5 / 3.6 hybrids: Gated DeltaNet layers and gated attention (Bonsai-27B).
    Qwen35,
}

impl Architecture {
    pub fn name(self) -> &'static str {
        match self {
            Architecture::Llama => "llama",
            Architecture::Qwen2 => "qwen2",
            Architecture::Qwen3 => "qwen3",
            Architecture::Qwen35 => "qwen35",
        }
    }

    /// How RoPE pairs dimensions: llama rotates adjacent pairs (2i, 2i+1); Qwen2/Qwen3 rotate
    /// the two halves of a head against each other (NeoX style), as llama.cpp's rope types say.
    pub fn rope_style(self) -> RopeStyle {
        match self {
            Architecture::Llama => RopeStyle::Adjacent,
            Architecture::Qwen2 | Architecture::Qwen3 | Architecture::Qwen35 => RopeStyle::NeoX,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RopeStyle {
    Adjacent,
    NeoX,
}

/// The widest causal convolution of a recurrent layer (qwen35 uses 4): its window lives on the
/// stack.
pub const MAX_CONV_KERNEL: usize = 16;

/// What mixes information across positions in one layer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LayerKind {
    /// Softmax attention over a KV cache that grows with the sequence.
    Attention,
    /// Gated DeltaNet: linear attention with a fixed-size recurrent state (qwen35).
    GatedDeltaNet,
}

/// The recurrent layers' geometry (llama.cpp's `ssm.*` keys).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SsmConfig {
    /// `ssm.conv_kernel`: the causal convolution's width.
    pub d_conv: usize,
    /// `ssm.state_size`: S, the key (= value) dimension of one head.
    pub d_state: usize,
    /// `ssm.group_count`: H_k, the query / key heads.
    pub n_group: usize,
    /// `ssm.time_step_rank`: H_v, the value heads (each owns an S×S state).
    pub n_v_head: usize,
}

impl SsmConfig {
    pub fn key_dim(&self) -> usize {
        self.d_state * self.n_group
    }

    pub fn value_dim(&self) -> usize {
        self.d_state * self.n_v_head
    }

    /// Channels of the convolution: queries, keys and values side by side.
    pub fn conv_dim(&self) -> usize {
        2 * self.key_dim() + self.value_dim()
    }

    /// Floats of one layer's convolution history: the last `d_conv - 1` inputs of each channel.
    pub fn conv_state_len(&self) -> usize {
        (self.d_conv - 1) * self.conv_dim()
    }

    /// Floats of one layer's delta-rule state: an S×S matrix per value head.
    pub fn ssm_state_len(&self) -> usize {
        self.d_state * self.d_state * self.n_v_head
    }
}

#[derive(Clone, Debug)]
pub struct ModelConfig {
    pub arch: Architecture,
    pub n_vocab: usize,
    pub n_embd: usize,
    pub n_layer: usize,
    /// Multi-token-prediction layers after the trunk (`nextn_predict_layers`; qwen35 only): a
    /// draft head ([`crate::model::MtpHead`]), never run by the trunk.
    pub n_nextn: usize,
    pub n_ff: usize,
    pub n_head: usize,
    pub n_head_kv: usize,
    /// Per-head dimension of queries and keys (`attention.key_length`).
    pub head_dim: usize,
    /// Per-head dimension of values (`attention.value_length`).
    pub head_dim_v: usize,
    /// Dimensions rotated by RoPE (`rope.dimension_count`, default the head dimension).
    pub n_rot: usize,
    pub rope_freq_base: f32,
    pub rms_norm_eps: f32,
    /// The context the model was trained for (`context_length`).
    pub n_ctx_train: usize,
    /// The mixer of each layer of the trunk (`n_layer` entries).
    pub layers: Vec<LayerKind>,
    /// Present when some layer is recurrent.
    pub ssm: Option<SsmConfig>,
    /// qwen35's multi-section RoPE (`rope.dimension_sections`, counts of rotary pairs `[t, h, w,
    /// e]`): for text t = h = w = the position and e = 0, so a pair of the `e` section does not
    /// rotate.
    pub rope_sections: Option<[u32; 4]>,
}

fn positive(key: &str, value: u64) -> Result<usize, EngineError> {
    if value == 0 || value > (1 << 24) {
        return Err(EngineError::BadHyperParameter {
            key: key.to_owned(),
            reason: format!("{value} is outside 1..=16777216"),
        });
    }
    Ok(value as usize)
}

/// The vocabulary size: the embedding table's row count (what the weights can actually produce;
/// `vocab_size` in metadata, when present, must agree).
fn embedding_rows(file: &GgufFile, n_embd: usize) -> Result<usize, EngineError> {
    let embd = file
        .tensor("token_embd.weight")
        .ok_or(EngineError::MissingTensor {
            name: "token_embd.weight".to_owned(),
        })?;
    if embd.dims.len() != 2 || embd.dims[0] != n_embd as u64 {
        return Err(EngineError::TensorShape {
            name: embd.name.clone(),
            expected: vec![n_embd as u64, 0],
            found: embd.dims.clone(),
        });
    }
    positive("token_embd.weight rows", embd.dims[1])
}

impl ModelConfig {
    pub fn from_gguf(file: &GgufFile) -> Result<ModelConfig, EngineError> {
        let meta = file.metadata();
        let arch_name = meta.get_str("general.architecture")?;
        let arch = match arch_name {
            "llama" => Architecture::Llama,
            "qwen2" => Architecture::Qwen2,
            "qwen3" => Architecture::Qwen3,
            "qwen35" => Architecture::Qwen35,
            "qwen35moe" | "qwen3next" => {
                return Err(EngineError::UnsupportedArchitecture {
                    arch: format!(
                        "{arch_name}: its mixture-of-experts feed-forward is not implemented"
                    ),
                })
            }
            other => {
                return Err(EngineError::UnsupportedArchitecture {
                    arch: other.to_owned(),
                })
            }
        };
        let key = |suffix: &str| format!("{arch_name}.{suffix}");
        let required = |suffix: &str| -> Result<usize, EngineError> {
            let k = key(suffix);
            positive(&k, meta.get_u64(&k)?)
        };
        let optional_usize = |suffix: &str| -> Result<Option<usize>, EngineError> {
            let k = key(suffix);
            meta.opt_u64(&k)?.map(|v| positive(&k, v)).transpose()
        };

        let n_embd = required("embedding_length")?;
        let n_layer = required("block_count")?;
        let n_ff = required("feed_forward_length")?;
        let n_head = required("attention.head_count")?;
        let n_head_kv = optional_usize("attention.head_count_kv")?.unwrap_or(n_head);
        if n_head % n_head_kv != 0 {
            return Err(EngineError::BadHyperParameter {
                key: key("attention.head_count_kv"),
                reason: format!("{n_head_kv} does not divide the head count {n_head}"),
            });
        }
        let head_dim = match optional_usize("attention.key_length")? {
            Some(d) => d,
            None if n_embd % n_head == 0 => n_embd / n_head,
            None => {
                return Err(EngineError::BadHyperParameter {
                    key: key("attention.head_count"),
                    reason: format!("{n_head} heads do not divide the embedding length {n_embd}"),
                })
            }
        };
        let head_dim_v = optional_usize("attention.value_length")?.unwrap_or(head_dim);
        let n_rot = optional_usize("rope.dimension_count")?.unwrap_or(head_dim);
        if n_rot > head_dim || n_rot % 2 != 0 {
            return Err(EngineError::BadHyperParameter {
                key: key("rope.dimension_count"),
                reason: format!("{n_rot} must be even and at most the head dimension {head_dim}"),
            });
        }
        let rope_freq_base = meta.opt_f32(&key("rope.freq_base"))?.unwrap_or(10_000.0);
        let rms_norm_eps = meta
            .opt_f32(&key("attention.layer_norm_rms_epsilon"))?
            .unwrap_or(1e-5);
        for (k, v) in [
            (key("rope.freq_base"), rope_freq_base),
            (key("attention.layer_norm_rms_epsilon"), rms_norm_eps),
        ] {
            if !(v.is_finite() && v > 0.0) {
                return Err(EngineError::BadHyperParameter {
                    key: k,
                    reason: format!("{v} is not a positive number"),
                });
            }
        }
        let n_ctx_train = optional_usize("context_length")?.unwrap_or(4096);

        let (mut layers, mut ssm, mut rope_sections) =
            (vec![LayerKind::Attention; n_layer], None, None);
        let mut n_layer = n_layer;
        let mut n_nextn = 0;
        if arch == Architecture::Qwen35 {
            let q = qwen35::read(
                meta,
                n_layer,
                head_dim,
                head_dim_v,
                &required,
                &optional_usize,
            )?;
            n_layer = q.n_layer;
            n_nextn = q.n_nextn;
            layers = q.layers;
            ssm = Some(q.ssm);
            rope_sections = Some(q.rope_sections);
        }

        let n_vocab = embedding_rows(file, n_embd)?;
        if let Some(declared) = optional_usize("vocab_size")? {
            if declared != n_vocab {
                return Err(EngineError::BadHyperParameter {
                    key: key("vocab_size"),
                    reason: format!("{declared} differs from token_embd.weight's {n_vocab} rows"),
                });
            }
        }
        Ok(ModelConfig {
            arch,
            n_vocab,
            n_embd,
            n_layer,
            n_nextn,
            n_ff,
            n_head,
            n_head_kv,
            head_dim,
            head_dim_v,
            n_rot,
            rope_freq_base,
            rms_norm_eps,
            n_ctx_train,
            layers,
            ssm,
            rope_sections,
        })
    }

    /// Query heads that share one key/value head.
    pub fn n_group(&self) -> usize {
        self.n_head / self.n_head_kv
    }

    /// Whether rotary pair `i` (of `n_rot / 2`) turns with the position: qwen35's IMROPE
    /// interleaves its sections (llama.cpp's `ggml_mrope_cache_init`), and a pair that falls in
    /// none of t / h / w belongs to `e`, whose position is 0 for text.
    pub fn rope_pair_rotates(&self, i: usize) -> bool {
        let Some(s) = self.rope_sections else {
            return true;
        };
        let sector = i as u32 % s.iter().sum::<u32>();
        (sector.is_multiple_of(3) && sector < 3 * s[0])
            || (sector % 3 == 1 && sector < 3 * s[1])
            || (sector % 3 == 2 && sector < 3 * s[2])
    }

    /// Whether any layer keeps a recurrent state (which cannot be truncated, only restored).
    pub fn has_recurrent_layers(&self) -> bool {
        self.layers.contains(&LayerKind::GatedDeltaNet)
    }

    /// The default context, as llama.cpp chooses it: min(the model's, 4096).
    pub fn default_ctx(&self) -> usize {
        self.n_ctx_train.min(4096)
    }
}
