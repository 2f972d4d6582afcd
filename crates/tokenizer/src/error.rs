//! Every way building or using a tokenizer can fail, each naming what was wrong.

/// An error building a tokenizer from a vocabulary, or using it with a bad token id.
#[derive(thiserror::Error, Debug)]
#[non_exhaustive]
pub enum TokenizerError {
    #[error("GGUF key '{key}' is missing: the tokenizer needs it")]
    MissingKey { key: &'static str },

    #[error(
        "tokenizer model '{found}' (tokenizer.ggml.model) is not supported; supported: gpt2 and \
         gemma4 (BPE), llama (SentencePiece), bert (WordPiece), t5 (Unigram)"
    )]
    UnsupportedModel { found: String },

    #[error("pre-tokenizer '{pre}': its pattern {pattern:?} is not supported ({reason})")]
    UnsupportedPattern {
        pre: String,
        pattern: String,
        reason: String,
    },

    #[error("tokenizer.ggml.precompiled_charsmap is malformed: {reason}")]
    MalformedCharsMap { reason: String },

    #[error("'{key}' has type {found}, expected {expected}")]
    WrongKeyType {
        key: &'static str,
        expected: &'static str,
        found: String,
    },

    #[error(
        "pre-tokenizer '{found}' (tokenizer.ggml.pre) is not supported; supported: {supported}"
    )]
    UnsupportedPre { found: String, supported: String },

    #[error("token id {id} is out of range: the vocabulary has {vocab_size} tokens")]
    TokenOutOfRange { id: u32, vocab_size: usize },

    #[error("'{key}' has {found} entries but tokenizer.ggml.tokens has {expected}")]
    LengthMismatch {
        key: &'static str,
        expected: usize,
        found: usize,
    },

    #[error("tokenizer.ggml.tokens holds {text:?} twice, at ids {first} and {second}")]
    DuplicateToken {
        text: String,
        first: u32,
        second: u32,
    },

    #[error("tokenizer.ggml.tokens is empty")]
    EmptyVocabulary,

    #[error("the vocabulary has {n_tokens} entries (tokens and merge symbols): more than u32 ids can name")]
    VocabularyTooLarge { n_tokens: usize },

    #[error("{flag} is true but {id_key} is not set (or out of range)")]
    MissingSpecialToken {
        flag: &'static str,
        id_key: &'static str,
    },

    #[error("token {id} is a byte token but its text {text:?} is not of the form <0xHH>")]
    MalformedByteToken { id: u32, text: String },

    // The message shows the GGUF error, so it is not also returned by `source()` (a chain printed
    // with `{:#}` would say it twice).
    #[error("reading the tokenizer from GGUF metadata: {0}")]
    Gguf(oxibonsai_gguf::GgufError),
}

impl From<oxibonsai_gguf::GgufError> for TokenizerError {
    fn from(err: oxibonsai_gguf::GgufError) -> Self {
        TokenizerError::Gguf(err)
    }
}
