//! Tokenizing throughput per tokenizer kind: 1 MB of mixed text (prose, code, numbers, CJK,
//! Cyrillic, emoji) through `encode(text, add_special = false, parse_special = false)` on
//! vocabularies of llama.cpp's test set (scripts/fetch-llama-vocabs.sh), best of 5, in MB/s.
//! `scripts/bench-tokenize.py` times llama.cpp's `llama_tokenize` on the same text and files.
//!
//!     cargo run --profile test -p oxibonsai-tokenizer --example tokenize_bench -- DIR [TEXT_OUT]
//!
//! TEXT_OUT: also write the text there, for the reference side.

use std::time::Instant;

use oxibonsai_tokenizer::Tokenizer;

/// (vocabulary file stem, what it exercises)
const VOCABS: &[(&str, &str)] = &[
    ("qwen35", "BPE, qwen35 scanner"),
    ("llama-bpe", "BPE, llama3 scanner"),
    ("gpt-2", "BPE, gpt-2 scanner"),
    ("deepseek-llm", "BPE, std::regex patterns"),
    ("falcon", "BPE, regex + scanners"),
    ("gemma-4", "BPE, gemma4 (raw UTF-8)"),
    ("llama-spm", "SPM"),
    ("bert-bge", "WPM"),
    ("nomic-bert-moe", "UGM"),
];

const WORDS: &[&str] = &[
    "The",
    "quick",
    "brown",
    "fox",
    "jumps",
    "over",
    "the",
    "lazy",
    "dog.",
    "It's",
    "we'll",
    "they've",
    "1234",
    "3.14159",
    "2024-11-25",
    "fn",
    "main()",
    "{",
    "}",
    "let",
    "x",
    "=",
    "vec![1,",
    "2,",
    "3];",
    "//",
    "comment",
    "if",
    "(a",
    "&&",
    "b)",
    "return;",
    "中文",
    "句子",
    "日本語",
    "한국어",
    "Привет",
    "мир",
    "Γειά",
    "σου",
    "naïve",
    "café",
    "straße",
    "🙂",
    "🚀",
    "—",
    "«quoted»",
    "\"double\"",
    "(parenthetical)",
    "e-mail:",
    "user@example.com",
    "https://example.org/path?q=1",
    "#hashtag",
    "$100",
    "50%",
    "snake_case",
    "camelCase",
];

fn text(bytes: usize) -> String {
    let mut out = String::with_capacity(bytes + 64);
    let mut state: u64 = 0x2545_F491_4F6C_DD1D;
    let mut line = 0;
    while out.len() < bytes {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        out.push_str(WORDS[(state % WORDS.len() as u64) as usize]);
        line += 1;
        out.push_str(match state % 23 {
            0 => "\n",
            1 if line > 8 => {
                line = 0;
                "\n\n"
            }
            2 => "    ",
            _ => " ",
        });
    }
    out
}

fn main() {
    let mut args = std::env::args().skip(1);
    let dir = args.next().expect("usage: tokenize_bench DIR [TEXT_OUT]");
    let text = text(1 << 20);
    if let Some(path) = args.next() {
        std::fs::write(&path, &text).expect("write the text");
    }
    let mb = text.len() as f64 / 1e6;
    println!("| vocabulary | kind | tokens | MB/s (best of 5) |");
    println!("|---|---|---:|---:|");
    for (name, what) in VOCABS {
        let path = format!("{dir}/ggml-vocab-{name}.gguf");
        let file = oxibonsai_gguf::GgufFile::open(&path).expect("open the vocabulary");
        let tokenizer = Tokenizer::from_gguf(&file).expect("build");
        let mut best = f64::MAX;
        let mut n = 0;
        for _ in 0..5 {
            let start = Instant::now();
            n = tokenizer.encode(&text, false, false).expect("encode").len();
            best = best.min(start.elapsed().as_secs_f64());
        }
        println!("| {name} | {what} | {n} | {:.1} |", mb / best);
    }
}
