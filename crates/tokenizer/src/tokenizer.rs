//! [`Tokenizer`]: llama.cpp's `llama_tokenize`, `llama_token_to_piece` and `llama_detokenize`
//! for its four vocabulary types (BPE with every pre-tokenizer, SentencePiece, WordPiece,
//! Unigram). Building one from a vocabulary is in `build`.

use std::fmt;
use std::ops::Range;

use crate::bpe::{Bpe, Scratch};
use crate::error::TokenizerError;
use crate::fast_hash::FastMap;
use crate::pieces;
use crate::pre_tokenizer::{PreTokenizer, SplitScratch};
use crate::spm::{self, SpmScratch};
use crate::ugm::Ugm;
use crate::vocab::{SpecialTokenIds, TokenAttr, TokenType};
use crate::wpm;

/// llama.cpp's vocabulary types.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TokenizerKind {
    /// Byte-pair encoding over pre-tokenized words (`gpt2`, `gemma4`).
    Bpe,
    /// SentencePiece BPE by token scores (`llama`).
    Spm,
    /// WordPiece (`bert`).
    Wpm,
    /// Unigram (`t5`).
    Ugm,
}

impl TokenizerKind {
    /// The kind a `tokenizer.ggml.model` value selects, `None` when it is not supported.
    pub fn of_model(model: &str) -> Option<TokenizerKind> {
        match model {
            "gpt2" | "gemma4" => Some(TokenizerKind::Bpe),
            "llama" => Some(TokenizerKind::Spm),
            "bert" => Some(TokenizerKind::Wpm),
            "t5" => Some(TokenizerKind::Ugm),
            _ => None,
        }
    }
}

impl fmt::Display for TokenizerKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            TokenizerKind::Bpe => "BPE",
            TokenizerKind::Spm => "SPM",
            TokenizerKind::Wpm => "WPM",
            TokenizerKind::Ugm => "UGM",
        })
    }
}

/// The algorithm and its data.
pub(crate) enum Model {
    Bpe {
        bpe: Box<Bpe>,
        pre: PreTokenizer,
    },
    Spm {
        scores: Vec<f32>,
        /// No token has a `▁` right after another character, so no merge crosses the start of a
        /// `▁` run: the text is merged run by run (same result, small heaps).
        split_at_spaces: bool,
    },
    Wpm {
        max_token_len: usize,
        lowercase: bool,
        strip_accents: bool,
    },
    Ugm(Ugm),
}

/// llama.cpp's per-vocabulary flags that shape tokenization and detokenization.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Flags {
    pub add_space_prefix: bool,
    pub escape_whitespaces: bool,
    pub clean_spaces: bool,
    pub add_sep: bool,
}

/// A tokenizer built from a vocabulary; immutable and shareable across threads.
pub struct Tokenizer {
    pub(crate) model_name: String,
    pub(crate) pre: String,
    pub(crate) model: Model,
    /// Token texts by id (an empty token renamed `[EMPTY_<id>]`, as llama.cpp does).
    pub(crate) texts: Vec<Box<str>>,
    pub(crate) types: Vec<TokenType>,
    pub(crate) attrs: Vec<TokenAttr>,
    /// Text → id for the kinds other than BPE (BPE's merge table holds its own).
    pub(crate) lookup: FastMap<Box<str>, u32>,
    /// The `<0xXX>` (or single-byte) token of each byte: SentencePiece's byte fallback.
    pub(crate) byte_token: [Option<u32>; 256],
    pub(crate) special: SpecialTokenIds,
    pub(crate) add_bos: bool,
    pub(crate) add_eos: bool,
    pub(crate) flags: Flags,
    pub(crate) eog: Vec<u32>,
    /// Control, user-defined and unknown tokens, longest text first: the order in which they are
    /// cut out of the input.
    pub(crate) special_tokens: Vec<u32>,
    /// Every token's piece as `token_to_piece(id, special = true)` gives it, back to back.
    pub(crate) pieces: Vec<u8>,
    /// `pieces[piece_at[id]..piece_at[id + 1]]` is token `id`'s piece.
    pub(crate) piece_at: Vec<usize>,
}

// The engine and the server share one tokenizer across threads.
const _: () = {
    fn shareable<T: Send + Sync>() {}
    let _ = shareable::<Tokenizer>;
};

/// A stretch of the input after special tokens are cut out.
enum Fragment {
    Token(u32),
    Text(Range<usize>),
}

impl Tokenizer {
    /// Builds the tokenizer a GGUF file describes.
    pub fn from_gguf(file: &oxibonsai_gguf::GgufFile) -> Result<Tokenizer, TokenizerError> {
        Tokenizer::from_metadata(file.metadata())
    }

    /// Builds the tokenizer from GGUF metadata (`tokenizer.ggml.*`).
    pub fn from_metadata(metadata: &oxibonsai_gguf::Metadata) -> Result<Tokenizer, TokenizerError> {
        Tokenizer::from_spec(crate::VocabSpec::from_metadata(metadata)?)
    }

    /// `llama_tokenize(text, add_special, parse_special)`: BOS/EOS (SEP for WordPiece) are added
    /// per the vocabulary's flags when `add_special`; control tokens written in the text are
    /// recognised only with `parse_special`, user-defined ones (e.g. Qwen3's `<think>`) always.
    pub fn encode(
        &self,
        text: &str,
        add_special: bool,
        parse_special: bool,
    ) -> Result<Vec<u32>, TokenizerError> {
        self.encode_except(text, add_special, parse_special, &[])
    }

    /// [`Tokenizer::encode`] with `parse_special`, except inside the `literal` byte ranges of
    /// `text`: there control-token text is text, as without `parse_special`. A chat prompt's
    /// template markers are control tokens, the text its messages brought in is not.
    pub fn encode_with_literal(
        &self,
        text: &str,
        add_special: bool,
        literal: &[Range<usize>],
    ) -> Result<Vec<u32>, TokenizerError> {
        self.encode_except(text, add_special, true, literal)
    }

    fn encode_except(
        &self,
        text: &str,
        add_special: bool,
        parse_special: bool,
        literal: &[Range<usize>],
    ) -> Result<Vec<u32>, TokenizerError> {
        let mut out = Vec::new();
        let fragments = self.partition(text, parse_special, literal);
        let wpm = matches!(self.model, Model::Wpm { .. });
        if add_special && (self.add_bos || wpm) {
            out.extend(self.special.bos);
        }
        match &self.model {
            Model::Bpe { bpe, pre } => {
                let mut scratch = Scratch::default();
                let mut split = SplitScratch::default();
                let mut words = Vec::new();
                let mut escaped;
                for fragment in fragments {
                    match fragment {
                        Fragment::Token(id) => out.push(id),
                        Fragment::Text(range) => {
                            let mut piece = &text[range];
                            if self.flags.escape_whitespaces {
                                escaped = piece.replace(' ', "\u{2581}");
                                piece = &escaped;
                            }
                            pre.split(piece, &mut split, &mut words);
                            for word in &words {
                                bpe.encode_word(
                                    piece[word.clone()].as_bytes(),
                                    &mut scratch,
                                    &mut out,
                                );
                            }
                        }
                    }
                }
            }
            Model::Spm {
                scores,
                split_at_spaces,
            } => {
                let mut scratch = SpmScratch::default();
                let mut prev_special = true;
                let mut buffer = String::new();
                for fragment in fragments {
                    match fragment {
                        Fragment::Token(id) => {
                            out.push(id);
                            prev_special = true;
                        }
                        Fragment::Text(range) => {
                            buffer.clear();
                            if self.flags.add_space_prefix && prev_special {
                                buffer.push('\u{2581}');
                            }
                            buffer.extend(text[range].chars().map(|c| {
                                if c == ' ' {
                                    '\u{2581}'
                                } else {
                                    c
                                }
                            }));
                            let mut start = 0;
                            if *split_at_spaces {
                                let mut previous = '\u{2581}';
                                for (at, c) in buffer.char_indices() {
                                    if c == '\u{2581}' && previous != '\u{2581}' {
                                        let segment = &buffer[start..at];
                                        spm::encode(
                                            segment,
                                            &self.lookup,
                                            scores,
                                            &self.byte_token,
                                            &mut scratch,
                                            &mut out,
                                        );
                                        start = at;
                                    }
                                    previous = c;
                                }
                            }
                            spm::encode(
                                &buffer[start..],
                                &self.lookup,
                                scores,
                                &self.byte_token,
                                &mut scratch,
                                &mut out,
                            );
                            prev_special = false;
                        }
                    }
                }
            }
            Model::Wpm {
                max_token_len,
                lowercase,
                strip_accents,
            } => {
                for fragment in fragments {
                    match fragment {
                        Fragment::Token(id) => out.push(id),
                        Fragment::Text(range) => {
                            for word in wpm::words(&text[range], *lowercase, *strip_accents) {
                                wpm::encode_word(
                                    &word,
                                    &self.lookup,
                                    *max_token_len,
                                    self.special.unknown,
                                    &mut out,
                                );
                            }
                        }
                    }
                }
            }
            Model::Ugm(ugm) => {
                for fragment in fragments {
                    match fragment {
                        Fragment::Token(id) => out.push(id),
                        Fragment::Text(range) => {
                            ugm.encode(&text[range], self.special.unknown, &mut out)
                        }
                    }
                }
            }
        }
        if add_special && wpm {
            out.extend(self.special.separator);
        } else if add_special && self.add_eos {
            out.extend(self.special.eos);
        }
        if add_special && self.add_bos && out.len() >= 2 && Some(out[1]) == self.special.bos {
            tracing::warn!(
                "the prompt starts with a BOS token and another was added: 2 BOS tokens"
            );
        }
        Ok(out)
    }

    /// Cuts special tokens out of `text` as llama.cpp's `tokenizer_st_partition` does: token by
    /// token, longest first, every occurrence in every remaining stretch of text; whitespace next
    /// to a token with the LSTRIP / RSTRIP attribute goes with it. Control tokens are not cut out
    /// where they overlap a `literal` range.
    fn partition(
        &self,
        text: &str,
        parse_special: bool,
        literal: &[Range<usize>],
    ) -> Vec<Fragment> {
        let mut fragments = Vec::new();
        if text.is_empty() {
            return fragments;
        }
        fragments.push(Fragment::Text(0..text.len()));
        let skipped_unless_parsing = TokenAttr::CONTROL.with(TokenAttr::UNKNOWN);
        let is_space = |b: u8| matches!(b, b' ' | b'\t' | b'\n' | 0x0B | 0x0C | b'\r');
        let bytes = text.as_bytes();
        let mut next = Vec::new();
        for &id in &self.special_tokens {
            let attr = self.attrs[id as usize];
            let is_control = attr.intersects(skipped_unless_parsing);
            if !parse_special && is_control {
                continue;
            }
            let needle = &*self.texts[id as usize];
            next.clear();
            for fragment in fragments.drain(..) {
                let Fragment::Text(range) = fragment else {
                    next.push(fragment);
                    continue;
                };
                let mut start = range.start;
                let mut from = start;
                while let Some(found) = text[from..range.end].find(needle) {
                    let at = from + found;
                    let end = at + needle.len();
                    if is_control && literal.iter().any(|l| l.start < end && at < l.end) {
                        // Text here: look on past this occurrence's first character.
                        from = at + text[at..].chars().next().map_or(1, char::len_utf8);
                        continue;
                    }
                    if at > start {
                        let mut left_end = at;
                        if attr.intersects(TokenAttr::LSTRIP) {
                            while left_end > start && is_space(bytes[left_end - 1]) {
                                left_end -= 1;
                            }
                        }
                        if left_end > start {
                            next.push(Fragment::Text(start..left_end));
                        }
                    }
                    next.push(Fragment::Token(id));
                    start = end;
                    if start < range.end && attr.intersects(TokenAttr::RSTRIP) {
                        while start < range.end && is_space(bytes[start]) {
                            start += 1;
                        }
                    }
                    from = start;
                }
                if start < range.end {
                    next.push(Fragment::Text(start..range.end));
                }
            }
            std::mem::swap(&mut fragments, &mut next);
        }
        fragments
    }

    /// `llama_token_to_piece(id, special)`: the bytes a token stands for. Control and unknown
    /// tokens give nothing unless `special`; user-defined tokens always give their text; byte
    /// tokens give their byte. A piece may be part of a UTF-8 character.
    pub fn token_to_piece(&self, id: u32, special: bool) -> Result<&[u8], TokenizerError> {
        let index = self.index(id)?;
        if !special && self.attrs[index].intersects(TokenAttr::CONTROL.with(TokenAttr::UNKNOWN)) {
            return Ok(&[]);
        }
        Ok(&self.pieces[self.piece_at[index]..self.piece_at[index + 1]])
    }

    /// `llama_detokenize(ids, remove_special, unparse_special)`: the pieces concatenated, less
    /// SentencePiece's leading space on the first (when no BOS leads), less a leading BOS and a
    /// trailing EOS when `remove_special` and the vocabulary adds them, spaces cleaned where the
    /// vocabulary says so.
    pub fn detokenize(
        &self,
        ids: &[u32],
        remove_special: bool,
        unparse_special: bool,
    ) -> Result<Vec<u8>, TokenizerError> {
        let mut ids = ids;
        let mut remove_space = self.flags.add_space_prefix;
        if remove_special && self.add_bos {
            if let [first, rest @ ..] = ids {
                if Some(*first) == self.special.bos {
                    remove_space = false;
                    ids = rest;
                }
            }
        }
        if remove_special && self.add_eos {
            if let [rest @ .., last] = ids {
                if Some(*last) == self.special.eos {
                    ids = rest;
                }
            }
        }
        let mut bytes = Vec::new();
        for &id in ids {
            let mut piece = self.token_to_piece(id, unparse_special)?;
            if remove_space {
                piece = piece.strip_prefix(b" ").unwrap_or(piece);
            }
            remove_space = false;
            bytes.extend_from_slice(piece);
        }
        if self.flags.clean_spaces {
            pieces::clean_spaces(&mut bytes);
        }
        Ok(bytes)
    }

    /// The pieces of `ids` concatenated (what printing each token's piece shows).
    pub fn decode_bytes(&self, ids: &[u32], special: bool) -> Result<Vec<u8>, TokenizerError> {
        let mut bytes = Vec::new();
        for &id in ids {
            bytes.extend_from_slice(self.token_to_piece(id, special)?);
        }
        Ok(bytes)
    }

    /// [`Tokenizer::decode_bytes`] as text; invalid UTF-8 becomes U+FFFD.
    pub fn decode(&self, ids: &[u32], special: bool) -> Result<String, TokenizerError> {
        Ok(String::from_utf8_lossy(&self.decode_bytes(ids, special)?).into_owned())
    }

    pub fn vocab_size(&self) -> usize {
        self.texts.len()
    }

    /// `tokenizer.ggml.model` (`gpt2`, `gemma4`, `llama`, `bert`, `t5`).
    pub fn kind(&self) -> &str {
        &self.model_name
    }

    /// The algorithm: BPE, SPM, WPM or UGM (llama.cpp's vocabulary types).
    pub fn algorithm(&self) -> TokenizerKind {
        match self.model {
            Model::Bpe { .. } => TokenizerKind::Bpe,
            Model::Spm { .. } => TokenizerKind::Spm,
            Model::Wpm { .. } => TokenizerKind::Wpm,
            Model::Ugm(_) => TokenizerKind::Ugm,
        }
    }

    /// The pre-tokenizer: `tokenizer.ggml.pre` for BPE (`default` when the file has none,
    /// `gemma4` for Gemma 4); `default` for the other kinds, which have none.
    pub fn pre(&self) -> &str {
        &self.pre
    }

    /// Whether `encode(…, add_special = true, …)` ends a WordPiece sequence with SEP (and the
    /// vocabulary's `add_sep` flag for the others).
    pub fn add_sep(&self) -> bool {
        self.flags.add_sep
    }

    /// SentencePiece's leading space: added before the text, removed from the first piece when
    /// detokenizing.
    pub fn add_space_prefix(&self) -> bool {
        self.flags.add_space_prefix
    }

    /// Whether [`Tokenizer::detokenize`] cleans spaces before punctuation.
    pub fn clean_spaces(&self) -> bool {
        self.flags.clean_spaces
    }

    pub fn bos(&self) -> Option<u32> {
        self.special.bos
    }

    pub fn eos(&self) -> Option<u32> {
        self.special.eos
    }

    pub fn eot(&self) -> Option<u32> {
        self.special.eot
    }

    /// Every resolved special id (BOS, EOS, EOT, EOM, padding, FIM …).
    pub fn special_ids(&self) -> &SpecialTokenIds {
        &self.special
    }

    /// The end-of-generation set as llama.cpp builds it (EOS, EOT, EOM, FIM pad/repo/separator
    /// and tokens such as `<|im_end|>`, `<|endoftext|>`, `<|eot_id|>`), ascending.
    pub fn eog_ids(&self) -> &[u32] {
        &self.eog
    }

    pub fn is_eog(&self, id: u32) -> bool {
        self.eog.binary_search(&id).is_ok()
    }

    /// Whether `encode(…, add_special = true, …)` starts with BOS.
    pub fn add_bos(&self) -> bool {
        self.add_bos
    }

    /// Whether `encode(…, add_special = true, …)` ends with EOS.
    pub fn add_eos(&self) -> bool {
        self.add_eos
    }

    /// `bos_token` / `eos_token` as chat templates see them: the vocabulary text of those tokens
    /// (empty when the vocabulary has none).
    pub fn template_specials(&self) -> crate::chat_template::SpecialTokens {
        let text = |id: Option<u32>| {
            id.and_then(|id| self.token_text(id))
                .unwrap_or_default()
                .to_owned()
        };
        crate::chat_template::SpecialTokens {
            bos_token: text(self.bos()),
            eos_token: text(self.eos()),
        }
    }

    /// A token's text as stored in the vocabulary (byte-level form for normal tokens).
    pub fn token_text(&self, id: u32) -> Option<&str> {
        self.texts.get(id as usize).map(|t| &**t)
    }

    /// The token whose stored text is exactly `text`.
    pub fn token_id(&self, text: &str) -> Option<u32> {
        match &self.model {
            Model::Bpe { bpe, .. } => bpe.token_id(text),
            _ => self.lookup.get(text).copied(),
        }
    }

    /// The type the file declares for a token.
    pub fn token_type(&self, id: u32) -> Option<TokenType> {
        self.types.get(id as usize).copied()
    }

    /// A token's effective attributes (declared type plus llama.cpp's load-time adjustments).
    pub fn token_attr(&self, id: u32) -> Option<TokenAttr> {
        self.attrs.get(id as usize).copied()
    }

    fn index(&self, id: u32) -> Result<usize, TokenizerError> {
        let index = id as usize;
        if index < self.texts.len() {
            Ok(index)
        } else {
            Err(TokenizerError::TokenOutOfRange {
                id,
                vocab_size: self.texts.len(),
            })
        }
    }
}

impl fmt::Debug for Tokenizer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Tokenizer")
            .field("model", &self.model_name)
            .field("pre", &self.pre)
            .field("vocab_size", &self.texts.len())
            .field("special", &self.special)
            .field("add_bos", &self.add_bos)
            .field("add_eos", &self.add_eos)
            .field("eog", &self.eog)
            .finish_non_exhaustive()
    }
}
