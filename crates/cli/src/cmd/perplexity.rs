//! `oxibonsai perplexity -m MODEL -f TEXT [-c 512] [--chunks N] [--kl-divergence-base FILE
//! [--kl-divergence]] [--json]`: llama-perplexity's measurement — perplexity over a text in chunks
//! of `-c` tokens, each scored on its second half; with `--kl-divergence-base FILE` alone, the
//! run's log-probabilities are saved in llama-perplexity's file format; with `--kl-divergence` too,
//! the model is compared with such a base (made by this engine or by llama.cpp) on the base's own
//! tokens: KL divergence, Δp and same-top statistics as llama-perplexity prints them.

use std::fs::File;
use std::io::{BufReader, BufWriter, IsTerminal, Write};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use anyhow::{bail, Context, Result};
use indicatif::{ProgressBar, ProgressStyle};
use oxibonsai_engine::perplexity::{
    base_row_len, encode_base_row, read_rows, token_nll, write_rows, BaseHeader, ChunkPlan,
    KlDivergence, KlSummary, Nll,
};
use oxibonsai_engine::{Logits, Model, RuntimeBackend, Sequence};
use serde_json::json;

use super::model_args::RunModelArgs;

#[derive(clap::Args, Debug)]
pub struct Args {
    #[command(flatten)]
    model: RunModelArgs,
    /// The text to measure on.
    #[arg(short = 'f', long = "file", value_name = "PATH")]
    file: Option<PathBuf>,
    /// Score at most this many chunks (default: every whole chunk of the text).
    #[arg(long = "chunks")]
    chunks: Option<usize>,
    /// Alone: save this run's log-probabilities to FILE. With --kl-divergence: the base to
    /// compare with.
    #[arg(long = "kl-divergence-base", value_name = "FILE")]
    kl_base: Option<PathBuf>,
    /// Compare with the base given by --kl-divergence-base (its tokens are evaluated; -f, if
    /// given, must tokenize to the same).
    #[arg(long = "kl-divergence", requires = "kl_base")]
    kl_divergence: bool,
    /// Print one JSON object (the figures below) instead of the text report.
    #[arg(long)]
    json: bool,
}

/// llama-perplexity's default chunk length.
const DEFAULT_CTX: usize = 512;

pub fn run(args: Args) -> Result<ExitCode> {
    let loaded = args.model.load()?;
    let (model, tokenizer) = (&loaded.model, &loaded.tokenizer);
    let bos = tokenizer.add_bos().then(|| tokenizer.bos()).flatten();
    let text_tokens = match &args.file {
        Some(path) => {
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("cannot read the text '{}'", path.display()))?;
            Some(tokenizer.encode(&text, true, false)?)
        }
        None => None,
    };
    let n_vocab = model.config.n_vocab;
    let started = Instant::now();
    let report = if args.kl_divergence {
        let base_path = args.kl_base.as_ref().expect("clap: requires");
        kl_divergence(&args, model, bos, text_tokens.as_deref(), base_path)?
    } else {
        let Some(tokens) = text_tokens else {
            bail!("give the text to measure on with -f FILE");
        };
        let n_ctx = args.model.ctx.unwrap_or(DEFAULT_CTX);
        let plan = ChunkPlan::new(tokens.len(), n_ctx, args.chunks)?;
        let mut base = match &args.kl_base {
            Some(path) => {
                let header = BaseHeader {
                    n_ctx,
                    n_vocab,
                    n_chunk: plan.n_chunk,
                    tokens: tokens[..plan.n_chunk * n_ctx].to_vec(),
                };
                let file = File::create(path)
                    .with_context(|| format!("cannot write '{}'", path.display()))?;
                let mut out = BufWriter::new(file);
                header.write(&mut out)?;
                Some((
                    out,
                    vec![0u16; plan.scored_per_chunk() * base_row_len(n_vocab)],
                ))
            }
            None => None,
        };
        let mut nll = Nll::default();
        let mut line = String::new();
        evaluate(model, &plan, &tokens, bos, |chunk, logits, next| {
            for (i, (row, &t)) in logits.chunks_exact(n_vocab).zip(next).enumerate() {
                let v = match &mut base {
                    Some((_, rows)) => {
                        let r = base_row_len(n_vocab);
                        encode_base_row(row, t as usize, &mut rows[i * r..(i + 1) * r])
                    }
                    None => token_nll(row, t as usize),
                };
                nll.add(v);
            }
            if let Some((out, rows)) = &mut base {
                write_rows(out, rows)?;
            }
            if !args.json {
                line = format!("[{}]{:.4},", chunk + 1, nll.ppl());
                super::print(&line)?;
            }
            Ok(())
        })?;
        if let Some((mut out, _)) = base {
            out.flush().context("cannot write the KL-divergence base")?;
        }
        Report::Perplexity { plan, nll }
    };
    let seconds = started.elapsed().as_secs_f64();
    let scored = report.plan().n_chunk * report.plan().n_ctx;
    let tokens_per_s = scored as f64 / seconds;
    if args.json {
        let mut value = report.json();
        value["tokens_evaluated"] = json!(scored);
        value["tokens_per_s"] = json!(tokens_per_s);
        value["seconds"] = json!(seconds);
        super::print(&format!("{value}\n"))?;
    } else {
        super::print(&format!("\n{}", report.text()))?;
        eprintln!("{scored} tokens evaluated in {seconds:.2} s ({tokens_per_s:.1} tokens/s)");
    }
    Ok(ExitCode::SUCCESS)
}

enum Report {
    Perplexity {
        plan: ChunkPlan,
        nll: Nll,
    },
    Kl {
        plan: ChunkPlan,
        summary: Box<KlSummary>,
    },
}

impl Report {
    fn plan(&self) -> ChunkPlan {
        match self {
            Report::Perplexity { plan, .. } | Report::Kl { plan, .. } => *plan,
        }
    }

    fn json(&self) -> serde_json::Value {
        match self {
            Report::Perplexity { plan, nll } => json!({
                "ppl": nll.ppl(),
                "ppl_error": nll.ppl_error(),
                "n_ctx": plan.n_ctx,
                "chunks": plan.n_chunk,
                "tokens_scored": nll.count,
            }),
            Report::Kl { plan, summary: s } => {
                let pair = |(v, e): (f64, f64)| json!({"value": v, "error": e});
                let table = |p: &[(f32, f32)]| {
                    p.iter()
                        .map(|&(f, v)| (format!("{:.1}", 100.0 * f), json!(v)))
                        .collect::<serde_json::Map<_, _>>()
                };
                json!({
                    "n_ctx": plan.n_ctx,
                    "chunks": plan.n_chunk,
                    "tokens_scored": s.count,
                    "ppl": pair(s.ppl),
                    "ppl_base": pair(s.ppl_base),
                    "ppl_correlation": s.ppl_correlation,
                    "ln_ppl_ratio": pair(s.ln_ppl_ratio),
                    "ppl_ratio": pair(s.ppl_ratio),
                    "ppl_diff": pair(s.ppl_diff),
                    "kld": pair(s.kld),
                    "kld_median": s.kld_median,
                    "kld_percentiles": table(&s.kld_percentiles),
                    "p_diff": pair(s.p_diff),
                    "p_diff_median": s.p_diff_median,
                    "p_diff_percentiles": table(&s.p_diff_percentiles),
                    "p_diff_rms": pair(s.p_diff_rms),
                    "same_top": pair(s.same_top),
                })
            }
        }
    }

    /// The closing lines of llama-perplexity, in its wording.
    fn text(&self) -> String {
        match self {
            Report::Perplexity { nll, .. } => match nll.ppl_error() {
                Some(err) => format!("Final estimate: PPL = {:.4} +/- {:.5}\n", nll.ppl(), err),
                None => format!(
                    "Final estimate: PPL = {:.4} (no spread to estimate an error)\n",
                    nll.ppl()
                ),
            },
            Report::Kl { summary: s, .. } => {
                let mut t = String::from("====== Perplexity statistics ======\n");
                let line = |t: &mut String, name: &str, (v, e): (f64, f64)| {
                    t.push_str(&format!("{name:<30}: {v:10.6} ± {e:10.6}\n"));
                };
                line(&mut t, "Mean PPL(Q)", s.ppl);
                line(&mut t, "Mean PPL(base)", s.ppl_base);
                t.push_str(&format!(
                    "{:<30}: {:6.2}%\n",
                    "Cor(ln(PPL(Q)), ln(PPL(base)))",
                    100.0 * s.ppl_correlation
                ));
                line(&mut t, "Mean ln(PPL(Q)/PPL(base))", s.ln_ppl_ratio);
                line(&mut t, "Mean PPL(Q)/PPL(base)", s.ppl_ratio);
                line(&mut t, "Mean PPL(Q)-PPL(base)", s.ppl_diff);
                t.push_str("\n====== KL divergence statistics ======\n");
                t.push_str(&format!(
                    "Mean    KLD: {:10.6} ± {:10.6}\n",
                    s.kld.0, s.kld.1
                ));
                for &(f, v) in &s.kld_percentiles {
                    let name = percentile_name(f);
                    t.push_str(&format!("{name} KLD: {v:10.6}\n"));
                    if f == 0.9 {
                        t.push_str(&format!("Median  KLD: {:10.6}\n", s.kld_median));
                    }
                }
                t.push_str("\n====== Token probability statistics ======\n");
                t.push_str(&format!(
                    "Mean    Δp: {:6.3} ± {:5.3} %\n",
                    100.0 * s.p_diff.0,
                    100.0 * s.p_diff.1
                ));
                for &(f, v) in &s.p_diff_percentiles {
                    t.push_str(&format!("{} Δp: {:6.3}%\n", percentile_name(f), 100.0 * v));
                    if f == 0.75 {
                        t.push_str(&format!("Median  Δp: {:6.3}%\n", 100.0 * s.p_diff_median));
                    }
                }
                t.push_str(&format!(
                    "RMS Δp    : {:6.3} ± {:5.3} %\n",
                    100.0 * s.p_diff_rms.0,
                    100.0 * s.p_diff_rms.1
                ));
                t.push_str(&format!(
                    "Same top p: {:6.3} ± {:5.3} %\n",
                    100.0 * s.same_top.0,
                    100.0 * s.same_top.1
                ));
                t
            }
        }
    }
}

fn percentile_name(f: f32) -> String {
    match f {
        f if f >= 1.0 => "Maximum".to_owned(),
        f if f <= 0.0 => "Minimum".to_owned(),
        f => format!("{:<7}", format!("{:.1}%", 100.0 * f)),
    }
}

/// Evaluates each chunk of `plan` from an empty state and hands `score` the logits of its scored
/// positions with the tokens they predict.
fn evaluate(
    model: &Model<RuntimeBackend>,
    plan: &ChunkPlan,
    tokens: &[u32],
    bos: Option<u32>,
    mut score: impl FnMut(usize, &[f32], &[u32]) -> Result<()>,
) -> Result<()> {
    let n_vocab = model.config.n_vocab;
    let mut seq: Sequence<RuntimeBackend> = model.new_sequence(plan.n_ctx)?;
    let bar = if std::io::stderr().is_terminal() {
        let bar = ProgressBar::new(plan.n_chunk as u64);
        if let Ok(style) =
            ProgressStyle::with_template("{bar:40} {pos}/{len} chunks {per_sec} {eta}")
        {
            bar.set_style(style);
        }
        bar
    } else {
        ProgressBar::hidden()
    };
    let first = plan.first();
    for i in 0..plan.n_chunk {
        seq.clear();
        let chunk = plan.chunk(tokens, i, bos);
        // Only the scored half needs logits (the reference asks for no more either).
        let logits = model.forward(&mut seq, &chunk, Logits::From(first))?;
        // Position j predicts the chunk's own token j + 1 (not the BOS it may start with).
        let own = &tokens[i * plan.n_ctx..(i + 1) * plan.n_ctx];
        score(
            i,
            &logits[..(plan.n_ctx - 1 - first) * n_vocab],
            &own[first + 1..],
        )?;
        bar.inc(1);
    }
    bar.finish_and_clear();
    Ok(())
}

fn kl_divergence(
    args: &Args,
    model: &Model<RuntimeBackend>,
    bos: Option<u32>,
    text_tokens: Option<&[u32]>,
    base_path: &std::path::Path,
) -> Result<Report> {
    let n_vocab = model.config.n_vocab;
    let file = File::open(base_path).with_context(|| {
        format!(
            "cannot read the KL-divergence base '{}'",
            base_path.display()
        )
    })?;
    let len = file.metadata()?.len();
    let mut input = BufReader::new(file);
    let header = BaseHeader::read(&mut input, len)
        .with_context(|| format!("in '{}'", base_path.display()))?;
    let mismatch = |reason: String| -> Result<Report> {
        bail!(
            "the KL-divergence base '{}' does not fit this run: {reason}",
            base_path.display()
        )
    };
    if header.n_vocab != n_vocab {
        return mismatch(format!(
            "it was made with a vocabulary of {} tokens, the model has {n_vocab}",
            header.n_vocab
        ));
    }
    if let Some(ctx) = args.model.ctx.filter(|&c| c != header.n_ctx) {
        return mismatch(format!(
            "it was made with -c {}, this run asks for -c {ctx}",
            header.n_ctx
        ));
    }
    if let Some(tokens) = text_tokens {
        let n = header.tokens.len().min(tokens.len());
        if let Some(at) = (0..n).find(|&i| tokens[i] != header.tokens[i]) {
            return mismatch(format!(
                "the text tokenizes differently from the base's tokens (first at token {at})"
            ));
        }
        if tokens.len() < header.tokens.len() {
            return mismatch(format!(
                "the text has {} tokens, the base {}",
                tokens.len(),
                header.tokens.len()
            ));
        }
    }
    let mut plan = header.plan();
    if let Some(max) = args.chunks {
        plan.n_chunk = max.clamp(1, plan.n_chunk);
    }
    let r = base_row_len(n_vocab);
    let mut rows = vec![0u16; plan.scored_per_chunk() * r];
    let mut kld = KlDivergence::default();
    if !args.json {
        super::print("chunk             PPL               ln(PPL(Q)/PPL(base))          KL Divergence              Δp RMS            Same top p\n")?;
    }
    evaluate(model, &plan, &header.tokens, bos, |chunk, logits, next| {
        read_rows(&mut input, &mut rows).with_context(|| {
            format!("cannot read the base's log-probabilities of chunk {chunk}")
        })?;
        for (i, (row, &t)) in logits.chunks_exact(n_vocab).zip(next).enumerate() {
            kld.add(row, &rows[i * r..(i + 1) * r], t as usize);
        }
        if !args.json {
            let s = kld.summary();
            super::print(&format!(
                "{:4}    {:9.4} ± {:9.4}    {:10.5} ± {:10.5}    {:10.5} ± {:10.5}    {:6.3} ± {:6.3} %    {:6.3} ± {:6.3} %\n",
                chunk + 1,
                s.ppl.0,
                s.ppl.1,
                s.ln_ppl_ratio.0,
                s.ln_ppl_ratio.1,
                s.kld.0,
                s.kld.1,
                100.0 * s.p_diff_rms.0,
                100.0 * s.p_diff_rms.1,
                100.0 * s.same_top.0,
                100.0 * s.same_top.1
            ))?;
        }
        Ok(())
    })?;
    Ok(Report::Kl {
        plan,
        summary: Box::new(kld.summary()),
    })
}
