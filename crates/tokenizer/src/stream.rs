//! Streaming detokenization: text as tokens arrive, never a character cut in two.
//!
//! A byte-level token can hold part of a UTF-8 character (an emoji is often split over two or
//! three tokens). The decoder keeps the bytes of a character that is still incomplete and emits
//! it when its last byte arrives. Bytes that can never become a character are emitted as U+FFFD
//! as soon as that is certain — a byte that cannot start a character, or a lead byte followed by
//! one that cannot continue it — one U+FFFD per maximal invalid sequence, exactly as
//! `String::from_utf8_lossy` replaces them; [`StreamDecoder::finish`] turns an incomplete
//! character left at the end into one U+FFFD. So the chunks, concatenated, always equal the lossy
//! decoding of all the bytes at once: [`Tokenizer::detokenize`] without removing special tokens,
//! less its space clean-up (which needs the text after each space, so no stream can do it).

use crate::error::TokenizerError;
use crate::tokenizer::Tokenizer;

/// Turns token ids into text incrementally; see the module documentation.
#[derive(Debug)]
pub struct StreamDecoder<'a> {
    tokenizer: &'a Tokenizer,
    special: bool,
    /// Bytes received but not yet emitted: at most the start of one incomplete character.
    pending: Vec<u8>,
    /// The text returned by the last call.
    out: String,
    /// No token pushed yet: SentencePiece's leading space is still to be dropped.
    first: bool,
}

// The decoder's constructor lives here, beside the decoder: the tokenizer itself knows nothing
// of streaming.
impl Tokenizer {
    /// A decoder fed one token at a time that only ever returns whole characters.
    pub fn stream_decoder(&self, special: bool) -> StreamDecoder<'_> {
        StreamDecoder {
            tokenizer: self,
            special,
            pending: Vec::new(),
            out: String::new(),
            first: true,
        }
    }
}

impl StreamDecoder<'_> {
    /// Adds one token and returns the text completed by it (possibly empty).
    pub fn push(&mut self, id: u32) -> Result<&str, TokenizerError> {
        let mut piece = self.tokenizer.token_to_piece(id, self.special)?;
        // As `llama_detokenize`: the first piece loses the space the tokenizer added.
        if std::mem::take(&mut self.first) && self.tokenizer.add_space_prefix() {
            piece = piece.strip_prefix(b" ").unwrap_or(piece);
        }
        self.pending.extend_from_slice(piece);
        self.out.clear();
        let mut rest: &[u8] = &self.pending;
        loop {
            match std::str::from_utf8(rest) {
                Ok(valid) => {
                    self.out.push_str(valid);
                    rest = &[];
                    break;
                }
                Err(error) => {
                    let (valid, after) = rest.split_at(error.valid_up_to());
                    // `valid_up_to` marks a valid prefix: the fallback is never taken.
                    self.out
                        .push_str(std::str::from_utf8(valid).unwrap_or_default());
                    match error.error_len() {
                        Some(invalid) => {
                            self.out.push(char::REPLACEMENT_CHARACTER);
                            rest = &after[invalid..];
                        }
                        // Incomplete at the end: more bytes may finish the character.
                        None => {
                            rest = after;
                            break;
                        }
                    }
                }
            }
        }
        let kept = rest.len();
        let drop = self.pending.len() - kept;
        self.pending.drain(..drop);
        Ok(&self.out)
    }

    /// Ends the stream: an incomplete character still held becomes one U+FFFD.
    pub fn finish(&mut self) -> &str {
        self.out.clear();
        if !self.pending.is_empty() {
            self.out.push_str(&String::from_utf8_lossy(&self.pending));
            self.pending.clear();
        }
        &self.out
    }

    /// Bytes held back because they may start a character not yet complete.
    pub fn pending_bytes(&self) -> &[u8] {
        &self.pending
    }
}
