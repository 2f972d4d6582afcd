//! `POST /infill`: fill-in-the-middle as llama-server lays it out (the editors' plugins,
//! llama.vscode and llama.vim, call it): the extra context chunks first (`input_extra`, under
//! the vocabulary's FIM_REP / FIM_SEP tokens when it has them, else a text separator), then
//! `FIM_PRE prefix prompt FIM_SUF suffix FIM_MID`, the prefix and suffix cut to fit a batch 3:1.
//! The answer is the native completion's ([`super::native`]).

use axum::response::Response;
use serde_json::Value;

use oxibonsai_tokenizer::Tokenizer;

use super::native::{self, mixed};
use super::ModelRequest;
use crate::error::ApiError;

/// llama-server's default batch: the prefix and suffix together fit in one.
const N_BATCH: usize = 2048;

/// The vocabulary's FIM tokens: the ids its metadata names (`tokenizer.ggml.fim_*_token_id`),
/// else found by their texts as llama.cpp's vocabulary loader finds them (each family's
/// spelling).
struct FimTokens {
    pre: u32,
    suf: u32,
    mid: u32,
    rep: Option<u32>,
    sep: Option<u32>,
}

const PRE: &[&str] = &[
    "<|fim_prefix|>",
    "<fim-prefix>",
    "<fim_prefix>",
    "<｜fim▁begin｜>",
    "<PRE>",
    "▁<PRE>",
    "<|code_prefix|>",
    "<|prefix|>",
];
const SUF: &[&str] = &[
    "<|fim_suffix|>",
    "<fim-suffix>",
    "<fim_suffix>",
    "<｜fim▁hole｜>",
    "<SUF>",
    "▁<SUF>",
    "<|code_suffix|>",
    "<|suffix|>",
];
const MID: &[&str] = &[
    "<|fim_middle|>",
    "<fim-middle>",
    "<fim_middle>",
    "<｜fim▁end｜>",
    "<MID>",
    "▁<MID>",
    "<|code_middle|>",
    "<|middle|>",
];
const REP: &[&str] = &[
    "<|fim_repo|>",
    "<|repo_name|>",
    "<fim-repo>",
    "<REPO>",
    "<reponame>",
];
const SEP: &[&str] = &["<|file_sep|>"];

impl FimTokens {
    /// The vocabulary's FIM tokens, or the 501 llama-server answers naming the missing ones.
    fn of(tokenizer: &Tokenizer) -> Result<FimTokens, ApiError> {
        let ids = tokenizer.special_ids();
        let find = |named: Option<u32>, names: &[&str]| {
            named.or_else(|| names.iter().find_map(|n| tokenizer.token_id(n)))
        };
        let (pre, suf, mid) = (
            find(ids.fim_pre, PRE),
            find(ids.fim_suf, SUF),
            find(ids.fim_mid, MID),
        );
        match (pre, suf, mid) {
            (Some(pre), Some(suf), Some(mid)) => Ok(FimTokens {
                pre,
                suf,
                mid,
                rep: find(ids.fim_rep, REP),
                sep: find(ids.fim_sep, SEP),
            }),
            _ => {
                let mut missing = String::new();
                for (token, what) in [(pre, "prefix"), (suf, "suffix"), (mid, "middle")] {
                    if token.is_none() {
                        missing.push_str(&format!("{what} token is missing. "));
                    }
                }
                Err(ApiError::NotSupported(format!(
                    "Infill is not supported by this model: {missing}"
                )))
            }
        }
    }
}

pub(super) async fn infill(req: ModelRequest) -> Result<Response, ApiError> {
    let (l, f) = req.parts()?;
    // The request's shape is checked first: a malformed body is a 400 whatever the model.
    let chunks = match f.get("input_extra") {
        None => Vec::new(),
        Some(Value::Array(items)) => parse_chunks(items)?,
        Some(_) => {
            return Err(ApiError::invalid(
                "input_extra",
                "'input_extra' must be an array of {\"filename\": string, \"text\": string}",
            ))
        }
    };
    let fim = FimTokens::of(&l.tokenizer)?;
    let text_or_tokens = |field: &str| -> Result<Vec<u32>, ApiError> {
        match f.get(field) {
            None => Err(ApiError::invalid(field, format!("'{field}' is required"))),
            // Plain text here: no BOS, special-token text kept as text (llama-server's
            // `tokenize_mixed(…, false, false)`).
            Some(Value::String(s)) => l
                .tokenizer
                .encode(s, false, false)
                .map_err(|e| ApiError::invalid(field, e.to_string())),
            Some(v) => mixed(l, v, field),
        }
    };
    let prefix = text_or_tokens("input_prefix")?;
    let suffix = text_or_tokens("input_suffix")?;
    let prompt = match f.get("prompt") {
        None => Vec::new(),
        Some(Value::String(s)) => l
            .tokenizer
            .encode(s, false, true)
            .map_err(|e| ApiError::invalid("prompt", e.to_string()))?,
        Some(_) => return Err(ApiError::invalid("prompt", "'prompt' must be a string")),
    };
    let extra = extra_chunks(&l.tokenizer, &chunks, &fim)?;
    let tokens = layout(&l.tokenizer, l.n_ctx, &fim, prefix, suffix, &prompt, extra);
    let native = native::read(l, &f, &req.state.options.request_defaults)?;
    native::answer(&req, l, vec![tokens], native).await
}

/// `input_extra`'s chunks as `(filename, text)`: each an object with a string `text` and an
/// optional string `filename` (`tmp` when absent, as llama-server).
fn parse_chunks(chunks: &[Value]) -> Result<Vec<(&str, &str)>, ApiError> {
    chunks
        .iter()
        .map(|chunk| {
            let body = chunk.get("text").and_then(Value::as_str).ok_or_else(|| {
                ApiError::invalid(
                    "input_extra",
                    "an 'input_extra' chunk must have a \"text\" field with a string value",
                )
            })?;
            let filename = match chunk.get("filename") {
                None => "tmp",
                Some(Value::String(s)) => s.as_str(),
                Some(_) => {
                    return Err(ApiError::invalid(
                        "input_extra",
                        "an 'input_extra' chunk's \"filename\" must be a string",
                    ))
                }
            };
            Ok((filename, body))
        })
        .collect()
}

/// `input_extra`'s chunks as tokens: `[FIM_REP]myproject\n`, then per chunk
/// `[FIM_SEP]filename\n` and its text (a text separator without FIM_SEP), then
/// `[FIM_SEP]filename\n` for the current file.
fn extra_chunks(
    tokenizer: &Tokenizer,
    chunks: &[(&str, &str)],
    fim: &FimTokens,
) -> Result<Vec<u32>, ApiError> {
    let text = |s: &str| {
        tokenizer
            .encode(s, false, false)
            .map_err(|e| ApiError::invalid("input_extra", e.to_string()))
    };
    let mut out = Vec::new();
    if let Some(rep) = fim.rep {
        out.push(rep);
        out.extend(text("myproject\n")?);
    }
    for &(filename, body) in chunks {
        match fim.sep {
            Some(sep) => {
                out.push(sep);
                out.extend(text(&format!("{filename}\n"))?);
            }
            None => out.extend(text("\n\n--- snippet ---\n\n")?),
        }
        out.extend(text(body)?);
    }
    if let Some(sep) = fim.sep {
        out.push(sep);
        out.extend(text("filename\n")?);
    }
    Ok(out)
}

/// llama-server's `format_prompt_infill` (prefix-suffix-middle order): the prefix's last
/// tokens and the suffix's first, 3:1 within a batch; the extra context's last tokens before
/// them, as many as the context leaves.
fn layout(
    tokenizer: &Tokenizer,
    n_ctx: usize,
    fim: &FimTokens,
    mut prefix: Vec<u32>,
    mut suffix: Vec<u32>,
    prompt: &[u32],
    extra: Vec<u32>,
) -> Vec<u32> {
    let prefix_take = prefix.len().min(3 * (N_BATCH / 4));
    let suffix_take = suffix
        .len()
        .min((N_BATCH / 4).saturating_sub(2 + prompt.len()));
    // llama-server's server default `n_predict` is -1: room for the batch and two tokens.
    let extra_take = (n_ctx.saturating_sub(N_BATCH) + 2).min(extra.len());
    prefix.drain(..prefix.len() - prefix_take);
    suffix.truncate(suffix_take);
    let mut out = Vec::with_capacity(extra_take + prefix.len() + suffix.len() + prompt.len() + 4);
    out.extend_from_slice(&extra[extra.len() - extra_take..]);
    if tokenizer.add_bos() {
        out.extend(tokenizer.bos());
    }
    out.push(fim.pre);
    out.extend(prefix);
    out.extend_from_slice(prompt);
    out.push(fim.suf);
    out.extend(suffix);
    out.push(fim.mid);
    out
}

#[cfg(test)]
mod tests {
    use oxibonsai_gguf::GgufFile;
    use oxibonsai_testkit::golden;
    use serde_json::json;

    use super::*;

    fn vocab(name: &str) -> Tokenizer {
        let path = golden(&format!("tokenizer/{name}/{name}-vocab.gguf"));
        let file = GgufFile::open(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        Tokenizer::from_gguf(&file).expect("the golden vocabulary")
    }

    /// Qwen3's vocabulary has all five FIM tokens: the layout is llama-server's, spelled out.
    #[test]
    fn the_layout_is_llama_servers_repo_level_pattern() {
        let t = vocab("qwen3");
        let fim = FimTokens::of(&t).expect("qwen3 has FIM tokens");
        let text = |s: &str| t.encode(s, false, false).unwrap();
        let chunks = [
            json!({"filename": "util.py", "text": "import math\n"}),
            json!({"text": "x = 1\n"}),
        ];
        let extra = extra_chunks(&t, &parse_chunks(&chunks).unwrap(), &fim).unwrap();
        let tokens = layout(
            &t,
            4096,
            &fim,
            text("def add(a, b):\n    "),
            text("\nprint(add(1, 2))\n"),
            &text("return"),
            extra,
        );
        let expected = "<|repo_name|>myproject\n<|file_sep|>util.py\nimport math\n\
                        <|file_sep|>tmp\nx = 1\n<|file_sep|>filename\n\
                        <|fim_prefix|>def add(a, b):\n    return\
                        <|fim_suffix|>\nprint(add(1, 2))\n<|fim_middle|>";
        assert_eq!(t.decode(&tokens, true).unwrap(), expected);
        // The extra context goes first when the context is short: its last tokens only.
        let extra = extra_chunks(&t, &parse_chunks(&chunks).unwrap(), &fim).unwrap();
        let short = layout(&t, 10, &fim, text("a"), text("b"), &[], extra.clone());
        let kept = 10usize.saturating_sub(N_BATCH) + 2;
        assert_eq!(&short[..kept], &extra[extra.len() - kept..]);
        assert_eq!(short[kept], fim.pre);
    }

    /// SmolLM2's vocabulary has none (its `<reponame>` alone is not enough): 501 naming them.
    #[test]
    fn a_vocabulary_without_fim_tokens_is_refused_naming_them() {
        let Err(err) = FimTokens::of(&vocab("smollm2")) else {
            panic!("smollm2 has no FIM tokens");
        };
        assert_eq!(err.status().as_u16(), 501);
        let message = err.body()["error"]["message"].to_string();
        for what in ["prefix", "suffix", "middle"] {
            assert!(message.contains(what), "{message}");
        }
    }
}
