//! `oxibonsai synth --shape bonsai-1.7b --format q1_0 -o FILE`: a random-weight GGUF of exactly a
//! published Bonsai shape (Qwen3 architecture), for benchmarks; `synth --arch qwen35 …` a small
//! hybrid (Gated DeltaNet) model of any size (`synth_qwen35.rs`). The reference engine loads these files
//! too, so both engines can be measured on the same bytes.
//!
//! Weights are valid blocks of the chosen format: a pool of blocks quantized by the format's own
//! reference quantizer from random values, laid out in a pseudo-random order (quantizing 8 billion
//! values one by one would take minutes and teach a benchmark nothing more).

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{bail, Context, Result};
use oxibonsai_formats::{format_by_name, Format, FormatKind};
use oxibonsai_gguf::{Array, GgufFile, GgufWriter, Value};

#[derive(clap::Args, Debug)]
pub struct Args {
    /// qwen3 (the published shapes, `--shape`) or qwen35 (sizes from the qwen35 options).
    #[arg(long, default_value = "qwen3")]
    arch: String,
    /// A published shape: bonsai-1.7b, bonsai-4b, bonsai-8b (qwen3), bonsai-27b (qwen35, Q1_0
    /// gen 1) or ternary-bonsai-2-27b / -9b / -4b / -2b (qwen35 with the prism.hadamard keys).
    #[arg(long)]
    shape: Option<String>,
    /// Weight format of every matrix: q1_0, q2_0, pq2_0, ptq1_0, tq1_0, tq2_0, q8_0, q4_0, q4_1, f16, …
    #[arg(long, required_unless_present = "from")]
    format: Option<String>,
    /// Start from this model instead of random weights (with --rotate: fold the rotation into it;
    /// with --pooling: add the pooling type and classifier head).
    #[arg(long, value_name = "GGUF", conflicts_with_all = ["shape", "format", "vocab"])]
    from: Option<PathBuf>,
    #[command(flatten)]
    rotate: super::synth_rotate::RotateArgs,
    #[command(flatten)]
    pooling: super::synth_pooling::PoolingArgs,
    /// Output file.
    #[arg(short = 'o', long = "output", value_name = "FILE")]
    output: PathBuf,
    /// Take the tokenizer (every `tokenizer.*` key: vocabulary, merges, special tokens, chat
    /// template) from this GGUF — e.g. a vocabulary-only Qwen3 file — instead of placeholder
    /// tokens, so that text, chat and the server work on the random weights. Its vocabulary must
    /// have the shape's tokens (151,936 for qwen3 shapes, 248,320 for qwen35 ones); with
    /// `--arch qwen35` it sets the vocabulary size.
    #[arg(long, value_name = "GGUF")]
    vocab: Option<PathBuf>,
    #[command(flatten)]
    qwen35: super::synth_qwen35::Options,
}

/// A published shape: the hyper-parameters of the real model.
#[derive(Clone, Copy, Debug)]
pub struct Shape {
    pub name: &'static str,
    pub n_embd: u64,
    pub n_layer: u64,
    pub n_head: u64,
    pub n_head_kv: u64,
    pub head_dim: u64,
    pub n_ff: u64,
    pub tied: bool,
}

pub const SHAPES: [Shape; 3] = [
    Shape {
        name: "bonsai-1.7b",
        n_embd: 2048,
        n_layer: 28,
        n_head: 16,
        n_head_kv: 8,
        head_dim: 128,
        n_ff: 6144,
        tied: true,
    },
    Shape {
        name: "bonsai-4b",
        n_embd: 2560,
        n_layer: 36,
        n_head: 32,
        n_head_kv: 8,
        head_dim: 128,
        n_ff: 9728,
        tied: true,
    },
    Shape {
        name: "bonsai-8b",
        n_embd: 4096,
        n_layer: 36,
        n_head: 32,
        n_head_kv: 8,
        head_dim: 128,
        n_ff: 12288,
        tied: false,
    },
];
const N_VOCAB: u64 = 151_936;

/// The published shapes' names, both architectures.
fn shape_names() -> String {
    let qwen35 = super::synth_qwen35::SHAPES.iter().map(|s| s.name);
    let names: Vec<_> = SHAPES.iter().map(|s| s.name).chain(qwen35).collect();
    names.join(", ")
}

pub fn shape(name: &str) -> Result<Shape> {
    SHAPES
        .into_iter()
        .find(|s| s.name.eq_ignore_ascii_case(name))
        .with_context(|| format!("unknown shape '{name}' (known: {})", shape_names()))
}

/// Writes the random-weight file of the published shape `name`, whatever its architecture, and
/// returns the shape's own spelling of its name.
pub fn write_shape(
    name: &str,
    format: &'static Format,
    vocab: Option<&Path>,
    path: &Path,
) -> Result<&'static str> {
    if let Some(s35) = super::synth_qwen35::shape(name) {
        let tokenizer = match vocab {
            Some(v) => Some(tokenizer_keys(v, Some(s35.n_vocab()))?),
            None => None,
        };
        super::synth_qwen35::write_shape(s35, format, tokenizer, path)?;
        return Ok(s35.name);
    }
    let shape = shape(name)?;
    let tokenizer = match vocab {
        Some(v) => Some(tokenizer_keys(v, Some(N_VOCAB))?),
        None => None,
    };
    write_synthetic(shape, format, tokenizer, path)?;
    Ok(shape.name)
}

/// The canonical name of a published shape (for cache file names), or the unknown-shape error.
pub fn shape_name(name: &str) -> Result<&'static str> {
    match super::synth_qwen35::shape(name) {
        Some(s35) => Ok(s35.name),
        None => Ok(shape(name)?.name),
    }
}

/// Formats a synthetic model may use for its matrices (the partner-only formats are not weights).
pub fn weight_format(name: &str) -> Result<&'static Format> {
    let Some(format) = format_by_name(name) else {
        bail!("unknown format '{name}'");
    };
    if matches!(format.kind, FormatKind::Q8_1 | FormatKind::Q8_K) {
        bail!("'{name}' is an activation format, not a weight format");
    }
    Ok(format)
}

pub fn run(args: Args) -> Result<ExitCode> {
    if let Some(source) = &args.from {
        if args.pooling.pooling.is_some() {
            if args.rotate.rotate.is_some() {
                bail!("--from takes either --rotate or --pooling, not both");
            }
            super::synth_pooling::pooling_file(source, &args.output, &args.pooling)?;
            eprintln!(
                "wrote {} (from {})",
                args.output.display(),
                source.display()
            );
            return Ok(ExitCode::SUCCESS);
        }
        if args.rotate.rotate.is_none() {
            bail!("--from needs --rotate or --pooling");
        }
        super::synth_rotate::rotate_file(source, &args.output, &args.rotate)?;
        eprintln!(
            "wrote {} ({} rotated)",
            args.output.display(),
            source.display()
        );
        return Ok(ExitCode::SUCCESS);
    }
    let format = weight_format(args.format.as_deref().unwrap_or_default())?;
    if let Some(name) = &args.shape {
        // A published shape decides its architecture.
        if args.arch != "qwen3" && super::synth_qwen35::shape(name).is_none() {
            bail!("--shape {name} is a qwen3 shape; drop --arch {}", args.arch);
        }
        if args.rotate.rotate.is_some() && super::synth_qwen35::shape(name).is_some() {
            bail!("--rotate folds into F32 weights, too large at --shape {name}; the ternary-bonsai-2 shapes carry the rotation's keys themselves");
        }
        let name = write_shape(name, format, args.vocab.as_deref(), &args.output)?;
        fold_rotation(&args)?;
        eprintln!(
            "wrote {} ({name} in {})",
            args.output.display(),
            format.name
        );
        return Ok(ExitCode::SUCCESS);
    }
    match args.arch.as_str() {
        "qwen35" => {
            let tokenizer = match &args.vocab {
                Some(path) => Some(tokenizer_keys(path, None)?),
                None => None,
            };
            super::synth_qwen35::write(&args.qwen35, format, tokenizer, &args.output)?;
            fold_rotation(&args)?;
            eprintln!(
                "wrote {} (qwen35 in {})",
                args.output.display(),
                format.name
            );
            Ok(ExitCode::SUCCESS)
        }
        "qwen3" => bail!("--shape is required for --arch qwen3 ({})", shape_names()),
        other => bail!("unknown --arch '{other}' (known: qwen3, qwen35)"),
    }
}

/// With `--rotate`, folds the rotation into the file just written, which it then replaces.
fn fold_rotation(args: &Args) -> Result<()> {
    if args.rotate.rotate.is_none() {
        return Ok(());
    }
    let unrotated = args.output.with_extension("unrotated.gguf.partial");
    std::fs::rename(&args.output, &unrotated)?;
    let rotated = super::synth_rotate::rotate_file(&unrotated, &args.output, &args.rotate);
    std::fs::remove_file(&unrotated)?;
    rotated
}

/// SplitMix64: a small, fixed, reproducible generator (the same file every time).
pub(crate) struct SplitMix(pub(crate) u64);
impl SplitMix {
    pub(crate) fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    /// Uniform in [-1, 1).
    pub(crate) fn unit(&mut self) -> f32 {
        (self.next() >> 40) as f32 / (1u64 << 23) as f32 - 1.0
    }
}

/// Valid blocks of `format`, quantized from random values of a weight-like scale.
pub(crate) fn block_pool(format: &Format, rng: &mut SplitMix) -> Vec<u8> {
    const POOL_ELEMS: usize = 1 << 16;
    let n = POOL_ELEMS.div_ceil(format.block_elems) * format.block_elems;
    let values: Vec<f32> = (0..n).map(|_| rng.unit() * 0.05).collect();
    let mut blocks = vec![0u8; n / format.block_elems * format.block_bytes];
    (format.quantize)(&values, &mut blocks);
    blocks
}

pub(crate) fn random_matrix(
    format: &Format,
    pool: &[u8],
    rows: u64,
    cols: u64,
    rng: &mut SplitMix,
) -> Result<Vec<u8>> {
    let bytes = format
        .bytes_for(rows * cols)
        .filter(|_| cols.is_multiple_of(format.block_elems as u64))
        .with_context(|| {
            format!(
                "{} blocks of {} do not divide rows of {cols}",
                format.name, format.block_elems
            )
        })?;
    let bb = format.block_bytes;
    let n_pool = pool.len() / bb;
    let mut out = vec![0u8; bytes as usize];
    for block in out.chunks_exact_mut(bb) {
        let i = (rng.next() % n_pool as u64) as usize;
        block.copy_from_slice(&pool[i * bb..(i + 1) * bb]);
    }
    Ok(out)
}

/// Every `tokenizer.*` key of the GGUF at `path`, checked to hold `n_vocab` tokens (the shape's)
/// where it is given.
pub(crate) fn tokenizer_keys(path: &Path, n_vocab: Option<u64>) -> Result<Vec<(String, Value)>> {
    let file = GgufFile::open(path)
        .with_context(|| format!("cannot open vocabulary file '{}'", path.display()))?;
    let keys: Vec<(String, Value)> = file
        .metadata()
        .iter()
        .filter(|(key, _)| key.starts_with("tokenizer."))
        .map(|(key, value)| (key.to_owned(), value.clone()))
        .collect();
    let n_tokens = match file.metadata().get("tokenizer.ggml.tokens") {
        Some(Value::Array(tokens)) => tokens.len() as u64,
        _ => bail!(
            "'{}' has no tokenizer.ggml.tokens array (not a GGUF with a vocabulary)",
            path.display()
        ),
    };
    if let Some(n_vocab) = n_vocab.filter(|&n| n != n_tokens) {
        bail!(
            "'{}' has {n_tokens} tokens in tokenizer.ggml.tokens; the shape has {n_vocab}",
            path.display()
        );
    }
    Ok(keys)
}

/// Writes the random-weight file; `tokenizer` (the `tokenizer.*` keys of a real vocabulary)
/// replaces the placeholder tokens.
pub fn write_synthetic(
    shape: Shape,
    format: &'static Format,
    tokenizer: Option<Vec<(String, Value)>>,
    path: &Path,
) -> Result<()> {
    let mut rng = SplitMix(0x00b0_a5a1);
    let pool = block_pool(format, &mut rng);
    let f32_format = format_by_name("f32").expect("f32 is registered");
    let ones = |n: u64| -> Vec<u8> { (0..n).flat_map(|_| 1.0f32.to_le_bytes()).collect() };
    let mut w = GgufWriter::new();
    let mut kv = model_metadata(shape, format);
    kv.extend(tokenizer.unwrap_or_else(placeholder_vocabulary));
    for (key, value) in kv {
        w.add_kv(key, value)?;
    }
    let (e, hd, f) = (shape.n_embd, shape.head_dim, shape.n_ff);
    let mut matrix = |w: &mut GgufWriter, name: &str, rows: u64, cols: u64| -> Result<()> {
        let data = random_matrix(format, &pool, rows, cols, &mut rng)?;
        w.add_tensor(name, &[cols, rows], format, data)?;
        Ok(())
    };
    matrix(&mut w, "token_embd.weight", N_VOCAB, e)?;
    for i in 0..shape.n_layer {
        let p = |s: &str| format!("blk.{i}.{s}");
        w.add_tensor(p("attn_norm.weight"), &[e], f32_format, ones(e))?;
        w.add_tensor(p("ffn_norm.weight"), &[e], f32_format, ones(e))?;
        w.add_tensor(p("attn_q_norm.weight"), &[hd], f32_format, ones(hd))?;
        w.add_tensor(p("attn_k_norm.weight"), &[hd], f32_format, ones(hd))?;
        matrix(&mut w, &p("attn_q.weight"), shape.n_head * hd, e)?;
        matrix(&mut w, &p("attn_k.weight"), shape.n_head_kv * hd, e)?;
        matrix(&mut w, &p("attn_v.weight"), shape.n_head_kv * hd, e)?;
        matrix(&mut w, &p("attn_output.weight"), e, shape.n_head * hd)?;
        matrix(&mut w, &p("ffn_gate.weight"), f, e)?;
        matrix(&mut w, &p("ffn_up.weight"), f, e)?;
        matrix(&mut w, &p("ffn_down.weight"), e, f)?;
    }
    w.add_tensor("output_norm.weight", &[e], f32_format, ones(e))?;
    if !shape.tied {
        matrix(&mut w, "output.weight", N_VOCAB, e)?;
    }
    write_atomically(&w, path)
}

/// The general and architecture keys of a synthetic model: Qwen3's, at the shape's sizes.
fn model_metadata(shape: Shape, format: &Format) -> Vec<(String, Value)> {
    let arch = "qwen3";
    let mut kv: Vec<(String, Value)> = vec![
        ("general.architecture".into(), arch.into()),
        (
            "general.name".into(),
            format!("synthetic {} {}", shape.name, format.name)
                .as_str()
                .into(),
        ),
        ("general.alignment".into(), Value::U32(32)),
    ];
    let sizes = [
        ("context_length", 40960),
        ("embedding_length", shape.n_embd),
        ("feed_forward_length", shape.n_ff),
        ("block_count", shape.n_layer),
        ("attention.head_count", shape.n_head),
        ("attention.head_count_kv", shape.n_head_kv),
        ("attention.key_length", shape.head_dim),
        ("attention.value_length", shape.head_dim),
    ];
    for (key, size) in sizes {
        kv.push((format!("{arch}.{key}"), Value::U32(size as u32)));
    }
    kv.push((format!("{arch}.rope.freq_base"), Value::F32(1_000_000.0)));
    kv.push((
        format!("{arch}.attention.layer_norm_rms_epsilon"),
        Value::F32(1e-6),
    ));
    kv
}

/// Token keys for a vocabulary of numbered placeholders, where no real one is given.
fn placeholder_vocabulary() -> Vec<(String, Value)> {
    vec![
        ("tokenizer.ggml.model".into(), "gpt2".into()),
        ("tokenizer.ggml.pre".into(), "qwen2".into()),
        (
            "tokenizer.ggml.tokens".into(),
            Value::Array(Array::String(
                (0..N_VOCAB).map(|i| format!("<t{i}>")).collect(),
            )),
        ),
        (
            "tokenizer.ggml.token_type".into(),
            Value::Array(Array::I32(vec![1; N_VOCAB as usize])),
        ),
        (
            "tokenizer.ggml.merges".into(),
            Value::Array(Array::String(vec!["< t".to_owned()])),
        ),
        ("tokenizer.ggml.bos_token_id".into(), Value::U32(0)),
        ("tokenizer.ggml.eos_token_id".into(), Value::U32(1)),
    ]
}

/// Written beside the target and renamed, so an interrupted run leaves no half file behind.
pub(crate) fn write_atomically(w: &GgufWriter, path: &Path) -> Result<()> {
    let partial = path.with_extension("gguf.partial");
    let file = std::fs::File::create(&partial)
        .with_context(|| format!("cannot create '{}'", partial.display()))?;
    let mut out = std::io::BufWriter::new(file);
    w.write_to(&mut out)
        .with_context(|| format!("cannot write '{}'", partial.display()))?;
    std::io::Write::flush(&mut out)?;
    drop(out);
    std::fs::rename(&partial, path)
        .with_context(|| format!("cannot write '{}'", path.display()))?;
    Ok(())
}
