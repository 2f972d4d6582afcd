//! Building a [`Tokenizer`] from a [`VocabSpec`] with llama.cpp's load-time rules
//! (`llama_vocab::impl::load`): the kind's defaults, the pre-tokenizer's flags, the file's keys,
//! special-token detection, the piece cache, and the attributes llama.cpp sets by model name.

use crate::bpe::{Bpe, BpeOptions};
use crate::error::TokenizerError;
use crate::fast_hash::FastMap;
use crate::pieces::append_piece;
use crate::pre_table::{pre_row, supported_pre_names, PreRow};
use crate::pre_tokenizer::PreTokenizer;
use crate::tokenizer::{Flags, Model, Tokenizer};
use crate::ugm::{Ugm, UgmToken};
use crate::vocab::{self, KindDefaults, SpecialTokenIds, TokenAttr, VocabSpec};

impl Tokenizer {
    /// Builds the tokenizer from its inputs, applying llama.cpp's load-time rules.
    pub fn from_spec(spec: VocabSpec<'_>) -> Result<Tokenizer, TokenizerError> {
        if spec.tokens.is_empty() {
            return Err(TokenizerError::EmptyVocabulary);
        }
        let texts: Vec<Box<str>> = spec
            .tokens
            .iter()
            .enumerate()
            .map(|(id, text)| {
                if text.is_empty() {
                    tracing::warn!("empty token at index {id}");
                    format!("[EMPTY_{id}]").into()
                } else {
                    text.as_str().into()
                }
            })
            .collect();
        let n_tokens =
            u32::try_from(texts.len()).map_err(|_| TokenizerError::VocabularyTooLarge {
                n_tokens: texts.len(),
            })?;
        let types = vocab::declared_types(&spec, texts.len())?;
        let mut attrs = vocab::declared_attrs(&types);
        let extra = &spec.extra;

        let mut flags = Flags {
            escape_whitespaces: true,
            ..Flags::default()
        };
        let mut defaults = KindDefaults::default();
        let mut force_bos = false;
        let mut lookup = FastMap::default();
        let (pre_name, model) = match &*spec.model {
            "gpt2" | "gemma4" => {
                let gemma4 = spec.model == "gemma4";
                let (name, row) = bpe_pre(&spec, gemma4)?;
                flags.clean_spaces = row.clean_spaces;
                flags.escape_whitespaces = row.escape_whitespaces;
                flags.add_sep = row.add_sep;
                defaults.add_bos = row.add_bos;
                defaults.add_sep = row.add_sep;
                if !gemma4 {
                    defaults.special.bos = Some(11);
                    defaults.special.eos = Some(11);
                }
                if row.no_bos {
                    defaults.special.bos = None;
                }
                force_bos = row.names.contains(&"gemma4");
                let merges = match spec.merges.as_deref() {
                    Some(merges) => merges,
                    None if row.merges_optional => &[],
                    None => {
                        return Err(TokenizerError::MissingKey {
                            key: "tokenizer.ggml.merges",
                        })
                    }
                };
                let options = BpeOptions {
                    ignore_merges: row.ignore_merges,
                    raw_utf8: row.raw_utf8,
                    whole_newline_words: force_bos,
                };
                let bpe = Bpe::new(&texts, merges, options)?;
                let pre = PreTokenizer::new(row.regexes).map_err(|(pattern, error)| {
                    TokenizerError::UnsupportedPattern {
                        pre: name.clone(),
                        pattern,
                        reason: error.0,
                    }
                })?;
                (
                    name,
                    Model::Bpe {
                        bpe: Box::new(bpe),
                        pre,
                    },
                )
            }
            "llama" => {
                defaults.special = SpecialTokenIds {
                    bos: Some(1),
                    eos: Some(2),
                    unknown: Some(0),
                    ..SpecialTokenIds::default()
                };
                defaults.add_bos = true;
                flags.add_space_prefix = true;
                lookup = text_lookup(&texts)?;
                let scores = scores(&spec, texts.len())?;
                let split_at_spaces = !texts.iter().any(|text| {
                    text.chars()
                        .zip(text.chars().skip(1))
                        .any(|(a, b)| b == '\u{2581}' && a != '\u{2581}')
                });
                (
                    "default".to_owned(),
                    Model::Spm {
                        scores,
                        split_at_spaces,
                    },
                )
            }
            "bert" => {
                defaults.special = SpecialTokenIds {
                    bos: Some(101),
                    unknown: Some(100),
                    separator: Some(102),
                    padding: Some(0),
                    mask: Some(103),
                    ..SpecialTokenIds::default()
                };
                defaults.add_bos = true;
                defaults.add_sep = true;
                flags.clean_spaces = true;
                lookup = text_lookup(&texts)?;
                let lowercase = extra.lowercase.unwrap_or(true);
                let model = Model::Wpm {
                    max_token_len: texts.iter().map(|t| t.len()).max().unwrap_or(0),
                    lowercase,
                    strip_accents: extra.strip_accents.unwrap_or(lowercase),
                };
                ("default".to_owned(), model)
            }
            "t5" => {
                defaults.special = SpecialTokenIds {
                    eos: Some(1),
                    unknown: Some(2),
                    padding: Some(0),
                    ..SpecialTokenIds::default()
                };
                defaults.add_eos = true;
                lookup = text_lookup(&texts)?;
                let scores = scores(&spec, texts.len())?;
                let tokens = texts
                    .iter()
                    .zip(&attrs)
                    .zip(&scores)
                    .map(|((text, attr), &score)| UgmToken {
                        text,
                        score,
                        normal: attr.intersects(TokenAttr::NORMAL),
                        user_defined: attr.intersects(TokenAttr::USER_DEFINED),
                        unused: attr.intersects(TokenAttr::UNUSED),
                    });
                let ugm = Ugm::new(tokens, extra.precompiled_charsmap.as_deref())?;
                ("default".to_owned(), Model::Ugm(ugm))
            }
            other => {
                return Err(TokenizerError::UnsupportedModel {
                    found: other.to_owned(),
                })
            }
        };
        flags.add_space_prefix = extra.add_space_prefix.unwrap_or(flags.add_space_prefix);
        let mut model = model;
        if let Model::Ugm(ugm) = &mut model {
            ugm.add_space_prefix = flags.add_space_prefix;
            ugm.remove_extra_whitespaces = extra.remove_extra_whitespaces.unwrap_or(false);
        }

        let token_id = |text: &str| match &model {
            Model::Bpe { bpe, .. } => bpe.token_id(text),
            _ => lookup.get(text).copied(),
        };
        let resolved = vocab::resolve(&spec, defaults, force_bos, &texts, &mut attrs, token_id)?;
        flags.add_sep = resolved.add_sep;

        let mut byte_token = [None; 256];
        for (b, slot) in byte_token.iter_mut().enumerate() {
            // `<0xXX>`, else the byte itself as a one-byte token (only ASCII can be one).
            *slot = token_id(&format!("<0x{b:02X}>")).or_else(|| {
                (b < 128)
                    .then(|| token_id(char::from(b as u8).encode_utf8(&mut [0; 4])))
                    .flatten()
            });
        }

        let special_mask = TokenAttr::CONTROL
            .with(TokenAttr::USER_DEFINED)
            .with(TokenAttr::UNKNOWN);
        let mut special_tokens: Vec<u32> = (0..n_tokens)
            .filter(|&id| attrs[id as usize].intersects(special_mask))
            .collect();
        // llama.cpp's sort is not stable; among equal lengths we keep id order.
        special_tokens.sort_by_key(|&id| std::cmp::Reverse(texts[id as usize].len()));

        let byte_level = matches!(model, Model::Bpe { .. }) && !flags.escape_whitespaces;
        let mut pieces = Vec::new();
        let mut piece_at = Vec::with_capacity(texts.len() + 1);
        piece_at.push(0);
        for (id, (text, &attr)) in (0u32..).zip(texts.iter().zip(&attrs)) {
            append_piece(id, text, attr, byte_level, &mut pieces)?;
            piece_at.push(pieces.len());
        }

        name_attributes(&spec, &special_tokens, &mut attrs, &token_id);

        Ok(Tokenizer {
            model_name: spec.model.into_owned(),
            pre: pre_name,
            model,
            texts,
            types,
            attrs,
            lookup,
            byte_token,
            special: resolved.special,
            add_bos: resolved.add_bos,
            add_eos: resolved.add_eos,
            flags,
            eog: resolved.eog,
            special_tokens,
            pieces,
            piece_at,
        })
    }
}

/// The pre-tokenizer name and row of a BPE vocabulary (Gemma 4's is implied by its model).
fn bpe_pre(spec: &VocabSpec<'_>, gemma4: bool) -> Result<(String, PreRow), TokenizerError> {
    let name = if gemma4 {
        "gemma4"
    } else {
        match spec.pre.as_deref() {
            Some(name) => name,
            None => {
                tracing::warn!(
                    "tokenizer.ggml.pre is missing: using llama.cpp's 'default' pre-tokenizer; \
                     tokenization quality may suffer (regenerate the GGUF to fix)"
                );
                "default"
            }
        }
    };
    match pre_row(name) {
        Some(row) => Ok((name.to_owned(), *row)),
        None => Err(TokenizerError::UnsupportedPre {
            found: name.to_owned(),
            supported: supported_pre_names(),
        }),
    }
}

/// Text → id; a text twice is an error (llama.cpp's load asserts the same).
fn text_lookup(texts: &[Box<str>]) -> Result<FastMap<Box<str>, u32>, TokenizerError> {
    let mut lookup = FastMap::with_capacity_and_hasher(texts.len(), Default::default());
    for (id, text) in (0u32..).zip(texts) {
        if let Some(first) = lookup.insert(text.clone(), id) {
            return Err(TokenizerError::DuplicateToken {
                text: text.to_string(),
                first,
                second: id,
            });
        }
    }
    Ok(lookup)
}

/// `tokenizer.ggml.scores`, zeros when absent (as llama.cpp).
fn scores(spec: &VocabSpec<'_>, n_tokens: usize) -> Result<Vec<f32>, TokenizerError> {
    match &spec.extra.scores {
        None => Ok(vec![0.0; n_tokens]),
        Some(scores) if scores.len() < n_tokens => Err(TokenizerError::LengthMismatch {
            key: "tokenizer.ggml.scores",
            expected: n_tokens,
            found: scores.len(),
        }),
        Some(scores) => Ok(scores[..n_tokens].to_vec()),
    }
}

/// The attributes llama.cpp sets by model name, architecture and pre-tokenizer (the strip flags
/// of Phi-3's special tokens and of some embedding models' mask token).
fn name_attributes(
    spec: &VocabSpec<'_>,
    special_tokens: &[u32],
    attrs: &mut [TokenAttr],
    token_id: &impl Fn(&str) -> Option<u32>,
) {
    let name = spec.extra.name.as_deref().unwrap_or("").to_lowercase();
    let arch = spec.extra.architecture.as_deref().unwrap_or("");
    let pre = spec.pre.as_deref().unwrap_or("");
    let set = |attrs: &mut [TokenAttr], text: &str, attr: TokenAttr, on: bool| {
        if let Some(id) = token_id(text) {
            let current = attrs[id as usize];
            attrs[id as usize] = if on {
                current.with(attr)
            } else {
                TokenAttr(current.0 & !attr.0)
            };
        }
    };
    if ["jina-v2-de", "jina-v2-es", "jina-v2-code"]
        .iter()
        .any(|p| pre.contains(p))
        || ["nomic-bert-moe", "jina-bert-v3"]
            .iter()
            .any(|a| arch.contains(a))
    {
        set(attrs, "<mask>", TokenAttr::LSTRIP, true);
    } else if name.contains("phi-3") || name.contains("phi3") {
        for &id in special_tokens {
            attrs[id as usize] = attrs[id as usize].with(TokenAttr::RSTRIP);
        }
        set(attrs, "</s>", TokenAttr::RSTRIP, true);
        for text in ["<unk>", "<s>", "<|endoftext|>"] {
            set(attrs, text, TokenAttr::RSTRIP, false);
        }
    } else if name.contains("modern-bert") {
        set(attrs, "[MASK]", TokenAttr::LSTRIP, true);
    }
}
