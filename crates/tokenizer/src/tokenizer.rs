//! [`Tokenizer`]: llama.cpp's `llama_tokenize` and `llama_token_to_piece` for byte-level BPE
//! vocabularies.

use std::fmt;
use std::ops::Range;

use crate::bpe::{Bpe, Scratch};
use crate::error::TokenizerError;
use crate::pre_tokenizer::{self, pre_config, supported_pre_names, PreConfig, PreTokenizerKind};
use crate::unicode::char_to_byte;
use crate::vocab::{self, SpecialTokenIds, TokenAttr, TokenType, VocabSpec};

/// A tokenizer built from a vocabulary; immutable and shareable across threads.
pub struct Tokenizer {
    model: String,
    pre: String,
    pre_kind: PreTokenizerKind,
    /// Token texts by id (an empty token renamed `[EMPTY_<id>]`, as llama.cpp does).
    texts: Vec<Box<str>>,
    types: Vec<TokenType>,
    attrs: Vec<TokenAttr>,
    bpe: Bpe,
    special: SpecialTokenIds,
    add_bos: bool,
    add_eos: bool,
    eog: Vec<u32>,
    /// Control, user-defined and unknown tokens, longest text first: the order in which they are
    /// cut out of the input.
    special_tokens: Vec<u32>,
    /// Every token's piece as `token_to_piece(id, special = true)` gives it, back to back.
    pieces: Vec<u8>,
    /// `pieces[piece_at[id]..piece_at[id + 1]]` is token `id`'s piece.
    piece_at: Vec<usize>,
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
        Tokenizer::from_spec(VocabSpec::from_metadata(metadata)?)
    }

    /// Builds the tokenizer from its inputs, applying llama.cpp's load-time rules.
    pub fn from_spec(spec: VocabSpec<'_>) -> Result<Tokenizer, TokenizerError> {
        if spec.model != "gpt2" {
            return Err(TokenizerError::UnsupportedModel {
                found: spec.model.into_owned(),
            });
        }
        let (pre, config) = match spec.pre.as_deref() {
            Some(name) => match pre_config(name) {
                Some(config) => (name.to_owned(), config),
                None => {
                    return Err(TokenizerError::UnsupportedPre {
                        found: name.to_owned(),
                        supported: supported_pre_names(),
                    })
                }
            },
            None => {
                tracing::warn!(
                    "tokenizer.ggml.pre is missing: using llama.cpp's 'default' pre-tokenizer; \
                     tokenization quality may suffer (regenerate the GGUF to fix)"
                );
                let config = PreConfig {
                    kind: PreTokenizerKind::Default,
                    ignore_merges: false,
                    add_bos_default: false,
                };
                ("default".to_owned(), config)
            }
        };
        let merges = spec.merges.as_deref().ok_or(TokenizerError::MissingKey {
            key: "tokenizer.ggml.merges",
        })?;
        if spec.tokens.is_empty() {
            return Err(TokenizerError::EmptyVocabulary);
        }

        let texts: Vec<Box<str>> = spec
            .tokens
            .iter()
            .enumerate()
            .map(|(id, text)| {
                if text.is_empty() {
                    tracing::warn!("empty token at index {id}");
                    format!("[EMPTY_{id}]").into()
                } else {
                    text.as_str().into()
                }
            })
            .collect();
        let types = vocab::declared_types(&spec, texts.len())?;
        let mut attrs = vocab::declared_attrs(&types);
        let bpe = Bpe::new(&texts, merges, config.ignore_merges)?;
        let resolved = vocab::resolve(&spec, config.add_bos_default, &texts, &mut attrs, |text| {
            bpe.token_id(text)
        })?;

        let special_mask = TokenAttr::CONTROL
            .with(TokenAttr::USER_DEFINED)
            .with(TokenAttr::UNKNOWN);
        let mut special_tokens: Vec<u32> = (0..texts.len())
            .filter(|&id| attrs[id].intersects(special_mask))
            .map(|id| id as u32)
            .collect();
        // llama.cpp's sort is not stable; among equal lengths we keep id order.
        special_tokens.sort_by_key(|&id| std::cmp::Reverse(texts[id as usize].len()));

        let mut pieces = Vec::new();
        let mut piece_at = Vec::with_capacity(texts.len() + 1);
        piece_at.push(0);
        for (id, (text, &attr)) in texts.iter().zip(&attrs).enumerate() {
            append_piece(id as u32, text, attr, &mut pieces)?;
            piece_at.push(pieces.len());
        }

        Ok(Tokenizer {
            model: spec.model.into_owned(),
            pre,
            pre_kind: config.kind,
            texts,
            types,
            attrs,
            bpe,
            special: resolved.special,
            add_bos: resolved.add_bos,
            add_eos: resolved.add_eos,
            eog: resolved.eog,
            special_tokens,
            pieces,
            piece_at,
        })
    }

    /// `llama_tokenize(text, add_special, parse_special)`: BOS/EOS are added per the vocabulary's
    /// flags when `add_special`; control tokens written in the text are recognised only with
    /// `parse_special`, user-defined ones (e.g. Qwen3's `<think>`) always.
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
        if add_special && self.add_bos {
            out.extend(self.special.bos);
        }
        let mut scratch = Scratch::default();
        let mut words = Vec::new();
        for fragment in self.partition(text, parse_special, literal) {
            match fragment {
                Fragment::Token(id) => out.push(id),
                Fragment::Text(range) => {
                    let piece = &text[range];
                    pre_tokenizer::split(piece, self.pre_kind.patterns(), &mut words);
                    for word in &words {
                        self.bpe.encode_word(
                            piece[word.clone()].as_bytes(),
                            &mut scratch,
                            &mut out,
                        );
                    }
                }
            }
        }
        if add_special && self.add_eos {
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
    /// token, longest first, every occurrence in every remaining stretch of text.
    /// Control tokens are not cut out where they overlap a `literal` range.
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
        let mut next = Vec::new();
        for &id in &self.special_tokens {
            let is_control = self.attrs[id as usize].intersects(skipped_unless_parsing);
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
                        next.push(Fragment::Text(start..at));
                    }
                    next.push(Fragment::Token(id));
                    start = end;
                    from = end;
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

    /// `tokenizer.ggml.model` (`gpt2`).
    pub fn kind(&self) -> &str {
        &self.model
    }

    /// `tokenizer.ggml.pre` (`default` when the file has none).
    pub fn pre(&self) -> &str {
        &self.pre
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
        self.bpe.token_id(text)
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
            .field("model", &self.model)
            .field("pre", &self.pre)
            .field("vocab_size", &self.texts.len())
            .field("special", &self.special)
            .field("add_bos", &self.add_bos)
            .field("add_eos", &self.add_eos)
            .field("eog", &self.eog)
            .finish_non_exhaustive()
    }
}

/// Appends `llama_token_to_piece(id, special = true)` for one token.
fn append_piece(
    id: u32,
    text: &str,
    attr: TokenAttr,
    out: &mut Vec<u8>,
) -> Result<(), TokenizerError> {
    let verbatim = TokenAttr::UNKNOWN
        .with(TokenAttr::CONTROL)
        .with(TokenAttr::USER_DEFINED);
    if attr.intersects(verbatim) {
        out.extend_from_slice(text.as_bytes());
    } else if attr.intersects(TokenAttr::NORMAL) {
        for c in text.chars() {
            match char_to_byte(c) {
                Some(b) => out.push(b),
                None => {
                    // llama.cpp's marker for a character outside the byte-level alphabet.
                    let mut utf8 = [0u8; 4];
                    out.extend_from_slice(b"[UNK_BYTE_0x");
                    for b in c.encode_utf8(&mut utf8).bytes() {
                        out.extend_from_slice(format!("{b:02x}").as_bytes());
                    }
                    out.extend_from_slice(text.as_bytes());
                    out.push(b']');
                }
            }
        }
    } else if attr.intersects(TokenAttr::BYTE) {
        out.push(byte_token_value(id, text)?);
    }
    // Unused and undefined tokens have no piece.
    Ok(())
}

/// The byte of a `<0xHH>` token: llama.cpp reads the two characters after `<0x` with `strtol`,
/// so it is as lenient (leading spaces, a sign, fewer digits).
fn byte_token_value(id: u32, text: &str) -> Result<u8, TokenizerError> {
    let bytes = text.as_bytes();
    let Some(digits) = bytes.get(3..bytes.len().min(5)) else {
        return Err(TokenizerError::MalformedByteToken {
            id,
            text: text.to_owned(),
        });
    };
    let mut rest = digits;
    while let [b' ' | b'\t' | b'\n' | 0x0B | 0x0C | b'\r', tail @ ..] = rest {
        rest = tail;
    }
    let negative = rest.first() == Some(&b'-');
    if matches!(rest.first(), Some(b'-' | b'+')) {
        rest = &rest[1..];
    }
    let mut value: i64 = 0;
    for &b in rest {
        match (b as char).to_digit(16) {
            Some(d) => value = value * 16 + i64::from(d),
            None => break,
        }
    }
    if negative {
        value = -value;
    }
    // C's conversion of the long to char keeps the low byte.
    Ok(value as u8)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn byte_tokens_read_like_strtol() {
        assert_eq!(byte_token_value(0, "<0x0A>").unwrap(), 0x0A);
        assert_eq!(byte_token_value(0, "<0xff>").unwrap(), 0xFF);
        assert_eq!(byte_token_value(0, "<0x7>").unwrap(), 0x07);
        assert_eq!(byte_token_value(0, "<0x").unwrap(), 0);
        assert!(matches!(
            byte_token_value(7, "<0"),
            Err(TokenizerError::MalformedByteToken { id: 7, .. })
        ));
    }
}
