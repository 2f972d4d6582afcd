//! `oxibonsai validate FILE [--json]`: every problem in a model file, not just the first.
//!
//! The container checks (header, every key, every tensor's type, shape, offset and size) come from
//! `oxibonsai_gguf::validate_file`. A file whose container is sound is then checked as a model: the
//! architecture's hyper-parameters, the tokenizer built from its metadata, and its chat template.

use std::process::ExitCode;

use anyhow::{Context, Result};
use oxibonsai_gguf::{GgufFile, Metadata};
use oxibonsai_tokenizer::chat_template::ChatTemplate;
use oxibonsai_tokenizer::Tokenizer;
use serde_json::json;

use super::{print, ModelArg};

#[derive(clap::Args, Debug)]
pub struct Args {
    #[command(flatten)]
    model: ModelArg,
    /// Print `{"file", "ok", "problems": [..]}` instead of text.
    #[arg(long)]
    json: bool,
}

pub fn run(args: Args) -> Result<ExitCode> {
    let path = args.model.path()?;
    let mut problems: Vec<String> = oxibonsai_gguf::validate_file(path)
        .with_context(|| format!("cannot read '{}'", path.display()))?
        .iter()
        .map(ToString::to_string)
        .collect();
    let mut summary = None;
    if problems.is_empty() {
        let file = GgufFile::open(path)
            .with_context(|| format!("cannot open model '{}'", path.display()))?;
        problems.extend(model_problems(&file));
        summary = Some(format!(
            "{} tensors, {} metadata keys",
            file.tensors().len(),
            file.metadata().len()
        ));
    }

    if args.json {
        let report = json!({
            "file": path.display().to_string(),
            "ok": problems.is_empty(),
            "problems": problems,
        });
        print(&(serde_json::to_string_pretty(&report)? + "\n"))?;
    } else if problems.is_empty() {
        print(&format!(
            "{}: OK ({})\n",
            path.display(),
            summary.unwrap_or_default()
        ))?;
    } else {
        let mut text = String::new();
        for problem in &problems {
            text.push_str(&format!("{}: {problem}\n", path.display()));
        }
        text.push_str(&format!(
            "{}: {} problem{} found\n",
            path.display(),
            problems.len(),
            if problems.len() == 1 { "" } else { "s" }
        ));
        print(&text)?;
    }
    Ok(if problems.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

/// Hyper-parameters every supported architecture needs (llama.cpp's `LLM_KV_*` names).
const REQUIRED_ARCH_KEYS: &[&str] = &[
    "context_length",
    "embedding_length",
    "block_count",
    "feed_forward_length",
    "attention.head_count",
];

/// Checks of a sound container as a model. Each problem is one line naming the key or the part.
fn model_problems(file: &GgufFile) -> Vec<String> {
    let meta = file.metadata();
    let mut problems = Vec::new();
    match meta.get_str("general.architecture") {
        Ok(arch) => {
            for suffix in REQUIRED_ARCH_KEYS {
                let key = format!("{arch}.{suffix}");
                if let Err(err) = meta.get_u64(&key) {
                    problems.push(err.to_string());
                }
            }
            for key in ["rope.freq_base", "attention.layer_norm_rms_epsilon"] {
                let key = format!("{arch}.{key}");
                if meta.get(&key).is_some() {
                    if let Err(err) = meta.get_f32(&key) {
                        problems.push(err.to_string());
                    }
                }
            }
        }
        Err(err) => problems.push(err.to_string()),
    }
    if has_tokenizer(meta) {
        if let Err(err) = Tokenizer::from_gguf(file) {
            problems.push(format!("tokenizer: {err}"));
        }
    }
    if let Some(source) = meta.get("tokenizer.chat_template") {
        match meta.get_str("tokenizer.chat_template") {
            Ok(text) => {
                if let Err(err) = ChatTemplate::new(text) {
                    problems.push(format!("chat template: {err}"));
                }
            }
            Err(_) => problems.push(format!(
                "key 'tokenizer.chat_template' should be a string, found {}",
                source.type_name()
            )),
        }
    }
    problems
}

fn has_tokenizer(meta: &Metadata) -> bool {
    meta.get("tokenizer.ggml.model").is_some()
}
