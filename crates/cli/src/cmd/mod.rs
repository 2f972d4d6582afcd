//! One module per subcommand, plus the few helpers they share.

pub mod bench;
pub mod info;
pub mod logits;
pub mod model_args;
pub mod quantize;
pub mod run;
pub mod serve;
pub mod synth;
pub mod template;
pub mod tokenize;
pub mod validate;

use std::io::Write;
use std::path::PathBuf;

use anyhow::{bail, Context, Result};
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
}

impl ModelArg {
    pub fn path(&self) -> Result<&PathBuf> {
        match (&self.model, &self.file) {
            (Some(path), _) | (None, Some(path)) => Ok(path),
            (None, None) => bail!("no model file given (pass FILE or -m FILE)"),
        }
    }
}

/// Opens and validates a GGUF file, with the path in the error.
pub fn open_model(path: &std::path::Path) -> Result<GgufFile> {
    GgufFile::open(path).with_context(|| format!("cannot open model '{}'", path.display()))
}

/// Writes to stdout, returning an error (which `main` treats as success if it is a broken pipe).
pub fn print(text: &str) -> Result<()> {
    let mut out = std::io::stdout().lock();
    out.write_all(text.as_bytes())?;
    out.flush()?;
    Ok(())
}
