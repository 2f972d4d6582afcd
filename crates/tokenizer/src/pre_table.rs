//! THE table of BPE pre-tokenizers: every `tokenizer.ggml.pre` value llama.cpp's vocabulary loader
//! recognises, with the regex list its `llm_tokenizer_bpe` runs for that type and the flags the
//! loader ties to the name. Adding one is one row (and, where llama.cpp has a hand-written
//! splitter for a new pattern string, one scanner in `pre_tokenizer`).

/// llama.cpp's regex lists, by pre-tokenizer type.
mod re {
    pub const GPT2: &str =
        "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)";
    pub const LLAMA3: &str = "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
    pub const QWEN2: &str = "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
    pub const QWEN35: &str = "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?[\\p{L}\\p{M}]+|\\p{N}| ?[^\\s\\p{L}\\p{M}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
    pub const JAIS2: &str = "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s{512}(?!\\S)|\\s{256}(?!\\S)|\\s{128}(?!\\S)|\\s{64}(?!\\S)|\\s{32}(?!\\S)|\\s{16}(?!\\S)|\\s{8}(?!\\S)|\\s{4}(?!\\S)|\\s{1,2}(?!\\S)|\\s{1}";
    pub const DEEPSEEK_LLM_LETTERS: &str =
        "\\s?[A-Za-z\u{B5}\u{C0}-\u{D6}\u{D8}-\u{F6}\u{F8}-\u{1BA}\u{1BC}-\u{1BF}\u{1C4}-\u{293}\u{295}-\u{2AF}\u{370}-\u{373}\u{376}\u{377}\u{37B}-\u{37D}\u{37F}\u{386}\u{388}-\u{38A}\u{38C}\u{38E}-\u{3A1}\u{3A3}-\u{3F5}\u{3F7}-\u{481}\u{48A}-\u{52F}\u{531}-\u{556}\u{10A0}-\u{10C5}\u{13A0}-\u{13F5}\u{13F8}-\u{13FD}\u{1C90}-\u{1CBA}\u{1CBD}-\u{1CBF}\u{1D00}-\u{1D2B}\u{1D6B}-\u{1D77}\u{1D79}-\u{1D9A}\u{1E00}-\u{1F15}\u{1F18}-\u{1F1D}\u{1F20}-\u{1F45}\u{1F48}-\u{1F4D}\u{1F50}-\u{1F57}\u{1F59}\u{1F5B}\u{1F5D}\u{1F5F}-\u{1F7D}\u{1F80}-\u{1FB4}\u{1FB6}-\u{1FBC}\u{1FBE}\u{1FC2}-\u{1FC4}\u{1FC6}-\u{1FCC}\u{1FD0}-\u{1FD3}\u{1FD6}-\u{1FDB}\u{1FE0}-\u{1FEC}\u{1FF2}-\u{1FF4}\u{1FF6}-\u{1FFC}\u{2102}\u{2107}\u{210A}-\u{2113}\u{2115}\u{2119}-\u{211D}\u{2124}\u{2126}\u{2128}\u{212A}-\u{212D}\u{212F}-\u{2134}\u{2139}\u{213C}-\u{213F}\u{2145}-\u{2149}\u{214E}\u{2183}\u{2184}\u{2C00}-\u{2C7B}\u{2C7E}-\u{2CE4}\u{2CEB}-\u{2CEE}\u{2CF2}\u{2CF3}\u{A640}-\u{A66D}\u{A680}-\u{A69B}\u{A722}-\u{A76F}\u{A771}-\u{A787}\u{A78B}-\u{A78E}\u{AB70}-\u{ABBF}\u{FB00}-\u{FB06}\u{FB13}-\u{FB17}\u{FF21}-\u{FF3A}\u{FF41}-\u{FF5A}\u{10400}-\u{1044F}\u{104B0}-\u{104D3}\u{104D8}-\u{104FB}\u{10C80}-\u{10CB2}\u{10CC0}-\u{10CF2}\u{118A0}-\u{118DF}\u{1E900}-\u{1E943}]+";
    pub const DEEPSEEK3_MAIN: &str = "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\r\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+| ?[\\p{P}\\p{S}]+[\r\n]*|\\s*[\r\n]+|\\s+(?!\\S)|\\s+";
    pub const SPARK_MAIN: &str = "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\r\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+| ?[\\p{P}\\p{S}]+|[\r\n]|\\s+(?!\\S)|\\s+";
    pub const CJK_KANA: &str = "[\u{4E00}-\u{9FA5}\u{3040}-\u{309F}\u{30A0}-\u{30FF}]+";
    pub const YOUTU_CJK: &str =
        "[\u{AC00}-\u{D7A3}\u{3131}-\u{318E}]+|[\u{FF01}\u{2026}\u{201C}\u{201D}\u{2018}\u{2019}\u{2014}\u{FF1A}\u{FF1B}\u{FF0C}\u{3001}-\u{303F}\u{FE30}-\u{FE4F}]+|[\u{3105}-\u{312F}]+|[\u{4E00}-\u{9FA5}\u{3040}-\u{309F}\u{30A0}-\u{30FF}]+";
    pub const YOUTU_MAIN: &str = "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]+(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]+[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]*(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
    pub const CJK_HANGUL: &str = "[\u{4E00}-\u{9FA5}\u{800}-\u{4E00}\u{AC00}-\u{D7FF}]+";
    pub const FALCON_PUNCT: &str = "[\\p{P}\\$\\+<=>\\^~\\|`]+";
    pub const BLOOM: &str = " ?[^(\\s|.,!?\u{2026}\u{3002}\u{FF0C}\u{3001}\u{964}\u{6D4}\u{60C})]+";
    pub const TEKKEN: &str = "[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}])([^a-z]))*((?=[\\p{L}])([^A-Z]))+|[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}])([^a-z]))+((?=[\\p{L}])([^A-Z]))*|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
    pub const GPT4O: &str = "[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}])([^a-z]))*((?=[\\p{L}])([^A-Z]))+(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}])([^a-z]))+((?=[\\p{L}])([^A-Z]))*(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
    pub const GRANITE_EMB: &str = "[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}\\p{M}])([^a-z]))*((?=[\\p{L}\\p{M}])([^A-Z]))+(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}\\p{M}])([^a-z]))+((?=[\\p{L}\\p{M}])([^A-Z]))*(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
    pub const TINY_AYA_DIGITS: &str = "\\d{1,3}(?=(?:\\d{3})*\\b)";
    pub const TINY_AYA_MAIN: &str = "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]+(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]+[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]*(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
    pub const BAILING: &str = "'(?:[sSdDmMtT]|[lL][lL]|[vV][eE]|[rR][eE])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]|\\s+(?!\\S)|\\s+";
    pub const SEED_CODER: &str = "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1}| ?[^\\s\\p{L}\\p{N}\\r\\n]+|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
    pub const UFAKZEKA: &str = "[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
    pub const AFMOE_CJK: &str =
        "[\u{4E00}-\u{9FFF}\u{3400}-\u{4DBF}\u{8C48}-\u{FAFF}\u{3040}-\u{309F}\u{30A0}-\u{30FF}\u{FF65}-\u{FF9F}\u{2F00}-\u{2FDF}\u{E40}-\u{E7F}\u{E80}-\u{EFF}\u{1780}-\u{17FF}\u{1000}-\u{109F}\u{AA60}-\u{AA7F}\u{A9E0}-\u{A9FF}\u{AC00}-\u{D7AF}\u{1100}-\u{11FF}]+";
    pub const AFMOE_MAIN: &str = "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\\r\\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+| ?[\\p{P}\\p{S}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
    pub const NEWLINES: &str = "[^\\n]+|[\\n]+";
    pub const EXAONE_MOE: &str = "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?(?:\\p{L}\\p{M}*(?: \\p{L}\\p{M}*)*)+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]?|\\s*[\\r\\n]|\\s+(?!\\S)|\\s+";
    pub const MINICPM5: &str = "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}+| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
    pub const DEFAULT_PUNCT: &str = "[\\p{P}\\$\\+<=>\\^~\\|]+";
}

/// What a `tokenizer.ggml.pre` value selects.
#[derive(Clone, Copy, Debug)]
pub(crate) struct PreRow {
    pub names: &'static [&'static str],
    pub regexes: &'static [&'static str],
    /// A word that is itself a token is emitted whole, without merging.
    pub ignore_merges: bool,
    /// The loader sets `add_bos` (before `tokenizer.ggml.add_bos_token` is read).
    pub add_bos: bool,
    /// `detokenize` cleans spaces before punctuation (llama.cpp's `clean_spaces`).
    pub clean_spaces: bool,
    pub add_sep: bool,
    /// Spaces become `▁` and words are raw UTF-8, not GPT-2 byte-level (SPM-style BPE).
    pub escape_whitespaces: bool,
    /// Words are raw UTF-8 with `<0xXX>` byte fallback, not GPT-2 byte-level text.
    pub raw_utf8: bool,
    /// The loader drops the default BOS (ChatGLM).
    pub no_bos: bool,
    /// A file may carry no `tokenizer.ggml.merges` (Kimi K2: words are then their characters'
    /// tokens); every other row requires the key.
    pub merges_optional: bool,
}

const fn row(names: &'static [&'static str], regexes: &'static [&'static str]) -> PreRow {
    PreRow {
        names,
        regexes,
        ignore_merges: false,
        add_bos: false,
        clean_spaces: true,
        add_sep: false,
        escape_whitespaces: false,
        raw_utf8: false,
        no_bos: false,
        merges_optional: false,
    }
}

const fn unclean(mut r: PreRow) -> PreRow {
    r.clean_spaces = false;
    r
}

const fn ignore_merges(mut r: PreRow) -> PreRow {
    r.ignore_merges = true;
    r
}

const fn bos(mut r: PreRow) -> PreRow {
    r.add_bos = true;
    r
}

const STARCODER: &[&str] = &["\\p{N}", re::GPT2];
const DEEPSEEK3: &[&str] = &["\\p{N}{1,3}", re::CJK_KANA, re::DEEPSEEK3_MAIN];
const GPT4O: &[&str] = &[re::GPT4O];

/// Every recognised name, as llama.cpp's `llama_vocab::impl::load` maps it.
pub(crate) const PRE_TABLE: &[PreRow] = &[
    row(
        &["default"],
        &[re::DEFAULT_PUNCT, re::GPT2, "\\p{N}+", "[0-9][0-9][0-9]"],
    ),
    ignore_merges(row(&["minicpm5"], &["\\p{N}{1,3}", re::MINICPM5])),
    bos(ignore_merges(row(
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
        &[re::LLAMA3],
    ))),
    unclean(row(
        &["deepseek-llm"],
        &[
            "[\r\n]",
            re::DEEPSEEK_LLM_LETTERS,
            "\\s?[!-/:-~\u{FF01}-\u{FF0F}\u{FF1A}-\u{FF5E}\u{2018}-\u{201F}\u{3000}-\u{3002}]+",
            "\\s+$",
            re::CJK_HANGUL,
            "\\p{N}+",
        ],
    )),
    unclean(row(
        &["deepseek-coder"],
        &[
            "[\r\n]",
            "\\s?\\p{L}+",
            "\\s?\\p{P}+",
            re::CJK_HANGUL,
            "\\p{N}",
        ],
    )),
    unclean(row(
        &["deepseek-v3", "hunyuan-dense", "hy_v4", "joyai-llm"],
        DEEPSEEK3,
    )),
    unclean(row(
        &["spark2_5"],
        &["\\p{N}{1,3}", re::CJK_KANA, re::SPARK_MAIN, "\\p{N}"],
    )),
    ignore_merges(unclean(row(&["youtu"], &[re::YOUTU_CJK, re::YOUTU_MAIN]))),
    row(
        &["falcon"],
        &[re::FALCON_PUNCT, re::GPT2, "[0-9][0-9][0-9]"],
    ),
    row(
        &[
            "gpt-2",
            "phi-2",
            "jina-es",
            "jina-de",
            "gigachat",
            "jina-v2-es",
            "jina-v2-de",
            "a.x-4.0",
            "mellum",
            "modern-bert",
            "mpt",
            "olmo",
            "jais",
            "exaone4",
        ],
        &[re::GPT2],
    ),
    unclean(row(&["trillion", "granite-docling"], &[re::GPT2])),
    PreRow {
        add_sep: true,
        ..row(&["jina-v1-en", "jina-v2-code", "roberta-bpe"], &[re::GPT2])
    },
    row(&["jais-2"], &[re::JAIS2]),
    PreRow {
        escape_whitespaces: true,
        raw_utf8: true,
        ..row(&["gemma4", "granite-embed-multi-311m"], &[re::NEWLINES])
    },
    PreRow {
        escape_whitespaces: true,
        raw_utf8: true,
        ..unclean(row(&["sarvam-moe"], &[re::NEWLINES]))
    },
    PreRow {
        raw_utf8: true,
        ..row(&["whitespace"], &["\\S+"])
    },
    row(
        &[
            "starcoder",
            "refact",
            "codeshell",
            "exaone",
            "minerva-7b",
            "mellum2",
        ],
        STARCODER,
    ),
    unclean(row(&["command-r", "smollm"], STARCODER)),
    unclean(row(
        &[
            "qwen2",
            "deepseek-r1-qwen",
            "kormo",
            "f2llmv2",
            "hunyuan",
            "solar-open",
        ],
        &[re::QWEN2],
    )),
    row(&["stablelm2", "megrez"], &[re::QWEN2]),
    unclean(row(&["qwen35"], &[re::QWEN35])),
    row(&["dbrx", "smaug-bpe"], &[re::LLAMA3]),
    unclean(row(&["poro-chat"], &[re::BLOOM])),
    row(&["bloom", "gpt3-finnish"], &[re::BLOOM]),
    PreRow {
        no_bos: true,
        ..row(&["chatglm-bpe"], &[re::LLAMA3])
    },
    PreRow {
        no_bos: true,
        ..ignore_merges(row(&["glm4", "glm5"], &[re::LLAMA3]))
    },
    unclean(row(&["viking"], &[re::BLOOM, "\\p{N}"])),
    bos(ignore_merges(unclean(row(&["tekken"], &[re::TEKKEN])))),
    row(&["exaone-moe"], &[re::EXAONE_MOE]),
    bos(unclean(row(
        &["chameleon"],
        &[
            "<sentinel:[0-9]+>",
            "(IMGIMG)((A|B|C|D|E|F|G|H|I){1,4})Z",
            "([\\t\\n]|    |  )",
            "\\p{N}",
            "[\\p{P}!-/:-@\\[-`{-~]",
            re::GPT2,
        ],
    ))),
    unclean(row(
        &["gpt-4o", "llama4", "kanana2", "talkie", "minimax-m2"],
        GPT4O,
    )),
    ignore_merges(unclean(row(
        &["granite-embed-multi-97m"],
        &[re::GRANITE_EMB],
    ))),
    unclean(row(
        &["tiny_aya", "cohere2moe"],
        &[re::TINY_AYA_DIGITS, re::TINY_AYA_MAIN],
    )),
    unclean(row(&["superbpe"], &["\\p{N}+", "(?=(\\d{3})+(?!\\d))"])),
    unclean(row(
        &["bailingmoe", "bailingmoe2", "llada-moe"],
        &[re::BAILING],
    )),
    unclean(row(&["seed-coder"], &[re::SEED_CODER])),
    PreRow {
        merges_optional: true,
        ..unclean(row(&["kimi-k2"], &["\\p{Han}+"]))
    },
    unclean(row(&["ufakzeka"], &[re::UFAKZEKA])),
    unclean(row(&["grok-2"], &[re::QWEN2])),
    unclean(row(
        &["afmoe"],
        &["\\p{AFMoE_digits}", re::AFMOE_CJK, re::AFMOE_MAIN],
    )),
    unclean(row(&["laguna"], &[re::NEWLINES, re::QWEN2])),
];

/// The row for a `tokenizer.ggml.pre` value.
pub(crate) fn pre_row(name: &str) -> Option<&'static PreRow> {
    PRE_TABLE.iter().find(|row| row.names.contains(&name))
}

/// The recognised `tokenizer.ggml.pre` values, comma-separated, for error messages.
pub(crate) fn supported_pre_names() -> String {
    PRE_TABLE
        .iter()
        .flat_map(|row| row.names.iter().copied())
        .collect::<Vec<_>>()
        .join(", ")
}

pub(crate) use re::{GPT2, LLAMA3, NEWLINES, QWEN2, QWEN35};
