//! A Hugging Face checkpoint folder (Qwen3, Qwen2, Llama; safetensors in f32 / f16 / bf16, one
//! file or sharded) → one GGUF file, named and laid out as llama.cpp's `convert_hf_to_gguf.py`
//! writes it.
//!
//! Everything is checked before any tensor is converted — config keys, every tensor's name,
//! shape and dtype, the vocabulary — so bad input writes nothing. Each tensor is then widened to
//! f32 (Llama's query/key rows regrouped for the engine's RoPE) and encoded with the type the
//! [`quantize`](crate::quantize) planner chooses for the file type: the same per-tensor rules,
//! fallbacks and row converter, so converting to q4_k_m equals converting to f32 and then
//! quantizing.
//!
//! [`checkpoint`] reads the safetensors, [`model`] maps `config.json` and the tensor names,
//! [`vocab`] and [`pre_tokenizer`] build the `tokenizer.*` keys; [`Conversion`] ties them together.

pub mod checkpoint;
mod error;
pub mod model;
pub mod pre_tokenizer;
pub mod vocab;

use std::collections::{BTreeMap, HashSet};
use std::path::Path;

use oxibonsai_formats::{format, FormatKind};
use oxibonsai_gguf::{GgufWriter, Metadata, Value};

use crate::quantize::{plan, rows, Decision, FileType, ModelFacts, QuantizeError};
use crate::Progress;
use checkpoint::Checkpoint;
pub use error::ConvertError;
use model::HParams;

/// The user's choices.
pub struct Options {
    pub file_type: &'static FileType,
    /// Where a 128-value-block type (q1_0, pq2_0) does not divide a tensor's rows, use q2_0
    /// there (as [`plan::Options::fallback`]).
    pub fallback: bool,
}

/// One tensor to write: where it comes from and what it becomes.
struct Planned {
    hf_name: String,
    gguf_name: String,
    /// GGUF order: the row length first.
    dims: Vec<u64>,
    /// Heads to regroup the rows over for RoPE (Llama's q/k), if any.
    permute_heads: Option<usize>,
}

/// A checkpoint folder read and checked, every tensor's GGUF name and type decided.
pub struct Conversion {
    hparams: HParams,
    checkpoint: Checkpoint,
    /// In the reference's writing order.
    tensors: Vec<Planned>,
    decisions: Vec<Decision>,
    /// Every key of the output, in the reference converter's order.
    metadata: Vec<(String, Value)>,
    n_vocab: usize,
}

/// The converted file, not yet written.
pub struct Converted {
    pub writer: GgufWriter<'static>,
    /// How many tensors each type has in the output, by type name.
    pub counts: BTreeMap<&'static str, usize>,
}

impl Conversion {
    /// Reads `config.json`, the weights and the tokenizer files of `dir` and plans the output;
    /// nothing is converted yet.
    pub fn plan(dir: &Path, options: &Options) -> Result<Conversion, ConvertError> {
        if !dir.is_dir() {
            return Err(ConvertError::NotAFolder {
                path: dir.to_owned(),
            });
        }
        let config_path = dir.join("config.json");
        if !config_path.is_file() {
            return Err(ConvertError::MissingFile {
                path: config_path,
                why: "the model's hyper-parameters",
            });
        }
        let config = read_json(&config_path)?;
        let hparams = HParams::from_config(&config)?;
        let checkpoint = Checkpoint::open(dir)?;
        let (tensors, n_vocab) = plan_tensors(&hparams, &checkpoint)?;
        let vocab = vocab::tokenizer_metadata(dir, n_vocab, &config)?;
        let metadata = file_metadata(dir, &hparams, n_vocab, options.file_type, vocab);
        let decisions = plan_types(&tensors, &metadata, options)?;
        Ok(Conversion {
            hparams,
            checkpoint,
            tensors,
            decisions,
            metadata,
            n_vocab,
        })
    }

    /// The architecture's GGUF name (`qwen3`).
    pub fn arch(&self) -> &'static str {
        self.hparams.arch.name()
    }

    /// Tokens in the vocabulary (the embedding table's rows).
    pub fn n_vocab(&self) -> usize {
        self.n_vocab
    }

    /// Tensors the output holds.
    pub fn n_tensors(&self) -> usize {
        self.tensors.len()
    }

    /// Each output tensor's GGUF name, checkpoint name, shape (row length first) and planned
    /// type, in writing order.
    pub fn tensors(&self) -> impl Iterator<Item = (&str, &str, &[u64], Decision)> + '_ {
        self.tensors.iter().zip(&self.decisions).map(|(t, d)| {
            (
                t.gguf_name.as_str(),
                t.hf_name.as_str(),
                t.dims.as_slice(),
                *d,
            )
        })
    }

    /// The output's keys, in writing order.
    pub fn metadata(&self) -> &[(String, Value)] {
        &self.metadata
    }

    /// Elements over all tensors, the unit of [`Progress::Done`].
    pub fn n_elements(&self) -> u64 {
        self.tensors
            .iter()
            .map(|t| t.dims.iter().product::<u64>())
            .sum()
    }

    /// Converts every tensor as planned into a writer holding the output file.
    pub fn run(&self, progress: &mut dyn FnMut(Progress)) -> Result<Converted, ConvertError> {
        let mut writer = GgufWriter::new();
        for (key, value) in &self.metadata {
            writer.add_kv(key.clone(), value.clone())?;
        }
        let f32_format = format(FormatKind::F32);
        let mut counts: BTreeMap<&'static str, usize> = BTreeMap::new();
        for (t, decision) in self.tensors.iter().zip(&self.decisions) {
            progress(Progress::Started {
                tensor: &t.gguf_name,
            });
            let raw =
                self.checkpoint
                    .get(&t.hf_name)
                    .ok_or_else(|| ConvertError::MissingTensor {
                        tensor: t.hf_name.clone(),
                    })?;
            let mut bytes = raw.to_f32_bytes(&t.hf_name)?;
            if let Some(heads) = t.permute_heads {
                // The row length in bytes: `dims` came from the checkpoint's usize shape.
                let row_bytes = t.dims[0] as usize * 4;
                bytes = model::permute_for_rope(&bytes, heads, row_bytes);
            }
            let data = if decision.convert {
                rows::convert(&t.gguf_name, &bytes, t.dims[0], f32_format, decision.format)
                    .map_err(QuantizeError::from)?
            } else {
                bytes
            };
            *counts.entry(decision.format.name).or_default() += 1;
            writer.add_tensor(&t.gguf_name, &t.dims, decision.format, data)?;
            progress(Progress::Done {
                n_elements: t.dims.iter().product(),
            });
        }
        Ok(Converted { writer, counts })
    }
}

/// The output's keys in the reference converter's order: name, architecture, file type, then
/// the vocabulary's.
fn file_metadata(
    dir: &Path,
    hparams: &HParams,
    n_vocab: usize,
    file_type: &FileType,
    vocab: Vec<(String, Value)>,
) -> Vec<(String, Value)> {
    let mut metadata: Vec<(String, Value)> = vec![
        (
            "general.architecture".into(),
            Value::String(hparams.arch.name().into()),
        ),
        ("general.name".into(), Value::String(model_name(dir))),
    ];
    metadata.extend(hparams.metadata(n_vocab));
    metadata.push((
        "general.file_type".into(),
        Value::U32(file_type.llama_ftype),
    ));
    metadata.push((
        "general.quantization_version".into(),
        Value::U32(plan::QUANTIZATION_VERSION),
    ));
    metadata.extend(vocab);
    metadata
}

/// Each tensor's type, as `quantize` would choose it for the f32 file with these keys.
fn plan_types(
    tensors: &[Planned],
    metadata: &[(String, Value)],
    options: &Options,
) -> Result<Vec<Decision>, QuantizeError> {
    let f32_format = format(FormatKind::F32);
    let facts = ModelFacts::new(
        &Metadata::new(metadata.to_vec())?,
        tensors.iter().map(|t| t.gguf_name.as_str()),
    )?;
    let inputs: Vec<plan::TensorIn> = tensors
        .iter()
        .map(|t| plan::TensorIn {
            name: &t.gguf_name,
            dims: &t.dims,
            format: f32_format,
        })
        .collect();
    let options = plan::Options {
        file_type: options.file_type,
        tensor_types: Vec::new(),
        embedding_type: None,
        output_type: None,
        allow_requantize: false,
        fallback: options.fallback,
    };
    Ok(plan::plan(&inputs, &options, &facts)?)
}
/// Maps every checkpoint tensor to its GGUF name, checking shape and dtype, and settles the tied
/// output; returns the tensors in the reference's writing order and the vocabulary size.
fn plan_tensors(
    hparams: &HParams,
    checkpoint: &Checkpoint,
) -> Result<(Vec<Planned>, usize), ConvertError> {
    let embd_name = "model.embed_tokens.weight";
    let embd = checkpoint
        .get(embd_name)
        .ok_or_else(|| ConvertError::MissingTensor {
            tensor: embd_name.into(),
        })?;
    let n_vocab = match (embd.shape, hparams.n_vocab) {
        ([rows, _], None) => *rows,
        ([rows, _], Some(n)) if *rows == n => n,
        (found, declared) => {
            return Err(ConvertError::ShapeMismatch {
                tensor: embd_name.into(),
                expected: vec![declared.unwrap_or(0), hparams.n_embd],
                found: found.to_vec(),
            })
        }
    };
    let has_lm_head = checkpoint.get("lm_head.weight").is_some();
    // Without the key, the weights decide; with it, a tied model's lm_head copy is dropped.
    let tied = hparams.tied.unwrap_or(!has_lm_head);

    let mut planned = Vec::new();
    for hf_name in checkpoint.names() {
        if tied && hf_name == "lm_head.weight" {
            continue;
        }
        let Some((gguf_name, shape)) = hparams.map_tensor(hf_name, n_vocab)? else {
            continue;
        };
        let Some(raw) = checkpoint.get(hf_name) else {
            continue;
        };
        if raw.shape != shape.as_slice() {
            return Err(ConvertError::ShapeMismatch {
                tensor: hf_name.to_owned(),
                expected: shape,
                found: raw.shape.to_vec(),
            });
        }
        if !matches!(
            raw.dtype,
            safetensors::Dtype::F32 | safetensors::Dtype::F16 | safetensors::Dtype::BF16
        ) {
            return Err(ConvertError::UnsupportedDtype {
                tensor: hf_name.to_owned(),
                dtype: format!("{:?}", raw.dtype),
            });
        }
        let permute_heads = hparams.rope_permute_heads(&gguf_name);
        planned.push(Planned {
            hf_name: hf_name.to_owned(),
            dims: shape.iter().rev().map(|&d| d as u64).collect(),
            gguf_name,
            permute_heads,
        });
    }
    let present: HashSet<&str> = planned.iter().map(|t| t.gguf_name.as_str()).collect();
    let mut required = hparams.required_tensors();
    if !tied {
        required.push("output.weight".into());
    }
    if let Some(missing) = required.iter().find(|n| !present.contains(n.as_str())) {
        return Err(ConvertError::MissingTensor {
            tensor: hf_name_of(missing),
        });
    }
    planned.sort_by(|a, b| {
        plan::layer_order_key(&a.gguf_name).cmp(&plan::layer_order_key(&b.gguf_name))
    });
    Ok((planned, n_vocab))
}

/// The checkpoint name a missing GGUF tensor would have come from, for the message.
fn hf_name_of(gguf_name: &str) -> String {
    const NAMES: &[(&str, &str)] = &[
        ("token_embd.weight", "model.embed_tokens.weight"),
        ("output_norm.weight", "model.norm.weight"),
        ("output.weight", "lm_head.weight"),
        ("attn_norm.weight", "input_layernorm.weight"),
        ("attn_q.weight", "self_attn.q_proj.weight"),
        ("attn_k.weight", "self_attn.k_proj.weight"),
        ("attn_v.weight", "self_attn.v_proj.weight"),
        ("attn_output.weight", "self_attn.o_proj.weight"),
        ("attn_q_norm.weight", "self_attn.q_norm.weight"),
        ("attn_k_norm.weight", "self_attn.k_norm.weight"),
        ("ffn_norm.weight", "post_attention_layernorm.weight"),
        ("ffn_gate.weight", "mlp.gate_proj.weight"),
        ("ffn_up.weight", "mlp.up_proj.weight"),
        ("ffn_down.weight", "mlp.down_proj.weight"),
    ];
    let (layer, suffix) = match gguf_name
        .strip_prefix("blk.")
        .and_then(|rest| rest.split_once('.'))
    {
        Some((layer, suffix)) => (Some(layer), suffix),
        None => (None, gguf_name),
    };
    let hf = NAMES
        .iter()
        .find(|(g, _)| *g == suffix)
        .map_or(suffix, |&(_, h)| h);
    match layer {
        Some(layer) => format!("model.layers.{layer}.{hf}"),
        None => hf.to_owned(),
    }
}

/// The folder's name, as the reference names a model without a model card.
fn model_name(dir: &Path) -> String {
    dir.canonicalize()
        .ok()
        .and_then(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
        .unwrap_or_else(|| "model".into())
}

pub(crate) fn read_json(path: &Path) -> Result<serde_json::Value, ConvertError> {
    let text = std::fs::read_to_string(path).map_err(|source| ConvertError::Io {
        path: path.to_owned(),
        source,
    })?;
    serde_json::from_str(&text).map_err(|source| ConvertError::Json {
        path: path.to_owned(),
        source,
    })
}
