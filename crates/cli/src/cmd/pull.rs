//! `oxibonsai pull REPO [FILE]`: download a file from the Hugging Face Hub into the cache that
//! `huggingface_hub` shares (so `-m hf:REPO/FILE` and Python tools find it), and print its path.

use std::process::ExitCode;

use anyhow::{bail, Context, Result};
use oxibonsai_hub::{fetch_hf, FetchOptions, HfSpec, HubError};

use super::print;

#[derive(clap::Args, Debug)]
pub struct Args {
    /// Repository on the Hub: ORG/NAME or ORG/NAME@REVISION (an `hf:` prefix is accepted).
    #[arg(value_name = "REPO")]
    repo: String,
    /// File in the repository, e.g. a .gguf (default: the repository's only .gguf).
    #[arg(value_name = "FILE")]
    file: Option<String>,
    /// Branch, tag or commit (default: main).
    #[arg(long)]
    revision: Option<String>,
    /// Token for gated or private repositories (default: HF_TOKEN, else the token saved by
    /// `huggingface-cli login`).
    #[arg(long)]
    token: Option<String>,
    /// Use only the cache (also HF_HUB_OFFLINE=1 or OXIBONSAI_OFFLINE=1).
    #[arg(long)]
    offline: bool,
}

pub fn run(args: Args) -> Result<ExitCode> {
    let spec = spec_of(&args)?;
    let mut options = FetchOptions::from_env();
    options.offline |= args.offline;
    if let Some(token) = &args.token {
        options.hf_token = Some(token.trim().to_owned());
    }
    match fetch_hf(&spec, &options) {
        Ok(path) => {
            print(&format!("{}\n", path.display()))?;
            Ok(ExitCode::SUCCESS)
        }
        Err(HubError::HfChooseFile { files, .. }) if !files.is_empty() => {
            // The list goes to stdout, where a script can pick from it.
            print(&files.iter().map(|f| format!("{f}\n")).collect::<String>())?;
            bail!(
                "{} holds {} .gguf files (listed above); name one: oxibonsai pull {} FILE",
                spec.repo,
                files.len(),
                args.repo
            )
        }
        Err(err) => Err(err).context("cannot pull"),
    }
}

/// REPO, FILE and --revision as one spec; each part may be given once.
fn spec_of(args: &Args) -> Result<HfSpec> {
    let repo = args.repo.strip_prefix("hf:").unwrap_or(&args.repo);
    let mut spec = HfSpec::parse(repo)?;
    if let Some(file) = &args.file {
        if spec.file.is_some() {
            bail!("the file is given twice: in REPO ({repo}) and as FILE ({file})");
        }
        spec.file = HfSpec::parse(&format!("{}/{file}", spec.repo))?.file;
    }
    if let Some(revision) = &args.revision {
        if spec.revision.as_ref().is_some_and(|r| r != revision) {
            bail!("the revision is given twice: in REPO ({repo}) and as --revision {revision}");
        }
        HfSpec::check_revision(revision).map_err(anyhow::Error::msg)?;
        spec.revision = Some(revision.clone());
    }
    Ok(spec)
}
