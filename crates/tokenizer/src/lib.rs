//! Text ↔ token ids, as the reference engine (llama.cpp) does it, from a GGUF file's
//! `tokenizer.ggml.*` metadata; streaming detokenization; chat templates.
//!
//! The boundary: this crate knows GGUF metadata (through `oxibonsai-gguf`) and nothing of models.
//! [`Tokenizer`] reproduces `llama_tokenize(text, add_special, parse_special)` and
//! `llama_token_to_piece` for byte-level BPE vocabularies (`tokenizer.ggml.model = gpt2`) with
//! the pre-tokenizers of Qwen 2/3, SmolLM, Llama 3, GPT-2 and llama.cpp's default, id for id.
//! [`StreamDecoder`] turns ids back into text one token at a time without ever splitting a
//! character. The pipeline: special tokens are cut out of the text ([`Tokenizer::encode`]),
//! the rest is split into words by the pre-tokenizer's patterns (`pre_tokenizer`), and each
//! word's bytes are merged by BPE rank (`bpe`).

pub mod chat_template;
pub mod reasoning;

mod bpe;
mod error;
mod gguf_keys;
mod pre_tokenizer;
#[cfg(test)]
mod pre_tokenizer_oracle;
mod stream;
mod tokenizer;
mod unicode;
mod vocab;

pub use error::TokenizerError;
pub use pre_tokenizer::PreTokenizerKind;
pub use stream::StreamDecoder;
pub use tokenizer::Tokenizer;
pub use vocab::{SpecialTokenIds, TokenAttr, TokenType, VocabSpec};
