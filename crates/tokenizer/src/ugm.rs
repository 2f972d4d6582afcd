//! Unigram (`tokenizer.ggml.model = t5`): llama.cpp's `llm_tokenizer_ugm`.
//!
//! The text is normalized first: user-defined tokens pass unchanged, otherwise the longest input
//! prefix found in the precompiled character map (SentencePiece's XOR-compressed double array,
//! `tokenizer.ggml.precompiled_charsmap`) is replaced by its string; then spaces become `▁`
//! (prefixed, merged as the vocabulary says). The token sequence is the Viterbi best
//! segmentation by summed scores (user-defined tokens score 0); a character no token covers costs
//! the lowest score less 10 as the unknown token, and consecutive unknowns merge.

use crate::fast_hash::{FastMap, FastSet};

use crate::error::TokenizerError;

/// The loaded model.
#[derive(Debug)]
pub(crate) struct Ugm {
    /// Normal, user-defined and unused tokens, with the score Viterbi uses; found through
    /// `heads` by [`prefix_hash`] of their text, entries with equal hashes chained by `next`.
    candidates: Vec<Candidate>,
    heads: FastMap<u64, u32>,
    /// [`prefix_hash`] of every prefix of a candidate: the walk from a position extends one byte
    /// at a time (as llama.cpp's trie) and stops at the first prefix no candidate has.
    prefixes: FastSet<u64>,
    max_token_len: usize,
    /// Every byte prefix of a user-defined token: llama.cpp's trie walk, which passes input
    /// through unchanged as far as it follows some user-defined token.
    user_defined_prefixes: FastSet<Box<[u8]>>,
    unknown_score: f64,
    charsmap: Option<CharsMap>,
    pub escape_whitespaces: bool,
    pub add_space_prefix: bool,
    pub remove_extra_whitespaces: bool,
    pub treat_whitespace_as_suffix: bool,
}

#[derive(Debug)]
struct Candidate {
    text: Box<[u8]>,
    id: u32,
    score: f64,
    next: u32,
}

const NO_CANDIDATE: u32 = u32::MAX;

#[derive(Debug)]
struct CharsMap {
    nodes: Vec<u32>,
    replacements: Vec<u8>,
}

/// A token of the vocabulary as UGM sees it.
pub(crate) struct UgmToken<'a> {
    pub text: &'a str,
    pub score: f32,
    pub normal: bool,
    pub user_defined: bool,
    pub unused: bool,
}

impl Ugm {
    pub(crate) fn new<'a>(
        tokens: impl Iterator<Item = UgmToken<'a>>,
        charsmap: Option<&[u8]>,
    ) -> Result<Ugm, TokenizerError> {
        let mut candidates: Vec<Candidate> = Vec::new();
        let mut heads: FastMap<u64, u32> = FastMap::default();
        let mut prefixes = FastSet::default();
        let mut user_defined_prefixes = FastSet::default();
        let mut max_token_len = 0;
        let mut min_score = f32::MAX;
        for (id, token) in (0u32..).zip(tokens) {
            if token.normal {
                min_score = min_score.min(token.score);
            }
            if token.normal || token.user_defined || token.unused {
                let score = if token.user_defined {
                    0.0
                } else {
                    f64::from(token.score)
                };
                let mut hash = PREFIX_HASH_START;
                for &b in token.text.as_bytes() {
                    hash = prefix_hash(hash, b);
                    prefixes.insert(hash);
                }
                let index = u32::try_from(candidates.len()).map_err(|_| {
                    TokenizerError::VocabularyTooLarge {
                        n_tokens: candidates.len(),
                    }
                })?;
                let next = heads.insert(hash, index).unwrap_or(NO_CANDIDATE);
                candidates.push(Candidate {
                    text: Box::from(token.text.as_bytes()),
                    id,
                    score,
                    next,
                });
                max_token_len = max_token_len.max(token.text.len());
            }
            if token.user_defined {
                let bytes = token.text.as_bytes();
                for len in 1..=bytes.len() {
                    user_defined_prefixes.insert(Box::from(&bytes[..len]));
                }
            }
        }
        let charsmap = charsmap.map(CharsMap::parse).transpose()?;
        Ok(Ugm {
            candidates,
            heads,
            prefixes,
            max_token_len,
            user_defined_prefixes,
            unknown_score: f64::from(min_score - 10.0),
            charsmap,
            escape_whitespaces: true,
            add_space_prefix: false,
            remove_extra_whitespaces: false,
            treat_whitespace_as_suffix: false,
        })
    }

    /// Appends the tokens of one text fragment.
    pub(crate) fn encode(&self, text: &str, unknown: Option<u32>, out: &mut Vec<u32>) {
        let normalized = self.normalize(text);
        let n = normalized.len();
        if n == 0 {
            return;
        }
        // (token, start, score) of the best segmentation ending at each byte offset.
        let mut best: Vec<(Option<u32>, usize, f64)> = vec![(unknown, 0, f64::MIN); n + 1];
        best[0] = (unknown, 0, 0.0);
        let mut at = 0;
        while at < n {
            let char_len = utf8_len(normalized[at]).min(n - at);
            let base = best[at].2;
            let mut whole_char = false;
            let limit = n.min(at + self.max_token_len);
            let mut hash = PREFIX_HASH_START;
            for end in at + 1..=limit {
                hash = prefix_hash(hash, normalized[end - 1]);
                if !self.prefixes.contains(&hash) {
                    break;
                }
                if let Some((id, score)) = self.candidate(hash, &normalized[at..end]) {
                    if end - at == char_len {
                        whole_char = true;
                    }
                    let challenger = base + score;
                    if challenger > best[end].2 {
                        best[end] = (Some(id), at, challenger);
                    }
                }
            }
            if !whole_char {
                let end = at + char_len;
                let challenger = base + self.unknown_score;
                if challenger > best[end].2 {
                    best[end] = (unknown, at, challenger);
                }
            }
            at += char_len;
        }

        let start = out.len();
        let mut end = n;
        let mut previous_unknown = false;
        loop {
            let (id, from, _) = best[end];
            let is_unknown = id == unknown;
            if !(previous_unknown && is_unknown) {
                out.extend(id);
            }
            if from == 0 {
                break;
            }
            previous_unknown = is_unknown;
            end = from;
        }
        out[start..].reverse();
    }

    /// The candidate whose text is `text` (`hash` = its prefix hash).
    fn candidate(&self, hash: u64, text: &[u8]) -> Option<(u32, f64)> {
        let mut index = *self.heads.get(&hash)?;
        while index != NO_CANDIDATE {
            let candidate = &self.candidates[index as usize];
            if *candidate.text == *text {
                return Some((candidate.id, candidate.score));
            }
            index = candidate.next;
        }
        None
    }

    fn normalize(&self, input: &str) -> Vec<u8> {
        let space: &[u8] = if self.escape_whitespaces {
            "\u{2581}".as_bytes()
        } else {
            b" "
        };
        let prepend = !self.treat_whitespace_as_suffix && self.add_space_prefix;
        let append = self.treat_whitespace_as_suffix && self.add_space_prefix;
        let merge = self.remove_extra_whitespaces;
        let mut out = Vec::with_capacity(input.len() * 3);
        let mut space_prepended = false;
        let mut in_word = false;
        let mut at = 0;
        let mut replaced = Vec::new();
        while at < input.len() {
            let consumed = self.normalize_prefix(input, at, &mut replaced);
            for &c in &replaced {
                if c != b' ' {
                    if !in_word {
                        in_word = true;
                        if (prepend && !space_prepended) || merge {
                            out.extend_from_slice(space);
                            space_prepended = true;
                        }
                    }
                    out.push(c);
                } else {
                    in_word = false;
                    if !merge {
                        out.extend_from_slice(space);
                    }
                }
            }
            at += consumed;
        }
        if append {
            out.extend_from_slice(space);
        }
        out
    }

    /// The normalized form of the input's next piece into `out`; returns the bytes consumed.
    fn normalize_prefix(&self, input: &str, at: usize, out: &mut Vec<u8>) -> usize {
        out.clear();
        let rest = &input.as_bytes()[at..];
        let mut user = 0;
        while user < rest.len()
            && !self.user_defined_prefixes.is_empty()
            && self.user_defined_prefixes.contains(&rest[..user + 1])
        {
            user += 1;
        }
        if user > 0 {
            out.extend_from_slice(&rest[..user]);
            return user;
        }
        if let Some(map) = &self.charsmap {
            if let Some((len, replacement)) = map.longest_prefix(rest) {
                out.extend_from_slice(replacement);
                return len;
            }
        }
        // A piece cut inside a character (after a user-defined prefix) is invalid: U+FFFD.
        let len = utf8_len(rest[0]).min(rest.len());
        match std::str::from_utf8(&rest[..len]) {
            Ok(_) => {
                out.extend_from_slice(&rest[..len]);
                len
            }
            Err(_) => {
                out.extend_from_slice("\u{FFFD}".as_bytes());
                1
            }
        }
    }
}

const PREFIX_HASH_START: u64 = 0xcbf2_9ce4_8422_2325;

/// FNV-1a, one byte at a time, so a prefix's hash extends to the next prefix's.
fn prefix_hash(hash: u64, b: u8) -> u64 {
    (hash ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
}

/// llama.cpp's `unicode_len_utf8`: the sequence length a lead byte announces.
fn utf8_len(lead: u8) -> usize {
    const LOOKUP: [usize; 16] = [1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4];
    LOOKUP[(lead >> 4) as usize]
}

impl CharsMap {
    fn parse(blob: &[u8]) -> Result<CharsMap, TokenizerError> {
        let bad = |what: &str| TokenizerError::MalformedCharsMap {
            reason: what.to_owned(),
        };
        let header: [u8; 4] = blob
            .get(..4)
            .and_then(|h| h.try_into().ok())
            .ok_or_else(|| bad("shorter than its 4-byte header"))?;
        let size = u32::from_le_bytes(header) as usize;
        if !size.is_multiple_of(4) || 4 + size >= blob.len() {
            return Err(bad("the double-array size exceeds the blob"));
        }
        let nodes = blob[4..4 + size]
            .chunks_exact(4)
            .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect();
        Ok(CharsMap {
            nodes,
            replacements: blob[4 + size..].to_vec(),
        })
    }

    /// The longest prefix of `input` the map knows, with its replacement.
    fn longest_prefix(&self, input: &[u8]) -> Option<(usize, &[u8])> {
        let node = |i: usize| self.nodes.get(i).copied();
        let base = |packed: u32| (packed >> 10) << ((packed & (1 << 9)) >> 6);
        let mut index = base(node(0)?) as usize;
        let mut found = None;
        for (k, &c) in input.iter().enumerate() {
            if c == 0 {
                break;
            }
            index ^= c as usize;
            let packed = node(index)?;
            if packed & ((1 << 31) | 0xFF) != u32::from(c) {
                break;
            }
            let leaf = (packed >> 8) & 1 == 1;
            index ^= base(packed) as usize;
            if leaf {
                let value = node(index)? & ((1 << 31) - 1);
                found = Some((k + 1, value as usize));
            }
        }
        let (len, offset) = found?;
        let tail = self.replacements.get(offset..)?;
        let end = tail.iter().position(|&b| b == 0)?;
        Some((len, &tail[..end]))
    }
}
