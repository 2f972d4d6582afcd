//! Which type each tensor becomes: llama.cpp's per-tensor choice (`llama-quant.cpp`) for the
//! non-K file types, reproduced decision by decision so the output is byte-identical.
//!
//! The reference sometimes picks a type this build cannot write yet (a separate `token_embd`
//! becomes `q4_K` for the ternary types). Such a choice is kept by name ([`Target::Missing`]) so
//! the error can say exactly what the reference would have written; `--fallback` substitutes a
//! documented type instead.

use fancy_regex::Regex;
use oxibonsai_formats::{format, format_by_name, Format, FormatKind};

/// `general.quantization_version` as the reference writes it (`GGML_QNT_VERSION`).
pub const QUANTIZATION_VERSION: u32 = 2;

/// A file type the command can produce: the default tensor type and the `general.file_type`
/// number llama.cpp writes for it (`enum llama_ftype`).
#[derive(Debug)]
pub struct FileType {
    pub name: &'static str,
    pub kind: FormatKind,
    pub llama_ftype: u32,
}

/// Every file type `quantize` accepts. `pq2_0` is ours (no reference ftype exists): its number
/// mirrors its GGUF type id so it can never collide with a reference ftype (all below 100).
pub static FILE_TYPES: &[FileType] = &[
    ft("f32", FormatKind::F32, 0),
    ft("f16", FormatKind::F16, 1),
    ft("q4_0", FormatKind::Q4_0, 2),
    ft("q4_1", FormatKind::Q4_1, 3),
    ft("q8_0", FormatKind::Q8_0, 7),
    ft("bf16", FormatKind::BF16, 32),
    ft("tq1_0", FormatKind::TQ1_0, 36),
    ft("tq2_0", FormatKind::TQ2_0, 37),
    ft("q1_0", FormatKind::Q1_0, 40),
    ft("q2_0", FormatKind::Q2_0, 41),
    ft("pq2_0", FormatKind::PQ2_0, 142),
];

const fn ft(name: &'static str, kind: FormatKind, llama_ftype: u32) -> FileType {
    FileType {
        name,
        kind,
        llama_ftype,
    }
}

pub fn file_type_by_name(name: &str) -> Option<&'static FileType> {
    FILE_TYPES
        .iter()
        .find(|t| t.name.eq_ignore_ascii_case(name))
}

/// Reference types the reference's choice can land on that our registry does not hold (yet):
/// name and block size, enough to follow the reference's fallback rules.
const MISSING_TYPES: &[(&str, usize)] = &[("q4_K", 256), ("q5_K", 256), ("q5_0", 32), ("q5_1", 32)];

/// What a tensor is written as.
#[derive(Debug, Clone, Copy)]
pub enum Target {
    Known(&'static Format),
    Missing {
        name: &'static str,
        block_elems: usize,
    },
}

impl Target {
    fn named(name: &str) -> Target {
        match format_by_name(name) {
            Some(f) => Target::Known(f),
            None => {
                let &(name, block_elems) = MISSING_TYPES
                    .iter()
                    .find(|(n, _)| *n == name)
                    .expect("only names from MISSING_TYPES or the registry are used here");
                Target::Missing { name, block_elems }
            }
        }
    }
    pub fn name(&self) -> &'static str {
        match self {
            Target::Known(f) => f.name,
            Target::Missing { name, .. } => name,
        }
    }
    fn block_elems(&self) -> usize {
        match self {
            Target::Known(f) => f.block_elems,
            Target::Missing { block_elems, .. } => *block_elems,
        }
    }
    fn is(&self, kind: FormatKind) -> bool {
        matches!(self, Target::Known(f) if f.kind == kind)
    }
}

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
    #[error(
        "tensor '{tensor}': the reference writes it as {format}, which this build cannot write yet \
         (pass --fallback to write q8_0 instead, or choose its type with --embedding-type / --output-type / --tensor-type)"
    )]
    UnsupportedType {
        tensor: String,
        format: &'static str,
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

/// Facts about the whole model the per-tensor rules look at.
pub struct ModelFacts {
    /// A separate `output.weight` exists (otherwise `token_embd.weight` doubles as the output).
    pub has_output: bool,
    /// `{arch}.expert_count`: the reference bumps attn_k / attn_v of 8-expert models to q8_0.
    pub n_expert: u64,
}

/// The tensor being planned: its name, its shape (ne0 first) and its current format.
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
fn is_quantizable(name: &str, dims: &[u64]) -> bool {
    const KEEP: &[&str] = &[
        "_norm.weight",
        "ffn_gate_inp.weight",
        "altup",
        "laurel",
        "per_layer_model_proj",
        "ssm_conv1d.weight",
        "shortconv.conv.weight",
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
        ".position_embd.",
    ];
    name.ends_with("weight")
        && n_dims(dims) >= 2
        && !KEEP.iter().any(|k| name.contains(k))
        && name != "position_embd.weight"
        && name != "token_types.weight"
}

/// The reference's fallback for a type whose block does not divide the row, or `None` where
/// the reference refuses the file.
fn reference_fallback(target: &Target) -> Option<Target> {
    let to = match target.name() {
        "tq1_0" | "tq2_0" => "q4_0",
        "q6_K" => "q8_0",
        "q4_K" => "q5_0",
        "q5_K" => "q5_1",
        _ => return None,
    };
    Some(Target::named(to))
}

/// Ours, used only with `--fallback` where the reference refuses: the closest low-bit type with a
/// smaller block (q1_0 and pq2_0 → q2_0, 64-value blocks; q2_0 → q4_0, 32).
fn our_fallback(target: &Target) -> Target {
    match target.name() {
        "q1_0" | "pq2_0" => Target::Known(format(FormatKind::Q2_0)),
        _ => Target::Known(format(FormatKind::Q4_0)),
    }
}

/// The reference's `llama_tensor_get_type` for non-K file types. Returns the type and whether a
/// fallback was taken (which disables `--tensor-type` for that tensor, as in the reference).
fn reference_choice(
    t: &TensorIn,
    opts: &Options,
    facts: &ModelFacts,
) -> Result<(Target, bool), PlanError> {
    let default = Target::Known(format(opts.file_type.kind));
    let row_len = t.dims[0];
    let mut target = default;
    let is_output =
        t.name == "output.weight" || (!facts.has_output && t.name == "token_embd.weight");
    if is_output {
        if let Some(f) = opts.output_type {
            target = Target::Known(f);
        } else if !row_len.is_multiple_of(target.block_elems() as u64) {
            target = Target::named("q8_0");
        } else if !target.is(FormatKind::Q8_0) {
            target = Target::named("q6_K");
        }
    } else if t.name == "token_embd.weight" {
        if let Some(f) = opts.embedding_type {
            target = Target::Known(f);
        } else if matches!(opts.file_type.kind, FormatKind::TQ1_0 | FormatKind::TQ2_0) {
            target = Target::named("q4_K");
        }
    } else if (t.name.contains("attn_k.weight") || t.name.contains("attn_v.weight"))
        && facts.n_expert == 8
    {
        target = Target::named("q8_0");
    }
    if row_len.is_multiple_of(target.block_elems() as u64) {
        return Ok((target, false));
    }
    let mut fallback = match reference_fallback(&target) {
        Some(f) => f,
        None if opts.fallback => our_fallback(&target),
        None => {
            return Err(PlanError::IncompatibleRows {
                tensor: t.name.to_owned(),
                format: target.name(),
                row_len,
                block_elems: target.block_elems(),
                fallback: our_fallback(&target).name(),
            })
        }
    };
    if !row_len.is_multiple_of(fallback.block_elems() as u64) {
        fallback = Target::named("f16");
    }
    Ok((fallback, true))
}

/// Decides one tensor, in the reference's order: the filter, the per-tensor rules, the
/// `--tensor-type` patterns (last match wins, skipped after a fallback), then the explicit
/// embedding / output types.
pub fn decide(t: &TensorIn, opts: &Options, facts: &ModelFacts) -> Result<Decision, PlanError> {
    if !is_quantizable(t.name, t.dims) {
        return Ok(Decision {
            format: t.format,
            convert: false,
        });
    }
    let default = format(opts.file_type.kind);
    let mut target = Target::Known(default);
    let mut overridden = false;
    if is_quantized(default) {
        let (chosen, fell_back) = reference_choice(t, opts, facts)?;
        target = chosen;
        if !fell_back {
            for (pattern, f) in &opts.tensor_types {
                // A pattern that fails to run (backtrack limit) simply does not match.
                if pattern.is_match(t.name).unwrap_or(false) {
                    target = Target::Known(f);
                    overridden = true;
                }
            }
        }
    }
    if let (Some(f), "token_embd.weight") = (opts.embedding_type, t.name) {
        target = Target::Known(f);
        overridden = true;
    }
    if let (Some(f), "output.weight") = (opts.output_type, t.name) {
        target = Target::Known(f);
        overridden = true;
    }
    let row_len = t.dims[0];
    let format = match target {
        Target::Known(f) => f,
        Target::Missing { .. } if opts.fallback => {
            let q8_0 = self::format(FormatKind::Q8_0);
            if row_len.is_multiple_of(q8_0.block_elems as u64) {
                q8_0
            } else {
                self::format(FormatKind::F16)
            }
        }
        Target::Missing { name, .. } => {
            return Err(PlanError::UnsupportedType {
                tensor: t.name.to_owned(),
                format: name,
            })
        }
    };
    if !row_len.is_multiple_of(format.block_elems as u64) {
        // Only an explicit choice can get here: the reference's own choices were checked above.
        debug_assert!(overridden);
        return Err(PlanError::OverrideDoesNotFit {
            tensor: t.name.to_owned(),
            format: format.name,
            row_len,
            block_elems: format.block_elems,
        });
    }
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
        let facts = ModelFacts {
            has_output: true,
            n_expert: 8,
        };
        let f16 = format(FormatKind::F16);
        let t = TensorIn {
            name: "blk.0.attn_k.weight",
            dims: &[256, 256],
            format: f16,
        };
        let d = decide(&t, &opts("q4_0"), &facts).unwrap();
        assert_eq!(d.format.name, "q8_0");
        let facts = ModelFacts {
            has_output: true,
            n_expert: 0,
        };
        assert_eq!(
            decide(&t, &opts("q4_0"), &facts).unwrap().format.name,
            "q4_0"
        );
    }

    #[test]
    fn separate_token_embd_of_ternary_types_wants_q4_k() {
        let facts = ModelFacts {
            has_output: true,
            n_expert: 0,
        };
        let f16 = format(FormatKind::F16);
        let t = TensorIn {
            name: "token_embd.weight",
            dims: &[256, 8],
            format: f16,
        };
        let err = decide(&t, &opts("tq1_0"), &facts).unwrap_err();
        assert!(
            matches!(err, PlanError::UnsupportedType { format: "q4_K", .. }),
            "{err}"
        );
        // A 576-wide row takes the reference's q4_K → q5_0 fallback, which we cannot write either.
        let t = TensorIn {
            name: "token_embd.weight",
            dims: &[576, 8],
            format: f16,
        };
        let err = decide(&t, &opts("tq2_0"), &facts).unwrap_err();
        assert!(
            matches!(err, PlanError::UnsupportedType { format: "q5_0", .. }),
            "{err}"
        );
    }
}
