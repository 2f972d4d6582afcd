//! Against Hugging Face `tokenizers`, an independent implementation: Qwen3's real tokenizer.json
//! through its own loader, and SmolLM2's GGUF vocabulary assembled into an HF pipeline with the
//! regexes llama.cpp uses for `smollm`. Compared with special-token parsing on (HF always matches
//! added tokens). HF normalizes Qwen3's input to NFC and llama.cpp does not: our ids for NFC(text)
//! must equal HF's for text.

mod support;

use std::sync::OnceLock;

use proptest::prelude::*;
use tokenizers::models::bpe::BPE;
use tokenizers::normalizers::unicode::NFC;
use tokenizers::pre_tokenizers::byte_level::ByteLevel;
use tokenizers::pre_tokenizers::sequence::Sequence;
use tokenizers::pre_tokenizers::split::{Split, SplitPattern};
use tokenizers::{
    AddedToken, NormalizedString, Normalizer, PreTokenizerWrapper, SplitDelimiterBehavior,
};

type HfTokenizer = tokenizers::Tokenizer;

fn hf_qwen3() -> &'static HfTokenizer {
    static TOKENIZER: OnceLock<HfTokenizer> = OnceLock::new();
    TOKENIZER.get_or_init(|| {
        let path = oxibonsai_testkit::golden("tokenizer/qwen3/tokenizer.json");
        HfTokenizer::from_file(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
    })
}

/// SmolLM2's vocabulary and merges (from our GGUF-built tokenizer) in an HF BPE with llama.cpp's
/// `smollm` regexes as HF `Split` pre-tokenizers.
fn hf_smollm2() -> &'static HfTokenizer {
    static TOKENIZER: OnceLock<HfTokenizer> = OnceLock::new();
    TOKENIZER.get_or_init(|| {
        let path = oxibonsai_testkit::golden("tokenizer/smollm2/smollm2-vocab.gguf");
        let file = oxibonsai_gguf::GgufFile::open(&path).expect("open");
        let metadata = file.metadata();
        let tokens = metadata
            .get_str_array("tokenizer.ggml.tokens")
            .expect("tokens");
        let merges = metadata
            .get_str_array("tokenizer.ggml.merges")
            .expect("merges");
        let vocab: tokenizers::models::bpe::Vocab = tokens
            .iter()
            .enumerate()
            .map(|(id, t)| (t.clone(), id as u32))
            .collect();
        let merges = merges
            .iter()
            .map(|m| {
                let (a, b) = m.split_once(' ').expect("merge lines have a space");
                (a.to_owned(), b.to_owned())
            })
            .collect();
        let bpe = BPE::builder()
            .vocab_and_merges(vocab, merges)
            .build()
            .expect("HF accepts SmolLM2's merges");
        let split = |pattern: &str| {
            PreTokenizerWrapper::Split(
                Split::new(
                    SplitPattern::Regex(pattern.to_owned()),
                    SplitDelimiterBehavior::Isolated,
                    false,
                )
                .expect("regex"),
            )
        };
        let pre = Sequence::new(vec![
            split(r"\p{N}"),
            split(r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)"),
            PreTokenizerWrapper::ByteLevel(ByteLevel::new(false, false, false)),
        ]);
        let mut tokenizer = HfTokenizer::new(bpe);
        tokenizer.with_pre_tokenizer(Some(PreTokenizerWrapper::Sequence(pre)));
        let specials: Vec<AddedToken> = (0..17)
            .map(|id| AddedToken::from(tokens[id].clone(), true))
            .collect();
        tokenizer.add_special_tokens(&specials);
        tokenizer
    })
}

fn hf_ids(tokenizer: &HfTokenizer, text: &str) -> Vec<u32> {
    tokenizer
        .encode(text, false)
        .unwrap_or_else(|e| panic!("HF encode {text:?}: {e}"))
        .get_ids()
        .to_vec()
}

fn nfc(text: &str) -> String {
    let mut normalized = NormalizedString::from(text);
    NFC.normalize(&mut normalized).expect("NFC");
    normalized.get().to_owned()
}

/// Written for this test: scripts, whitespace runs, numbers, code, contractions, special tokens
/// inline, emoji, invisible and control characters.
fn extra_texts() -> Vec<String> {
    let mut texts: Vec<String> = [
        "Hello, world! It's a beautiful day, isn't it? We'll see; they'd say I'm right.",
        "SHOUTING IT'S WE'RE YOU'VE THEY'LL I'D I'M 'S 'T",
        "'s 't 're 've 'm 'll 'd 'S 'T 'RE 'VE 'M 'LL 'D '' 'x ' s",
        "don't won't can't shouldn't y'all ma'am o'clock rock'n'roll",
        "mixed 中文 and English 混合 text; 日本語とEnglishの混在。",
        "Ελληνικά κείμενα και ελληνικές λέξεις, Кириллица тоже.",
        "हिन्दी में लिखा गया पाठ और বাংলা লেখা",
        "Tiếng Việt có dấu: Hà Nội, Sài Gòn",
        "١٢٣ عربي 456 עברית ภาษาไทยง่ายนิดเดียว 789",
        "     many spaces     then text     ",
        "\n\n\n\n\t\t\t  \r\n\r\n  mixed whitespace runs \u{3000}\u{3000} ideographic",
        "a \t b\t \tc \n d \u{A0} e\u{A0}\u{A0}f\u{2009}g\u{202F}h\u{205F}i\u{85}j\u{2028}k",
        "   \t  ",
        "0 00 000 0000 12345678901234567890 3.14159e-10 1,234,567.89 -42 +7 ½ ² ٣٤٥ ௧௨ Ⅻ",
        "Call 555-0123 or +1 (800) 123-4567 ext. 89; 2024-05-01T12:34:56Z",
        "for i in range(10):\n    if i % 2 == 0:\n        print(f\"{i} is even\")\n",
        "fn main() -> Result<(), Box<dyn Error>> {\n    let x: Vec<u8> = vec![0xFF; 16];\n    Ok(())\n}\n",
        "const f = (a, b) => a ?? b; // nullish\nconsole.log(`${a}`);\t/* done */",
        "{\"a\":[1,2.5,-3e4,true,null],\"b\":{\"c\":\"d\\n\"}}",
        "CamelCaseIdentifiers and snake_case_names and kebab-case-names and SCREAMING_SNAKE",
        "x1y2z3 αβγ123δ ١a٢b __init__ @decorator #hashtag $var %pct ^caret &amp; *star",
        "# Title\n\n- item **bold** _it_ `code`\n\n> quote\n\n```rust\nlet a = 1;\n```\n",
        "<|im_start|>system\nYou are helpful.<|im_end|>\n<|im_start|>user\nWhat's 2+2?<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n4<|im_end|>",
        "<tool_call>\n{\"name\": \"f\", \"arguments\": {}}\n</tool_call><tool_response>ok</tool_response>",
        "<|im_start|><|im_start|><|im_end|><|endoftext|>",
        "text<|endoftext|>more<|fim_prefix|>x<|fim_suffix|>y<|fim_middle|>z",
        "<|im_start <|im_end| <think </think <|endoftext||> <<|im_end|>>",
        "emoji 👨‍👩‍👧‍👦🏳️‍🌈🇺🇳 🙂🙃 ❤️‍🔥 ✈️",
        "façade naïve — “quotes” ‘single’ «guillemets» … ‰ † ‡ •",
        "https://example.org/a/b?c=d&e=f#g and a.b+c@d.co.uk",
        "$$$ €€€ ¥¥ ££ ¢ ₹ ₿ 100% 50‰",
        "∀x∈ℝ: x² ≥ 0 ⇒ √(x²) = |x|; ∑_{i=1}^{n} i = n(n+1)/2",
        "zero width: a\u{200B}b\u{200C}c\u{200D}d\u{2060}e\u{FEFF}f",
        "controls: \u{1}\u{2}\u{7}\u{1B}[31mred\u{1B}[0m\u{7F}\u{1C}\u{1F}",
        "Mixed\r\nline\rendings\n\r\n\n",
        "𝔘𝔫𝔦𝔠𝔬𝔡𝔢 𝟘𝟙𝟚 🄰🄱",
    ]
    .into_iter()
    .map(str::to_owned)
    .collect();
    texts.push("ha".repeat(300));
    texts.push(format!("{}x", " ".repeat(300)));
    texts.push("\n".repeat(40));
    texts.push("1".repeat(64));
    texts.push("=".repeat(100));
    texts.push("中".repeat(50));
    texts
}

#[test]
fn qwen3_vocabulary_matches_tokenizer_json() {
    let ours = support::qwen3();
    let hf = hf_qwen3();
    // HF knows the 151,669 real tokens; the GGUF pads with unused [PAD…] up to 151,936.
    let real = hf.get_vocab_size(true);
    assert_eq!(real, 151_669);
    for id in 0..real as u32 {
        assert_eq!(
            ours.token_text(id),
            hf.id_to_token(id).as_deref(),
            "token {id}"
        );
    }
}

#[test]
fn qwen3_golden_cases_match_hf_tokenizers() {
    let ours = support::qwen3();
    let mut compared = 0;
    for case in support::qwen3_cases().iter().filter(|c| c.parse_special) {
        let recorded = case.hf_tokenizers_ids.as_ref().expect("recorded HF ids");
        assert_eq!(&hf_ids(hf_qwen3(), &case.text), recorded, "{:?}", case.text);
        let ids = ours.encode(&nfc(&case.text), true, true).unwrap();
        assert_eq!(&ids, recorded, "{:?}", case.text);
        compared += 1;
    }
    assert!(compared >= 50);
}

#[test]
fn qwen3_extra_texts_match_hf_tokenizers() {
    let ours = support::qwen3();
    for text in extra_texts() {
        assert_eq!(nfc(&text), text, "extra texts are written in NFC");
        let ids = ours.encode(&text, true, true).unwrap();
        assert_eq!(ids, hf_ids(hf_qwen3(), &text), "{text:?}");
        // And the pieces give the text back.
        assert_eq!(ours.decode(&ids, true).unwrap(), text);
    }
}

#[test]
fn qwen3_ids_differ_from_hf_only_by_nfc() {
    // "e" + combining acute: HF composes it to "é" first, llama.cpp keeps both code points.
    let text = "cafe\u{301}";
    let ours = support::qwen3();
    assert_ne!(
        ours.encode(text, false, true).unwrap(),
        hf_ids(hf_qwen3(), text)
    );
    assert_eq!(
        ours.encode(&nfc(text), false, true).unwrap(),
        hf_ids(hf_qwen3(), text)
    );
}

#[test]
fn smollm2_matches_an_hf_pipeline_with_llama_cpp_regexes() {
    let ours = support::smollm2();
    let cases = support::smollm2_cases();
    let texts = cases.iter().map(|c| c.text.clone()).chain(extra_texts());
    for text in texts {
        let ids = ours.encode(&text, true, true).unwrap();
        assert_eq!(ids, hf_ids(hf_smollm2(), &text), "{text:?}");
    }
}

/// Random text over characters that exercise every rule, special tokens included.
fn random_text() -> impl Strategy<Value = String> {
    const PARTS: &[&str] = &[
        "a",
        "Z",
        "é",
        "ß",
        "中",
        "한",
        "1",
        "٣",
        "²",
        "½",
        " ",
        " ",
        "  ",
        "\t",
        "\n",
        "\r\n",
        "\u{A0}",
        "\u{3000}",
        "'",
        "s",
        "T",
        "ll",
        "VE",
        ".",
        ",",
        "!",
        "$",
        "+",
        "<",
        ">",
        "|",
        "`",
        "€",
        "😀",
        "🇯🇵",
        "\u{200B}",
        "\u{301}",
        "_",
        "-",
        "word",
        " the",
        "<|im_start|>",
        "<|im_end|>",
        "<think>",
        "</think>",
        "<|endoftext|>",
        "<tool_call>",
    ];
    prop::collection::vec(prop::sample::select(PARTS), 0..40).prop_map(|parts| parts.concat())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(600))]

    #[test]
    fn qwen3_random_texts_match_hf_tokenizers(text in random_text()) {
        let ours = support::qwen3().encode(&nfc(&text), true, true).unwrap();
        prop_assert_eq!(ours, hf_ids(hf_qwen3(), &text), "{:?}", text);
    }

    #[test]
    fn smollm2_random_texts_match_the_hf_pipeline(text in random_text()) {
        let ours = support::smollm2().encode(&text, true, true).unwrap();
        prop_assert_eq!(ours, hf_ids(hf_smollm2(), &text), "{:?}", text);
    }
}
