//! `oxibonsai embed -m MODEL [-p TEXT]… [-f FILE]… [--pooling TYPE] [--embd-normalize N] [--json]`:
//! embeddings as llama.cpp's `llama-embedding` computes them. Each `-p` or `--tokens` is one input;
//! a file gives one input per non-empty line (llama-embedding's separator); `--tokens` inputs first. Inputs are tokenized with the
//! vocabulary's special tokens (BOS …) and special-token text parsed, as llama-embedding does.
//!
//! Plain output: one line per input (per token with `--pooling none`), the values separated by
//! spaces. `--json`: `{"object": "list", "data": [{"object": "embedding", "index", "embedding"}],
//! "model", "usage": {"prompt_tokens", "total_tokens"}}` — OpenAI's embeddings response, with an
//! array of per-token vectors as `embedding` for `--pooling none`.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{bail, Context, Result};
use oxibonsai_engine::embed::{embed_inputs, Pooling};
use serde_json::json;

use super::model_args::RunModelArgs;

#[derive(clap::Args, Debug)]
pub struct Args {
    #[command(flatten)]
    model: RunModelArgs,
    /// An input text (repeatable).
    #[arg(short = 'p', long = "prompt")]
    prompt: Vec<String>,
    /// A file of inputs, one per non-empty line (repeatable).
    #[arg(short = 'f', long = "file", value_name = "PATH")]
    file: Vec<PathBuf>,
    /// An input as exact token ids, separated by commas or spaces (repeatable; used as given).
    #[arg(long = "tokens", value_name = "ID,ID,…")]
    tokens: Vec<String>,
    /// none, mean, cls, last or rank (default: the file's `<arch>.pooling_type`, else mean).
    #[arg(long)]
    pooling: Option<String>,
    /// -1 none, 0 max absolute (int16 range), 1 taxicab, 2 euclidean, >2 p-norm (llama.cpp's).
    #[arg(
        long = "embd-normalize",
        default_value_t = 2,
        allow_negative_numbers = true
    )]
    embd_normalize: i32,
    /// Cut inputs longer than the context instead of refusing them.
    #[arg(long)]
    truncate: bool,
    /// Tokens per batched forward pass (several inputs share one; llama.cpp's -b).
    #[arg(short = 'b', long = "batch-size", default_value_t = 2048)]
    batch_size: usize,
    /// Print OpenAI's embeddings response as JSON.
    #[arg(long)]
    json: bool,
}

/// The pooling asked for, else the model's, else mean (what an embedding command is for; a
/// generation model's file has no pooling key).
pub fn pooling_of(asked: Option<&str>, model_default: Option<Pooling>) -> Result<Pooling> {
    match asked {
        Some(name) => Pooling::from_name(name)
            .with_context(|| format!("--pooling '{name}': expected none, mean, cls, last or rank")),
        None => Ok(model_default.unwrap_or(Pooling::Mean)),
    }
}

pub fn run(args: Args) -> Result<ExitCode> {
    let mut texts: Vec<String> = args.prompt.clone();
    for path in &args.file {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("cannot read '{}'", path.display()))?;
        texts.extend(
            text.lines()
                .filter(|l| !l.trim().is_empty())
                .map(str::to_owned),
        );
    }
    if texts.is_empty() && args.tokens.is_empty() {
        bail!("no input: give -p TEXT, -f FILE or --tokens IDS");
    }
    if args.batch_size == 0 {
        bail!("--batch-size must be at least 1");
    }
    let loaded = args.model.load()?;
    let model = &loaded.model;
    let pooling = pooling_of(args.pooling.as_deref(), model.pooling)?;
    model.embedding_width(pooling)?;
    let mut inputs = Vec::with_capacity(texts.len() + args.tokens.len());
    for ids in &args.tokens {
        inputs.push(super::logits::parse_ids(ids)?);
    }
    for text in &texts {
        inputs.push(loaded.tokenizer.encode(text, true, true)?);
    }
    for (i, ids) in inputs.iter_mut().enumerate() {
        if ids.is_empty() {
            bail!("input {i} is empty: it has no tokens");
        }
        if ids.len() > loaded.n_ctx {
            if !args.truncate {
                bail!(
                    "input {i} has {} tokens, more than the context of {} (raise -c or pass --truncate)",
                    ids.len(),
                    loaded.n_ctx
                );
            }
            ids.truncate(loaded.n_ctx);
        }
    }
    let started = std::time::Instant::now();
    let vectors = embed_inputs(
        model,
        &inputs,
        pooling,
        args.embd_normalize,
        args.batch_size,
        &mut Default::default(),
    )?;
    let seconds = started.elapsed().as_secs_f64();
    let n_tokens: usize = inputs.iter().map(Vec::len).sum();
    // The model's load is not counted: what `scripts/bench-embeddings.py` compares.
    eprintln!(
        "embedded {} inputs ({n_tokens} tokens) in {seconds:.4} s: {:.1} inputs/s",
        inputs.len(),
        inputs.len() as f64 / seconds
    );
    let width = model.embedding_width(pooling)?;
    let mut out = std::io::stdout().lock();
    if args.json {
        let data: Vec<_> = vectors
            .iter()
            .enumerate()
            .map(|(index, v)| {
                let embedding = if pooling == Pooling::None {
                    json!(v.chunks_exact(width).collect::<Vec<_>>())
                } else {
                    json!(v)
                };
                json!({"object": "embedding", "index": index, "embedding": embedding})
            })
            .collect();
        let model_name = model
            .file
            .metadata()
            .opt_str("general.name")?
            .unwrap_or(&args.model.model)
            .to_owned();
        let body = json!({
            "object": "list",
            "data": data,
            "model": model_name,
            "usage": {"prompt_tokens": n_tokens, "total_tokens": n_tokens},
        });
        writeln!(out, "{body}")?;
    } else {
        for v in &vectors {
            for row in v.chunks_exact(width) {
                let line: Vec<String> = row.iter().map(|x| x.to_string()).collect();
                writeln!(out, "{}", line.join(" "))?;
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}
