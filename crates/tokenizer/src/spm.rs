//! SentencePiece BPE (`tokenizer.ggml.model = llama`): llama.cpp's `llm_tokenizer_spm_session`.
//!
//! The text (spaces already `▁`) starts as one symbol per character; the adjacent pair whose
//! joined text is a token with the highest score merges first (the leftmost among equal scores),
//! until no pair is a token. A symbol left that is no token is written as its bytes' `<0xXX>`
//! tokens (byte fallback).

use std::collections::BinaryHeap;

use crate::fast_hash::FastMap;

/// A queued pair: higher score first, then the leftmost.
#[derive(Clone, Copy, Debug)]
struct Bigram {
    score: f32,
    left: u32,
    right: u32,
    size: u32,
}

impl PartialEq for Bigram {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == std::cmp::Ordering::Equal
    }
}
impl Eq for Bigram {}
impl PartialOrd for Bigram {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Bigram {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        // llama.cpp's comparator: a < b when a.score < b.score, or equal scores and a.left > b.left.
        self.score
            .total_cmp(&other.score)
            .then(other.left.cmp(&self.left))
    }
}

#[derive(Clone, Copy, Debug)]
struct Symbol {
    start: usize,
    len: usize,
    prev: Option<usize>,
    next: Option<usize>,
}

/// Buffers reused across the fragments of one `encode` call.
#[derive(Default)]
pub(crate) struct SpmScratch {
    symbols: Vec<Symbol>,
    queue: BinaryHeap<Bigram>,
}

/// Appends the tokens of `text` (whitespace already escaped). `lookup` is the vocabulary's text →
/// id map, `scores` the token scores, `byte_token` the fallback token of each byte.
pub(crate) fn encode(
    text: &str,
    lookup: &FastMap<Box<str>, u32>,
    scores: &[f32],
    byte_token: &[Option<u32>; 256],
    scratch: &mut SpmScratch,
    out: &mut Vec<u32>,
) {
    let SpmScratch { symbols, queue } = scratch;
    symbols.clear();
    queue.clear();
    let n = text.chars().count();
    for (k, (at, c)) in text.char_indices().enumerate() {
        symbols.push(Symbol {
            start: at,
            len: c.len_utf8(),
            prev: k.checked_sub(1),
            next: (k + 1 < n).then_some(k + 1),
        });
    }
    let try_pair = |symbols: &[Symbol],
                    queue: &mut BinaryHeap<Bigram>,
                    left: Option<usize>,
                    right: Option<usize>| {
        let (Some(left), Some(right)) = (left, right) else {
            return;
        };
        let (l, r) = (symbols[left], symbols[right]);
        let joined = &text[l.start..r.start + r.len];
        // Symbol indices and sizes fit u32: a fragment over 4 GiB is not a prompt.
        if let Some(&id) = lookup.get(joined) {
            queue.push(Bigram {
                score: scores.get(id as usize).copied().unwrap_or(0.0),
                left: left as u32,
                right: right as u32,
                size: joined.len() as u32,
            });
        }
    };
    for i in 1..symbols.len() {
        try_pair(symbols, queue, Some(i - 1), Some(i));
    }
    while let Some(bigram) = queue.pop() {
        let (left, right) = (bigram.left as usize, bigram.right as usize);
        let (l, r) = (symbols[left], symbols[right]);
        if l.len == 0 || r.len == 0 || l.len + r.len != bigram.size as usize {
            continue;
        }
        symbols[left].len += r.len;
        symbols[right].len = 0;
        symbols[left].next = r.next;
        if let Some(next) = r.next {
            symbols[next].prev = Some(left);
        }
        try_pair(symbols, queue, l.prev, Some(left));
        try_pair(symbols, queue, Some(left), r.next);
    }

    // Every merged symbol is a token (a pair merges only when its text is one), so a symbol
    // that is not a token is a single character: its bytes fall back.
    let mut at = (!symbols.is_empty()).then_some(0);
    while let Some(i) = at {
        let symbol = symbols[i];
        let piece = &text[symbol.start..symbol.start + symbol.len];
        match lookup.get(piece) {
            Some(&id) => out.push(id),
            None => out.extend(piece.bytes().filter_map(|b| byte_token[b as usize])),
        }
        at = symbol.next;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn highest_score_merges_first_and_unknown_characters_fall_back_to_bytes() {
        let vocab = ["a", "b", "c", "ab", "bc", "<0xC3>", "<0xA9>"];
        let lookup: FastMap<Box<str>, u32> = vocab
            .iter()
            .enumerate()
            .map(|(i, t)| (Box::from(*t), i as u32))
            .collect();
        let mut byte_token = [None; 256];
        byte_token[0xC3] = Some(5);
        byte_token[0xA9] = Some(6);
        let mut out = Vec::new();
        // "bc" scores higher than "ab": a + bc.
        encode(
            "abcé",
            &lookup,
            &[0.0, 0.0, 0.0, -2.0, -1.0, 0.0, 0.0],
            &byte_token,
            &mut SpmScratch::default(),
            &mut out,
        );
        assert_eq!(out, [0, 4, 5, 6]);
    }
}
