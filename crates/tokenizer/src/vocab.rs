//! What a vocabulary is made of ([`VocabSpec`], the GGUF `tokenizer.ggml.*` keys as values) and
//! the facts llama.cpp derives from it at load: token attributes, the special token ids with their
//! defaults and text-based detection, and the end-of-generation set.

use std::borrow::Cow;

use crate::error::TokenizerError;

/// The inputs of a tokenizer, one field per `tokenizer.ggml.*` key. Built from GGUF metadata by
/// [`VocabSpec::from_metadata`](crate::VocabSpec::from_metadata), or by hand (tests, converters).
#[derive(Clone, Debug, Default)]
pub struct VocabSpec<'a> {
    /// `tokenizer.ggml.model`: `gpt2` or `gemma4` (BPE), `llama` (SentencePiece), `bert`
    /// (WordPiece), `t5` (Unigram).
    pub model: Cow<'a, str>,
    /// `tokenizer.ggml.pre`; absent means llama.cpp's `default` pre-tokenizer.
    pub pre: Option<Cow<'a, str>>,
    /// `tokenizer.ggml.tokens`, indexed by id.
    pub tokens: Cow<'a, [String]>,
    /// `tokenizer.ggml.token_type` (GGUF token types); absent means every token is normal.
    pub token_types: Option<Cow<'a, [i32]>>,
    /// `tokenizer.ggml.merges`, `"left right"` in rank order; required for `gpt2`.
    pub merges: Option<Cow<'a, [String]>>,
    /// The `tokenizer.ggml.*_token_id` keys present in the file.
    pub special: SpecialTokenIds,
    /// `tokenizer.ggml.add_bos_token`, when present.
    pub add_bos: Option<bool>,
    /// `tokenizer.ggml.add_eos_token`, when present.
    pub add_eos: Option<bool>,
    /// The keys only some tokenizer kinds read (scores, normalizer options, …).
    pub extra: VocabExtra<'a>,
}

/// The `tokenizer.ggml.*` keys beyond what every BPE vocabulary has, plus the `general.*` names
/// llama.cpp reads to adjust token attributes.
#[derive(Clone, Debug, Default)]
pub struct VocabExtra<'a> {
    /// `tokenizer.ggml.scores` (SentencePiece and Unigram).
    pub scores: Option<Cow<'a, [f32]>>,
    /// `tokenizer.ggml.precompiled_charsmap` (Unigram's normalizer).
    pub precompiled_charsmap: Option<Cow<'a, [u8]>>,
    /// `tokenizer.ggml.add_sep_token`.
    pub add_sep: Option<bool>,
    /// `tokenizer.ggml.add_space_prefix`.
    pub add_space_prefix: Option<bool>,
    /// `tokenizer.ggml.remove_extra_whitespaces`.
    pub remove_extra_whitespaces: Option<bool>,
    /// `tokenizer.ggml.normalizer.lowercase` (WordPiece).
    pub lowercase: Option<bool>,
    /// `tokenizer.ggml.normalizer.strip_accents` (WordPiece).
    pub strip_accents: Option<bool>,
    /// `general.name`.
    pub name: Option<Cow<'a, str>>,
    /// `general.architecture`.
    pub architecture: Option<Cow<'a, str>>,
}

/// Special token ids. In a [`VocabSpec`] these are the keys the file sets; in a built tokenizer
/// they are the resolved ids (defaults, range checks and text-based detection applied).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SpecialTokenIds {
    pub bos: Option<u32>,
    pub eos: Option<u32>,
    pub eot: Option<u32>,
    pub eom: Option<u32>,
    pub unknown: Option<u32>,
    pub separator: Option<u32>,
    pub padding: Option<u32>,
    pub mask: Option<u32>,
    pub fim_pre: Option<u32>,
    pub fim_suf: Option<u32>,
    pub fim_mid: Option<u32>,
    pub fim_pad: Option<u32>,
    pub fim_rep: Option<u32>,
    pub fim_sep: Option<u32>,
}

/// Selects one role's slot in a [`SpecialTokenIds`].
type RoleSlot = fn(&mut SpecialTokenIds) -> &mut Option<u32>;

/// The roles in the order llama.cpp reads their keys, with the key names (for messages).
const ROLES: [(&str, RoleSlot); 14] = [
    ("tokenizer.ggml.bos_token_id", |s| &mut s.bos),
    ("tokenizer.ggml.eos_token_id", |s| &mut s.eos),
    ("tokenizer.ggml.eot_token_id", |s| &mut s.eot),
    ("tokenizer.ggml.eom_token_id", |s| &mut s.eom),
    ("tokenizer.ggml.unknown_token_id", |s| &mut s.unknown),
    ("tokenizer.ggml.seperator_token_id", |s| &mut s.separator),
    ("tokenizer.ggml.padding_token_id", |s| &mut s.padding),
    ("tokenizer.ggml.mask_token_id", |s| &mut s.mask),
    ("tokenizer.ggml.fim_pre_token_id", |s| &mut s.fim_pre),
    ("tokenizer.ggml.fim_suf_token_id", |s| &mut s.fim_suf),
    ("tokenizer.ggml.fim_mid_token_id", |s| &mut s.fim_mid),
    ("tokenizer.ggml.fim_pad_token_id", |s| &mut s.fim_pad),
    ("tokenizer.ggml.fim_rep_token_id", |s| &mut s.fim_rep),
    ("tokenizer.ggml.fim_sep_token_id", |s| &mut s.fim_sep),
];

/// The GGUF token type of one token, as the file declares it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TokenType {
    Undefined,
    Normal,
    Unknown,
    Control,
    UserDefined,
    Unused,
    Byte,
}

impl TokenType {
    /// llama.cpp reads an unknown type number as undefined.
    pub fn from_gguf(value: i32) -> TokenType {
        match value {
            1 => TokenType::Normal,
            2 => TokenType::Unknown,
            3 => TokenType::Control,
            4 => TokenType::UserDefined,
            5 => TokenType::Unused,
            6 => TokenType::Byte,
            _ => TokenType::Undefined,
        }
    }

    fn attr(self) -> TokenAttr {
        match self {
            TokenType::Undefined => TokenAttr::UNDEFINED,
            TokenType::Normal => TokenAttr::NORMAL,
            TokenType::Unknown => TokenAttr::UNKNOWN,
            TokenType::Control => TokenAttr::CONTROL,
            TokenType::UserDefined => TokenAttr::USER_DEFINED,
            TokenType::Unused => TokenAttr::UNUSED,
            TokenType::Byte => TokenAttr::BYTE,
        }
    }
}

/// A token's effective attributes (llama.cpp's `llama_token_attr` bits): the declared type plus
/// what the loader adds, e.g. control for end-of-generation tokens declared normal.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TokenAttr(pub u16);

impl TokenAttr {
    pub const UNDEFINED: TokenAttr = TokenAttr(0);
    pub const UNKNOWN: TokenAttr = TokenAttr(1 << 0);
    pub const UNUSED: TokenAttr = TokenAttr(1 << 1);
    pub const NORMAL: TokenAttr = TokenAttr(1 << 2);
    pub const CONTROL: TokenAttr = TokenAttr(1 << 3);
    pub const USER_DEFINED: TokenAttr = TokenAttr(1 << 4);
    pub const BYTE: TokenAttr = TokenAttr(1 << 5);
    /// Whitespace before the token is removed when it is cut out of the text.
    pub const LSTRIP: TokenAttr = TokenAttr(1 << 6);
    /// Whitespace after the token is removed when it is cut out of the text.
    pub const RSTRIP: TokenAttr = TokenAttr(1 << 7);

    /// Whether any of `other`'s bits are set.
    pub fn intersects(self, other: TokenAttr) -> bool {
        self.0 & other.0 != 0
    }

    #[must_use]
    pub fn with(self, other: TokenAttr) -> TokenAttr {
        TokenAttr(self.0 | other.0)
    }
}

/// Tokens llama.cpp takes for end-of-turn (`eot`) when the file names none, in our order of
/// preference (llama.cpp takes whichever its hash map yields first).
const EOT_TEXTS: &[&str] = &[
    "<|eot_id|>",
    "<|im_end|>",
    "<|end|>",
    "<end_of_turn>",
    "<|endoftext|>",
    "<|end_of_text|>",
    "<EOT>",
    "_<EOT>",
    "[EOT]",
    "<｜end▁of▁sentence｜>",
    "<end_of_utterance>",
];
const EOM_TEXTS: &[&str] = &["<|eom_id|>"];
const FIM_PRE_TEXTS: &[&str] = &[
    "<|fim_prefix|>",
    "<fim-prefix>",
    "<fim_prefix>",
    "<｜fim▁begin｜>",
    "<PRE>",
    "▁<PRE>",
    "<|code_prefix|>",
    "<|prefix|>",
];
const FIM_SUF_TEXTS: &[&str] = &[
    "<|fim_suffix|>",
    "<fim-suffix>",
    "<fim_suffix>",
    "<｜fim▁hole｜>",
    "<SUF>",
    "▁<SUF>",
    "<|code_suffix|>",
    "<|suffix|>",
];
const FIM_MID_TEXTS: &[&str] = &[
    "<|fim_middle|>",
    "<fim-middle>",
    "<fim_middle>",
    "<｜fim▁end｜>",
    "<MID>",
    "▁<MID>",
    "<|code_middle|>",
    "<|middle|>",
];
const FIM_PAD_TEXTS: &[&str] = &["<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", "[PAD]"];
const FIM_REP_TEXTS: &[&str] = &[
    "<|fim_repo|>",
    "<|repo_name|>",
    "<fim-repo>",
    "<REPO>",
    "<reponame>",
];
const FIM_SEP_TEXTS: &[&str] = &["<|file_sep|>"];

/// Every token whose text is one of these ends generation (llama.cpp's list).
const EOG_TEXTS: &[&str] = &[
    "<|eot_id|>",
    "<|im_end|>",
    "<|end|>",
    "<|return|>",
    "<|call|>",
    "<|flush|>",
    "<|calls|>",
    "<end_of_turn>",
    "<|endoftext|>",
    "</s>",
    "<|eom_id|>",
    "<EOT>",
    "_<EOT>",
    "[EOT]",
    "[EOS]",
    "<|end_of_text|>",
    "<end_of_utterance>",
    "<eos>",
    "<turn|>",
    "<|tool_response>",
    "<｜end▁of▁sentence｜>",
    "[e~[",
];

/// gpt-oss channel markers llama.cpp always renders, whatever their declared type.
const ALWAYS_RENDERED_TEXTS: &[&str] =
    &["<|channel|>", "<|message|>", "<|start|>", "<|constrain|>"];

/// What a tokenizer kind starts from before the file's keys are read (llama.cpp's defaults).
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct KindDefaults {
    pub special: SpecialTokenIds,
    pub add_bos: bool,
    pub add_eos: bool,
    pub add_sep: bool,
}

/// What [`resolve`] derives.
pub(crate) struct Resolved {
    pub special: SpecialTokenIds,
    pub add_bos: bool,
    pub add_eos: bool,
    pub add_sep: bool,
    /// Sorted ascending.
    pub eog: Vec<u32>,
}

/// Applies llama.cpp's load-time rules: special ids (defaults, range checks, text detection),
/// add_bos/add_eos/add_sep, and the end-of-generation set; adjusts `attrs` as it does.
/// `force_bos` is Gemma 4's override of a false `add_bos`.
pub(crate) fn resolve(
    spec: &VocabSpec<'_>,
    defaults: KindDefaults,
    force_bos: bool,
    texts: &[Box<str>],
    attrs: &mut [TokenAttr],
    lookup: impl Fn(&str) -> Option<u32>,
) -> Result<Resolved, TokenizerError> {
    let mut special = special_ids(spec, defaults.special, texts.len());

    let add_bos = spec.add_bos.unwrap_or(defaults.add_bos) || force_bos;
    let add_eos = spec.add_eos.unwrap_or(defaults.add_eos);
    let add_sep = spec.extra.add_sep.unwrap_or(defaults.add_sep);
    if add_bos && special.bos.is_none() {
        return Err(TokenizerError::MissingSpecialToken {
            flag: "tokenizer.ggml.add_bos_token",
            id_key: "tokenizer.ggml.bos_token_id",
        });
    }
    if add_eos && special.eos.is_none() {
        return Err(TokenizerError::MissingSpecialToken {
            flag: "tokenizer.ggml.add_eos_token",
            id_key: "tokenizer.ggml.eos_token_id",
        });
    }

    detect_by_text(&mut special, attrs, &lookup);

    // Control tokens named "…unused…" are unused.
    for (attr, text) in attrs.iter_mut().zip(texts) {
        if attr.intersects(TokenAttr::CONTROL) && text.contains("unused") {
            *attr = attr.with(TokenAttr::UNUSED);
        }
    }

    let eog = end_of_generation(&special, attrs, &lookup);
    Ok(Resolved {
        special,
        add_bos,
        add_eos,
        add_sep,
        eog,
    })
}

/// The special ids: the kind's defaults (a default out of the vocabulary is disabled), each
/// replaced by the file's id where that is in the vocabulary.
fn special_ids(
    spec: &VocabSpec<'_>,
    defaults: SpecialTokenIds,
    n_tokens: usize,
) -> SpecialTokenIds {
    let in_range = |id: u32| (id as usize) < n_tokens;
    let mut special = defaults;
    let mut from_file = spec.special;
    for (key, role) in ROLES {
        let current = role(&mut special);
        if let Some(id) = *current {
            if !in_range(id) {
                tracing::warn!(
                    "default special token {key} = {id} is out of the vocabulary; disabled"
                );
                *current = None;
            }
        }
        if let Some(id) = *role(&mut from_file) {
            if in_range(id) {
                *current = Some(id);
            } else {
                tracing::warn!(
                    "special token {key} = {id} is out of the vocabulary ({n_tokens} tokens); \
                     keeping {current:?}"
                );
            }
        }
    }
    special
}

/// The end-of-turn, end-of-message and fill-in-the-middle ids the file leaves unset, found by
/// their token's text (llama.cpp's lists); a token found so becomes a control token.
fn detect_by_text(
    special: &mut SpecialTokenIds,
    attrs: &mut [TokenAttr],
    lookup: &impl Fn(&str) -> Option<u32>,
) {
    let mut detect = |slot: &mut Option<u32>, candidates: &[&str]| {
        if slot.is_some() {
            return;
        }
        if let Some(id) = candidates.iter().find_map(|text| lookup(text)) {
            *slot = Some(id);
            attrs[id as usize] = attrs[id as usize].with(TokenAttr::CONTROL);
        }
    };
    detect(&mut special.eot, EOT_TEXTS);
    detect(&mut special.eom, EOM_TEXTS);
    detect(&mut special.fim_pre, FIM_PRE_TEXTS);
    detect(&mut special.fim_suf, FIM_SUF_TEXTS);
    detect(&mut special.fim_mid, FIM_MID_TEXTS);
    detect(&mut special.fim_pad, FIM_PAD_TEXTS);
    detect(&mut special.fim_rep, FIM_REP_TEXTS);
    detect(&mut special.fim_sep, FIM_SEP_TEXTS);
}

/// The end-of-generation set, sorted: the special ids that end generation and every token named
/// in llama.cpp's list, less the tokens some vocabularies use as text; adjusts the attributes of
/// the tokens it names as llama.cpp does.
fn end_of_generation(
    special: &SpecialTokenIds,
    attrs: &mut [TokenAttr],
    lookup: &impl Fn(&str) -> Option<u32>,
) -> Vec<u32> {
    let mut eog: Vec<u32> = [special.fim_pad, special.fim_rep, special.fim_sep]
        .into_iter()
        .flatten()
        .collect();
    for id in EOG_TEXTS.iter().filter_map(|text| lookup(text)) {
        eog.push(id);
        attrs[id as usize] = attrs[id as usize].with(TokenAttr::CONTROL);
    }
    for id in ALWAYS_RENDERED_TEXTS.iter().filter_map(|text| lookup(text)) {
        attrs[id as usize] = TokenAttr::USER_DEFINED;
    }
    eog.extend(
        [special.eos, special.eot, special.eom]
            .into_iter()
            .flatten(),
    );
    eog.sort_unstable();
    eog.dedup();

    // o200k_harmony and solar-open end a message with <|end|> without ending generation.
    let has =
        |eog: &[u32], text: &str| lookup(text).is_some_and(|id| eog.binary_search(&id).is_ok());
    if let Some(end) = lookup("<|end|>").filter(|_| {
        let call = has(&eog, "<|call|>") || has(&eog, "<|calls|>");
        has(&eog, "<|end|>") && call && (has(&eog, "<|return|>") || has(&eog, "<|flush|>"))
    }) {
        eog.retain(|&id| id != end);
        attrs[end as usize] = TokenAttr::USER_DEFINED;
    }
    // </s> ends generation for PaddleOCR but is ordinary text for Gemma 4 and PLaMo.
    let normal_s = has(&eog, "<|tool_response>") || has(&eog, "<|plamo:eos|>");
    if let Some(s) = lookup("</s>").filter(|_| normal_s && has(&eog, "</s>")) {
        eog.retain(|&id| id != s);
        attrs[s as usize] = TokenAttr::NORMAL;
    }

    eog
}

/// The declared attributes of every token (normal when the file has no token types).
pub(crate) fn declared_types(
    spec: &VocabSpec<'_>,
    n_tokens: usize,
) -> Result<Vec<TokenType>, TokenizerError> {
    match &spec.token_types {
        None => Ok(vec![TokenType::Normal; n_tokens]),
        Some(types) if types.len() < n_tokens => Err(TokenizerError::LengthMismatch {
            key: "tokenizer.ggml.token_type",
            expected: n_tokens,
            found: types.len(),
        }),
        Some(types) => Ok(types[..n_tokens]
            .iter()
            .map(|&t| TokenType::from_gguf(t))
            .collect()),
    }
}

pub(crate) fn declared_attrs(types: &[TokenType]) -> Vec<TokenAttr> {
    types.iter().map(|t| t.attr()).collect()
}
