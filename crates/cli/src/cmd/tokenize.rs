//! `oxibonsai tokenize -m FILE [--special] [--json] TEXT`: the ids llama.cpp's `llama_tokenize` gives
//! (special tokens such as BOS added as the vocabulary asks).

use std::process::ExitCode;

use anyhow::{Context, Result};
use oxibonsai_tokenizer::Tokenizer;

use super::{open_model, print};

#[derive(clap::Args, Debug)]
pub struct Args {
    /// Model file (GGUF) whose vocabulary is used.
    #[arg(short = 'm', long = "model", value_name = "FILE")]
    model: std::path::PathBuf,
    /// Treat special-token text in the input (e.g. `<|im_start|>`) as special tokens.
    #[arg(long = "special", visible_alias = "parse-special")]
    special: bool,
    /// Do not add BOS/EOS even when the vocabulary asks for them.
    #[arg(long)]
    no_add_special: bool,
    /// Print a JSON array of ids instead of space-separated ids.
    #[arg(long)]
    json: bool,
    /// The text to tokenize.
    text: String,
}

pub fn run(args: Args) -> Result<ExitCode> {
    let file = open_model(&args.model)?;
    let tokenizer = Tokenizer::from_gguf(&file)
        .with_context(|| format!("cannot build the tokenizer of '{}'", args.model.display()))?;
    let ids = tokenizer.encode(&args.text, !args.no_add_special, args.special)?;
    let text = if args.json {
        serde_json::to_string(&ids)?
    } else {
        ids.iter().map(u32::to_string).collect::<Vec<_>>().join(" ")
    };
    print(&(text + "\n"))?;
    Ok(ExitCode::SUCCESS)
}
