//! WordPiece (`tokenizer.ggml.model = bert`): llama.cpp's `llm_tokenizer_wpm_session`.
//!
//! BERT's basic tokenization (optional lower-casing and accent stripping, whitespace splits words,
//! punctuation, ASCII symbols and CJK ideographs are words of their own, control characters are
//! dropped), then each word, prefixed with `▁`, is cut greedily into the longest vocabulary
//! entries from the left; a word with a character no entry covers becomes the unknown token.

use crate::fast_hash::FastMap;
use crate::unicode::{class_of, MARK, PUNCTUATION, SYMBOL, WHITESPACE};

/// The words of `text` after BERT's basic tokenization.
pub(crate) fn words(text: &str, lowercase: bool, strip_accents: bool) -> Vec<String> {
    let mut words = vec![String::new()];
    let chars: Box<dyn Iterator<Item = char>> = if strip_accents {
        Box::new(text.chars().map(nfd_first))
    } else {
        Box::new(text.chars())
    };
    for c in chars {
        let class = class_of(c);
        if class & WHITESPACE != 0 {
            if !words.last().is_some_and(String::is_empty) {
                words.push(String::new());
            }
            continue;
        }
        if c == '\0' || c == '\u{FFFD}' || is_control(c) {
            continue;
        }
        if strip_accents && class & MARK != 0 {
            continue;
        }
        let last = words.len() - 1;
        let push = |word: &mut String| {
            if lowercase {
                word.push(lower(c));
            } else {
                word.push(c);
            }
        };
        if class & PUNCTUATION != 0 || ((c as u32) < 0x7F && class & SYMBOL != 0) || is_chinese(c) {
            if !words[last].is_empty() {
                words.push(String::new());
            }
            let at = words.len() - 1;
            push(&mut words[at]);
            words.push(String::new());
        } else {
            push(&mut words[last]);
        }
    }
    if words.last().is_some_and(String::is_empty) {
        words.pop();
    }
    words
}

/// llama.cpp's `unicode_tolower`: one code point to one (the simple lower-case mapping).
fn lower(c: char) -> char {
    if c.is_ascii() {
        return c.to_ascii_lowercase();
    }
    let mut lower = c.to_lowercase();
    match (lower.next(), lower.next()) {
        (Some(l), None) => l,
        // A character whose full lower case is several (İ → i̇) keeps its simple mapping.
        _ if c == 'İ' => 'i',
        _ => c,
    }
}

/// llama.cpp's `unicode_cpts_normalize_nfd` maps each code point to the first code point of its
/// decomposition (the accents are dropped afterwards).
fn nfd_first(c: char) -> char {
    crate::unicode::nfd_base(c)
}

fn is_control(c: char) -> bool {
    if c.is_ascii() {
        return c.is_ascii_control();
    }
    use unicode_general_category::{get_general_category, GeneralCategory as Gc};
    // `\p{C}` as llama.cpp's tables have it: unassigned code points are not in it.
    matches!(
        get_general_category(c),
        Gc::Control | Gc::Format | Gc::PrivateUse | Gc::Surrogate
    )
}

fn is_chinese(c: char) -> bool {
    matches!(c as u32,
        0x4E00..=0x9FFF
        | 0x3400..=0x4DBF
        | 0x20000..=0x2A6DF
        | 0x2A700..=0x2B73F
        | 0x2B740..=0x2B81F
        | 0x2B920..=0x2CEAF
        | 0xF900..=0xFAFF
        | 0x2F800..=0x2FA1F)
}

/// Appends the tokens of one word: `▁word` cut greedily into the longest entries; the unknown
/// token when some position matches nothing.
pub(crate) fn encode_word(
    word: &str,
    lookup: &FastMap<Box<str>, u32>,
    max_token_len: usize,
    unknown: Option<u32>,
    out: &mut Vec<u32>,
) {
    if word.is_empty() {
        return;
    }
    let text = format!("\u{2581}{word}");
    let start_len = out.len();
    let mut i = 0;
    while i < text.len() {
        let limit = text.len().min(i + max_token_len + 1);
        let found = (i + 1..=limit)
            .rev()
            .filter(|&j| text.is_char_boundary(j))
            .find_map(|j| lookup.get(&text[i..j]).map(|&id| (id, j)));
        match found {
            Some((id, j)) => {
                out.push(id);
                i = j;
            }
            None => {
                out.truncate(start_len);
                break;
            }
        }
    }
    if out.len() == start_len {
        out.extend(unknown);
    }
}
