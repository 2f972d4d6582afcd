//! `config.json` → the architecture's GGUF hyper-parameters (llama.cpp's key names, as its
//! `convert_hf_to_gguf.py` writes them), and Hugging Face tensor names → GGUF names with the
//! shape each must have.

use oxibonsai_gguf::Value;
use serde_json::Value as Json;

use super::error::ConvertError;

const CONFIG: &str = "config.json";

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Arch {
    Llama,
    Qwen2,
    Qwen3,
}

impl Arch {
    pub fn name(self) -> &'static str {
        match self {
            Arch::Llama => "llama",
            Arch::Qwen2 => "qwen2",
            Arch::Qwen3 => "qwen3",
        }
    }

    fn from_class(class: &str) -> Option<Arch> {
        Some(match class {
            "LlamaForCausalLM" => Arch::Llama,
            "Qwen2ForCausalLM" => Arch::Qwen2,
            "Qwen3ForCausalLM" => Arch::Qwen3,
            _ => return None,
        })
    }
}

/// The hyper-parameters the engine reads, from `config.json`.
#[derive(Debug, Clone)]
pub struct HParams {
    pub arch: Arch,
    pub n_layer: usize,
    pub n_embd: usize,
    pub n_ff: usize,
    pub n_head: usize,
    pub n_head_kv: usize,
    pub head_dim: usize,
    /// `head_dim` was given explicitly (the reference then writes key/value lengths).
    head_dim_given: bool,
    pub n_vocab: Option<usize>,
    n_ctx: Option<usize>,
    rope_theta: Option<f64>,
    rms_norm_eps: Option<f64>,
    /// `tie_word_embeddings`, when the config says.
    pub tied: Option<bool>,
}

fn bad(key: &str, expected: &'static str, found: &Json) -> ConvertError {
    ConvertError::BadKey {
        file: CONFIG,
        key: key.to_owned(),
        expected,
        found: found.to_string(),
    }
}

/// The first of `keys` present (the reference accepts these aliases), as a positive integer.
fn count(config: &Json, keys: &[&str]) -> Result<Option<usize>, ConvertError> {
    for key in keys {
        if let Some(v) = config.get(*key).filter(|v| !v.is_null()) {
            return match v.as_u64().filter(|&n| n > 0 && n <= 1 << 31) {
                Some(n) => Ok(Some(n as usize)),
                None => Err(bad(key, "a positive integer", v)),
            };
        }
    }
    Ok(None)
}

fn required(config: &Json, keys: &[&str], why: &'static str) -> Result<usize, ConvertError> {
    count(config, keys)?.ok_or_else(|| ConvertError::MissingKey {
        file: CONFIG,
        key: keys[0].to_owned(),
        why,
    })
}

fn number(config: &Json, key: &str) -> Result<Option<f64>, ConvertError> {
    match config.get(key).filter(|v| !v.is_null()) {
        None => Ok(None),
        Some(v) => match v.as_f64().filter(|x| x.is_finite() && *x > 0.0) {
            Some(x) => Ok(Some(x)),
            None => Err(bad(key, "a positive number", v)),
        },
    }
}

impl HParams {
    pub fn from_config(config: &Json) -> Result<HParams, ConvertError> {
        let arch = architecture(config)?;
        check_rope_scaling(config)?;

        let n_layer = required(
            config,
            &["num_hidden_layers", "n_layer", "num_layers"],
            "the number of layers",
        )?;
        let n_embd = required(
            config,
            &["hidden_size", "n_embd", "dim"],
            "the embedding length",
        )?;
        let n_ff = required(
            config,
            &["intermediate_size", "n_inner", "hidden_dim"],
            "the feed-forward length",
        )?;
        let n_head = required(
            config,
            &["num_attention_heads", "n_head", "n_heads"],
            "the number of attention heads",
        )?;
        let n_head_kv = count(config, &["num_key_value_heads", "n_kv_heads"])?.unwrap_or(n_head);
        if n_head % n_head_kv != 0 {
            return Err(ConvertError::BadKey {
                file: CONFIG,
                key: "num_key_value_heads".into(),
                expected: "a divisor of num_attention_heads",
                found: format!("{n_head_kv} (with {n_head} attention heads)"),
            });
        }
        let (head_dim, head_dim_given) = head_dim(config, n_embd, n_head)?;
        // transformers 5 moved `rope_theta` into `rope_parameters`.
        let rope_theta = match number(config, "rope_theta")? {
            Some(t) => Some(t),
            None => match config.get("rope_parameters") {
                Some(p) => number(p, "rope_theta")?,
                None => None,
            },
        };
        let tied = match config.get("tie_word_embeddings").filter(|v| !v.is_null()) {
            None => None,
            Some(v) => Some(
                v.as_bool()
                    .ok_or_else(|| bad("tie_word_embeddings", "true or false", v))?,
            ),
        };
        Ok(HParams {
            arch,
            n_layer,
            n_embd,
            n_ff,
            n_head,
            n_head_kv,
            head_dim,
            head_dim_given,
            n_vocab: count(config, &["vocab_size"])?,
            n_ctx: count(
                config,
                &[
                    "max_position_embeddings",
                    "n_ctx",
                    "n_positions",
                    "max_length",
                ],
            )?,
            rope_theta,
            rms_norm_eps: match number(config, "rms_norm_eps")? {
                Some(e) => Some(e),
                None => number(config, "norm_eps")?,
            },
            tied,
        })
    }

    /// The architecture's keys, in the reference converter's order.
    pub fn metadata(&self, n_vocab: usize) -> Vec<(String, Value)> {
        let arch = self.arch.name();
        let key = |suffix: &str| format!("{arch}.{suffix}");
        let u32_of = |n: usize| Value::U32(u32::try_from(n).unwrap_or(u32::MAX));
        let mut out = Vec::new();
        if self.arch == Arch::Llama {
            out.push((key("vocab_size"), u32_of(n_vocab)));
        }
        if let Some(n_ctx) = self.n_ctx {
            out.push((key("context_length"), u32_of(n_ctx)));
        }
        out.push((key("embedding_length"), u32_of(self.n_embd)));
        out.push((key("block_count"), u32_of(self.n_layer)));
        out.push((key("feed_forward_length"), u32_of(self.n_ff)));
        out.push((key("attention.head_count"), u32_of(self.n_head)));
        out.push((key("attention.head_count_kv"), u32_of(self.n_head_kv)));
        if let Some(theta) = self.rope_theta {
            out.push((key("rope.freq_base"), Value::F32(theta as f32)));
        }
        if let Some(eps) = self.rms_norm_eps {
            out.push((
                key("attention.layer_norm_rms_epsilon"),
                Value::F32(eps as f32),
            ));
        }
        if self.head_dim_given || self.head_dim * self.n_head != self.n_embd {
            out.push((key("attention.key_length"), u32_of(self.head_dim)));
            out.push((key("attention.value_length"), u32_of(self.head_dim)));
        }
        if self.arch == Arch::Llama {
            out.push((key("rope.dimension_count"), u32_of(self.head_dim)));
        }
        out
    }

    /// The GGUF name of a checkpoint tensor and the shape it must have (Hugging Face order:
    /// outer dimension first). `None` for a tensor the engine has no use for.
    pub fn map_tensor(
        &self,
        hf: &str,
        n_vocab: usize,
    ) -> Result<Option<(String, Vec<usize>)>, ConvertError> {
        let (e, f) = (self.n_embd, self.n_ff);
        let q = self.n_head * self.head_dim;
        let kv = self.n_head_kv * self.head_dim;
        let unknown = || ConvertError::UnknownTensor {
            tensor: hf.to_owned(),
            arch: self.arch.name(),
        };
        let global = match hf {
            "model.embed_tokens.weight" => Some(("token_embd.weight", vec![n_vocab, e])),
            "model.norm.weight" => Some(("output_norm.weight", vec![e])),
            "lm_head.weight" => Some(("output.weight", vec![n_vocab, e])),
            _ => None,
        };
        if let Some((name, shape)) = global {
            return Ok(Some((name.to_owned(), shape)));
        }
        let Some(rest) = hf.strip_prefix("model.layers.") else {
            return Err(unknown());
        };
        let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
        let layer: usize = rest[..digits].parse().map_err(|_| unknown())?;
        let Some(suffix) = rest[digits..].strip_prefix('.') else {
            return Err(unknown());
        };
        if layer >= self.n_layer {
            return Err(ConvertError::BadKey {
                file: CONFIG,
                key: "num_hidden_layers".into(),
                expected: "more layers than the checkpoint's highest layer number",
                found: format!("{} (tensor '{hf}' is in layer {layer})", self.n_layer),
            });
        }
        let qk_norm = self.arch == Arch::Qwen3;
        let (name, shape) = match suffix {
            // Precomputed RoPE frequencies some exporters keep: the engine computes its own.
            "self_attn.rotary_emb.inv_freq" => return Ok(None),
            "input_layernorm.weight" => ("attn_norm.weight", vec![e]),
            "self_attn.q_proj.weight" => ("attn_q.weight", vec![q, e]),
            "self_attn.k_proj.weight" => ("attn_k.weight", vec![kv, e]),
            "self_attn.v_proj.weight" => ("attn_v.weight", vec![kv, e]),
            "self_attn.q_proj.bias" => ("attn_q.bias", vec![q]),
            "self_attn.k_proj.bias" => ("attn_k.bias", vec![kv]),
            "self_attn.v_proj.bias" => ("attn_v.bias", vec![kv]),
            "self_attn.o_proj.weight" => ("attn_output.weight", vec![e, q]),
            "self_attn.q_norm.weight" if qk_norm => ("attn_q_norm.weight", vec![self.head_dim]),
            "self_attn.k_norm.weight" if qk_norm => ("attn_k_norm.weight", vec![self.head_dim]),
            "post_attention_layernorm.weight" => ("ffn_norm.weight", vec![e]),
            "mlp.gate_proj.weight" => ("ffn_gate.weight", vec![f, e]),
            "mlp.up_proj.weight" => ("ffn_up.weight", vec![f, e]),
            "mlp.down_proj.weight" => ("ffn_down.weight", vec![e, f]),
            _ => return Err(unknown()),
        };
        Ok(Some((format!("blk.{layer}.{name}"), shape)))
    }

    /// GGUF names the engine cannot run without (biases are optional; `output.weight` is
    /// checked by the caller, which knows whether the embeddings are tied).
    pub fn required_tensors(&self) -> Vec<String> {
        let mut names = vec![
            "token_embd.weight".to_owned(),
            "output_norm.weight".to_owned(),
        ];
        let mut per_layer = vec![
            "attn_norm.weight",
            "attn_q.weight",
            "attn_k.weight",
            "attn_v.weight",
            "attn_output.weight",
            "ffn_norm.weight",
            "ffn_gate.weight",
            "ffn_up.weight",
            "ffn_down.weight",
        ];
        if self.arch == Arch::Qwen3 {
            per_layer.extend(["attn_q_norm.weight", "attn_k_norm.weight"]);
        }
        for i in 0..self.n_layer {
            names.extend(per_layer.iter().map(|s| format!("blk.{i}.{s}")));
        }
        names
    }

    /// How many heads a tensor's rows must be regrouped over for the engine's RoPE: Llama
    /// checkpoints rotate the two halves of each head (`rotate_half`), the engine's llama path
    /// rotates adjacent pairs, so the reference converter interleaves the halves of each head's
    /// query and key rows. Qwen is run NeoX-style, as trained, and needs nothing.
    pub fn rope_permute_heads(&self, gguf_name: &str) -> Option<usize> {
        if self.arch != Arch::Llama {
            return None;
        }
        let suffix = gguf_name.rsplit_once("blk.").map(|(_, s)| s)?;
        let suffix = suffix.split_once('.').map(|(_, s)| s)?;
        match suffix {
            "attn_q.weight" | "attn_q.bias" => Some(self.n_head),
            "attn_k.weight" | "attn_k.bias" => Some(self.n_head_kv),
            _ => None,
        }
    }
}

/// The model class `architectures` names, refusing a pre-quantized checkpoint.
fn architecture(config: &Json) -> Result<Arch, ConvertError> {
    let classes = config
        .get("architectures")
        .ok_or_else(|| ConvertError::MissingKey {
            file: CONFIG,
            key: "architectures".into(),
            why: "it names the model class, e.g. Qwen3ForCausalLM",
        })?;
    let class = classes
        .as_array()
        .and_then(|a| a.first())
        .and_then(Json::as_str)
        .ok_or_else(|| bad("architectures", "a list of class names", classes))?;
    let arch = Arch::from_class(class).ok_or_else(|| ConvertError::UnknownArchitecture {
        found: class.to_owned(),
        supported: "Qwen3ForCausalLM, Qwen2ForCausalLM, LlamaForCausalLM",
    })?;
    if let Some(q) = config.get("quantization_config").filter(|q| !q.is_null()) {
        let method = q.get("quant_method").and_then(Json::as_str).unwrap_or("?");
        return Err(ConvertError::Unsupported {
            what: format!(
                "a pre-quantized checkpoint (quantization_config, quant_method '{method}')"
            ),
        });
    }
    Ok(arch)
}

/// The attention head size, and whether `head_dim` gave it (else `hidden_size / n_head`).
fn head_dim(config: &Json, n_embd: usize, n_head: usize) -> Result<(usize, bool), ConvertError> {
    let explicit = count(config, &["head_dim"])?;
    let head_dim = match explicit {
        Some(d) => d,
        None if n_embd.is_multiple_of(n_head) => n_embd / n_head,
        None => {
            return Err(ConvertError::MissingKey {
                file: CONFIG,
                key: "head_dim".into(),
                why: "hidden_size is not a multiple of num_attention_heads",
            })
        }
    };
    if head_dim % 2 != 0 {
        return Err(ConvertError::BadKey {
            file: CONFIG,
            key: "head_dim".into(),
            expected: "an even number (RoPE rotates pairs)",
            found: head_dim.to_string(),
        });
    }
    Ok((head_dim, explicit.is_some()))
}

/// Any RoPE scaling changes the frequencies the model was trained with; the engine has none.
fn check_rope_scaling(config: &Json) -> Result<(), ConvertError> {
    let scaling = config
        .get("rope_scaling")
        .filter(|s| !s.is_null())
        .or_else(|| config.get("rope_parameters"));
    let Some(scaling) = scaling else {
        return Ok(());
    };
    let kind = scaling
        .get("rope_type")
        .or_else(|| scaling.get("type"))
        .and_then(Json::as_str)
        .unwrap_or("default");
    if kind == "default" {
        return Ok(());
    }
    Err(ConvertError::Unsupported {
        what: format!("RoPE scaling of type '{kind}'"),
    })
}

/// Regroups each head's rows from [first half; second half] to interleaved pairs (row `2i + t`
/// of a head takes row `t·d/2 + i`), as the reference converter's `permute` does. `values`
/// holds `n_heads` heads of `d` rows of `row_len` elements each (a bias has rows of one value;
/// the elements may be the bytes of the values, with `row_len` counted in bytes).
pub fn permute_for_rope<T: Copy + Default>(values: &[T], n_heads: usize, row_len: usize) -> Vec<T> {
    let per_head = values.len() / (n_heads * row_len).max(1);
    let half = per_head / 2;
    let mut out = vec![T::default(); values.len()];
    for h in 0..n_heads {
        for i in 0..half {
            for t in 0..2 {
                let src = (h * per_head + t * half + i) * row_len;
                let dst = (h * per_head + 2 * i + t) * row_len;
                out[dst..dst + row_len].copy_from_slice(&values[src..src + row_len]);
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One head of 4 rows of 2: rows [a b c d] (halves [a b], [c d]) become [a c b d].
    #[test]
    fn permutation_interleaves_the_halves_of_each_head() {
        let rows: Vec<f32> = (0..16).map(|v| v as f32).collect();
        let out = permute_for_rope(&rows, 2, 2);
        let want: Vec<f32> = [0, 1, 4, 5, 2, 3, 6, 7, 8, 9, 12, 13, 10, 11, 14, 15]
            .iter()
            .map(|&v| v as f32)
            .collect();
        assert_eq!(out, want);
    }

    #[test]
    fn rope_scaling_other_than_default_is_refused() {
        let ok: Json = serde_json::json!({"rope_scaling": null});
        assert!(check_rope_scaling(&ok).is_ok());
        let llama3: Json =
            serde_json::json!({"rope_scaling": {"rope_type": "llama3", "factor": 8.0}});
        let err = check_rope_scaling(&llama3).unwrap_err().to_string();
        assert!(err.contains("llama3"), "{err}");
    }
}
