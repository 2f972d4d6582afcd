//! The reference's mixture rules (`llama_tensor_get_type_impl` in llama.cpp's `llama-quant.cpp`):
//! which tensors of a file type get more (or fewer) bits than its default type, by tensor role,
//! layer position and model shape. Reproduced decision by decision — counters included, which
//! advance in tensor order — so the chosen types, and so the bytes, equal the reference's.

use oxibonsai_formats::{format, FormatKind};
use oxibonsai_gguf::{GgufError, Metadata, Value};

use super::file_type::FileTypeId;

/// A tensor's role, from its name alone (`tensor_get_category`; the first match in this order).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Category {
    TokenEmbd,
    AttentionQ,
    AttentionV,
    AttentionK,
    AttentionQkv,
    AttentionKvB,
    AttentionOutput,
    FfnUp,
    FfnGate,
    FfnDown,
    Output,
    Other,
}

impl Category {
    pub fn of(name: &str) -> Category {
        if name == "output.weight" {
            return Category::Output;
        }
        if name == "token_embd.weight" || name == "per_layer_token_embd.weight" {
            return Category::TokenEmbd;
        }
        const BY_SUBSTRING: &[(&str, Category)] = &[
            ("attn_qkv.weight", Category::AttentionQkv),
            ("attn_kv_b.weight", Category::AttentionKvB),
            ("attn_v.weight", Category::AttentionV),
            ("attn_k.weight", Category::AttentionK),
            ("attn_q.weight", Category::AttentionQ),
            ("attn_output.weight", Category::AttentionOutput),
            ("ffn_up", Category::FfnUp),
            ("ffn_gate", Category::FfnGate),
            ("ffn_down", Category::FfnDown),
        ];
        BY_SUBSTRING
            .iter()
            .find(|(s, _)| name.contains(s))
            .map_or(Category::Other, |&(_, c)| c)
    }

    /// The value-projection-like tensors the reference counts and treats alike.
    fn is_attn_v(self) -> bool {
        matches!(
            self,
            Category::AttentionV | Category::AttentionQkv | Category::AttentionKvB
        )
    }
}

#[derive(Debug, thiserror::Error)]
pub enum RuleError {
    #[error("tensor '{tensor}': cannot tell its layer (expected a name starting 'blk.N.' in a {n_expert}-expert model)")]
    NoLayer { tensor: String, n_expert: u64 },
    #[error("tensor '{tensor}': layer {layer} is outside the model's {n_layer} layers")]
    BadLayer {
        tensor: String,
        layer: i64,
        n_layer: u64,
    },
    #[error("reading the model's metadata")]
    Metadata(#[from] GgufError),
}

/// What the rules need to know about the whole model.
#[derive(Debug, Clone, Default)]
pub struct ModelFacts {
    /// `general.architecture` ("" when absent).
    pub arch: String,
    /// `{arch}.block_count` (0 when absent).
    pub n_layer: u64,
    /// `{arch}.expert_count` (0 when absent).
    pub n_expert: u64,
    /// Query heads per key/value head in layer 0 (0 when there are no key/value heads).
    pub n_gqa: u64,
    /// The reference's `LLM_TYPE_70B`: 8 query heads share one V projection, which gets more bits.
    pub is_70b: bool,
    /// No `output.weight`: `token_embd.weight` is also the output projection.
    pub tied_embeddings: bool,
    /// How many tensors are attn_v-like, over the whole file.
    pub n_attention_wv: u64,
}

impl ModelFacts {
    pub fn new<'a>(
        metadata: &Metadata,
        tensor_names: impl IntoIterator<Item = &'a str>,
    ) -> Result<ModelFacts, RuleError> {
        let arch = metadata
            .opt_str("general.architecture")?
            .unwrap_or_default()
            .to_owned();
        let key = |suffix: &str| format!("{arch}.{suffix}");
        let n_layer = metadata.opt_u64(&key("block_count"))?.unwrap_or(0);
        let n_expert = metadata.opt_u64(&key("expert_count"))?.unwrap_or(0);
        let n_head = first_of(metadata, &key("attention.head_count"))?.unwrap_or(0);
        // The reference defaults the key/value heads to the query heads.
        let n_head_kv = first_of(metadata, &key("attention.head_count_kv"))?.unwrap_or(n_head);
        let n_gqa = n_head.checked_div(n_head_kv).unwrap_or(0);
        // As the reference's model loaders type an 80-layer (Jais2: 68-layer) model.
        let is_70b = match arch.as_str() {
            "llama" => n_layer == 80 && n_head != n_head_kv,
            "qwen2" | "deci" | "olmo" => n_layer == 80,
            "jais2" => n_layer == 68,
            _ => false,
        };
        let mut tied_embeddings = true;
        let mut n_attention_wv = 0;
        for name in tensor_names {
            match Category::of(name) {
                Category::Output => tied_embeddings = false,
                c if c.is_attn_v() => n_attention_wv += 1,
                _ => {}
            }
        }
        Ok(ModelFacts {
            arch,
            n_layer,
            n_expert,
            n_gqa,
            is_70b,
            tied_embeddings,
            n_attention_wv,
        })
    }

    fn is_falcon(&self) -> bool {
        self.arch == "falcon"
    }
}

/// A per-layer hyper-parameter may be one number or one per layer: the reference reads layer 0's.
fn first_of(metadata: &Metadata, key: &str) -> Result<Option<u64>, GgufError> {
    match metadata.get(key) {
        None => Ok(None),
        Some(Value::Array(_)) => Ok(metadata
            .get_i32_array(key)?
            .first()
            .map(|&v| u64::try_from(v).unwrap_or(0))),
        Some(_) => metadata.get_u64(key).map(Some),
    }
}

/// The reference's running counters: how many tensors of each kind the rules have seen so far.
#[derive(Debug, Default)]
pub struct Counters {
    i_attention_wv: u64,
    i_ffn_down: u64,
    i_ffn_gate: u64,
    i_ffn_up: u64,
}

/// The first and last eighth of the layers, and every third one between, get more bits.
fn use_more_bits(i_layer: i64, n_layers: i64) -> bool {
    i_layer < n_layers / 8 || i_layer >= 7 * n_layers / 8 || (i_layer - n_layers / 8) % 3 == 2
}

/// The layer a per-layer rule applies to: the running count, or in a mixture-of-experts model
/// (whose expert tensors need not come in layer order) the number in the name.
fn layer_of(counter: u64, name: &str, facts: &ModelFacts) -> Result<(i64, i64), RuleError> {
    let n_layer = i64::try_from(facts.n_layer).unwrap_or(i64::MAX);
    if facts.n_expert <= 1 {
        return Ok((i64::try_from(counter).unwrap_or(i64::MAX), n_layer));
    }
    let layer = name
        .strip_prefix("blk.")
        .and_then(|rest| {
            let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
            rest[..digits].parse::<i64>().ok()
        })
        .ok_or_else(|| RuleError::NoLayer {
            tensor: name.to_owned(),
            n_expert: facts.n_expert,
        })?;
    if layer >= n_layer {
        return Err(RuleError::BadLayer {
            tensor: name.to_owned(),
            layer,
            n_layer: facts.n_layer,
        });
    }
    Ok((layer, n_layer))
}

/// The type the file type's mixture gives one quantizable tensor, starting from the file type's
/// default; `output_type` is the user's `--output-type` (reached here for a tied token_embd).
/// Advances the counters as the reference does. Row-fit fallbacks come after, in the caller.
// One function, as `llama_tensor_get_type` is one: the branches are tried in the reference's
// order and the first that matches decides, so reading it beside the reference (and checking an
// update of it) is a comparison of one `if` chain with another.
pub fn mixture_choice(
    name: &str,
    row_len: u64,
    ftype: FileTypeId,
    default: FormatKind,
    output_type: Option<FormatKind>,
    facts: &ModelFacts,
    counters: &mut Counters,
) -> Result<FormatKind, RuleError> {
    use FileTypeId as F;
    use FormatKind as K;
    let category = Category::of(name);
    let falcon = facts.is_falcon();
    let mut t = default;

    // GLM-5-next keeps its low-rank query and next-token projections at 8 bits at least.
    if facts.arch == "glm5-next"
        && ["attn_q_a", "attn_q_b", "nextn.eh_proj"]
            .iter()
            .any(|s| name.contains(s))
    {
        return Ok(K::Q8_0);
    }

    if category == Category::Output || (facts.tied_embeddings && category == Category::TokenEmbd) {
        if let Some(o) = output_type {
            t = o;
        } else if falcon || !row_len.is_multiple_of(format(t).block_elems as u64) {
            t = K::Q8_0;
        } else if t != K::Q8_0 {
            t = K::Q6_K;
        }
    } else if category == Category::TokenEmbd {
        if matches!(ftype, F::TQ1_0 | F::TQ2_0 | F::Q2_0 | F::PQ2_0 | F::PTQ1_0) {
            t = K::Q4_K;
        }
    } else if category.is_attn_v() {
        let i = counters.i_attention_wv;
        let more_bits = use_more_bits(
            i64::try_from(i).unwrap_or(i64::MAX),
            i64::try_from(facts.n_attention_wv).unwrap_or(i64::MAX),
        );
        match ftype {
            F::Q2_K => t = if facts.n_gqa >= 4 { K::Q4_K } else { K::Q3_K },
            F::Q3_K_M => t = if i < 2 { K::Q5_K } else { K::Q4_K },
            F::Q3_K_L => t = K::Q5_K,
            F::Q4_K_M | F::Q5_K_M if more_bits => t = K::Q6_K,
            F::Q4_K_S if i < 4 => t = K::Q5_K,
            _ => {}
        }
        if facts.is_70b && matches!(t, K::Q3_K | K::Q4_K) {
            t = K::Q5_K;
        }
        if facts.n_expert == 8 {
            t = K::Q8_0;
        }
        counters.i_attention_wv += 1;
    } else if category == Category::AttentionK {
        if facts.n_expert == 8 {
            t = K::Q8_0;
        }
    } else if category == Category::FfnDown {
        let (i, n) = layer_of(counters.i_ffn_down, name, facts)?;
        match ftype {
            F::Q2_K => t = K::Q3_K,
            F::Q3_K_M => {
                t = if i < n / 16 {
                    K::Q5_K
                } else if !falcon || use_more_bits(i, n) {
                    K::Q4_K
                } else {
                    K::Q3_K
                }
            }
            F::Q3_K_L => t = if falcon { K::Q4_K } else { K::Q5_K },
            F::Q4_K_M if falcon => {
                t = if i < n / 16 {
                    K::Q6_K
                } else if use_more_bits(i, n) {
                    K::Q5_K
                } else {
                    K::Q4_K
                }
            }
            F::Q4_K_M | F::Q5_K_M if use_more_bits(i, n) => t = K::Q6_K,
            F::Q4_K_S if !falcon && i < n / 8 => t = K::Q5_K,
            _ => {}
        }
        counters.i_ffn_down += 1;
    } else if category == Category::AttentionOutput {
        if !falcon {
            if facts.n_expert == 8 {
                if matches!(
                    ftype,
                    F::Q2_K | F::Q3_K_S | F::Q3_K_M | F::Q4_K_S | F::Q4_K_M
                ) {
                    t = K::Q5_K;
                }
            } else {
                match ftype {
                    F::Q2_K => t = K::Q3_K,
                    F::Q3_K_M => t = K::Q4_K,
                    F::Q3_K_L => t = K::Q5_K,
                    _ => {}
                }
            }
        } else if ftype == F::Q3_K_L {
            t = K::Q4_K;
        }
    } else if category == Category::FfnGate {
        // No file type of ours changes these; the layer is still checked, as the reference does.
        layer_of(counters.i_ffn_gate, name, facts)?;
        counters.i_ffn_gate += 1;
    } else if category == Category::FfnUp {
        layer_of(counters.i_ffn_up, name, facts)?;
        counters.i_ffn_up += 1;
    }
    Ok(t)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn facts(n_layer: u64, n_gqa: u64) -> ModelFacts {
        ModelFacts {
            arch: "llama".into(),
            n_layer,
            n_gqa,
            n_attention_wv: n_layer,
            tied_embeddings: false,
            ..ModelFacts::default()
        }
    }

    /// Q4_K_M's choice for a tensor with rows of 256.
    fn q4_k_m(name: &str, f: &ModelFacts, c: &mut Counters) -> Result<FormatKind, RuleError> {
        mixture_choice(name, 256, FileTypeId::Q4_K_M, FormatKind::Q4_K, None, f, c)
    }

    /// The layers that get more bits, listed by hand from the rule for 30 layers (SmolLM2):
    /// the first 3 (30/8), the last 4 (from 7·30/8 = 26), and every third from 3 + 2.
    #[test]
    fn use_more_bits_picks_the_reference_layers() {
        let picked: Vec<i64> = (0..30).filter(|&i| use_more_bits(i, 30)).collect();
        assert_eq!(picked, [0, 1, 2, 5, 8, 11, 14, 17, 20, 23, 26, 27, 28, 29]);
    }

    #[test]
    fn categories_follow_the_reference_order() {
        assert_eq!(Category::of("output.weight"), Category::Output);
        assert_eq!(
            Category::of("blk.0.attn_qkv.weight"),
            Category::AttentionQkv
        );
        assert_eq!(Category::of("blk.0.ffn_gate_inp.weight"), Category::FfnGate);
        assert_eq!(
            Category::of("blk.0.ffn_down_exps.weight"),
            Category::FfnDown
        );
        assert_eq!(Category::of("output_norm.weight"), Category::Other);
    }

    /// Q4_K_M's ffn_down: q6_K exactly on the use-more-bits layers, counted in tensor order.
    #[test]
    fn q4_k_m_ffn_down_follows_the_counter() {
        let f = facts(8, 1);
        let mut counters = Counters::default();
        let got: Vec<FormatKind> = (0..8)
            .map(|i| q4_k_m(&format!("blk.{i}.ffn_down.weight"), &f, &mut counters).unwrap())
            .collect();
        let want: Vec<FormatKind> = (0..8)
            .map(|i| {
                if use_more_bits(i, 8) {
                    FormatKind::Q6_K
                } else {
                    FormatKind::Q4_K
                }
            })
            .collect();
        assert_eq!(got, want);
    }

    #[test]
    fn q2_k_attn_v_depends_on_gqa_and_70b() {
        let mut c = Counters::default();
        let choose = |f: &ModelFacts, c: &mut Counters| {
            mixture_choice(
                "blk.0.attn_v.weight",
                256,
                FileTypeId::Q2_K,
                FormatKind::Q2_K,
                None,
                f,
                c,
            )
            .unwrap()
        };
        assert_eq!(choose(&facts(4, 3), &mut c), FormatKind::Q3_K);
        assert_eq!(choose(&facts(4, 4), &mut c), FormatKind::Q4_K);
        let big = ModelFacts {
            is_70b: true,
            ..facts(80, 8)
        };
        assert_eq!(choose(&big, &mut c), FormatKind::Q5_K);
        let moe = ModelFacts {
            n_expert: 8,
            ..facts(4, 1)
        };
        assert_eq!(choose(&moe, &mut c), FormatKind::Q8_0);
    }

    #[test]
    fn expert_layers_come_from_the_name() {
        let f = ModelFacts {
            n_expert: 4,
            ..facts(2, 1)
        };
        let mut c = Counters::default();
        let err = q4_k_m("ffn_down.weight", &f, &mut c).unwrap_err();
        assert!(err.to_string().contains("'ffn_down.weight'"), "{err}");
        let err = q4_k_m("blk.7.ffn_down_exps.weight", &f, &mut c).unwrap_err();
        assert!(err.to_string().contains("layer 7"), "{err}");
    }
}
