//! Which type each tensor becomes, in the reference's order of decisions (`llama_tensor_get_type`
//! in llama.cpp's `llama-quant.cpp`): the filter of tensors quantized at all, the explicit
//! `--embedding-type` / `--output-type`, the first matching `--tensor-type` pattern, else the file
//! type's mixture ([`rules`]), then the fallback for rows the chosen block does not
//! divide. The whole file is planned before anything is converted, so a refusal writes nothing.

use fancy_regex::Regex;
use oxibonsai_formats::{format, Format, FormatKind};

use super::file_type::FileType;
use super::rules::{self, Category, Counters, ModelFacts, RuleError};

/// `general.quantization_version` as the reference writes it (`GGML_QNT_VERSION`).
pub const QUANTIZATION_VERSION: u32 = 2;

#[derive(Debug, thiserror::Error)]
pub enum PlanError {
    #[error(
        "tensor '{tensor}': rows of {row_len} values are not a multiple of {format}'s {block_elems}-value \
         blocks, and the reference has no fallback for {format} (pass --fallback to use {fallback} there)"
    )]
    IncompatibleRows {
        tensor: String,
        format: &'static str,
        row_len: u64,
        block_elems: usize,
        fallback: &'static str,
    },
    #[error("tensor '{tensor}': {format} was asked for, but its rows of {row_len} values are not a multiple of its {block_elems}-value blocks")]
    OverrideDoesNotFit {
        tensor: String,
        format: &'static str,
        row_len: u64,
        block_elems: usize,
    },
    #[error("tensor '{tensor}' is already quantized ({format}); requantizing loses precision, pass --allow-requantize to do it anyway")]
    RequantizeDisabled {
        tensor: String,
        format: &'static str,
    },
    #[error(transparent)]
    Rule(#[from] RuleError),
}

/// The user's choices that shape the plan.
pub struct Options {
    pub file_type: &'static FileType,
    pub tensor_types: Vec<(Regex, &'static Format)>,
    pub embedding_type: Option<&'static Format>,
    pub output_type: Option<&'static Format>,
    pub allow_requantize: bool,
    pub fallback: bool,
}

/// A tensor to plan: its name, its shape (ne0 first) and its current format.
pub struct TensorIn<'a> {
    pub name: &'a str,
    pub dims: &'a [u64],
    pub format: &'static Format,
}

/// The outcome for one tensor.
#[derive(Debug, Clone, Copy)]
pub struct Decision {
    pub format: &'static Format,
    /// False when the tensor is copied byte for byte.
    pub convert: bool,
}

fn is_quantized(format: &Format) -> bool {
    format.block_elems > 1
}

/// `ggml_n_dims`: trailing dimensions of 1 do not count.
fn n_dims(dims: &[u64]) -> usize {
    dims.iter().rposition(|&d| d > 1).map_or(1, |i| i + 1)
}

/// The reference's filter of tensors that are quantized at all. Names listed here are small or
/// precision-critical weights in other architectures; they are kept as they are.
fn is_quantizable(name: &str, dims: &[u64], arch: &str) -> bool {
    const KEEP: &[&str] = &[
        "_norm.weight",
        "ffn_gate_inp.weight",
        "ffn_gate_tid2eid.weight",
        "altup",
        "laurel",
        "per_layer_model_proj",
        "ssm_conv1d",
        "shortconv.conv.weight",
        "indexer.k_proj.weight",
        "indexer.q_proj.weight",
        "time_mix_first.weight",
        "time_mix_w0.weight",
        "time_mix_w1.weight",
        "time_mix_w2.weight",
        "time_mix_v0.weight",
        "time_mix_v1.weight",
        "time_mix_v2.weight",
        "time_mix_a0.weight",
        "time_mix_a1.weight",
        "time_mix_a2.weight",
        "time_mix_g1.weight",
        "time_mix_g2.weight",
        "time_mix_decay_w1.weight",
        "time_mix_decay_w2.weight",
        "time_mix_lerp_fused.weight",
        "attn_rel_b.weight",
        ".position_embd",
        "sam.pos_embd",
        "sam.neck.",
        "sam.net_",
        ".rel_pos",
        ".patch_embd",
        ".patch_merger",
        "a.rvq.codebook",
        "mm.a.code_embd",
    ];
    const KEEP_GLM5_NEXT: &[&str] = &[
        "hc_",
        "indexer.attn_q_b",
        "indexer.attn_k",
        "indexer.proj",
        "indexer_compressor_gate",
        "indexer_compressor_ape",
        "ssm_f_a.weight",
        "ssm_f_b.weight",
        "ssm_g_a.weight",
        "ssm_g_b.weight",
        "ssm_beta.weight",
        "attn_kv_a_mqa.weight",
        "attn_k_b.weight",
        "attn_v_b.weight",
    ];
    let kept_by_arch = arch == "glm5-next" && KEEP_GLM5_NEXT.iter().any(|k| name.contains(k));
    n_dims(dims) >= 2
        && name.ends_with("weight")
        && !KEEP.iter().any(|k| name.contains(k))
        && !kept_by_arch
        && name != "position_embd.weight"
        && name != "token_types.weight"
}

/// The reference's fallback where a block does not divide the rows (`tensor_type_fallback`):
/// a 32-value-block type of similar size, or f16 where even that does not fit.
fn fit(
    target: &'static Format,
    name: &str,
    row_len: u64,
    opts: &Options,
) -> Result<&'static Format, PlanError> {
    let fits = |f: &Format| row_len.is_multiple_of(f.block_elems as u64);
    if fits(target) {
        return Ok(target);
    }
    use FormatKind as K;
    let to = match target.kind {
        K::Q2_0 | K::Q2_K | K::Q3_K | K::TQ1_0 | K::TQ2_0 => format(K::Q4_0),
        K::Q4_K => format(K::Q5_0),
        K::Q5_K => format(K::Q5_1),
        K::Q6_K => format(K::Q8_0),
        _ if target.block_elems <= 32 => target,
        // Ours, where the reference refuses the file: the 128-value-block types become q2_0
        // (64-value blocks), which falls back further by the reference's own rule.
        _ if opts.fallback => return fit(format(K::Q2_0), name, row_len, opts),
        _ => {
            return Err(PlanError::IncompatibleRows {
                tensor: name.to_owned(),
                format: target.name,
                row_len,
                block_elems: target.block_elems,
                fallback: format(K::Q2_0).name,
            })
        }
    };
    Ok(if fits(to) { to } else { format(K::F16) })
}

/// Plans every tensor, given in the reference's order (see [`layer_order_key`]): the mixture's
/// counters advance in that order.
pub fn plan(
    tensors: &[TensorIn],
    opts: &Options,
    facts: &ModelFacts,
) -> Result<Vec<Decision>, PlanError> {
    let mut counters = Counters::default();
    tensors
        .iter()
        .map(|t| decide(t, opts, facts, &mut counters))
        .collect()
}

fn decide(
    t: &TensorIn,
    opts: &Options,
    facts: &ModelFacts,
    counters: &mut Counters,
) -> Result<Decision, PlanError> {
    if !is_quantizable(t.name, t.dims, &facts.arch) {
        return Ok(Decision {
            format: t.format,
            convert: false,
        });
    }
    let row_len = t.dims[0];
    let category = Category::of(t.name);
    let first_pattern = || {
        opts.tensor_types
            .iter()
            // A pattern that fails to run (backtrack limit) simply does not match.
            .find(|(pattern, _)| pattern.is_match(t.name).unwrap_or(false))
            .map(|&(_, f)| f)
    };
    // A separate per-layer embedding table named by a pattern follows the pattern instead.
    let embedding_type = opts
        .embedding_type
        .filter(|_| category == Category::TokenEmbd)
        .filter(|_| t.name != "per_layer_token_embd.weight" || first_pattern().is_none());
    let explicit = embedding_type.or(opts.output_type.filter(|_| category == Category::Output));

    let format = if let Some(f) = explicit {
        // The reference takes these as they are, without a fallback.
        if !row_len.is_multiple_of(f.block_elems as u64) {
            return Err(PlanError::OverrideDoesNotFit {
                tensor: t.name.to_owned(),
                format: f.name,
                row_len,
                block_elems: f.block_elems,
            });
        }
        f
    } else {
        let default = format(opts.file_type.kind);
        if is_quantized(default) {
            let chosen = match first_pattern() {
                Some(f) => f,
                None => format(rules::mixture_choice(
                    t.name,
                    row_len,
                    opts.file_type.id,
                    default.kind,
                    opts.output_type.map(|f| f.kind),
                    facts,
                    counters,
                )?),
            };
            fit(chosen, t.name, row_len, opts)?
        } else {
            default
        }
    };
    let convert = !std::ptr::eq(format, t.format);
    if convert && is_quantized(t.format) && !opts.allow_requantize {
        return Err(PlanError::RequantizeDisabled {
            tensor: t.name.to_owned(),
            format: t.format.name,
        });
    }
    Ok(Decision { format, convert })
}

/// The reference's tensor order (`weight_name_comparer`): by layer number (`blk.N.`, -1 for
/// tensors outside a block), then by name.
pub fn layer_order_key(name: &str) -> (i64, &str) {
    let layer = name
        .strip_prefix("blk.")
        .and_then(|rest| {
            let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
            rest[..digits].parse::<i64>().ok()
        })
        .unwrap_or(-1);
    (layer, name)
}

#[cfg(test)]
mod tests {
    use super::super::file_type::file_type_by_name;
    use super::*;

    fn opts(file_type: &str) -> Options {
        Options {
            file_type: file_type_by_name(file_type).unwrap(),
            tensor_types: Vec::new(),
            embedding_type: None,
            output_type: None,
            allow_requantize: true,
            fallback: false,
        }
    }

    fn facts(n_expert: u64) -> ModelFacts {
        ModelFacts {
            arch: "qwen3".into(),
            n_layer: 1,
            n_expert,
            n_gqa: 2,
            ..ModelFacts::default()
        }
    }

    fn one(
        name: &str,
        dims: &[u64],
        opts: &Options,
        facts: &ModelFacts,
    ) -> Result<Decision, PlanError> {
        let t = TensorIn {
            name,
            dims,
            format: format(FormatKind::F16),
        };
        plan(&[t], opts, facts).map(|d| d[0])
    }

    #[test]
    fn order_is_by_layer_number_then_name() {
        let mut names = vec![
            "blk.10.a",
            "token_embd.weight",
            "blk.2.b",
            "blk.2.a",
            "output_norm.weight",
            "output.weight",
        ];
        names.sort_by_key(|n| layer_order_key(n));
        assert_eq!(
            names,
            [
                "output.weight",
                "output_norm.weight",
                "token_embd.weight",
                "blk.2.a",
                "blk.2.b",
                "blk.10.a"
            ]
        );
    }

    #[test]
    fn eight_expert_attention_keys_go_to_q8_0() {
        let d = one("blk.0.attn_k.weight", &[256, 256], &opts("q4_0"), &facts(8)).unwrap();
        assert_eq!(d.format.name, "q8_0");
        let d = one("blk.0.attn_k.weight", &[256, 256], &opts("q4_0"), &facts(0)).unwrap();
        assert_eq!(d.format.name, "q4_0");
    }

    #[test]
    fn separate_token_embd_of_ternary_types_is_q4_k_with_its_fallback() {
        for ft in ["tq1_0", "tq2_0", "q2_0", "pq2_0"] {
            let d = one("token_embd.weight", &[256, 8], &opts(ft), &facts(0)).unwrap();
            assert_eq!(d.format.name, "q4_K", "{ft}");
        }
        // A 576-wide row takes the reference's q4_K → q5_0 fallback.
        let d = one("token_embd.weight", &[576, 8], &opts("tq2_0"), &facts(0)).unwrap();
        assert_eq!(d.format.name, "q5_0");
    }

    /// The reference's fallback table, down to f16 where no 32-value block fits either.
    #[test]
    fn fallbacks_follow_the_reference_table() {
        let f = facts(0);
        let cases: &[(&str, u64, &str)] = &[
            ("q2_k", 576, "q4_0"),
            ("q2_0", 96, "q4_0"),
            ("q4_k_s", 576, "q5_0"),
            ("q5_k_s", 576, "q5_1"),
            ("q6_k", 576, "q8_0"),
            ("q6_k", 100, "f16"),
            ("q4_0", 48, "f16"),
        ];
        for &(ft, row, want) in cases {
            let d = one("blk.0.attn_q.weight", &[row, 4], &opts(ft), &f).unwrap();
            assert_eq!(d.format.name, want, "{ft} with rows of {row}");
        }
        let err = one("blk.0.attn_q.weight", &[576, 4], &opts("q1_0"), &f).unwrap_err();
        assert!(
            matches!(err, PlanError::IncompatibleRows { format: "q1_0", .. }),
            "{err}"
        );
        let with_fallback = Options {
            fallback: true,
            ..opts("q1_0")
        };
        let d = one("blk.0.attn_q.weight", &[576, 4], &with_fallback, &f).unwrap();
        assert_eq!(d.format.name, "q2_0");
    }

    /// The first matching pattern wins, skips the mixture (and its counters) and still falls back.
    #[test]
    fn patterns_come_before_the_mixture_and_before_the_fallback() {
        let mut o = opts("q4_k_m");
        o.tensor_types = vec![
            (Regex::new("attn_v").unwrap(), format(FormatKind::TQ1_0)),
            (Regex::new("attn").unwrap(), format(FormatKind::Q8_0)),
        ];
        let f = ModelFacts {
            n_attention_wv: 1,
            ..facts(0)
        };
        let d = one("blk.0.attn_v.weight", &[256, 4], &o, &f).unwrap();
        assert_eq!(d.format.name, "tq1_0");
        let d = one("blk.0.attn_v.weight", &[576, 4], &o, &f).unwrap();
        assert_eq!(d.format.name, "q4_0");
        let d = one("blk.0.attn_q.weight", &[256, 4], &o, &f).unwrap();
        assert_eq!(d.format.name, "q8_0");
    }
}
