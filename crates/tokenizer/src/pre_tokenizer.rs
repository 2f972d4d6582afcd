//! Pre-tokenization: cutting text into the words BPE merges within, as llama.cpp does per
//! `tokenizer.ggml.pre`.
//!
//! llama.cpp runs a list of regexes per pre-tokenizer type, each one splitting every piece the
//! previous one left (matches and the text between matches both stay pieces). It evaluates the
//! GPT-2 and Llama-3 patterns with hand-written scanners and the others with `std::regex`; all
//! of them are written here as scanners over code points, one per pattern, so that long runs of
//! whitespace cost linear time and no backtracking limit can fail an input. The tests check every
//! scanner against the literal regex (run by `fancy-regex`) on random text.

use std::ops::Range;

use crate::unicode::{class_of, LETTER, NUMBER, PUNCTUATION, WHITESPACE};

/// One regex of a pre-tokenizer's list.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Pattern {
    /// `(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,MAX}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
    /// with MAX = 3 (Llama 3) or 1 (Qwen 2, written `\p{N}` there).
    Llama3 { max_digits: usize },
    /// `'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)`
    Gpt2,
    /// `\p{N}`
    EachNumber,
    /// `\p{N}+`
    NumberRuns,
    /// `[0-9][0-9][0-9]`
    AsciiDigitTriples,
    /// `[\p{P}\$\+<=>\^~\|]+`
    PunctuationRuns,
}

/// The regex lists of the pre-tokenizer types implemented, as llama.cpp's `llm_tokenizer_bpe`
/// sets them up.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PreTokenizerKind {
    /// llama.cpp's `LLAMA_VOCAB_PRE_TYPE_DEFAULT` (also what it uses when `tokenizer.ggml.pre` is absent).
    Default,
    /// GPT-2's pattern alone.
    Gpt2,
    /// Digits one by one, then GPT-2's pattern (StarCoder, SmolLM, …).
    Smollm,
    /// The Llama-3 pattern: digits in groups of up to three.
    Llama3,
    /// The Llama-3 pattern with single digits (Qwen 2/2.5/3).
    Qwen2,
}

impl PreTokenizerKind {
    pub(crate) fn patterns(self) -> &'static [Pattern] {
        match self {
            PreTokenizerKind::Default => &[
                Pattern::PunctuationRuns,
                Pattern::Gpt2,
                Pattern::NumberRuns,
                Pattern::AsciiDigitTriples,
            ],
            PreTokenizerKind::Gpt2 => &[Pattern::Gpt2],
            PreTokenizerKind::Smollm => &[Pattern::EachNumber, Pattern::Gpt2],
            PreTokenizerKind::Llama3 => &[Pattern::Llama3 { max_digits: 3 }],
            PreTokenizerKind::Qwen2 => &[Pattern::Llama3 { max_digits: 1 }],
        }
    }
}

/// What a `tokenizer.ggml.pre` value selects, with the flags llama.cpp ties to that name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct PreConfig {
    pub kind: PreTokenizerKind,
    /// A word that is itself a token is emitted whole, without merging.
    pub ignore_merges: bool,
    /// `add_bos` when `tokenizer.ggml.add_bos_token` is absent.
    pub add_bos_default: bool,
}

/// Every accepted `tokenizer.ggml.pre` value, grouped as llama.cpp's `llama_vocab::impl::load`
/// maps names to pre-tokenizer types (names whose type shares one of these regex lists and needs
/// no further special handling).
const PRE_TABLE: &[(&[&str], PreTokenizerKind, bool, bool)] = &[
    (&["default"], PreTokenizerKind::Default, false, false),
    (
        &[
            "llama3",
            "llama-v3",
            "llama-bpe",
            "falcon3",
            "falcon-h1",
            "pixtral",
            "midm-2.0",
            "lfm2",
            "jina-v5-nano",
        ],
        PreTokenizerKind::Llama3,
        true,
        true,
    ),
    (
        &["dbrx", "smaug-bpe"],
        PreTokenizerKind::Llama3,
        false,
        false,
    ),
    (
        &[
            "qwen2",
            "deepseek-r1-qwen",
            "kormo",
            "f2llmv2",
            "megrez",
            "stablelm2",
            "hunyuan",
            "solar-open",
        ],
        PreTokenizerKind::Qwen2,
        false,
        false,
    ),
    (
        &[
            "smollm",
            "starcoder",
            "refact",
            "command-r",
            "codeshell",
            "exaone",
            "minerva-7b",
            "mellum2",
        ],
        PreTokenizerKind::Smollm,
        false,
        false,
    ),
    (
        &[
            "gpt-2",
            "phi-2",
            "mpt",
            "olmo",
            "jais",
            "gigachat",
            "a.x-4.0",
            "mellum",
            "trillion",
            "granite-docling",
            "exaone4",
        ],
        PreTokenizerKind::Gpt2,
        false,
        false,
    ),
];

/// The configuration for a `tokenizer.ggml.pre` value, `None` when it is not supported.
pub(crate) fn pre_config(name: &str) -> Option<PreConfig> {
    PRE_TABLE
        .iter()
        .find(|(names, ..)| names.contains(&name))
        .map(|&(_, kind, ignore_merges, add_bos_default)| PreConfig {
            kind,
            ignore_merges,
            add_bos_default,
        })
}

/// The supported `tokenizer.ggml.pre` values, comma-separated, for error messages.
pub(crate) fn supported_pre_names() -> String {
    PRE_TABLE
        .iter()
        .flat_map(|(names, ..)| names.iter().copied())
        .collect::<Vec<_>>()
        .join(", ")
}

/// One code point and its class bits.
#[derive(Clone, Copy, Debug)]
struct Cp {
    c: char,
    class: u8,
}

/// Splits `text` into words (byte ranges, in order, covering all of `text`).
pub(crate) fn split(text: &str, patterns: &[Pattern], words: &mut Vec<Range<usize>>) {
    words.clear();
    if text.is_empty() {
        return;
    }
    let mut cps = Vec::with_capacity(text.len());
    let mut byte_at = Vec::with_capacity(text.len() + 1);
    for (at, c) in text.char_indices() {
        cps.push(Cp {
            c,
            class: class_of(c),
        });
        byte_at.push(at);
    }
    byte_at.push(text.len());

    // Piece lengths in code points, as llama.cpp's offsets.
    let mut pieces = vec![cps.len()];
    let mut next = Vec::new();
    for &pattern in patterns {
        next.clear();
        let mut start = 0;
        for &len in &pieces {
            split_piece(pattern, &cps[start..start + len], &mut next);
            start += len;
        }
        std::mem::swap(&mut pieces, &mut next);
    }

    let mut start = 0;
    for len in pieces {
        words.push(byte_at[start]..byte_at[start + len]);
        start += len;
    }
}

fn split_piece(pattern: Pattern, s: &[Cp], out: &mut Vec<usize>) {
    match pattern {
        Pattern::Llama3 { max_digits } => scan(s, out, |s, p| llama3_match(s, p, max_digits)),
        Pattern::Gpt2 => scan(s, out, gpt2_match),
        Pattern::EachNumber => scan(s, out, |s, p| (s[p].class & NUMBER != 0).then_some(1)),
        Pattern::NumberRuns => scan(s, out, |s, p| run(s, p, |cp| cp.class & NUMBER != 0)),
        Pattern::AsciiDigitTriples => scan(s, out, |s, p| {
            (p + 3 <= s.len() && s[p..p + 3].iter().all(|cp| cp.c.is_ascii_digit())).then_some(3)
        }),
        Pattern::PunctuationRuns => scan(s, out, |s, p| {
            run(s, p, |cp| {
                cp.class & PUNCTUATION != 0
                    || matches!(cp.c, '$' | '+' | '<' | '=' | '>' | '^' | '~' | '|')
            })
        }),
    }
}

/// Finds successive leftmost matches the way a regex iterator does: `matcher(s, p)` is the length
/// of the match starting at `p`, if any. Matches and the gaps between them become pieces.
fn scan(s: &[Cp], out: &mut Vec<usize>, matcher: impl Fn(&[Cp], usize) -> Option<usize>) {
    let mut gap_start = 0;
    let mut p = 0;
    while p < s.len() {
        match matcher(s, p) {
            Some(len) if len > 0 => {
                if p > gap_start {
                    out.push(p - gap_start);
                }
                out.push(len);
                p += len;
                gap_start = p;
            }
            _ => p += 1,
        }
    }
    if p > gap_start {
        out.push(p - gap_start);
    }
}

/// Length of the run of code points from `p` that satisfy `member` (`None` when empty).
fn run(s: &[Cp], p: usize, member: impl Fn(&Cp) -> bool) -> Option<usize> {
    let len = s[p..].iter().take_while(|cp| member(cp)).count();
    (len > 0).then_some(len)
}

fn is(s: &[Cp], p: usize, class: u8) -> bool {
    p < s.len() && s[p].class & class != 0
}

/// `'s|'t|'re|'ve|'m|'ll|'d` (lower case only) or, with `any_case`, each letter in either case.
fn contraction(s: &[Cp], p: usize, any_case: bool) -> Option<usize> {
    if s[p].c != '\'' || p + 1 >= s.len() {
        return None;
    }
    let fold = |c: char| if any_case { c.to_ascii_lowercase() } else { c };
    let first = fold(s[p + 1].c);
    if matches!(first, 's' | 't' | 'm' | 'd') {
        return Some(2);
    }
    let second = s.get(p + 2).map(|cp| fold(cp.c));
    match (first, second) {
        ('r', Some('e')) | ('v', Some('e')) | ('l', Some('l')) => Some(3),
        _ => None,
    }
}

/// Length of the whitespace run starting at `p`.
fn whitespace_run(s: &[Cp], p: usize) -> usize {
    s[p..]
        .iter()
        .take_while(|cp| cp.class & WHITESPACE != 0)
        .count()
}

/// `\s+(?!\S)`: a whitespace run, less its last character when a non-space follows it.
fn trailing_whitespace(s: &[Cp], p: usize) -> Option<usize> {
    let n = whitespace_run(s, p);
    if n == 0 {
        None
    } else if p + n == s.len() {
        Some(n)
    } else if n > 1 {
        Some(n - 1)
    } else {
        None
    }
}

/// ` ?X+` where X is a class test: an optional space, then at least one X.
fn space_then_run(s: &[Cp], p: usize, member: impl Fn(&Cp) -> bool) -> Option<usize> {
    let skip = usize::from(s[p].c == ' ');
    if p + skip < s.len() && member(&s[p + skip]) {
        run(s, p + skip, member).map(|n| n + skip)
    } else {
        None
    }
}

fn other(cp: &Cp) -> bool {
    cp.class & (WHITESPACE | LETTER | NUMBER) == 0
}

fn gpt2_match(s: &[Cp], p: usize) -> Option<usize> {
    contraction(s, p, false)
        .or_else(|| space_then_run(s, p, |cp| cp.class & LETTER != 0))
        .or_else(|| space_then_run(s, p, |cp| cp.class & NUMBER != 0))
        .or_else(|| space_then_run(s, p, other))
        .or_else(|| trailing_whitespace(s, p))
}

fn llama3_match(s: &[Cp], p: usize, max_digits: usize) -> Option<usize> {
    if let Some(n) = contraction(s, p, true) {
        return Some(n);
    }
    // [^\r\n\p{L}\p{N}]?\p{L}+
    if is(s, p, LETTER) {
        return run(s, p, |cp| cp.class & LETTER != 0);
    }
    let c = s[p].c;
    if c != '\r' && c != '\n' && !is(s, p, NUMBER) && is(s, p + 1, LETTER) {
        return run(s, p + 1, |cp| cp.class & LETTER != 0).map(|n| n + 1);
    }
    // \p{N}{1,max}
    if is(s, p, NUMBER) {
        return run(s, p, |cp| cp.class & NUMBER != 0).map(|n| n.min(max_digits));
    }
    // ` ?[^\s\p{L}\p{N}]+[\r\n]*`
    if let Some(n) = space_then_run(s, p, other) {
        let newlines = s[p + n..]
            .iter()
            .take_while(|cp| cp.c == '\r' || cp.c == '\n')
            .count();
        return Some(n + newlines);
    }
    // \s*[\r\n]+ : the whitespace run up to and including its last \r or \n.
    let n = whitespace_run(s, p);
    if let Some(last) = s[p..p + n]
        .iter()
        .rposition(|cp| cp.c == '\r' || cp.c == '\n')
    {
        return Some(last + 1);
    }
    // \s+(?!\S) then \s+
    trailing_whitespace(s, p).or((n > 0).then_some(n))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(text: &str, kind: PreTokenizerKind) -> Vec<&str> {
        let mut ranges = Vec::new();
        split(text, kind.patterns(), &mut ranges);
        ranges.into_iter().map(|r| &text[r]).collect()
    }

    #[test]
    fn qwen2_splits_digits_singly_and_keeps_leading_space_on_words() {
        assert_eq!(
            words("Hello  world 2024!\n\n x", PreTokenizerKind::Qwen2),
            ["Hello", " ", " world", " ", "2", "0", "2", "4", "!\n\n", " x"]
        );
    }

    #[test]
    fn llama3_groups_digits_by_three_and_folds_contraction_case() {
        assert_eq!(
            words("12345 I'LL", PreTokenizerKind::Llama3),
            ["123", "45", " I", "'LL"]
        );
    }

    #[test]
    fn smollm_isolates_digits_before_gpt2() {
        assert_eq!(
            words("abc 123x's", PreTokenizerKind::Smollm),
            ["abc", " ", "1", "2", "3", "x", "'s"]
        );
    }

    #[test]
    fn every_piece_is_kept_in_order() {
        for kind in [
            PreTokenizerKind::Default,
            PreTokenizerKind::Gpt2,
            PreTokenizerKind::Smollm,
            PreTokenizerKind::Llama3,
            PreTokenizerKind::Qwen2,
        ] {
            let text = "a\t\u{A0} b,, 12345 €$ \r\n  \n";
            assert_eq!(words(text, kind).concat(), text, "{kind:?}");
        }
    }

    #[test]
    fn pre_names_resolve_to_their_llama_cpp_family() {
        assert_eq!(
            pre_config("qwen2").map(|c| c.kind),
            Some(PreTokenizerKind::Qwen2)
        );
        let llama = pre_config("llama-bpe").expect("llama-bpe is supported");
        assert!(llama.ignore_merges && llama.add_bos_default);
        assert_eq!(
            pre_config("smollm").map(|c| c.kind),
            Some(PreTokenizerKind::Smollm)
        );
        assert_eq!(pre_config("made-up"), None);
        assert!(supported_pre_names().contains("qwen2"));
    }
}
