//! `oxibonsai info FILE [--json]`: what a model file is, read from its header alone.

use std::collections::BTreeMap;
use std::process::ExitCode;

use anyhow::Result;
use oxibonsai_convert::quantize::{file_type_by_number, mixture};
use oxibonsai_engine::kv_cache::CacheTypes;
use oxibonsai_engine::rotation::Rotation;
use oxibonsai_engine::state::state_bytes;
use oxibonsai_engine::{LayerKind, ModelConfig};
use oxibonsai_formats::kernels::Kernels;
use oxibonsai_gguf::{GgufFile, Metadata};
use serde::Serialize;

use super::model_args::CacheTypeArgs;
use super::{open_model, print, ModelArg};

#[derive(clap::Args, Debug)]
pub struct Args {
    #[command(flatten)]
    model: ModelArg,
    /// Print one JSON object (schema documented in README.md) instead of text.
    #[arg(long)]
    json: bool,
    /// The cache types `kv_bytes_per_token` is counted in.
    #[command(flatten)]
    cache: CacheTypeArgs,
}

/// The `--json` schema of `info`. Keys are stable; absent hyper-parameters are `null`.
#[derive(Serialize, Debug)]
pub struct Info {
    pub file: String,
    pub file_size: u64,
    pub gguf_version: u32,
    pub alignment: u64,
    pub name: Option<String>,
    pub architecture: Option<String>,
    pub context_length: Option<u64>,
    pub n_embd: Option<u64>,
    pub n_layer: Option<u64>,
    pub n_ff: Option<u64>,
    pub n_head: Option<u64>,
    pub n_head_kv: Option<u64>,
    pub head_dim: Option<u64>,
    pub rope_freq_base: Option<f32>,
    pub rms_norm_eps: Option<f32>,
    pub tied_embeddings: bool,
    pub n_params: u64,
    pub tensor_bytes: u64,
    pub bits_per_weight: f64,
    pub tensor_count: usize,
    pub metadata_count: usize,
    /// `general.file_type`, the number llama.cpp writes for the file type (`enum llama_ftype`).
    pub file_type_id: Option<u64>,
    /// Its name (`Q4_K_M`) where the number is one `quantize` writes, else `null`.
    pub file_type: Option<String>,
    /// The file type and tensor types by count, e.g. `Q4_K_M: q5_0 166, f32 61, q4_K 16, …`.
    pub mixture: String,
    /// Per tensor type: count and bytes, in the registry's naming (`q1_0`, `f32`, …).
    pub types: Vec<TypeSummary>,
    pub tokenizer: Option<TokenizerInfo>,
    pub chat_template: bool,
    /// The CPU kernel tier this machine runs (`OXIBONSAI_ISA`, else the best it has).
    pub kernel_tier: &'static str,
    /// Hybrid models (qwen35): the trunk's mixers, e.g. `16 × (GDN×3, attention)`; else `null`.
    pub layer_pattern: Option<String>,
    /// Hybrid models: the recurrent layers' state of one sequence (convolution history and
    /// delta-rule matrices, f32), whatever its length.
    pub recurrent_state_bytes: Option<u64>,
    /// Hybrid models: the attention layers' KV cache per position (in `-ctk` / `-ctv`'s types,
    /// f16 by default).
    pub kv_bytes_per_token: Option<u64>,
    /// PrismML's `prism.hadamard` rotation (Bonsai-2 files), `null` when the file has none.
    pub rotation: Option<RotationInfo>,
}

/// What `prism.hadamard.*` says, as the engine reads it.
#[derive(Serialize, Debug)]
pub struct RotationInfo {
    pub block_size: Option<usize>,
    /// `explicit` or `identity`.
    pub sign_mode: Option<&'static str>,
    /// The activation widths that carry signs (explicit mode).
    pub sign_widths: Vec<usize>,
    /// How many weights are stored folded.
    pub folded_weights: usize,
    /// Whether the embedding rows are stored rotated (undone after the lookup).
    pub embedding_rotated: bool,
    /// Whether `ssm_out`'s input is permuted to grouped V-head order first.
    pub gdn_v_grouped: bool,
    /// Why the engine refuses the rotation, when it does (the file still loads nowhere).
    pub error: Option<String>,
}

fn rotation_info(file: &GgufFile, arch: Option<&str>) -> Option<RotationInfo> {
    let refused = |error: String| RotationInfo {
        block_size: None,
        sign_mode: None,
        sign_widths: Vec::new(),
        folded_weights: 0,
        embedding_rotated: false,
        gdn_v_grouped: false,
        error: Some(error),
    };
    match Rotation::from_gguf(file, arch.unwrap_or("")) {
        Ok(None) => None,
        Ok(Some(r)) => {
            let sign_widths: Vec<usize> = r.sign_widths().collect();
            Some(RotationInfo {
                block_size: Some(r.block_size()),
                sign_mode: Some(if sign_widths.is_empty() {
                    "identity"
                } else {
                    "explicit"
                }),
                sign_widths,
                folded_weights: r.n_folded(),
                embedding_rotated: r.embedding_is_rotated(),
                gdn_v_grouped: r.gdn_heads().is_some(),
                error: None,
            })
        }
        Err(e) => Some(refused(e.to_string())),
    }
}

/// The layers' mixers, run-length coded (`GDN×3, attention`) and, when the whole trunk repeats
/// a group, as `count × (group)`.
fn layer_pattern(layers: &[LayerKind]) -> String {
    let runs = |layers: &[LayerKind]| -> String {
        let mut parts: Vec<String> = Vec::new();
        let mut i = 0;
        while i < layers.len() {
            let run = layers[i..].iter().take_while(|&&k| k == layers[i]).count();
            let name = match layers[i] {
                LayerKind::Attention => "attention",
                LayerKind::GatedDeltaNet => "GDN",
            };
            parts.push(if run == 1 {
                name.to_owned()
            } else {
                format!("{name}×{run}")
            });
            i += run;
        }
        parts.join(", ")
    };
    let n = layers.len();
    let period = (1..=n)
        .find(|&p| n.is_multiple_of(p) && layers.chunks(p).all(|c| c == &layers[..p]))
        .unwrap_or(n);
    if period < n {
        format!("{} × ({})", n / period, runs(&layers[..period]))
    } else {
        runs(layers)
    }
}

#[derive(Serialize, Debug)]
pub struct TypeSummary {
    #[serde(rename = "type")]
    pub type_name: &'static str,
    pub tensors: usize,
    pub bytes: u64,
    pub params: u64,
    /// Whether `kernel_tier` has a fast matrix-vector kernel for this type (else the scalar one
    /// runs: on a tier still being filled in, the slow tensors of a file).
    pub fast_kernel: bool,
}

#[derive(Serialize, Debug)]
pub struct TokenizerInfo {
    pub model: String,
    /// The algorithm `model` selects (BPE, SPM, WPM, UGM); absent when it is not supported.
    pub kind: Option<String>,
    pub pre: Option<String>,
    pub vocab_size: usize,
    pub bos_token_id: Option<u64>,
    pub eos_token_id: Option<u64>,
}

pub fn run(args: Args) -> Result<ExitCode> {
    let path = args.model.path()?;
    let file = open_model(path)?;
    let info = summarize(&path.display().to_string(), &file, args.cache.types())?;
    if args.json {
        print(&(serde_json::to_string_pretty(&info)? + "\n"))?;
    } else {
        print(&render_text(&info))?;
    }
    Ok(ExitCode::SUCCESS)
}

pub fn summarize(file_label: &str, file: &GgufFile, cache: CacheTypes) -> Result<Info> {
    let kernels = Kernels::from_env()?;
    let meta = file.metadata();
    let architecture = meta.opt_str("general.architecture")?.map(str::to_owned);
    let arch_u64 = |suffix: &str| -> Result<Option<u64>> {
        match &architecture {
            Some(arch) => Ok(meta.opt_u64(&format!("{arch}.{suffix}"))?),
            None => Ok(None),
        }
    };
    let arch_f32 = |suffix: &str| -> Result<Option<f32>> {
        match &architecture {
            Some(arch) => Ok(meta.opt_f32(&format!("{arch}.{suffix}"))?),
            None => Ok(None),
        }
    };
    let n_embd = arch_u64("embedding_length")?;
    let n_head = arch_u64("attention.head_count")?;
    // head_dim is key_length when the file says so (Qwen3-4B: 128 with 2560 / 32 heads).
    let head_dim = match arch_u64("attention.key_length")? {
        Some(d) => Some(d),
        None => match (n_embd, n_head) {
            (Some(e), Some(h)) if h > 0 => Some(e / h),
            _ => None,
        },
    };

    let types = type_summaries(file, &kernels);
    let n_params: u64 = types.iter().map(|t| t.params).sum();
    let tensor_bytes: u64 = types.iter().map(|t| t.bytes).sum();
    let file_type_id = meta.opt_u64("general.file_type")?;
    let file_type = file_type_id
        .and_then(file_type_by_number)
        .map(|t| t.name.to_uppercase());
    let label = match (&file_type, file_type_id) {
        (Some(name), _) => name.clone(),
        (None, Some(id)) => format!("file type {id}"),
        (None, None) => "no file type".to_owned(),
    };
    let counts: Vec<(&str, usize)> = types.iter().map(|t| (t.type_name, t.tensors)).collect();
    let mixture = mixture(&label, &counts);

    let tokenizer = tokenizer_info(meta)?;
    // What a sequence holds, where the architecture is one the engine knows and has recurrent
    // layers (a file it cannot parse is still described by the rest).
    let hybrid = ModelConfig::from_gguf(file)
        .ok()
        .filter(ModelConfig::has_recurrent_layers);
    let (kv_per_token, recurrent) = match &hybrid {
        Some(c) => {
            let (kv, fixed) = state_bytes(c, 1, cache)?;
            (Some(kv as u64), Some(fixed as u64))
        }
        None => (None, None),
    };

    Ok(Info {
        file: file_label.to_owned(),
        file_size: file.file_size(),
        gguf_version: file.version(),
        alignment: file.alignment(),
        name: meta.opt_str("general.name")?.map(str::to_owned),
        context_length: arch_u64("context_length")?,
        n_embd,
        n_layer: arch_u64("block_count")?,
        n_ff: arch_u64("feed_forward_length")?,
        n_head,
        n_head_kv: arch_u64("attention.head_count_kv")?,
        head_dim,
        rope_freq_base: arch_f32("rope.freq_base")?,
        rms_norm_eps: arch_f32("attention.layer_norm_rms_epsilon")?,
        tied_embeddings: file.tensor("token_embd.weight").is_some()
            && file.tensor("output.weight").is_none(),
        architecture: architecture.clone(),
        n_params,
        tensor_bytes,
        bits_per_weight: if n_params == 0 {
            0.0
        } else {
            tensor_bytes as f64 * 8.0 / n_params as f64
        },
        tensor_count: file.tensors().len(),
        metadata_count: meta.len(),
        file_type_id,
        file_type,
        mixture,
        types,
        tokenizer,
        chat_template: meta.get("tokenizer.chat_template").is_some(),
        kernel_tier: kernels.isa().name(),
        layer_pattern: hybrid.as_ref().map(|c| layer_pattern(&c.layers)),
        recurrent_state_bytes: recurrent,
        kv_bytes_per_token: kv_per_token,
        rotation: rotation_info(file, architecture.as_deref()),
    })
}

/// Count, bytes and parameters per tensor type, the largest first (then by name).
fn type_summaries(file: &GgufFile, kernels: &Kernels) -> Vec<TypeSummary> {
    let mut by_type: BTreeMap<&'static str, TypeSummary> = BTreeMap::new();
    for tensor in file.tensors() {
        let entry = by_type.entry(tensor.format.name).or_insert(TypeSummary {
            type_name: tensor.format.name,
            tensors: 0,
            bytes: 0,
            params: 0,
            fast_kernel: kernels.has_fast_gemv(tensor.format.kind),
        });
        entry.tensors += 1;
        entry.bytes += tensor.n_bytes;
        entry.params += tensor.n_elements();
    }
    let mut types: Vec<TypeSummary> = by_type.into_values().collect();
    types.sort_by(|a, b| b.bytes.cmp(&a.bytes).then(a.type_name.cmp(b.type_name)));
    types
}

/// The vocabulary's summary, where the file has one.
fn tokenizer_info(meta: &Metadata) -> Result<Option<TokenizerInfo>> {
    let Some(model) = meta.opt_str("tokenizer.ggml.model")?.map(str::to_owned) else {
        return Ok(None);
    };
    Ok(Some(TokenizerInfo {
        kind: oxibonsai_tokenizer::TokenizerKind::of_model(&model).map(|k| k.to_string()),
        model,
        pre: meta.opt_str("tokenizer.ggml.pre")?.map(str::to_owned),
        vocab_size: meta
            .opt_str_array("tokenizer.ggml.tokens")?
            .map_or(0, <[String]>::len),
        bos_token_id: meta.opt_u64("tokenizer.ggml.bos_token_id")?,
        eos_token_id: meta.opt_u64("tokenizer.ggml.eos_token_id")?,
    }))
}

fn or_dash<T: ToString>(value: &Option<T>) -> String {
    value.as_ref().map_or_else(|| "-".to_owned(), T::to_string)
}

/// Parameter counts as people write them: 1.72 B, 135 M.
fn human_count(n: u64) -> String {
    match n {
        n if n >= 1_000_000_000 => format!("{:.2} B", n as f64 / 1e9),
        n if n >= 1_000_000 => format!("{:.2} M", n as f64 / 1e6),
        n if n >= 1_000 => format!("{:.2} K", n as f64 / 1e3),
        n => n.to_string(),
    }
}

fn human_bytes(n: u64) -> String {
    match n {
        n if n >= 1 << 30 => format!("{:.2} GiB", n as f64 / (1u64 << 30) as f64),
        n if n >= 1 << 20 => format!("{:.2} MiB", n as f64 / (1u64 << 20) as f64),
        n if n >= 1 << 10 => format!("{:.2} KiB", n as f64 / 1024.0),
        n => format!("{n} B"),
    }
}

fn render_text(info: &Info) -> String {
    let mut out = String::new();
    let mut line = |label: &str, value: String| out.push_str(&format!("{label:<18}{value}\n"));
    line(
        "file",
        format!("{} ({})", info.file, human_bytes(info.file_size)),
    );
    line(
        "gguf",
        format!(
            "v{}, {} tensors, {} metadata keys, alignment {}",
            info.gguf_version, info.tensor_count, info.metadata_count, info.alignment
        ),
    );
    line("name", or_dash(&info.name));
    line("architecture", or_dash(&info.architecture));
    line("context length", or_dash(&info.context_length));
    line("embedding length", or_dash(&info.n_embd));
    line("layers", or_dash(&info.n_layer));
    line("feed-forward", or_dash(&info.n_ff));
    line(
        "heads",
        format!(
            "{} (kv {}), head dim {}",
            or_dash(&info.n_head),
            or_dash(&info.n_head_kv),
            or_dash(&info.head_dim)
        ),
    );
    line("rope freq base", or_dash(&info.rope_freq_base));
    line("rms norm eps", or_dash(&info.rms_norm_eps));
    line(
        "embeddings",
        if info.tied_embeddings {
            "tied (token_embd is the LM head)"
        } else {
            "untied"
        }
        .to_owned(),
    );
    line(
        "parameters",
        format!(
            "{} ({} in tensors, {:.3} bits per weight)",
            human_count(info.n_params),
            human_bytes(info.tensor_bytes),
            info.bits_per_weight
        ),
    );
    line("mixture", info.mixture.clone());
    for t in &info.types {
        line(
            "  tensor type",
            format!(
                "{:<18}{:>5} tensors {:>12} {:>12} params",
                t.type_name,
                t.tensors,
                human_bytes(t.bytes),
                t.params
            ),
        );
    }
    match &info.tokenizer {
        Some(tok) => line(
            "tokenizer",
            format!(
                "{} {} (pre {}), {} tokens, bos {}, eos {}",
                tok.model,
                tok.kind.as_deref().unwrap_or("unsupported"),
                or_dash(&tok.pre),
                tok.vocab_size,
                or_dash(&tok.bos_token_id),
                or_dash(&tok.eos_token_id)
            ),
        ),
        None => line("tokenizer", "none".to_owned()),
    }
    if let Some(pattern) = &info.layer_pattern {
        line("layer pattern", pattern.clone());
        line(
            "sequence state",
            format!(
                "{} recurrent (fixed), {} KV per token",
                human_bytes(info.recurrent_state_bytes.unwrap_or(0)),
                human_bytes(info.kv_bytes_per_token.unwrap_or(0))
            ),
        );
    }
    if let Some(r) = &info.rotation {
        let text = match (&r.error, r.block_size) {
            (Some(error), _) => format!("prism.hadamard, refused: {error}"),
            (None, block) => format!(
                "prism.hadamard, block {}, {} signs{}, {} weights folded{}{}",
                or_dash(&block),
                r.sign_mode.unwrap_or("-"),
                if r.sign_widths.is_empty() {
                    String::new()
                } else {
                    format!(
                        " (widths {})",
                        r.sign_widths
                            .iter()
                            .map(usize::to_string)
                            .collect::<Vec<_>>()
                            .join(", ")
                    )
                },
                r.folded_weights,
                if r.embedding_rotated {
                    ", embedding rotated"
                } else {
                    ""
                },
                if r.gdn_v_grouped {
                    ", GDN V heads grouped"
                } else {
                    ""
                }
            ),
        };
        line("rotation", text);
    }
    line(
        "chat template",
        if info.chat_template { "yes" } else { "no" }.to_owned(),
    );
    let scalar: Vec<&str> = info
        .types
        .iter()
        .filter(|t| !t.fast_kernel)
        .map(|t| t.type_name)
        .collect();
    line(
        "CPU kernels",
        if scalar.is_empty() {
            format!("{} (a fast kernel for every tensor type)", info.kernel_tier)
        } else {
            format!(
                "{} (scalar path for {})",
                info.kernel_tier,
                scalar.join(", ")
            )
        },
    );
    out
}
