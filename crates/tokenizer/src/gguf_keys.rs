//! The one place that reads GGUF metadata: `tokenizer.ggml.*` keys into a [`VocabSpec`].

use std::borrow::Cow;

use oxibonsai_gguf::Metadata;

use crate::error::TokenizerError;
use crate::vocab::{SpecialTokenIds, VocabExtra, VocabSpec};

impl<'a> VocabSpec<'a> {
    /// Reads the tokenizer keys, borrowing the large arrays. A missing required key
    /// (`tokenizer.ggml.model`, `tokenizer.ggml.tokens`) is [`TokenizerError::MissingKey`]; a key
    /// of the wrong type is reported by the GGUF reader, naming it. Merges are read when present
    /// (whether the model needs them is decided when building).
    pub fn from_metadata(metadata: &'a Metadata) -> Result<VocabSpec<'a>, TokenizerError> {
        let required = |key: &'static str| {
            if metadata.contains_key(key) {
                Ok(key)
            } else {
                Err(TokenizerError::MissingKey { key })
            }
        };
        let model = metadata.get_str(required("tokenizer.ggml.model")?)?;
        let tokens = metadata.get_str_array(required("tokenizer.ggml.tokens")?)?;
        let n_tokens = tokens.len();

        let id = |key: &str| metadata.opt_u32(key);
        // The deprecated prefix/suffix/middle keys are read after the FIM ones and win when
        // they name a token, as in llama.cpp.
        let fim = |key: &str, deprecated: &str| -> Result<Option<u32>, TokenizerError> {
            let old = id(deprecated)?.filter(|&v| (v as usize) < n_tokens);
            Ok(old.or(id(key)?))
        };
        let special = SpecialTokenIds {
            bos: id("tokenizer.ggml.bos_token_id")?,
            eos: id("tokenizer.ggml.eos_token_id")?,
            eot: id("tokenizer.ggml.eot_token_id")?,
            eom: id("tokenizer.ggml.eom_token_id")?,
            unknown: id("tokenizer.ggml.unknown_token_id")?,
            separator: id("tokenizer.ggml.seperator_token_id")?,
            padding: id("tokenizer.ggml.padding_token_id")?,
            mask: id("tokenizer.ggml.mask_token_id")?,
            fim_pre: fim(
                "tokenizer.ggml.fim_pre_token_id",
                "tokenizer.ggml.prefix_token_id",
            )?,
            fim_suf: fim(
                "tokenizer.ggml.fim_suf_token_id",
                "tokenizer.ggml.suffix_token_id",
            )?,
            fim_mid: fim(
                "tokenizer.ggml.fim_mid_token_id",
                "tokenizer.ggml.middle_token_id",
            )?,
            fim_pad: id("tokenizer.ggml.fim_pad_token_id")?,
            fim_rep: id("tokenizer.ggml.fim_rep_token_id")?,
            fim_sep: id("tokenizer.ggml.fim_sep_token_id")?,
        };

        Ok(VocabSpec {
            model: Cow::Borrowed(model),
            pre: metadata.opt_str("tokenizer.ggml.pre")?.map(Cow::Borrowed),
            tokens: Cow::Borrowed(tokens),
            token_types: metadata.opt_i32_array("tokenizer.ggml.token_type")?,
            merges: metadata
                .opt_str_array("tokenizer.ggml.merges")?
                .map(Cow::Borrowed),
            special,
            add_bos: metadata.opt_bool("tokenizer.ggml.add_bos_token")?,
            add_eos: metadata.opt_bool("tokenizer.ggml.add_eos_token")?,
            extra: VocabExtra {
                scores: metadata.opt_f32_array("tokenizer.ggml.scores")?,
                precompiled_charsmap: charsmap(metadata)?,
                add_sep: metadata.opt_bool("tokenizer.ggml.add_sep_token")?,
                add_space_prefix: metadata.opt_bool("tokenizer.ggml.add_space_prefix")?,
                remove_extra_whitespaces: metadata
                    .opt_bool("tokenizer.ggml.remove_extra_whitespaces")?,
                lowercase: metadata.opt_bool("tokenizer.ggml.normalizer.lowercase")?,
                strip_accents: metadata.opt_bool("tokenizer.ggml.normalizer.strip_accents")?,
                name: metadata.opt_str("general.name")?.map(Cow::Borrowed),
                architecture: metadata.opt_str("general.architecture")?.map(Cow::Borrowed),
            },
        })
    }
}

/// `tokenizer.ggml.precompiled_charsmap`: an array of u8 or i8 (llama.cpp accepts both).
fn charsmap(metadata: &Metadata) -> Result<Option<Cow<'_, [u8]>>, TokenizerError> {
    const KEY: &str = "tokenizer.ggml.precompiled_charsmap";
    if !metadata.contains_key(KEY) {
        return Ok(None);
    }
    match metadata.get_array(KEY)? {
        oxibonsai_gguf::Array::U8(bytes) => Ok(Some(Cow::Borrowed(bytes))),
        oxibonsai_gguf::Array::I8(bytes) => {
            Ok(Some(Cow::Owned(bytes.iter().map(|&b| b as u8).collect())))
        }
        other => Err(TokenizerError::WrongKeyType {
            key: KEY,
            expected: "array<u8>",
            found: other.type_name().to_owned(),
        }),
    }
}
