//! `oxibonsai quantize IN OUT TYPE`: re-quantize a GGUF model the way `llama-quantize` does, with
//! the same per-tensor choices, tensor order and metadata, so the output is byte-identical to the
//! reference's for the types this build can write. The planner and converter are
//! `oxibonsai_convert::quantize`; this module parses the arguments (`--tensor-type` patterns and
//! the type names), shows progress, writes the file and prints the summary.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{bail, Context, Result};
use fancy_regex::Regex;
use oxibonsai_convert::quantize::{mixture, FileType, Options, Quantization};
use oxibonsai_formats::{format_by_name, Format};

use super::{open_model, with_progress};

#[derive(clap::Args, Debug)]
pub struct Args {
    /// Input model (GGUF).
    #[arg(value_name = "IN")]
    input: PathBuf,
    /// Output file.
    #[arg(value_name = "OUT")]
    output: PathBuf,
    /// File type: f32, f16, bf16, q8_0, q4_0, q4_1, q5_0, q5_1, q2_k, q3_k_s, q3_k_m, q3_k_l,
    /// q4_k_s, q4_k_m, q5_k_s, q5_k_m, q6_k, tq1_0, tq2_0, q1_0, q2_0, pq2_0, ptq1_0 (for weights
    /// that are ternary at 128 values a block; from an already quantized file, with
    /// --allow-requantize, only data it holds exactly is transcoded, anything else is refused).
    #[arg(value_name = "TYPE")]
    file_type: String,
    /// Allow re-quantizing tensors that are already quantized (they are dequantized first).
    #[arg(long)]
    allow_requantize: bool,
    /// PATTERN=TYPE: tensors whose name matches the regular expression PATTERN become TYPE
    /// instead of the file type's choice (repeatable; the first match wins; a type whose blocks do
    /// not divide the rows falls back as the reference's own choices do; quantized file types only,
    /// as in llama-quantize).
    #[arg(long = "tensor-type", value_name = "PATTERN=TYPE")]
    tensor_types: Vec<String>,
    /// Type of token_embd.weight.
    #[arg(long, value_name = "TYPE")]
    embedding_type: Option<String>,
    /// Type of the output tensor (output.weight, or a tied token_embd.weight).
    #[arg(long, value_name = "TYPE")]
    output_type: Option<String>,
    /// Where the reference refuses a 128-value-block type (q1_0, pq2_0, ptq1_0) for rows its blocks do not
    /// divide, use q2_0 there instead (then the reference's own fallbacks: q4_0, f16).
    #[arg(long)]
    fallback: bool,
}

pub fn run(args: Args) -> Result<ExitCode> {
    let options = options(&args)?;
    let file = open_model(&args.input)?;
    let quantization = Quantization::plan(&file, &options)?;
    let total = quantization.n_elements();
    let quantized = with_progress(total, |progress| quantization.run(progress))?;
    quantized
        .writer
        .write_file(&args.output)
        .with_context(|| format!("cannot write '{}'", args.output.display()))?;
    let written = std::fs::metadata(&args.output)
        .with_context(|| format!("cannot read back '{}'", args.output.display()))?
        .len();
    eprintln!(
        "{}",
        summary(
            options.file_type.name,
            file.file_size(),
            written,
            quantized.tensor_bytes,
            total,
            &quantized.counts
        )
    );
    Ok(ExitCode::SUCCESS)
}

fn options(args: &Args) -> Result<Options> {
    let file_type = FileType::parse(&args.file_type)?;
    let tensor_types = args
        .tensor_types
        .iter()
        .map(|spec| parse_tensor_type(spec))
        .collect::<Result<_>>()?;
    Ok(Options {
        file_type,
        tensor_types,
        embedding_type: args
            .embedding_type
            .as_deref()
            .map(|t| writable_type(t, "--embedding-type"))
            .transpose()?,
        output_type: args
            .output_type
            .as_deref()
            .map(|t| writable_type(t, "--output-type"))
            .transpose()?,
        allow_requantize: args.allow_requantize,
        fallback: args.fallback,
    })
}

/// `PATTERN=TYPE`, the pattern lower-cased as llama-quantize does (tensor names are lower case).
fn parse_tensor_type(spec: &str) -> Result<(Regex, &'static Format)> {
    let Some((pattern, type_name)) = spec.rsplit_once('=') else {
        bail!("--tensor-type '{spec}': expected PATTERN=TYPE");
    };
    if pattern.is_empty() {
        bail!("--tensor-type '{spec}': the pattern is empty");
    }
    let regex = Regex::new(&pattern.to_lowercase())
        .with_context(|| format!("--tensor-type '{spec}': bad pattern '{pattern}'"))?;
    Ok((regex, writable_type(type_name, "--tensor-type")?))
}

/// A tensor type named on the command line: any registry format except the activation-only
/// partners, which are never stored as weights by the reference.
fn writable_type(name: &str, flag: &str) -> Result<&'static Format> {
    match format_by_name(name) {
        Some(f) if !matches!(f.name, "q8_1" | "q8_K") => Ok(f),
        _ => bail!(
            "{flag}: unknown tensor type '{name}' (expected one of: f32, f16, bf16, q8_0, q4_0, q4_1, \
             q5_0, q5_1, q2_K, q3_K, q4_K, q5_K, q6_K, q1_0, q2_0, q2_0_g128_legacy, tq1_0, tq2_0, pq2_0, ptq1_0)"
        ),
    }
}

fn summary(
    file_type: &str,
    in_size: u64,
    out_size: u64,
    tensor_bytes: u64,
    n_elements: u64,
    counts: &BTreeMap<&'static str, usize>,
) -> String {
    let mib = |b: u64| b as f64 / (1024.0 * 1024.0);
    let bpw = if n_elements == 0 {
        0.0
    } else {
        tensor_bytes as f64 * 8.0 / n_elements as f64
    };
    let counts: Vec<(&str, usize)> = counts.iter().map(|(t, n)| (*t, *n)).collect();
    format!(
        "quantized: {:.2} MiB → {:.2} MiB, {bpw:.3} bits per weight\nmixture: {}",
        mib(in_size),
        mib(out_size),
        mixture(&file_type.to_uppercase(), &counts)
    )
}
