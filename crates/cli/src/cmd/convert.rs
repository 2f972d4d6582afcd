//! `oxibonsai convert HF_DIR OUT.gguf [--type TYPE]`: a Hugging Face checkpoint folder (Qwen3,
//! Qwen2, Llama; safetensors in f32 / f16 / bf16, one file or sharded) → one GGUF file, named and
//! laid out as llama.cpp's `convert_hf_to_gguf.py` writes it. The conversion itself is
//! `oxibonsai_convert::hf`; this module parses the arguments, shows progress, writes the file and
//! prints the summary.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, Result};
use oxibonsai_convert::hf::{Conversion, Options};
use oxibonsai_convert::quantize::FileType;

use super::with_progress;

#[derive(clap::Args, Debug)]
pub struct Args {
    /// Hugging Face checkpoint folder (config.json, tokenizer.json, *.safetensors).
    #[arg(value_name = "HF_DIR")]
    dir: PathBuf,
    /// Output GGUF file.
    #[arg(value_name = "OUT.gguf")]
    output: PathBuf,
    /// File type: f32, f16, bf16, q8_0, or any type `quantize` writes (q4_k_m, tq2_0, pq2_0, …);
    /// norms and biases stay f32.
    #[arg(long = "type", value_name = "TYPE", default_value = "f16")]
    file_type: String,
    /// Where a 128-value-block type (q1_0, pq2_0) does not divide a tensor's rows, use q2_0
    /// there (as `quantize --fallback`).
    #[arg(long)]
    fallback: bool,
}

pub fn run(args: Args) -> Result<ExitCode> {
    let options = Options {
        file_type: FileType::parse(&args.file_type)?,
        fallback: args.fallback,
    };
    let conversion = Conversion::plan(&args.dir, &options)?;
    let converted = with_progress(conversion.n_elements(), |progress| conversion.run(progress))?;
    converted
        .writer
        .write_file(&args.output)
        .with_context(|| format!("cannot write '{}'", args.output.display()))?;
    let counts: Vec<String> = converted
        .counts
        .iter()
        .map(|(f, n)| format!("{n} {f}"))
        .collect();
    eprintln!(
        "converted {} ({}) → '{}': {} tensors ({}), {} tokens",
        args.dir.display(),
        conversion.arch(),
        args.output.display(),
        conversion.n_tensors(),
        counts.join(", "),
        conversion.n_vocab()
    );
    Ok(ExitCode::SUCCESS)
}
