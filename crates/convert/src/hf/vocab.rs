//! `tokenizer.json` (+ `tokenizer_config.json`, `config.json`) → the `tokenizer.*` GGUF keys, as
//! the reference converter's byte-level BPE path writes them: tokens padded to the embedding
//! rows, token types, merges, the pre-tokenizer name (recognised by hashing the ids of a fixed
//! check text), special token ids, the add-BOS/EOS flags and the chat template.

use std::collections::{BTreeMap, HashSet};
use std::path::Path;

use oxibonsai_gguf::{Array, Value};
use serde_json::Value as Json;

use super::error::ConvertError;
use super::read_json;

/// GGUF token types (llama.cpp's `llama_token_type`).
const NORMAL: i32 = 1;
const CONTROL: i32 = 3;
const USER_DEFINED: i32 = 4;
const UNUSED: i32 = 5;

/// Special token kinds in the reference's order, with their GGUF key.
const SPECIAL_KINDS: &[(&str, &str)] = &[
    ("bos", "tokenizer.ggml.bos_token_id"),
    ("eos", "tokenizer.ggml.eos_token_id"),
    ("unk", "tokenizer.ggml.unknown_token_id"),
    ("sep", "tokenizer.ggml.seperator_token_id"),
    ("pad", "tokenizer.ggml.padding_token_id"),
    ("cls", "tokenizer.ggml.cls_token_id"),
    ("mask", "tokenizer.ggml.mask_token_id"),
    ("eot", "tokenizer.ggml.eot_token_id"),
];

struct AddedToken {
    id: u64,
    content: String,
    special: bool,
}

/// The `tokenizer.*` keys for a model whose embedding table has `n_vocab` rows.
pub fn tokenizer_metadata(
    dir: &Path,
    n_vocab: usize,
    config: &Json,
) -> Result<Vec<(String, Value)>, ConvertError> {
    let tokenizer_path = dir.join("tokenizer.json");
    if !tokenizer_path.is_file() {
        return Err(ConvertError::MissingFile {
            path: tokenizer_path,
            why: "the vocabulary; only Hugging Face byte-level BPE tokenizers are supported",
        });
    }
    let tokenizer = read_json(&tokenizer_path)?;
    let model = &tokenizer["model"];
    let model_type = model["type"].as_str().unwrap_or("?");
    let decoder_type = tokenizer["decoder"]["type"].as_str().unwrap_or("?");
    if model_type != "BPE"
        || model["byte_fallback"].as_bool().unwrap_or(false)
        || decoder_type != "ByteLevel"
    {
        return Err(ConvertError::UnsupportedTokenizer {
            what: format!("model type '{model_type}', decoder '{decoder_type}'"),
        });
    }
    let added = added_tokens(&tokenizer)?;
    let (tokens, token_types) = token_table(model, &added, n_vocab)?;
    let merges = merges(model)?;
    let pre = super::pre_tokenizer::pre_tokenizer_name(&tokenizer_path)?;

    let config_path = dir.join("tokenizer_config.json");
    let tokenizer_config = if config_path.is_file() {
        Some(read_json(&config_path)?)
    } else {
        None
    };
    let specials = special_tokens(&tokenizer, tokenizer_config.as_ref(), &added, config);

    let mut out: Vec<(String, Value)> = vec![
        ("tokenizer.ggml.model".into(), Value::String("gpt2".into())),
        ("tokenizer.ggml.pre".into(), Value::String(pre.to_owned())),
        (
            "tokenizer.ggml.tokens".into(),
            Value::Array(Array::String(tokens)),
        ),
        (
            "tokenizer.ggml.token_type".into(),
            Value::Array(Array::I32(token_types)),
        ),
        (
            "tokenizer.ggml.merges".into(),
            Value::Array(Array::String(merges)),
        ),
    ];
    for &(kind, key) in SPECIAL_KINDS {
        if let Some(&id) = specials.ids.get(kind) {
            if id >= n_vocab as u64 {
                return Err(ConvertError::TokenOutOfRange {
                    token: format!("the {kind} token"),
                    id,
                    n_vocab,
                });
            }
            out.push((key.into(), Value::U32(id as u32)));
        }
    }
    for kind in ["bos", "eos", "sep"] {
        if let Some(&add) = specials.add.get(kind) {
            out.push((format!("tokenizer.ggml.add_{kind}_token"), Value::Bool(add)));
        }
    }
    out.extend(chat_templates(dir, tokenizer_config.as_ref())?);
    Ok(out)
}

fn added_tokens(tokenizer: &Json) -> Result<Vec<AddedToken>, ConvertError> {
    let Some(list) = tokenizer.get("added_tokens").filter(|v| !v.is_null()) else {
        return Ok(Vec::new());
    };
    let bad = || ConvertError::BadKey {
        file: "tokenizer.json",
        key: "added_tokens".into(),
        expected: "a list of {id, content, special}",
        found: truncate(&list.to_string()),
    };
    list.as_array()
        .ok_or_else(bad)?
        .iter()
        .map(|t| {
            Ok(AddedToken {
                id: t["id"].as_u64().ok_or_else(bad)?,
                content: t["content"].as_str().ok_or_else(bad)?.to_owned(),
                special: t["special"].as_bool().unwrap_or(false),
            })
        })
        .collect()
}

fn truncate(text: &str) -> String {
    match text.char_indices().nth(80) {
        Some((i, _)) => format!("{}…", &text[..i]),
        None => text.to_owned(),
    }
}

/// Names every id below `n_vocab`: the vocabulary, then the added tokens (which may replace a
/// vocabulary entry), `[PADn]` fillers for ids nobody names.
fn token_table(
    model: &Json,
    added: &[AddedToken],
    n_vocab: usize,
) -> Result<(Vec<String>, Vec<i32>), ConvertError> {
    let Some(vocab) = model["vocab"].as_object() else {
        return Err(ConvertError::MissingKey {
            file: "tokenizer.json",
            key: "model.vocab".into(),
            why: "the map from token text to id",
        });
    };
    let mut names: Vec<Option<String>> = vec![None; n_vocab];
    let mut types = vec![UNUSED; n_vocab];
    let mut place = |text: &str, id: Option<u64>, kind: i32| -> Result<(), ConvertError> {
        let id = id.ok_or_else(|| ConvertError::BadKey {
            file: "tokenizer.json",
            key: format!("model.vocab.{text}"),
            expected: "a token id",
            found: "something else".into(),
        })?;
        let slot = usize::try_from(id)
            .ok()
            .filter(|&i| i < n_vocab)
            .ok_or_else(|| ConvertError::TokenOutOfRange {
                token: text.to_owned(),
                id,
                n_vocab,
            })?;
        names[slot] = Some(text.to_owned());
        types[slot] = kind;
        Ok(())
    };
    for (text, id) in vocab {
        place(text, id.as_u64(), NORMAL)?;
    }
    for t in added {
        if t.special || looks_special(&t.content) {
            place(&t.content, Some(t.id), CONTROL)?;
        } else {
            // The reference pre-normalizes SentencePiece-style spaces in user-defined tokens.
            place(
                &t.content.replace('\u{2581}', " "),
                Some(t.id),
                USER_DEFINED,
            )?;
        }
    }
    let tokens = names
        .into_iter()
        .enumerate()
        .map(|(i, name)| name.unwrap_or_else(|| format!("[PAD{i}]")))
        .collect();
    Ok((tokens, types))
}

/// Added tokens some models forget to mark special, recognised by their shape as the
/// reference does.
fn looks_special(text: &str) -> bool {
    matches!(text, "<pad>" | "<mask>" | "<2mass>" | "[@BOS@]")
        || (text.starts_with("<|") && text.ends_with("|>"))
        || (text.starts_with("<｜") && text.ends_with("｜>"))
        || (text.starts_with("<unused") && text.ends_with('>'))
}

/// `model.merges`, either "a b" strings or (since transformers 4.45) ["a", "b"] pairs, whose
/// spaces are encoded as U+0120 so that "a b" stays unambiguous.
fn merges(model: &Json) -> Result<Vec<String>, ConvertError> {
    let Some(list) = model.get("merges").and_then(Json::as_array) else {
        return Err(ConvertError::MissingKey {
            file: "tokenizer.json",
            key: "model.merges".into(),
            why: "a BPE vocabulary needs its merges",
        });
    };
    let bad = |found: &Json| ConvertError::BadKey {
        file: "tokenizer.json",
        key: "model.merges".into(),
        expected: "\"a b\" strings or [\"a\", \"b\"] pairs",
        found: truncate(&found.to_string()),
    };
    list.iter()
        .map(|m| match m {
            Json::String(s) => Ok(s.clone()),
            Json::Array(pair) if pair.len() == 2 => {
                let part = |p: &Json| {
                    p.as_str()
                        .map(|s| s.replace(' ', "\u{0120}"))
                        .ok_or_else(|| bad(m))
                };
                Ok(format!("{} {}", part(&pair[0])?, part(&pair[1])?))
            }
            other => Err(bad(other)),
        })
        .collect()
}

struct Specials {
    ids: BTreeMap<&'static str, u64>,
    add: BTreeMap<&'static str, bool>,
}

/// A `*_token` entry of tokenizer_config.json: a string, or an object with `content`.
fn token_text(entry: Option<&Json>) -> Option<String> {
    match entry? {
        Json::String(s) => Some(s.clone()),
        Json::Object(o) => o.get("content")?.as_str().map(str::to_owned),
        _ => None,
    }
}

/// The reference's `SpecialVocab`: first the token texts of tokenizer_config.json (looked up
/// among the added tokens), with BOS/EOS taken from CLS/SEP where missing and the add flags read
/// from a `TemplateProcessing` post-processor; then `*_token_id` of config.json for kinds still
/// unset. The first id found for a kind wins.
fn special_tokens(
    tokenizer: &Json,
    tokenizer_config: Option<&Json>,
    added: &[AddedToken],
    config: &Json,
) -> Specials {
    let mut specials = Specials {
        ids: BTreeMap::new(),
        add: BTreeMap::new(),
    };
    let mut texts: BTreeMap<&'static str, String> = BTreeMap::new();
    if let Some(tc) = tokenizer_config {
        for &(kind, _) in SPECIAL_KINDS {
            if let Some(text) = token_text(tc.get(format!("{kind}_token"))) {
                texts.insert(kind, text);
            }
        }
        if !texts.contains_key("bos") {
            if let Some(cls) = texts.get("cls").cloned() {
                texts.insert("bos", cls);
            }
        }
        if !texts.contains_key("eos") {
            if let Some(sep) = texts.get("sep").cloned() {
                texts.insert("eos", sep);
            }
        }
    }
    read_template_processing(
        tokenizer,
        tokenizer_config.is_some(),
        &mut texts,
        &mut specials,
    );
    if let Some(tc) = tokenizer_config {
        for &(kind, _) in SPECIAL_KINDS {
            if let Some(add) = tc.get(format!("add_{kind}_token")).and_then(Json::as_bool) {
                specials.add.insert(kind, add);
            }
            if let Some(text) = texts.get(kind) {
                if let Some(t) = added.iter().find(|t| &t.content == text) {
                    specials.ids.entry(kind).or_insert(t.id);
                }
            }
        }
    }
    for &(kind, _) in SPECIAL_KINDS {
        let key = format!("{kind}_token_id");
        let id = config
            .get(&key)
            .or_else(|| config.get("text_config").and_then(|t| t.get(&key)))
            .and_then(Json::as_u64);
        if let Some(id) = id {
            specials.ids.entry(kind).or_insert(id);
        }
    }
    specials
}

/// A `TemplateProcessing` post-processor (alone or in a `Sequence`) that puts a special token
/// before or after the text says whether BOS / EOS are added. A trailing token other than the
/// configured EOS becomes the EOS, the old one the end-of-turn token, as in the reference.
fn read_template_processing(
    tokenizer: &Json,
    have_config: bool,
    texts: &mut BTreeMap<&'static str, String>,
    specials: &mut Specials,
) {
    let Some(post) = tokenizer.get("post_processor").filter(|p| !p.is_null()) else {
        return;
    };
    let processors: Vec<&Json> = match post.get("processors").and_then(Json::as_array) {
        Some(list) => list.iter().collect(),
        None => vec![post],
    };
    for processor in processors {
        if processor["type"].as_str() != Some("TemplateProcessing") {
            continue;
        }
        let Some(single) = processor["single"].as_array().filter(|s| s.len() > 1) else {
            continue;
        };
        let special_id = |item: &Json| item["SpecialToken"]["id"].as_str().map(str::to_owned);
        if let Some(first) = single.first().and_then(special_id) {
            if !have_config {
                texts.insert("bos", first.clone());
            }
            let is_bos = texts.get("bos") == Some(&first) || texts.get("cls") == Some(&first);
            specials.add.insert("bos", is_bos);
        }
        if let Some(last) = single.last().and_then(special_id) {
            if !have_config {
                texts.insert("eos", last.clone());
            } else if texts.get("eos") != Some(&last) {
                if let Some(old) = texts.get("eos").cloned() {
                    texts.entry("eot").or_insert(old);
                }
                texts.insert("eos", last.clone());
            }
            specials.add.insert("eos", texts.get("eos") == Some(&last));
        }
    }
}

/// `tokenizer.chat_template` (and `tokenizer.chat_template.NAME` for named extra templates):
/// from tokenizer_config.json, else `chat_template.jinja`, else `chat_template.json`.
fn chat_templates(
    dir: &Path,
    tokenizer_config: Option<&Json>,
) -> Result<Vec<(String, Value)>, ConvertError> {
    let from_config = tokenizer_config
        .and_then(|tc| tc.get("chat_template"))
        .filter(|t| !t.is_null())
        .cloned();
    let template = match from_config {
        Some(t) => Some(t),
        None => {
            let jinja = dir.join("chat_template.jinja");
            let json = dir.join("chat_template.json");
            if jinja.is_file() {
                let text = std::fs::read_to_string(&jinja).map_err(|source| ConvertError::Io {
                    path: jinja,
                    source,
                })?;
                Some(Json::String(text))
            } else if json.is_file() {
                read_json(&json)?.get("chat_template").cloned()
            } else {
                None
            }
        }
    };
    let bad = |found: &Json| ConvertError::BadKey {
        file: "tokenizer_config.json",
        key: "chat_template".into(),
        expected: "a string or a list of {name, template}",
        found: truncate(&found.to_string()),
    };
    let mut out = Vec::new();
    match template {
        None | Some(Json::Null) => {}
        Some(Json::String(text)) => {
            out.push(("tokenizer.chat_template".into(), Value::String(text)))
        }
        Some(Json::Array(list)) => {
            let mut seen = HashSet::new();
            for entry in &list {
                let (Some(name), Some(text)) = (entry["name"].as_str(), entry["template"].as_str())
                else {
                    return Err(bad(entry));
                };
                if !seen.insert(name.to_owned()) {
                    return Err(bad(entry));
                }
                let key = if name == "default" {
                    "tokenizer.chat_template".to_owned()
                } else {
                    format!("tokenizer.chat_template.{name}")
                };
                out.push((key, Value::String(text.to_owned())));
            }
        }
        Some(other) => return Err(bad(&other)),
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pair_merges_encode_their_spaces() {
        let model = serde_json::json!({"merges": [["a b", "c"], "d e"]});
        assert_eq!(merges(&model).unwrap(), ["a\u{0120}b c", "d e"]);
    }

    #[test]
    fn template_processing_sets_add_bos_and_bos_without_a_config() {
        let tokenizer = serde_json::json!({"post_processor": {"type": "Sequence", "processors": [
            {"type": "ByteLevel"},
            {"type": "TemplateProcessing", "single": [
                {"SpecialToken": {"id": "<|begin_of_text|>", "type_id": 0}},
                {"Sequence": {"id": "A", "type_id": 0}}
            ]}
        ]}});
        let added = vec![AddedToken {
            id: 7,
            content: "<|begin_of_text|>".into(),
            special: true,
        }];
        let tc = serde_json::json!({"bos_token": "<|begin_of_text|>"});
        let s = special_tokens(&tokenizer, Some(&tc), &added, &serde_json::json!({}));
        assert_eq!(s.ids.get("bos"), Some(&7));
        assert_eq!(s.add.get("bos"), Some(&true));
        assert_eq!(s.add.get("eos"), None);
    }

    #[test]
    fn lookalike_specials_are_control_tokens() {
        assert!(looks_special("<|im_start|>"));
        assert!(!looks_special("<think>"));
    }
}
