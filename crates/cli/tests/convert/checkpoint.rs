//! Tiny Hugging Face checkpoints for the `convert` tests: deterministic random weights (exactly
//! representable in the storage dtype), config.json, the real Qwen3 tokenizer files, and
//! safetensors written in one file or in shards with an index.

use std::collections::BTreeMap;
use std::path::Path;

use oxibonsai_testkit::golden;
use safetensors::{Dtype, View};
use serde_json::{json, Value};

/// splitmix64: deterministic weights without a dependency.
pub struct Rng(u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    /// Uniform in [-1, 1).
    pub fn uniform(&mut self) -> f32 {
        ((self.next() >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
    }
}

#[derive(Clone, Copy, PartialEq, Debug)]
pub enum Arch {
    Qwen3,
    Qwen2,
    Llama,
}

#[derive(Clone, Debug)]
pub struct Spec {
    pub arch: Arch,
    pub n_embd: usize,
    pub n_ff: usize,
    pub n_layer: usize,
    pub n_head: usize,
    pub n_head_kv: usize,
    /// Written to config.json when set; else n_embd / n_head.
    pub head_dim: Option<usize>,
    pub n_vocab: usize,
    pub tied: bool,
    pub dtype: Dtype,
    pub rope_theta: f64,
    pub eps: f64,
    /// Linear weights are {−s, 0, +s} per row.
    pub ternary: bool,
    /// The chat template comes as chat_template.jinja instead of in tokenizer_config.json.
    pub template_file: bool,
}

impl Spec {
    pub fn head_dim(&self) -> usize {
        self.head_dim.unwrap_or(self.n_embd / self.n_head)
    }
}

pub const QWEN3_VOCAB: usize = 151_936;

pub fn qwen3_spec() -> Spec {
    Spec {
        arch: Arch::Qwen3,
        n_embd: 64,
        n_ff: 128,
        n_layer: 2,
        n_head: 4,
        n_head_kv: 2,
        // 4 × 32 = 128 ≠ 64: key_length / value_length must be written.
        head_dim: Some(32),
        n_vocab: QWEN3_VOCAB,
        tied: true,
        dtype: Dtype::BF16,
        rope_theta: 1_000_000.0,
        eps: 1e-6,
        ternary: false,
        template_file: false,
    }
}

/// Qwen2: q/k/v biases, no q/k norms, f32 storage.
pub fn qwen2_spec() -> Spec {
    Spec {
        arch: Arch::Qwen2,
        n_embd: 64,
        n_ff: 96,
        n_layer: 2,
        n_head: 4,
        n_head_kv: 2,
        head_dim: None,
        n_vocab: QWEN3_VOCAB,
        tied: true,
        dtype: Dtype::F32,
        rope_theta: 1_000_000.0,
        eps: 1e-6,
        ternary: false,
        template_file: false,
    }
}

/// Llama: untied, f16 storage, the chat template in its own file; sizes as Qwen2's.
pub fn llama_spec() -> Spec {
    Spec {
        arch: Arch::Llama,
        tied: false,
        dtype: Dtype::F16,
        rope_theta: 10_000.0,
        eps: 1e-5,
        template_file: true,
        ..qwen2_spec()
    }
}

/// The template a `template_file` checkpoint carries in chat_template.jinja.
pub const TEMPLATE_FILE_TEXT: &str = "{% for m in messages %}<|start_header_id|>{{ m.role }}<|end_header_id|>\n\n{{ m.content }}<|eot_id|>{% endfor %}";

/// A checkpoint's tensors by Hugging Face name: shape (outer first) and values, already
/// rounded to the storage dtype so they are exactly what the file holds.
pub type Weights = BTreeMap<String, (Vec<usize>, Vec<f32>)>;

pub fn round_to(dtype: Dtype, v: f32) -> f32 {
    match dtype {
        Dtype::F16 => half::f16::from_f32(v).to_f32(),
        Dtype::BF16 => half::bf16::from_f32(v).to_f32(),
        _ => v,
    }
}

pub fn make_weights(spec: &Spec, seed: u64) -> Weights {
    let mut rng = Rng(seed);
    let mut w = Weights::new();
    let (e, f, d) = (spec.n_embd, spec.n_ff, spec.head_dim());
    let q = spec.n_head * d;
    let kv = spec.n_head_kv * d;
    let matrix =
        |w: &mut Weights, rng: &mut Rng, name: String, rows: usize, cols: usize, ternary: bool| {
            let values: Vec<f32> = if ternary {
                (0..rows)
                    .flat_map(|_| {
                        // Scales a few multiples of 2^-10: exact in bf16 and f16.
                        let s = (8 + rng.next() % 56) as f32 / 1024.0;
                        (0..cols)
                            .map(|_| match rng.next() % 3 {
                                0 => -s,
                                1 => 0.0,
                                _ => s,
                            })
                            .collect::<Vec<_>>()
                    })
                    .collect()
            } else {
                let scale = 1.5 / (cols as f32).sqrt();
                (0..rows * cols)
                    .map(|_| round_to(spec.dtype, rng.uniform() * scale))
                    .collect()
            };
            w.insert(name, (vec![rows, cols], values));
        };
    let vector = |w: &mut Weights, rng: &mut Rng, name: String, len: usize| {
        // Norms stay f32 in the checkpoint (as exporters often keep them).
        let values = (0..len).map(|_| 1.0 + 0.2 * rng.uniform()).collect();
        w.insert(name, (vec![len], values));
    };
    let embd: Vec<f32> = (0..spec.n_vocab * e)
        .map(|_| round_to(spec.dtype, rng.uniform()))
        .collect();
    w.insert(
        "model.embed_tokens.weight".into(),
        (vec![spec.n_vocab, e], embd),
    );
    for i in 0..spec.n_layer {
        let p = |s: &str| format!("model.layers.{i}.{s}");
        let t = spec.ternary;
        vector(&mut w, &mut rng, p("input_layernorm.weight"), e);
        matrix(&mut w, &mut rng, p("self_attn.q_proj.weight"), q, e, t);
        matrix(&mut w, &mut rng, p("self_attn.k_proj.weight"), kv, e, t);
        matrix(&mut w, &mut rng, p("self_attn.v_proj.weight"), kv, e, t);
        matrix(&mut w, &mut rng, p("self_attn.o_proj.weight"), e, q, t);
        if spec.arch == Arch::Qwen3 {
            vector(&mut w, &mut rng, p("self_attn.q_norm.weight"), d);
            vector(&mut w, &mut rng, p("self_attn.k_norm.weight"), d);
        }
        if spec.arch == Arch::Qwen2 {
            for (name, len) in [("q", q), ("k", kv), ("v", kv)] {
                let values = (0..len).map(|_| 0.5 * rng.uniform()).collect();
                w.insert(
                    p(&format!("self_attn.{name}_proj.bias")),
                    (vec![len], values),
                );
            }
        }
        vector(&mut w, &mut rng, p("post_attention_layernorm.weight"), e);
        matrix(&mut w, &mut rng, p("mlp.gate_proj.weight"), f, e, t);
        matrix(&mut w, &mut rng, p("mlp.up_proj.weight"), f, e, t);
        matrix(&mut w, &mut rng, p("mlp.down_proj.weight"), e, f, t);
    }
    vector(&mut w, &mut rng, "model.norm.weight".into(), e);
    if !spec.tied {
        matrix(
            &mut w,
            &mut rng,
            "lm_head.weight".into(),
            spec.n_vocab,
            e,
            false,
        );
    }
    w
}

pub fn config_json(spec: &Spec) -> Value {
    let mut c = json!({
        "architectures": [match spec.arch {
            Arch::Qwen3 => "Qwen3ForCausalLM",
            Arch::Qwen2 => "Qwen2ForCausalLM",
            Arch::Llama => "LlamaForCausalLM",
        }],
        "hidden_size": spec.n_embd,
        "intermediate_size": spec.n_ff,
        "num_hidden_layers": spec.n_layer,
        "num_attention_heads": spec.n_head,
        "num_key_value_heads": spec.n_head_kv,
        "vocab_size": spec.n_vocab,
        "max_position_embeddings": 256,
        "rope_theta": spec.rope_theta,
        "rms_norm_eps": spec.eps,
        "tie_word_embeddings": spec.tied,
        "bos_token_id": 151643,
        "eos_token_id": 151645,
        "torch_dtype": "bfloat16",
    });
    if let Some(d) = spec.head_dim {
        c["head_dim"] = json!(d);
    }
    c
}

/// A tensor to serialize: f32 norms, everything else in the spec's dtype.
struct Stored {
    dtype: Dtype,
    shape: Vec<usize>,
    bytes: Vec<u8>,
}

impl View for &Stored {
    fn dtype(&self) -> Dtype {
        self.dtype
    }
    fn shape(&self) -> &[usize] {
        &self.shape
    }
    fn data(&self) -> std::borrow::Cow<'_, [u8]> {
        std::borrow::Cow::Borrowed(&self.bytes)
    }
    fn data_len(&self) -> usize {
        self.bytes.len()
    }
}

fn stored(dtype: Dtype, shape: &[usize], values: &[f32]) -> Stored {
    let dtype = if shape.len() == 1 { Dtype::F32 } else { dtype };
    let bytes = match dtype {
        Dtype::F16 => values
            .iter()
            .flat_map(|&v| half::f16::from_f32(v).to_le_bytes())
            .collect(),
        Dtype::BF16 => values
            .iter()
            .flat_map(|&v| half::bf16::from_f32(v).to_le_bytes())
            .collect(),
        _ => values.iter().flat_map(|v| v.to_le_bytes()).collect(),
    };
    Stored {
        dtype,
        shape: shape.to_vec(),
        bytes,
    }
}

/// Writes config, tokenizer files and the weights, in one file or in `n_shards` with an index.
pub fn write_checkpoint(dir: &Path, spec: &Spec, weights: &Weights, n_shards: usize) {
    std::fs::create_dir_all(dir).unwrap();
    std::fs::write(
        dir.join("config.json"),
        serde_json::to_string_pretty(&config_json(spec)).unwrap(),
    )
    .unwrap();
    std::fs::copy(
        golden("tokenizer/qwen3/tokenizer.json"),
        dir.join("tokenizer.json"),
    )
    .unwrap();
    let mut tokenizer_config: Value = serde_json::from_str(
        &std::fs::read_to_string(golden("tokenizer/qwen3/tokenizer_config.json")).unwrap(),
    )
    .unwrap();
    if spec.template_file {
        tokenizer_config
            .as_object_mut()
            .unwrap()
            .remove("chat_template");
        std::fs::write(dir.join("chat_template.jinja"), TEMPLATE_FILE_TEXT).unwrap();
    }
    std::fs::write(
        dir.join("tokenizer_config.json"),
        tokenizer_config.to_string(),
    )
    .unwrap();
    let tensors: Vec<(String, Stored)> = weights
        .iter()
        .map(|(name, (shape, values))| (name.clone(), stored(spec.dtype, shape, values)))
        .collect();
    if n_shards <= 1 {
        let views = tensors.iter().map(|(n, s)| (n.clone(), s));
        safetensors::serialize_to_file(views, None, &dir.join("model.safetensors")).unwrap();
        return;
    }
    let mut weight_map = serde_json::Map::new();
    let per_shard = tensors.len().div_ceil(n_shards);
    for (k, chunk) in tensors.chunks(per_shard).enumerate() {
        let file = format!("model-{:05}-of-{:05}.safetensors", k + 1, n_shards);
        for (name, _) in chunk {
            weight_map.insert(name.clone(), json!(file));
        }
        let views = chunk.iter().map(|(n, s)| (n.clone(), s));
        safetensors::serialize_to_file(views, None, &dir.join(&file)).unwrap();
    }
    let index = json!({"metadata": {"total_size": 0}, "weight_map": weight_map});
    std::fs::write(
        dir.join("model.safetensors.index.json"),
        serde_json::to_string_pretty(&index).unwrap(),
    )
    .unwrap();
}
