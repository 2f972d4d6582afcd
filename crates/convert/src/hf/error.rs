//! Everything that can be wrong with a checkpoint folder, each naming the file, key or tensor.
//! A variant that wraps a source error adds only its own context: the source's text follows in
//! the chain (`{err:#}`), once.

use std::path::PathBuf;

use crate::quantize::QuantizeError;

#[derive(Debug, thiserror::Error)]
pub enum ConvertError {
    #[error("'{}' is not a folder (expected a Hugging Face checkpoint folder with config.json)", path.display())]
    NotAFolder { path: PathBuf },
    #[error("'{}' is missing ({why})", path.display())]
    MissingFile { path: PathBuf, why: &'static str },
    #[error("cannot read '{}'", path.display())]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("'{}' is not valid JSON", path.display())]
    Json {
        path: PathBuf,
        source: serde_json::Error,
    },
    #[error("{file}: key '{key}' is missing ({why})")]
    MissingKey {
        file: &'static str,
        key: String,
        why: &'static str,
    },
    #[error("{file}: key '{key}': expected {expected}, found {found}")]
    BadKey {
        file: &'static str,
        key: String,
        expected: &'static str,
        found: String,
    },
    #[error("config.json: architecture '{found}' is not supported (expected one of: {supported})")]
    UnknownArchitecture {
        found: String,
        supported: &'static str,
    },
    #[error("config.json: {what} is not supported by the engine, so converting would change the model's outputs")]
    Unsupported { what: String },
    #[error("'{}': not a safetensors file: {reason}", path.display())]
    BadSafetensors { path: PathBuf, reason: String },
    #[error("shard '{shard}' (named in model.safetensors.index.json for tensor '{tensor}') is missing from the folder")]
    MissingShard { shard: String, tensor: String },
    #[error(
        "model.safetensors.index.json: shard name '{shard}' is not a plain file name in the folder"
    )]
    BadShardName { shard: String },
    #[error("tensor '{tensor}': model.safetensors.index.json places it in '{shard}', which does not hold it")]
    NotInShard { tensor: String, shard: String },
    #[error("tensor '{tensor}' in '{shard}' is not listed in model.safetensors.index.json")]
    NotInIndex { tensor: String, shard: String },
    #[error("tensor '{tensor}' is in both '{first}' and '{second}'")]
    DuplicateTensor {
        tensor: String,
        first: String,
        second: String,
    },
    #[error("tensor '{tensor}': dtype {dtype} is not supported (expected F32, F16 or BF16)")]
    UnsupportedDtype { tensor: String, dtype: String },
    #[error("tensor '{tensor}': shape {found:?}, expected {expected:?} (from config.json)")]
    ShapeMismatch {
        tensor: String,
        expected: Vec<usize>,
        found: Vec<usize>,
    },
    #[error("tensor '{tensor}' has no GGUF name for a {arch} model")]
    UnknownTensor { tensor: String, arch: &'static str },
    #[error("tensor '{tensor}' is missing from the checkpoint")]
    MissingTensor { tensor: String },
    #[error("tokenizer.json: {what} (only byte-level BPE tokenizers — GPT-2 style, as Qwen and Llama 3 use — are supported)")]
    UnsupportedTokenizer { what: String },
    #[error(
        "tokenizer.json: token '{token}' has id {id}, outside the model's {n_vocab} embedding rows"
    )]
    TokenOutOfRange {
        token: String,
        id: u64,
        n_vocab: usize,
    },
    #[error("tokenizer.json: cannot load it with the Hugging Face tokenizer: {reason}")]
    TokenizerLoad { reason: String },
    #[error(
        "tokenizer.json: its pre-tokenizer is not one the engine knows (check hash {hash}); \
         the reference converter would refuse it too"
    )]
    UnknownPreTokenizer { hash: String },
    /// Planning or converting a tensor's type, as `quantize` does.
    #[error(transparent)]
    Quantize(#[from] QuantizeError),
    #[error(transparent)]
    Gguf(#[from] oxibonsai_gguf::GgufError),
}
