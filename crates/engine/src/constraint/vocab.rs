//! The tokenizer side of constrained decoding, built once per model: every token's bytes in a
//! trie, the end-of-generation set, and llguidance's parser factory (which precomputes how the
//! vocabulary splits over common lexemes, the part of a mask that is costly to redo per request).

use std::sync::Arc;

use llguidance::toktrie::{TokEnv, TokRxInfo, TokTrie, TokenId, TokenizerEnv};
use llguidance::ParserFactory;
use oxibonsai_tokenizer::{TokenAttr, Tokenizer};

use super::ConstraintError;

/// The trie stores token ids in 24 bits.
const MAX_VOCAB: usize = 1 << 24;

/// What every request's [`super::Constraint`] is compiled against. Cheap to clone (shared).
#[derive(Clone)]
pub struct ConstraintVocab {
    factory: Arc<ParserFactory>,
    n_vocab: usize,
}

impl std::fmt::Debug for ConstraintVocab {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConstraintVocab")
            .field("n_vocab", &self.n_vocab)
            .finish_non_exhaustive()
    }
}

impl ConstraintVocab {
    /// Builds the trie from `tokenizer`: a token stands for the bytes it prints as
    /// (`token_to_piece(id, false)`), so the grammar constrains exactly the text the user sees.
    /// Control tokens (`<|im_end|>` …) carry llguidance's special-token marker instead, so no
    /// grammar of text matches them (a Lark grammar can still name them as `<|im_end|>`); unused
    /// and unknown tokens stand for nothing and are never allowed. The end-of-generation tokens
    /// are the ones allowed once the grammar is complete.
    pub fn new(tokenizer: Arc<Tokenizer>) -> Result<ConstraintVocab, ConstraintError> {
        let n_vocab = tokenizer.vocab_size();
        if n_vocab == 0 || n_vocab >= MAX_VOCAB {
            return Err(ConstraintError::Vocabulary {
                reason: format!(
                    "{n_vocab} tokens: a constraint needs between 1 and {} tokens",
                    MAX_VOCAB - 1
                ),
            });
        }
        let mut eog: Vec<u32> = tokenizer.eog_ids().to_vec();
        if let Some(eos) = tokenizer.eos() {
            if !eog.contains(&eos) {
                eog.insert(0, eos);
            }
        }
        eog.retain(|&id| (id as usize) < n_vocab);
        // llguidance reports the first as "the" EOS: prefer the tokenizer's own.
        let tok_eos = match tokenizer.eos().filter(|&id| (id as usize) < n_vocab) {
            Some(eos) => eos,
            None => *eog.first().ok_or_else(|| ConstraintError::Vocabulary {
                reason: "no end-of-generation token (EOS, EOT, <|im_end|> …): a constrained \
                         generation could never end"
                    .to_owned(),
            })?,
        };
        if let Some(pos) = eog.iter().position(|&id| id == tok_eos) {
            eog.swap(0, pos);
        }

        let mut words = Vec::with_capacity(n_vocab);
        for id in 0..n_vocab as u32 {
            words.push(token_bytes(&tokenizer, id)?);
        }
        let info = TokRxInfo {
            vocab_size: n_vocab as u32,
            tok_eos,
            tok_bos: tokenizer.bos(),
            tok_pad: tokenizer.special_ids().padding,
            tok_unk: tokenizer.special_ids().unknown,
            tok_end_of_turn: tokenizer.eot(),
        };
        let trie = TokTrie::from(&info, &words).with_eos_tokens(&eog);
        let env: TokEnv = Arc::new(OurTokEnv { tokenizer, trie });
        let mut factory =
            ParserFactory::new_simple(&env).map_err(|e| ConstraintError::Vocabulary {
                reason: format!("{e:#}"),
            })?;
        // Warnings go through `tracing` (see `Constraint::new`), not straight to stderr.
        factory.set_stderr_log_level(0);
        Ok(ConstraintVocab {
            factory: Arc::new(factory),
            n_vocab,
        })
    }

    pub fn n_vocab(&self) -> usize {
        self.n_vocab
    }

    /// The end-of-generation tokens, the first being EOS.
    pub fn eos_tokens(&self) -> &[u32] {
        self.factory.tok_env().tok_trie().eos_tokens()
    }

    /// The bytes a token stands for in the trie (with the special marker for control tokens).
    pub fn token_bytes(&self, id: u32) -> &[u8] {
        self.factory.tok_env().tok_trie().token(id)
    }

    pub(super) fn factory(&self) -> &ParserFactory {
        &self.factory
    }
}

fn token_bytes(tokenizer: &Tokenizer, id: u32) -> Result<Vec<u8>, ConstraintError> {
    let attr = tokenizer.token_attr(id).unwrap_or_default();
    if attr.intersects(TokenAttr::UNUSED.with(TokenAttr::UNKNOWN)) {
        return Ok(Vec::new());
    }
    if attr.intersects(TokenAttr::CONTROL) {
        let piece = tokenizer.token_to_piece(id, true)?;
        if piece.is_empty() {
            return Ok(Vec::new());
        }
        let mut word = Vec::with_capacity(piece.len() + 1);
        word.push(TokTrie::SPECIAL_TOKEN_MARKER);
        word.extend_from_slice(piece);
        return Ok(word);
    }
    Ok(tokenizer.token_to_piece(id, false)?.to_vec())
}

/// Our BPE tokenizer as llguidance sees it: used to turn text the grammar forces into the
/// tokens the model would have produced for it.
struct OurTokEnv {
    tokenizer: Arc<Tokenizer>,
    trie: TokTrie,
}

impl OurTokEnv {
    fn encode(&self, text: &str, parse_special: bool) -> Vec<TokenId> {
        self.tokenizer
            .encode(text, false, parse_special)
            // Encoding text cannot fail today; should it ever, the trie's greedy split is
            // still a valid (if not canonical) tokenization.
            .unwrap_or_else(|_| self.trie.greedy_tokenize(text.as_bytes()))
    }
}

impl TokenizerEnv for OurTokEnv {
    fn tok_trie(&self) -> &TokTrie {
        &self.trie
    }

    fn tokenize_bytes(&self, s: &[u8]) -> Vec<TokenId> {
        self.trie
            .tokenize_with_greedy_fallback(s, |text| self.encode(text, false))
    }

    fn tokenize_bytes_special(&self, s: &[u8]) -> Vec<TokenId> {
        self.trie
            .tokenize_with_greedy_fallback(s, |text| self.encode(text, true))
    }
}
