//! Pre-tokenization: cutting text into the words BPE merges within, as llama.cpp does per
//! `tokenizer.ggml.pre` (the lists are in `pre_table`).
//!
//! llama.cpp runs a list of regexes per pre-tokenizer type, each one splitting every piece the
//! previous one left (matches and the text between matches both stay pieces). It evaluates a few
//! pattern strings with hand-written splitters (GPT-2, Llama 3, Qwen 2, Qwen 3.5, Kimi K2, newline runs,
//! AFMoE digits) and the rest with `std::regex`. Here the same strings get scanners over code
//! points (linear in long whitespace runs, no backtracking limit), as do a few simple `std::regex`
//! patterns that are hot; every other pattern goes to the `regex` module, which reproduces
//! llama.cpp's `std::regex` route. The tests check the scanners against the literal regexes.

use std::ops::Range;

use crate::pre_table;
use crate::regex::{Regex, RegexError};
use crate::unicode::{classify, Cp, LETTER, MARK, NUMBER, PUNCTUATION, WHITESPACE};

/// A hand-written splitter for one pattern string.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Pattern {
    /// `(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?L+|\p{N}{1,MAX}| ?[^\s L \p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
    /// with MAX = 3 (Llama 3) or 1 (Qwen 2), L = `\p{L}`, or `[\p{L}\p{M}]` with `marks` (Qwen 3.5).
    Llama3 { max_digits: usize, marks: bool },
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
    /// `[^\n]+|[\n]+`
    NewlineRuns,
    /// llama.cpp's `\p{AFMoE_digits}` (also used for tiny_aya's digit grouping).
    AfmoeDigits,
    /// Kimi K2's list, which llama.cpp keys on its first pattern `\p{Han}+` and runs as one
    /// splitter (`kimi_k2_match`).
    KimiK2,
}

impl Pattern {
    /// The scanner for a pattern string, as llama.cpp's `unicode_regex_split_custom` picks one
    /// by exact string (plus the simple patterns scanned here for speed).
    fn for_regex(regex: &str) -> Option<Pattern> {
        Some(match regex {
            pre_table::GPT2 => Pattern::Gpt2,
            pre_table::LLAMA3 => Pattern::Llama3 {
                max_digits: 3,
                marks: false,
            },
            pre_table::QWEN2 => Pattern::Llama3 {
                max_digits: 1,
                marks: false,
            },
            pre_table::QWEN35 => Pattern::Llama3 {
                max_digits: 1,
                marks: true,
            },
            pre_table::NEWLINES => Pattern::NewlineRuns,
            "\\p{AFMoE_digits}" | "\\d{1,3}(?=(?:\\d{3})*\\b)" => Pattern::AfmoeDigits,
            "\\p{Han}+" => Pattern::KimiK2,
            "\\p{N}" => Pattern::EachNumber,
            "\\p{N}+" => Pattern::NumberRuns,
            "[0-9][0-9][0-9]" => Pattern::AsciiDigitTriples,
            "[\\p{P}\\$\\+<=>\\^~\\|]+" => Pattern::PunctuationRuns,
            _ => return None,
        })
    }
}

/// One regex of a pre-tokenizer's list.
#[derive(Debug)]
enum Step {
    Scan(Pattern),
    Regex(Regex),
}

/// A pre-tokenizer: the regex list of one `tokenizer.ggml.pre` row, compiled.
#[derive(Debug)]
pub(crate) struct PreTokenizer {
    steps: Vec<Step>,
}

impl PreTokenizer {
    /// Compiles a regex list; the error names the pattern that could not be compiled.
    pub(crate) fn new(regexes: &[&str]) -> Result<PreTokenizer, (String, RegexError)> {
        let steps = regexes
            .iter()
            .map(|&regex| match Pattern::for_regex(regex) {
                Some(pattern) => Ok(Step::Scan(pattern)),
                None => Regex::new(regex)
                    .map(Step::Regex)
                    .map_err(|e| (regex.to_owned(), e)),
            })
            .collect::<Result<_, _>>()?;
        Ok(PreTokenizer { steps })
    }

    /// Splits `text` into words (byte ranges, in order, covering all of `text`; llama.cpp can
    /// produce empty words, which are kept).
    pub(crate) fn split(
        &self,
        text: &str,
        scratch: &mut SplitScratch,
        words: &mut Vec<Range<usize>>,
    ) {
        words.clear();
        if text.is_empty() {
            return;
        }
        let SplitScratch {
            cps,
            byte_at,
            pieces,
            next,
            units,
        } = scratch;
        classify(text, cps);
        byte_at.clear();
        byte_at.extend(text.char_indices().map(|(at, _)| at));
        byte_at.push(text.len());

        // Piece lengths in code points, as llama.cpp's offsets.
        pieces.clear();
        pieces.push(cps.len());
        for step in &self.steps {
            next.clear();
            match step {
                Step::Scan(pattern) => {
                    let mut start = 0;
                    for &len in pieces.iter() {
                        split_piece(*pattern, &cps[start..start + len], next);
                        start += len;
                    }
                }
                Step::Regex(regex) => {
                    regex.prepare(cps, units);
                    let mut start = 0;
                    for &len in pieces.iter() {
                        regex.split(units, start..start + len, next);
                        start += len;
                    }
                }
            }
            std::mem::swap(pieces, next);
        }

        let mut start = 0;
        for &len in pieces.iter() {
            words.push(byte_at[start]..byte_at[start + len]);
            start += len;
        }
    }
}

/// Buffers reused across calls.
#[derive(Default)]
pub(crate) struct SplitScratch {
    cps: Vec<Cp>,
    byte_at: Vec<usize>,
    pieces: Vec<usize>,
    next: Vec<usize>,
    units: Vec<u32>,
}

fn split_piece(pattern: Pattern, s: &[Cp], out: &mut Vec<usize>) {
    match pattern {
        Pattern::Llama3 { max_digits, marks } => {
            scan(s, out, |s, p| llama3_match(s, p, max_digits, marks))
        }
        Pattern::NewlineRuns => scan(s, out, |s, p| {
            let newline = s[p].c == '\n';
            run(s, p, |cp| (cp.c == '\n') == newline)
        }),
        Pattern::AfmoeDigits => afmoe_digits(s, out),
        Pattern::KimiK2 => scan(s, out, kimi_k2_match),
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

/// llama.cpp's AFMoE digit splitter: each digit run is cut into a leading group of
/// `len % 3` digits and groups of three; the text before a run stays joined to its first group.
fn afmoe_digits(s: &[Cp], out: &mut Vec<usize>) {
    let mut emitted = 0;
    let mut p = 0;
    while p < s.len() {
        if s[p].class & NUMBER == 0 {
            p += 1;
            continue;
        }
        let start = p;
        while p < s.len() && s[p].class & NUMBER != 0 {
            p += 1;
        }
        let mut cut = start + (p - start) % 3;
        if cut == start {
            cut += 3;
        }
        while cut <= p {
            out.push(cut - emitted);
            emitted = cut;
            cut += 3;
        }
    }
    if emitted < s.len() {
        out.push(s.len() - emitted);
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

fn llama3_match(s: &[Cp], p: usize, max_digits: usize, marks: bool) -> Option<usize> {
    if let Some(n) = contraction(s, p, true) {
        return Some(n);
    }
    // [^\r\n\p{L}\p{N}]?W+ with W the word class
    let word = if marks { LETTER | MARK } else { LETTER };
    if is(s, p, word) {
        return run(s, p, |cp| cp.class & word != 0);
    }
    let c = s[p].c;
    if c != '\r' && c != '\n' && !is(s, p, NUMBER) && is(s, p + 1, word) {
        return run(s, p + 1, |cp| cp.class & word != 0).map(|n| n + 1);
    }
    // \p{N}{1,max}
    if is(s, p, NUMBER) {
        return run(s, p, |cp| cp.class & NUMBER != 0).map(|n| n.min(max_digits));
    }
    llama3_tail(s, p, word)
}

/// ` ?[^\s W \p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+` at `p`, W the word class.
fn llama3_tail(s: &[Cp], p: usize, word: u8) -> Option<usize> {
    // ` ?[^\s W \p{N}]+[\r\n]*`
    if let Some(n) = space_then_run(s, p, |cp| cp.class & (WHITESPACE | word | NUMBER) == 0) {
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

/// The Han ideograph blocks llama.cpp's `unicode_cpt_is_han` lists (CJK Unified Ideographs and
/// extensions A–F, the compatibility ideographs and their supplement).
fn is_han(s: &[Cp], p: usize) -> bool {
    p < s.len()
        && matches!(u32::from(s[p].c),
            0x4E00..=0x9FFF
                | 0x3400..=0x4DBF
                | 0x20000..=0x2A6DF
                | 0x2A700..=0x2EBEF
                | 0xF900..=0xFAFF
                | 0x2F800..=0x2FA1F)
}

/// Kimi K2 (tiktoken's pattern, with Han split from the other letters), as llama.cpp's splitter
/// evaluates it:
/// `[\p{Han}]+|[^\r\n\p{L}\p{N}]?L*L+C?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
/// with L the letters other than Han (no marks, as llama.cpp's code, unlike the Python regex)
/// and C an optional contraction of either case that ends the word instead of starting one.
fn kimi_k2_match(s: &[Cp], p: usize) -> Option<usize> {
    if is_han(s, p) {
        return Some((p..s.len()).take_while(|&q| is_han(s, q)).count());
    }
    let letter = |q: usize| is(s, q, LETTER) && !is_han(s, q);
    let c = s[p].c;
    let lead = usize::from(c != '\r' && c != '\n' && !is(s, p, LETTER | NUMBER) && letter(p + 1));
    if lead == 1 || letter(p) {
        let mut q = p + lead;
        while letter(q) {
            q += 1;
        }
        if q < s.len() {
            q += contraction(s, q, true).unwrap_or(0);
        }
        return Some(q - p);
    }
    // The rest is Llama 3's tail: digits by three, punctuation runs, whitespace.
    if is(s, p, NUMBER) {
        return run(s, p, |cp| cp.class & NUMBER != 0).map(|n| n.min(3));
    }
    llama3_tail(s, p, LETTER)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words_of<'t>(text: &'t str, pre: &str) -> Vec<&'t str> {
        words(text, pre)
    }

    fn words<'t>(text: &'t str, pre: &str) -> Vec<&'t str> {
        let row = pre_table::pre_row(pre).expect("known pre-tokenizer");
        let pre = PreTokenizer::new(row.regexes).expect("compiles");
        let mut ranges = Vec::new();
        pre.split(text, &mut SplitScratch::default(), &mut ranges);
        ranges.into_iter().map(|r| &text[r]).collect()
    }

    #[test]
    fn qwen2_splits_digits_singly_and_keeps_leading_space_on_words() {
        assert_eq!(
            words("Hello  world 2024!\n\n x", "qwen2"),
            ["Hello", " ", " world", " ", "2", "0", "2", "4", "!\n\n", " x"]
        );
    }

    #[test]
    fn qwen35_keeps_combining_marks_in_words() {
        // U+0301 (a mark) joins the letters around it; Qwen 2 cuts the word there.
        assert_eq!(words("cafe\u{301}s x", "qwen35"), ["cafe\u{301}s", " x"]);
        assert_eq!(words("cafe\u{301}s x", "qwen2"), ["cafe", "\u{301}s", " x"]);
    }

    #[test]
    fn llama3_groups_digits_by_three_and_folds_contraction_case() {
        assert_eq!(words("12345 I'LL", "llama-bpe"), ["123", "45", " I", "'LL"]);
    }

    #[test]
    fn smollm_isolates_digits_before_gpt2() {
        assert_eq!(
            words("abc 123x's", "smollm"),
            ["abc", " ", "1", "2", "3", "x", "'s"]
        );
    }

    #[test]
    fn afmoe_digits_group_from_the_right_and_keep_the_text_before() {
        let pre = PreTokenizer::new(&["\\p{AFMoE_digits}"]).unwrap();
        let mut ranges = Vec::new();
        let text = "ab1234567 x12";
        pre.split(text, &mut SplitScratch::default(), &mut ranges);
        let words: Vec<&str> = ranges.into_iter().map(|r| &text[r]).collect();
        assert_eq!(words, ["ab1", "234", "567", " x12"]);
        // The whole AFMoE list then cuts letters from digits.
        assert_eq!(words_of("ab1234567", "afmoe"), ["ab", "1", "234", "567"]);
    }

    #[test]
    fn every_row_compiles_and_covers_its_text() {
        for row in pre_table::PRE_TABLE {
            let result = PreTokenizer::new(row.regexes);
            assert!(result.is_ok(), "{:?}: {:?}", row.names, result.err());
            let text = "a\t\u{A0} b,, 12345 €$ \r\n  \n中文";
            assert_eq!(words(text, row.names[0]).concat(), text, "{:?}", row.names);
        }
        assert!(pre_table::pre_row("made-up").is_none());
        assert!(pre_table::supported_pre_names().contains("qwen35"));
    }
}
