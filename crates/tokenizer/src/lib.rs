//! Text ↔ token ids, as the reference engine (llama.cpp) does it, from a GGUF file's
//! `tokenizer.ggml.*` metadata; streaming detokenization; chat templates.
//!
//! The boundary: this crate knows GGUF metadata (through `oxibonsai-gguf`) and nothing of models.
//! [`Tokenizer`] reproduces `llama_tokenize(text, add_special, parse_special)`,
//! `llama_token_to_piece` and `llama_detokenize` for every vocabulary type llama.cpp builds from
//! GGUF metadata: BPE (`gpt2`, with every `tokenizer.ggml.pre` its loader knows — one table,
//! `pre_table` — and `gemma4`), SentencePiece (`llama`, `spm`), WordPiece (`bert`, `wpm`) and
//! Unigram (`t5`, `ugm`), id for id. [`StreamDecoder`] turns ids back into text one token at a
//! time without ever splitting a character. The BPE pipeline: special tokens are cut out of the
//! text ([`Tokenizer::encode`]), the rest is split into words by the pre-tokenizer's patterns
//! (`pre_tokenizer`: hand-written scanners, or the `regex` module for the patterns llama.cpp gives
//! to `std::regex`), and each word is merged by BPE rank (`bpe`).

pub mod chat_template;
pub mod reasoning;

mod bpe;
mod build;
mod error;
mod fast_hash;
mod gguf_keys;
mod nfd_table;
mod pieces;
mod pre_table;
mod pre_tokenizer;
#[cfg(test)]
mod pre_tokenizer_oracle;
mod regex;
mod spm;
mod stream;
mod tokenizer;
mod ugm;
mod unicode;
mod vocab;
mod wpm;

pub use error::TokenizerError;
pub use stream::StreamDecoder;
pub use tokenizer::{Tokenizer, TokenizerKind};
pub use vocab::{SpecialTokenIds, TokenAttr, TokenType, VocabExtra, VocabSpec};
