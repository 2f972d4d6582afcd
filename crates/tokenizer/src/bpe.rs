//! Byte-level BPE: the merge table and the merge loop of llama.cpp's `llm_tokenizer_bpe_session`.
//!
//! Hand-written rather than taken from the `tokenizers` crate because llama.cpp's rules differ in
//! corners that change ids: a merge applies even when its result is not a token (HF refuses such a
//! table), a final symbol that is not a token falls back to the single-character tokens of its
//! printable-ASCII bytes (others are dropped), duplicate merges keep their first rank, and some
//! pre-tokenizers emit a word that is itself a token without merging (`ignore_merges`).
//!
//! Symbols are interned: every token text and every merge operand or result gets an id (token ids
//! for tokens, ids past the vocabulary for the rest), so the merge loop compares and looks up
//! integers. A word is processed as its raw bytes, each byte standing for its byte-level character.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use crate::fast_hash::FastMap;

use crate::error::TokenizerError;
use crate::unicode::BYTE_TO_CHAR;

/// A symbol that names no token and appears in no merge.
const NO_SYMBOL: u32 = u32::MAX;

pub(crate) struct Bpe {
    /// Text of every interned symbol → its id; ids below `n_vocab` are token ids.
    symbols: FastMap<Box<str>, u32>,
    n_vocab: u32,
    /// `(left << 32) | right` → (rank, merged symbol).
    merges: FastMap<u64, (u32, u32)>,
    /// The symbol of each byte's byte-level character.
    byte_symbol: [u32; 256],
    ignore_merges: bool,
    /// SPM-style BPE (Gemma 4): words are raw UTF-8, a symbol starts as one character, and a
    /// symbol left that is no token falls back to `<0xXX>` tokens.
    raw_utf8: bool,
    /// The `<0xXX>` token of each byte (raw mode).
    byte_token: [u32; 256],
    /// Gemma 4: a word of newlines that is itself a token is emitted whole.
    whole_newline_words: bool,
}

/// How a BPE vocabulary treats words.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct BpeOptions {
    pub ignore_merges: bool,
    pub raw_utf8: bool,
    pub whole_newline_words: bool,
}

impl Bpe {
    /// `tokens[i]` is the text of token `i` (none empty); `merges` are `"left right"` lines,
    /// rank = position.
    pub(crate) fn new(
        tokens: &[Box<str>],
        merges: &[String],
        options: BpeOptions,
    ) -> Result<Bpe, TokenizerError> {
        let n_vocab =
            u32::try_from(tokens.len()).map_err(|_| TokenizerError::VocabularyTooLarge {
                n_tokens: tokens.len(),
            })?;
        let mut symbols: FastMap<Box<str>, u32> =
            FastMap::with_capacity_and_hasher(tokens.len() + merges.len() / 4, Default::default());
        for (id, text) in (0..n_vocab).zip(tokens) {
            if let Some(first) = symbols.insert(text.clone(), id) {
                return Err(TokenizerError::DuplicateToken {
                    text: text.to_string(),
                    first,
                    second: id,
                });
            }
        }

        let mut next_symbol = n_vocab;
        let mut intern =
            |symbols: &mut FastMap<Box<str>, u32>, text: &str| -> Result<u32, TokenizerError> {
                if let Some(&id) = symbols.get(text) {
                    return Ok(id);
                }
                let id = next_symbol;
                next_symbol = next_symbol
                    .checked_add(1)
                    .filter(|&n| n != NO_SYMBOL)
                    .ok_or(TokenizerError::VocabularyTooLarge {
                        n_tokens: tokens.len() + merges.len(),
                    })?;
                symbols.insert(text.into(), id);
                Ok(id)
            };

        let mut merge_map = FastMap::with_capacity_and_hasher(merges.len(), Default::default());
        let mut joined = String::new();
        for (rank, line) in (0..u32::MAX).zip(merges) {
            // As llama.cpp: split at the first space after the first byte; a line without one
            // yields an empty pair, which no symbol can ever match.
            let Some(space) = line.bytes().skip(1).position(|b| b == b' ').map(|i| i + 1) else {
                continue;
            };
            let (left, right) = (&line[..space], &line[space + 1..]);
            if left.is_empty() || right.is_empty() {
                continue;
            }
            let left_id = intern(&mut symbols, left)?;
            let right_id = intern(&mut symbols, right)?;
            joined.clear();
            joined.push_str(left);
            joined.push_str(right);
            let merged = intern(&mut symbols, &joined)?;
            merge_map
                .entry(pair_key(left_id, right_id))
                .or_insert((rank, merged));
        }

        let mut byte_symbol = [NO_SYMBOL; 256];
        let mut utf8 = [0u8; 4];
        for (b, slot) in byte_symbol.iter_mut().enumerate() {
            let text: &str = BYTE_TO_CHAR[b].encode_utf8(&mut utf8);
            if let Some(&id) = symbols.get(text) {
                *slot = id;
            }
        }

        let mut byte_token = [NO_SYMBOL; 256];
        for (b, slot) in byte_token.iter_mut().enumerate() {
            if let Some(&id) = symbols.get(format!("<0x{b:02X}>").as_str()) {
                *slot = id;
            }
        }

        Ok(Bpe {
            symbols,
            n_vocab,
            merges: merge_map,
            byte_symbol,
            ignore_merges: options.ignore_merges,
            raw_utf8: options.raw_utf8,
            byte_token,
            whole_newline_words: options.whole_newline_words,
        })
    }

    /// The token whose text is `text`, if any.
    pub(crate) fn token_id(&self, text: &str) -> Option<u32> {
        self.symbols
            .get(text)
            .copied()
            .filter(|&id| id < self.n_vocab)
    }

    /// Appends the tokens of one pre-tokenized word (raw UTF-8 bytes).
    pub(crate) fn encode_word(&self, word: &[u8], scratch: &mut Scratch, out: &mut Vec<u32>) {
        if word.is_empty() {
            return;
        }
        let whole_newlines = self.whole_newline_words && word.iter().all(|&b| b == b'\n');
        if self.ignore_merges || whole_newlines {
            let text = if self.raw_utf8 {
                std::str::from_utf8(word).unwrap_or_default()
            } else {
                scratch.encoded.clear();
                scratch
                    .encoded
                    .extend(word.iter().map(|&b| BYTE_TO_CHAR[b as usize]));
                &scratch.encoded
            };
            if let Some(id) = self.token_id(text) {
                out.push(id);
                return;
            }
        }

        let symbols = &mut scratch.symbols;
        symbols.clear();
        if self.raw_utf8 {
            // Words come from a &str, so every character boundary is one.
            let text = std::str::from_utf8(word).unwrap_or_default();
            let n = text.chars().count();
            for (k, (i, c)) in text.char_indices().enumerate() {
                let end = i + c.len_utf8();
                symbols.push(Symbol {
                    start: i,
                    end,
                    id: self
                        .symbols
                        .get(&text[i..end])
                        .copied()
                        .unwrap_or(NO_SYMBOL),
                    prev: k.checked_sub(1),
                    next: (k + 1 < n).then_some(k + 1),
                });
            }
        } else {
            for (i, &b) in word.iter().enumerate() {
                symbols.push(Symbol {
                    start: i,
                    end: i + 1,
                    id: self.byte_symbol[b as usize],
                    prev: i.checked_sub(1),
                    next: (i + 1 < word.len()).then_some(i + 1),
                });
            }
        }

        let queue = &mut scratch.queue;
        queue.clear();
        for left in 0..symbols.len().saturating_sub(1) {
            self.push_pair(symbols, queue, Some(left), Some(left + 1));
        }

        // Lowest rank first, leftmost among equal ranks, as llama.cpp's comparator orders them.
        while let Some(Reverse(candidate)) = queue.pop() {
            let (left, right) = (candidate.left, candidate.right);
            // Stale when either side has changed since the pair was queued: the left symbol only
            // changes by absorbing the right one, so comparing both ids is enough.
            if symbols[left].id != candidate.left_id || symbols[right].id != candidate.right_id {
                continue;
            }
            let absorbed = symbols[right];
            let merged = &mut symbols[left];
            merged.id = candidate.merged;
            merged.end = absorbed.end;
            merged.next = absorbed.next;
            let prev = merged.prev;
            symbols[right].id = NO_SYMBOL;
            symbols[right].end = symbols[right].start;
            if let Some(next) = absorbed.next {
                symbols[next].prev = Some(left);
            }
            self.push_pair(symbols, queue, prev, Some(left));
            self.push_pair(symbols, queue, Some(left), absorbed.next);
        }

        let mut at = Some(0);
        while let Some(i) = at {
            let symbol = symbols[i];
            if symbol.id < self.n_vocab {
                out.push(symbol.id);
            } else if self.raw_utf8 {
                for &b in &word[symbol.start..symbol.end] {
                    let id = self.byte_token[b as usize];
                    if id < self.n_vocab {
                        out.push(id);
                    }
                }
            } else {
                // llama.cpp looks up each byte of the symbol's byte-level text as a one-byte
                // token: only the printable-ASCII bytes can be one.
                for &b in &word[symbol.start..symbol.end] {
                    let single = self.byte_symbol[b as usize];
                    if (0x21..=0x7E).contains(&b) && single < self.n_vocab {
                        out.push(single);
                    }
                }
            }
            at = symbol.next;
        }
    }

    fn push_pair(
        &self,
        symbols: &[Symbol],
        queue: &mut BinaryHeap<Reverse<Candidate>>,
        left: Option<usize>,
        right: Option<usize>,
    ) {
        let (Some(left), Some(right)) = (left, right) else {
            return;
        };
        let (left_id, right_id) = (symbols[left].id, symbols[right].id);
        if left_id == NO_SYMBOL || right_id == NO_SYMBOL {
            return;
        }
        if let Some(&(rank, merged)) = self.merges.get(&pair_key(left_id, right_id)) {
            queue.push(Reverse(Candidate {
                rank,
                left,
                right,
                left_id,
                right_id,
                merged,
            }));
        }
    }
}

fn pair_key(left: u32, right: u32) -> u64 {
    (u64::from(left) << 32) | u64::from(right)
}

#[derive(Clone, Copy, Debug)]
struct Symbol {
    start: usize,
    end: usize,
    id: u32,
    prev: Option<usize>,
    next: Option<usize>,
}

/// A queued merge; ordered by rank, then by the left symbol's position.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Candidate {
    rank: u32,
    left: usize,
    right: usize,
    left_id: u32,
    right_id: u32,
    merged: u32,
}

/// Buffers reused across the words of one `encode` call.
#[derive(Default)]
pub(crate) struct Scratch {
    symbols: Vec<Symbol>,
    queue: BinaryHeap<Reverse<Candidate>>,
    encoded: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strings(items: &[&str]) -> Vec<String> {
        items.iter().map(|s| s.to_string()).collect()
    }

    fn texts(items: &[&str]) -> Vec<Box<str>> {
        items.iter().map(|&s| s.into()).collect()
    }

    fn encode(bpe: &Bpe, word: &str) -> Vec<u32> {
        let mut out = Vec::new();
        bpe.encode_word(word.as_bytes(), &mut Scratch::default(), &mut out);
        out
    }

    #[test]
    fn merges_apply_by_rank_then_leftmost() {
        // "aaa": the pair (a,a) matches at 0 and 1; the leftmost merges, leaving "aa" + "a".
        let tokens = texts(&["a", "aa", "b", "ab", "aab"]);
        let bpe = Bpe::new(
            &tokens,
            &strings(&["a a", "a b", "aa b"]),
            BpeOptions::default(),
        )
        .unwrap();
        assert_eq!(encode(&bpe, "aaa"), [1, 0]);
        // "aab": rank 0 (a a) beats rank 1 (a b); then (aa b) at rank 2.
        assert_eq!(encode(&bpe, "aab"), [4]);
    }

    #[test]
    fn a_merge_through_a_non_token_still_applies() {
        // "xy" is not a token, but the merges xy+z → "xyz" are, as in llama.cpp.
        let tokens = texts(&["x", "y", "z", "xyz"]);
        let bpe = Bpe::new(&tokens, &strings(&["x y", "xy z"]), BpeOptions::default()).unwrap();
        assert_eq!(encode(&bpe, "xyz"), [3]);
        // Stuck on the non-token "xy": its printable bytes fall back to their own tokens.
        assert_eq!(encode(&bpe, "xy"), [0, 1]);
    }

    #[test]
    fn ignore_merges_emits_a_whole_word_token_directly() {
        // Without ignore_merges the merges give a+b, c: "abc" as one token is never formed.
        let tokens = texts(&["a", "b", "c", "ab", "abc"]);
        let merges = strings(&["a b"]);
        assert_eq!(
            encode(
                &Bpe::new(&tokens, &merges, BpeOptions::default()).unwrap(),
                "abc"
            ),
            [3, 2]
        );
        assert_eq!(
            encode(
                &Bpe::new(
                    &tokens,
                    &merges,
                    BpeOptions {
                        ignore_merges: true,
                        ..BpeOptions::default()
                    }
                )
                .unwrap(),
                "abc"
            ),
            [4]
        );
    }

    #[test]
    fn merge_lines_split_at_the_first_space_after_the_first_byte() {
        // Multi-byte operands (byte-level Ġ) and a leading space that belongs to the left side.
        let tokens = texts(&["Ġ", "t", "Ġt", " ", "x", " x"]);
        let bpe = Bpe::new(
            &tokens,
            &strings(&["Ġ t", "  x", "nospace"]),
            BpeOptions::default(),
        )
        .unwrap();
        assert_eq!(encode(&bpe, " t"), [2]);
        assert_eq!(bpe.merges.len(), 2);
    }

    #[test]
    fn duplicate_tokens_are_rejected() {
        let error = Bpe::new(&texts(&["a", "b", "a"]), &[], BpeOptions::default()).err();
        assert!(matches!(
            error,
            Some(TokenizerError::DuplicateToken {
                first: 0,
                second: 2,
                ..
            })
        ));
    }
}
