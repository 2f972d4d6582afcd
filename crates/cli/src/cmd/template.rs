//! `oxibonsai template -m FILE REQUEST.json`: the prompt the model's chat template makes of a request
//! (`messages`, optional `tools`, `add_generation_prompt`, `extra_kwargs`).

use std::process::ExitCode;

use anyhow::{Context, Result};
use oxibonsai_tokenizer::chat_template::{ChatRequest, ChatTemplate};
use oxibonsai_tokenizer::Tokenizer;

use super::{open_model, print};

#[derive(clap::Args, Debug)]
pub struct Args {
    /// Model file (GGUF) holding `tokenizer.chat_template`.
    #[arg(short = 'm', long = "model", value_name = "FILE")]
    model: std::path::PathBuf,
    /// The request: a JSON file (`-` reads standard input).
    request: std::path::PathBuf,
}

pub fn run(args: Args) -> Result<ExitCode> {
    let file = open_model(&args.model)?;
    let source = file
        .metadata()
        .get_str("tokenizer.chat_template")
        .with_context(|| format!("'{}' has no chat template", args.model.display()))?;
    let template =
        ChatTemplate::new(source).context("the model's chat template does not compile")?;
    let text = if args.request.as_os_str() == "-" {
        std::io::read_to_string(std::io::stdin()).context("cannot read the request from stdin")?
    } else {
        std::fs::read_to_string(&args.request)
            .with_context(|| format!("cannot read '{}'", args.request.display()))?
    };
    let request: ChatRequest = serde_json::from_str(&text)
        .with_context(|| format!("'{}' is not a valid chat request", args.request.display()))?;
    let tokenizer = Tokenizer::from_gguf(&file).context("cannot build the tokenizer")?;
    let prompt = template.render(&request, &tokenizer.template_specials())?;
    print(&prompt)?;
    Ok(ExitCode::SUCCESS)
}
