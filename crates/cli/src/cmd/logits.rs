//! `oxibonsai logits -m MODEL (-p PROMPT | --tokens ID,ID,…) [-n N] [--top-k K] [--raw OUT.f32]`:
//! the logits of every position, teacher-forced in one batch (the schema of the reference's
//! `peer/logits.py`: one JSON line per position, `{"pos", "token", "top": [[id, logit], …]}`), then
//! N greedy steps one token at a time. `--raw` writes the teacher-forced logits as f32
//! `[positions][n_vocab]`, the layout of the reference files.

use std::io::Write;
use std::process::ExitCode;

use anyhow::{bail, Context, Result};
use oxibonsai_engine::Logits;
use serde_json::json;

use super::model_args::{PromptArgs, RunModelArgs};

#[derive(clap::Args, Debug)]
pub struct Args {
    #[command(flatten)]
    model: RunModelArgs,
    #[command(flatten)]
    prompt: PromptArgs,
    /// Exact token ids, separated by commas or spaces (teacher forcing).
    #[arg(long, conflicts_with_all = ["prompt", "file"])]
    tokens: Option<String>,
    /// Greedy steps after the teacher-forced positions.
    #[arg(short = 'n', long = "n-predict", default_value_t = 0)]
    n_predict: usize,
    /// How many of the largest logits to print per position.
    #[arg(long = "top-k", default_value_t = 5)]
    top_k: usize,
    /// Write all teacher-forced logits as raw little-endian f32 [positions][n_vocab].
    #[arg(long, value_name = "OUT.f32")]
    raw: Option<std::path::PathBuf>,
}

pub(crate) fn parse_ids(text: &str) -> Result<Vec<u32>> {
    text.split([',', ' ', '\n', '\t'])
        .filter(|s| !s.is_empty())
        .map(|s| {
            s.parse::<u32>()
                .with_context(|| format!("--tokens: '{s}' is not a token id"))
        })
        .collect()
}

fn top(row: &[f32], k: usize) -> Vec<(usize, f32)> {
    let mut order: Vec<usize> = (0..row.len()).collect();
    // Stable order for ties, as the reference script sorts.
    order.sort_by(|&a, &b| row[b].total_cmp(&row[a]).then(a.cmp(&b)));
    order.into_iter().take(k).map(|i| (i, row[i])).collect()
}

fn line(pos: usize, token: u32, row: &[f32], k: usize) -> String {
    let top: Vec<_> = top(row, k)
        .into_iter()
        .map(|(i, v)| json!([i, v]))
        .collect();
    json!({"pos": pos, "token": token, "top": top}).to_string()
}

pub fn run(args: Args) -> Result<ExitCode> {
    let loaded = args.model.load()?;
    let ids = match (&args.tokens, args.prompt.text()?) {
        (Some(tokens), _) => parse_ids(tokens)?,
        (None, Some(text)) => loaded
            .tokenizer
            .encode(&text, true, args.prompt.parse_special)?,
        (None, None) => bail!("give a prompt (-p / -f) or --tokens"),
    };
    if ids.is_empty() {
        bail!("the prompt is empty: at least one token is needed");
    }
    let n_vocab = loaded.model.config.n_vocab;
    let needed = ids.len() + args.n_predict;
    let n_ctx = args.model.ctx.unwrap_or(needed.max(loaded.n_ctx));
    if needed > n_ctx {
        bail!(
            "{} prompt tokens and {} steps need a context of {needed}, more than {n_ctx}",
            ids.len(),
            args.n_predict
        );
    }
    let mut seq = loaded.model.new_sequence(n_ctx)?;
    let all = loaded.model.forward(&mut seq, &ids, Logits::All)?.to_vec();
    if let Some(path) = &args.raw {
        let bytes: Vec<u8> = all.iter().flat_map(|v| v.to_le_bytes()).collect();
        std::fs::write(path, bytes)
            .with_context(|| format!("cannot write '{}'", path.display()))?;
    }
    let mut out = std::io::stdout().lock();
    for (pos, row) in all.chunks_exact(n_vocab).enumerate() {
        writeln!(out, "{}", line(pos, ids[pos], row, args.top_k))?;
    }
    let mut last = all[all.len() - n_vocab..].to_vec();
    for step in 0..args.n_predict {
        let next = top(&last, 1)[0].0 as u32;
        let row = loaded.model.forward(&mut seq, &[next], Logits::Last)?;
        writeln!(out, "{}", line(ids.len() + step, next, row, args.top_k))?;
        last.copy_from_slice(row);
    }
    Ok(ExitCode::SUCCESS)
}
