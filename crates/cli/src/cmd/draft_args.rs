//! Speculative-decoding flags with llama.cpp's names (`--model-draft` / `-md`, `--draft-max`,
//! `--draft-min`, `--draft-p-min`, `--spec-type draft-mtp`), prompt lookup (`--draft-ngram`) and
//! the model's own multi-token-prediction head (`--draft-mtp`), flattened into `run`, `chat` and
//! `serve`; building the drafter they ask for (`run` and `chat` here, `serve` in the server from
//! [`DraftArgs::server_options`]).

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::{bail, Context, Result};
use oxibonsai_engine::speculative::{DraftLimits, DraftModel, Drafter, MtpDrafter, PromptLookup};
use oxibonsai_engine::{CpuBackend, Model, RuntimeBackend};
use oxibonsai_gguf::GgufFile;
use oxibonsai_hub::{resolve_model, FetchOptions};
use oxibonsai_server::{DraftOptions, DraftSource};
use oxibonsai_tokenizer::Tokenizer;

#[derive(clap::Args, Debug, Clone, Default)]
pub struct DraftArgs {
    /// Draft model for speculative decoding (same vocabulary as -m; also `-md`).
    #[arg(
        long = "model-draft",
        value_name = "FILE",
        conflicts_with = "draft_ngram"
    )]
    pub model_draft: Option<String>,
    /// Draft by prompt lookup: the continuation of the earlier occurrence (in the prompt and the
    /// output so far) whose preceding tokens agree longest with the text's end, compared over up
    /// to N tokens (default 16); a longer agreement drafts more tokens.
    #[arg(long = "draft-ngram", value_name = "N", num_args = 0..=1, default_missing_value = "16")]
    pub draft_ngram: Option<usize>,
    /// Draft with the model's own multi-token-prediction layers (qwen35 files with
    /// `nextn_predict_layers`); in `serve`, each slot drafts with the one head.
    #[arg(long = "draft-mtp", conflicts_with_all = ["model_draft", "draft_ngram"])]
    pub draft_mtp: bool,
    /// llama.cpp's spelling of the drafter type; `draft-mtp` is --draft-mtp.
    #[arg(long = "spec-type", value_name = "TYPE", conflicts_with_all = ["model_draft", "draft_ngram"])]
    pub spec_type: Option<String>,
    /// Tokens drafted at most per step (the lookahead adapts to the acceptance rate below it).
    #[arg(
        long = "draft-max",
        alias = "draft",
        alias = "draft-n",
        default_value_t = 16
    )]
    pub draft_max: usize,
    /// Drafts shorter than this are not verified.
    #[arg(long = "draft-min", alias = "draft-n-min", default_value_t = 0)]
    pub draft_min: usize,
    /// Stop drafting when the draft model's (or head's) most likely token is less likely than P.
    #[arg(long = "draft-p-min", value_name = "P", default_value_t = 0.0)]
    pub draft_p_min: f32,
}

impl DraftArgs {
    /// The server's form of these flags (the draft model is loaded with the model).
    pub fn server_options(&self, fetch: &FetchOptions) -> Result<Option<DraftOptions>> {
        let limits = self.limits()?;
        let source = match (&self.model_draft, self.draft_ngram) {
            _ if self.mtp()? => DraftSource::Mtp,
            (_, Some(0)) => bail!("--draft-ngram must be at least 1"),
            (_, Some(n)) => DraftSource::PromptLookup(PromptLookup {
                ngram_max: n,
                ngram_min: 1,
            }),
            (Some(spec), None) => DraftSource::Model(
                resolve_model(spec, fetch)
                    .with_context(|| format!("cannot find the draft model '{spec}'"))?,
            ),
            (None, None) => return Ok(None),
        };
        Ok(Some(DraftOptions {
            source,
            limits,
            p_min: self.draft_p_min,
        }))
    }

    /// Whether MTP drafting is asked for (`--draft-mtp` or `--spec-type draft-mtp`).
    pub fn mtp(&self) -> Result<bool> {
        match self.spec_type.as_deref() {
            None => Ok(self.draft_mtp),
            Some("draft-mtp") => Ok(true),
            Some(other) => bail!(
                "--spec-type {other}: only draft-mtp is supported (use --draft-ngram or --model-draft for the others)"
            ),
        }
    }

    pub fn limits(&self) -> Result<DraftLimits> {
        if self.draft_max == 0 {
            bail!("--draft-max must be at least 1");
        }
        if self.draft_min > self.draft_max {
            bail!(
                "--draft-min {} is more than --draft-max {}",
                self.draft_min,
                self.draft_max
            );
        }
        if !(0.0..=1.0).contains(&self.draft_p_min) {
            bail!("--draft-p-min {} is not a probability", self.draft_p_min);
        }
        Ok(DraftLimits {
            max: self.draft_max,
            min: self.draft_min,
        })
    }

    /// Loads into the model what the drafter asked for reads there (the multi-token-prediction
    /// head for --draft-mtp), before the model is shared; refused, naming
    /// `nextn_predict_layers`, for a file without the head.
    pub fn prepare(&self, model: &mut Model<RuntimeBackend>) -> Result<()> {
        if self.mtp()? {
            model.load_mtp().context("--draft-mtp")?;
        }
        Ok(())
    }

    /// The drafter asked for (`None`: no speculative decoding), for `model` (made ready by
    /// [`DraftArgs::prepare`]) with `tokenizer` running `n_ctx` positions.
    pub fn drafter(
        &self,
        model: &Arc<Model<RuntimeBackend>>,
        tokenizer: &Tokenizer,
        n_ctx: usize,
        threads: usize,
    ) -> Result<Option<Box<dyn Drafter>>> {
        self.limits()?;
        if self.mtp()? {
            // The head's weights are the model's; the drafter holds only the head's cache.
            let drafter = MtpDrafter::new(Arc::clone(model), n_ctx, self.draft_p_min)
                .context("--draft-mtp")?;
            return Ok(Some(Box::new(drafter)));
        }
        let n_vocab = model.config.n_vocab;
        if let Some(n) = self.draft_ngram {
            if n == 0 {
                bail!("--draft-ngram must be at least 1");
            }
            return Ok(Some(Box::new(PromptLookup {
                ngram_max: n,
                ngram_min: 1,
            })));
        }
        let Some(spec) = &self.model_draft else {
            return Ok(None);
        };
        let path: PathBuf = resolve_model(spec, &FetchOptions::from_env())
            .with_context(|| format!("cannot find the draft model '{spec}'"))?;
        let file = Arc::new(
            GgufFile::open(&path)
                .with_context(|| format!("cannot open draft model '{}'", path.display()))?,
        );
        let draft_tokenizer = Tokenizer::from_gguf(&file).with_context(|| {
            format!(
                "cannot build the tokenizer of draft model '{}'",
                path.display()
            )
        })?;
        let model = Model::load(file, CpuBackend::new(threads)?)
            .with_context(|| format!("cannot load draft model '{}'", path.display()))?;
        let drafter = DraftModel::new(
            model,
            tokenizer,
            n_vocab,
            &draft_tokenizer,
            n_ctx,
            self.draft_p_min,
        )
        .with_context(|| format!("--model-draft '{}'", path.display()))?;
        Ok(Some(Box::new(drafter)))
    }
}
