//! The engine's errors: each names what was wrong (key, tensor, token, position) and what was expected.

use thiserror::Error;

#[derive(Error, Debug)]
pub enum EngineError {
    #[error(transparent)]
    Gguf(#[from] oxibonsai_gguf::GgufError),
    #[error(transparent)]
    Tokenizer(#[from] oxibonsai_tokenizer::TokenizerError),
    #[error(transparent)]
    Sampling(#[from] crate::sampling::SamplingError),
    #[error(transparent)]
    Constraint(#[from] crate::constraint::ConstraintError),
    #[cfg(feature = "gpu")]
    #[error(transparent)]
    Gpu(#[from] oxibonsai_gpu::GpuError),
    #[cfg(feature = "gpu")]
    #[error("tensor '{name}' on the GPU: {source}")]
    GpuTensor {
        name: String,
        source: oxibonsai_gpu::GpuError,
    },
    #[error("--device gpu: this oxibonsai was built without GPU support (cargo feature `gpu`)")]
    NoGpuSupport,
    #[error("unsupported architecture '{arch}' (supported: llama, qwen2, qwen3, qwen35)")]
    UnsupportedArchitecture { arch: String },
    #[error("hyper-parameter '{key}' is invalid: {reason}")]
    BadHyperParameter { key: String, reason: String },
    #[error("the Hadamard rotation's '{key}' is invalid: {reason}")]
    BadRotation { key: String, reason: String },
    #[error("tensor '{name}' is missing")]
    MissingTensor { name: String },
    #[error("tensor '{name}' has shape {found:?}, expected {expected:?}")]
    TensorShape {
        name: String,
        expected: Vec<u64>,
        found: Vec<u64>,
    },
    #[error("tensor '{name}' is stored as {format}, which cannot be used as {role}")]
    TensorFormat {
        name: String,
        format: &'static str,
        role: &'static str,
    },
    #[error("token id {id} is out of range (the vocabulary has {n_vocab} tokens)")]
    TokenOutOfRange { id: u32, n_vocab: usize },
    #[error("position {position} is past the context of {n_ctx} tokens")]
    ContextExceeded { position: usize, n_ctx: usize },
    #[error("rank pooling needs a classifier head ('cls.output.weight'); this model has none (a generation-only model)")]
    NoClassifierHead,
    #[error("input {index} is empty: at least one token is needed")]
    EmptyInput { index: usize },
    #[error("the prompt is empty: at least one token is needed")]
    EmptyPrompt,
    #[error("context length {requested} is invalid: {reason}")]
    BadContext { requested: usize, reason: String },
    #[error("{flag}: {reason}")]
    BadCacheType { flag: String, reason: String },
    /// A sequence state file that does not fit this model's sequences.
    #[error("sequence state file: {0}")]
    StateFile(String),
    #[error("cannot copy the KV of positions {start}..{end}: {reason}")]
    KvCopy {
        start: usize,
        end: usize,
        reason: String,
    },
    #[error(
        "the draft model cannot draft for this model: {reason} (the vocabularies must be the same)"
    )]
    DraftVocabulary { reason: String },
    #[error("{what}: the model has no multi-token-prediction layers ({key} is 0 or absent)")]
    NoMtpLayers { what: &'static str, key: String },
    #[error("the multi-token-prediction head: {reason}")]
    Mtp { reason: String },
    #[error("a batch of {entries} entries was given {rows} row counts")]
    BatchRows { entries: usize, rows: usize },
}
