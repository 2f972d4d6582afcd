//! Sampling parameters (llama.cpp's names and defaults) and their validation.

/// What the sampler does with a row of logits. Field names and defaults are llama.cpp's CLI ones
/// (`--temp`, `--top-k`, …), so a command line or an API request maps onto it field by field.
#[derive(Debug, Clone, PartialEq)]
pub struct SamplingParams {
    /// Divides the logits before the draw; `<= 0` means greedy (argmax).
    pub temperature: f32,
    /// Keep only the `top_k` most likely tokens; 0 disables.
    pub top_k: usize,
    /// Keep the smallest set of most likely tokens whose probability reaches `top_p`; 1 disables.
    pub top_p: f32,
    /// Keep tokens whose probability is at least `min_p` times the most likely one's; 0 disables.
    pub min_p: f32,
    /// Divides positive and multiplies non-positive logits of tokens seen in the window; 1 disables.
    pub repeat_penalty: f32,
    /// How many of the most recently accepted tokens the three penalties look at; 0 disables them.
    pub repeat_last_n: usize,
    /// Subtracted once from the logit of every token present in the window.
    pub presence_penalty: f32,
    /// Subtracted from a token's logit once per occurrence in the window.
    pub frequency_penalty: f32,
    /// `(token, bias)` added to the logits before anything else; `f32::NEG_INFINITY` bans a token.
    /// Several entries for one token add up.
    pub logit_bias: Vec<(u32, f32)>,
    /// `None` draws a seed from the OS (see [`super::Sampler::seed`] to log it); `Some` makes
    /// the draws reproducible on every platform.
    pub seed: Option<u64>,
}

impl Default for SamplingParams {
    fn default() -> Self {
        SamplingParams {
            temperature: 0.8,
            top_k: 40,
            top_p: 0.95,
            min_p: 0.05,
            repeat_penalty: 1.0,
            repeat_last_n: 64,
            presence_penalty: 0.0,
            frequency_penalty: 0.0,
            logit_bias: Vec::new(),
            seed: None,
        }
    }
}

impl SamplingParams {
    /// Greedy decoding (temperature 0), everything else at its default.
    pub fn greedy() -> Self {
        SamplingParams {
            temperature: 0.0,
            ..Self::default()
        }
    }

    /// Checks every field against what the sampler can use, naming the first one that is wrong.
    pub fn validate(&self, n_vocab: usize) -> Result<(), SamplingError> {
        // Token ids are u32: a vocabulary must be non-empty and every id must fit.
        if n_vocab == 0 || u32::try_from(n_vocab - 1).is_err() {
            return Err(SamplingError::InvalidVocabularySize { n_vocab });
        }
        check(
            "temperature",
            self.temperature,
            self.temperature.is_finite(),
            "a finite number (<= 0 means greedy)",
        )?;
        check(
            "top_p",
            self.top_p,
            (0.0..=1.0).contains(&self.top_p),
            "between 0 and 1 (1 disables it)",
        )?;
        check(
            "min_p",
            self.min_p,
            (0.0..=1.0).contains(&self.min_p),
            "between 0 and 1 (0 disables it)",
        )?;
        check(
            "repeat_penalty",
            self.repeat_penalty,
            self.repeat_penalty.is_finite() && self.repeat_penalty > 0.0,
            "a finite number > 0 (1 disables it)",
        )?;
        check(
            "presence_penalty",
            self.presence_penalty,
            self.presence_penalty.is_finite(),
            "a finite number (0 disables it)",
        )?;
        check(
            "frequency_penalty",
            self.frequency_penalty,
            self.frequency_penalty.is_finite(),
            "a finite number (0 disables it)",
        )?;
        for &(token, bias) in &self.logit_bias {
            if token as usize >= n_vocab {
                return Err(SamplingError::BiasTokenOutOfRange { token, n_vocab });
            }
            // +inf would turn the softmax into inf/inf = NaN; -inf is the documented ban.
            if bias.is_nan() || bias == f32::INFINITY {
                return Err(SamplingError::InvalidBias { token, found: bias });
            }
        }
        Ok(())
    }

    /// Whether any of the three penalties changes a logit.
    pub(super) fn penalties_active(&self) -> bool {
        self.repeat_last_n > 0
            && (self.repeat_penalty != 1.0
                || self.presence_penalty != 0.0
                || self.frequency_penalty != 0.0)
    }
}

fn check(
    name: &'static str,
    found: f32,
    ok: bool,
    expected: &'static str,
) -> Result<(), SamplingError> {
    if ok {
        Ok(())
    } else {
        Err(SamplingError::InvalidParameter {
            name,
            expected,
            found,
        })
    }
}

/// Why a sampler could not be built or could not pick a token.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum SamplingError {
    #[error("sampling parameter `{name}` must be {expected}, found {found}")]
    InvalidParameter {
        name: &'static str,
        expected: &'static str,
        found: f32,
    },
    #[error("logit_bias names token {token}, but the vocabulary has only {n_vocab} tokens")]
    BiasTokenOutOfRange { token: u32, n_vocab: usize },
    #[error("logit_bias for token {token} must be a finite number or -inf (a ban), found {found}")]
    InvalidBias { token: u32, found: f32 },
    #[error("vocabulary size must be between 1 and 2^32 tokens, found {n_vocab}")]
    InvalidVocabularySize { n_vocab: usize },
    #[error("expected {expected} logits (one per vocabulary entry), found {found}")]
    LogitCount { expected: usize, found: usize },
    #[error("logit of token {token} is {value} after logit bias and penalties; expected a finite number or -inf")]
    InvalidLogit { token: u32, value: f32 },
    #[error("no token can be sampled: every logit is -inf after logit bias and penalties")]
    NoCandidates,
}
