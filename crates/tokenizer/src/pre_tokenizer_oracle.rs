//! The pre-tokenizer scanners against the regexes they implement: llama.cpp's literal pattern
//! lists, run by `fancy-regex` with llama.cpp's splitting rule (every match and every gap between
//! matches becomes a piece; each regex splits the pieces of the one before), on random text.

use std::ops::Range;
use std::sync::OnceLock;

use fancy_regex::Regex;
use proptest::prelude::*;

use crate::pre_table::pre_row;
use crate::pre_tokenizer::{PreTokenizer, SplitScratch};

/// The compiled reference regexes (llama.cpp's literal lists), in [`KINDS`] order.
fn compiled() -> &'static [Vec<Regex>] {
    static REGEXES: OnceLock<Vec<Vec<Regex>>> = OnceLock::new();
    REGEXES.get_or_init(|| {
        KINDS
            .iter()
            .map(|&name| {
                pre_row(name)
                    .expect("known")
                    .regexes
                    .iter()
                    .map(|p| Regex::new(p).expect("reference regex compiles"))
                    .collect()
            })
            .collect()
    })
}

fn ours(name: &str) -> PreTokenizer {
    PreTokenizer::new(pre_row(name).expect("known").regexes).expect("compiles")
}

fn oracle(text: &str, regexes: &[Regex]) -> Vec<Range<usize>> {
    let mut pieces: Vec<Range<usize>> = Vec::new();
    if !text.is_empty() {
        pieces.push(0..text.len());
    }
    for regex in regexes {
        let mut next = Vec::new();
        for piece in pieces {
            let mut gap_start = piece.start;
            for found in regex.find_iter(&text[piece.clone()]) {
                let found = found.expect("no backtracking limit on short text");
                let (start, end) = (piece.start + found.start(), piece.start + found.end());
                if start > gap_start {
                    next.push(gap_start..start);
                }
                next.push(start..end);
                gap_start = end;
            }
            if gap_start < piece.end {
                next.push(gap_start..piece.end);
            }
        }
        pieces = next;
    }
    pieces
}

/// The pre-tokenizers made of hand-written scanners (and falcon's one `std::regex` pattern, run by
/// the `regex` module), against `fancy-regex`. The `std::regex` patterns in general are checked
/// against llama.cpp itself (tests/llama_vocabs.rs), since its text collapse changes what some of
/// them mean.
const KINDS: [&str; 7] = [
    "default",
    "gpt-2",
    "smollm",
    "llama-bpe",
    "qwen2",
    "qwen35",
    "falcon",
];

/// Characters (and a few sequences) chosen to hit every branch: letters and numbers of several
/// categories, ASCII and Unicode whitespace, newlines, contraction letters in both cases, the
/// punctuation/symbol split, marks and format characters that are neither.
const ALPHABET: &[&str] = &[
    "a", "Z", "é", "ß", "中", "한", "ª", "1", "9", "٣", "²", "Ⅻ", "½", " ", " ", " ", "\t", "\n",
    "\r", "\r\n", "\u{B}", "\u{C}", "\u{A0}", "\u{3000}", "\u{85}", "\u{2028}", "'", "'", "s", "S",
    "t", "T", "l", "L", "e", "E", "v", "r", "m", "d", "D", ".", ",", "!", "$", "+", "<", "=", ">",
    "^", "~", "|", "`", "€", "😀", "\u{301}", "\u{200B}", "\u{1C}", "_", "-", "@", "\\", "(", "0",
    "'ll", "'RE", "  ", "\n\n",
];

fn text_strategy() -> impl Strategy<Value = String> {
    prop::collection::vec(prop::sample::select(ALPHABET), 0..48).prop_map(|parts| parts.concat())
}

fn check(text: &str) -> Result<(), TestCaseError> {
    for (kind, regexes) in KINDS.iter().zip(compiled()) {
        let mut ours_words = Vec::new();
        ours(kind).split(text, &mut SplitScratch::default(), &mut ours_words);
        let ours = ours_words;
        let expected = oracle(text, regexes);
        prop_assert_eq!(&ours, &expected, "{:?} on {:?}", kind, text);
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(4000))]

    #[test]
    fn scanners_split_like_the_reference_regexes(text in text_strategy()) {
        check(&text)?;
    }
}

/// Kimi K2's list as llama.cpp's splitter reads tiktoken's pattern: Han is llama.cpp's block
/// list (not the Han script: U+3005 is Han script but outside it), the word class is the letters
/// other than Han (no marks), and a contraction of either case may end a word.
const KIMI_K2: &str = concat!(
    r"[\x{4E00}-\x{9FFF}\x{3400}-\x{4DBF}\x{20000}-\x{2A6DF}\x{2A700}-\x{2EBEF}\x{F900}-\x{FAFF}",
    r"\x{2F800}-\x{2FA1F}]+",
    r"|[^\r\n\p{L}\p{N}]?(?:(?![\x{4E00}-\x{9FFF}\x{3400}-\x{4DBF}\x{20000}-\x{2A6DF}",
    r"\x{2A700}-\x{2EBEF}\x{F900}-\x{FAFF}\x{2F800}-\x{2FA1F}])\p{L})+(?i:'s|'t|'re|'ve|'m|'ll|'d)?",
    r"|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+",
);

fn kimi_text() -> impl Strategy<Value = String> {
    let alphabet: Vec<&str> = ALPHABET
        .iter()
        .copied()
        .chain([
            "中",
            "文",
            "\u{3005}",
            "\u{20000}",
            "\u{F900}",
            "\u{2F800}",
            "ア",
            "'S",
        ])
        .collect();
    prop::collection::vec(prop::sample::select(alphabet), 0..48).prop_map(|parts| parts.concat())
}

fn check_kimi(text: &str) -> Result<(), TestCaseError> {
    static REGEX: OnceLock<Regex> = OnceLock::new();
    let regex = REGEX.get_or_init(|| Regex::new(KIMI_K2).expect("compiles"));
    let mut words = Vec::new();
    ours("kimi-k2").split(text, &mut SplitScratch::default(), &mut words);
    prop_assert_eq!(
        &words,
        &oracle(text, std::slice::from_ref(regex)),
        "{:?}",
        text
    );
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(4000))]

    #[test]
    fn kimi_k2_splits_like_its_regex_as_llama_cpp_reads_it(text in kimi_text()) {
        check_kimi(&text)?;
    }
}

#[test]
fn kimi_k2_separates_han_from_other_letters() {
    let text = "日本語の文章と中文句子，还有한국어 He'LL say 1234567\r\n\n  x";
    let mut words = Vec::new();
    ours("kimi-k2").split(text, &mut SplitScratch::default(), &mut words);
    let words: Vec<&str> = words.into_iter().map(|r| &text[r]).collect();
    assert_eq!(
        words,
        [
            "日本語",
            "の",
            "文章",
            "と",
            "中文句子",
            "，",
            "还有",
            "한국어",
            " He'LL",
            " say",
            " ",
            "123",
            "456",
            "7",
            "\r\n\n",
            " ",
            " x"
        ]
    );
    check_kimi(text).unwrap();
}

#[test]
fn scanners_split_like_the_reference_regexes_on_the_golden_texts() {
    for text in [
        "Hello  world",
        "I'm sure they'll say we've done it, haven't we? I'd think so. It's John's.",
        "DON'T SHOUT, I'LL HEAR YOU'VE",
        "3.14159 and 2,718,281 and 1e-9",
        "mixed \r\n line \r endings\n",
        "trailing spaces   ",
        "\u{A0}non-breaking\u{2009}thin\u{200B}zero-width",
        "$100 €200 £300 ¥400",
        "ĠĊ weird byte-level chars ĉ",
    ] {
        check(text).unwrap();
    }
}

#[test]
fn long_whitespace_runs_split_in_one_pass() {
    let text = format!("{}x{}", " ".repeat(200_000), "\n".repeat(3));
    let mut ours_words = Vec::new();
    ours("qwen2").split(&text, &mut SplitScratch::default(), &mut ours_words);
    let ours = ours_words;
    assert_eq!(ours, [0..199_999, 199_999..200_001, 200_001..200_004]);
}
