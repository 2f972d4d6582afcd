//! One conversation and the KV cache that follows it. Each turn the whole conversation is rendered
//! with the chat template and tokenized; only the tokens after the longest common prefix with what
//! the cache holds go through the model. When the template renders earlier text differently (e.g.
//! it drops a thinking section from past answers, or the answer re-tokenizes differently) the
//! cache is cut back to the common prefix rather than trusted.

use std::sync::atomic::AtomicBool;

use anyhow::{Context, Result};
use oxibonsai_engine::generate::{generate_speculative, GenerateOptions, GenerationStats};
use oxibonsai_engine::speculative::{DraftLimits, Drafter, Speculation};
use oxibonsai_engine::{Model, RuntimeBackend, Sequence};
use oxibonsai_tokenizer::chat_template::{ChatRequest, ChatTemplate, SpecialTokens};
use oxibonsai_tokenizer::Tokenizer;
use serde_json::{json, Map, Value};

/// What a turn will feed the model.
#[derive(Debug)]
pub struct Turn {
    /// Tokens to run through the model: the rendered conversation after the reused prefix.
    pub feed: Vec<u32>,
    /// Tokens kept from the cache.
    pub reused: usize,
    /// The whole rendered conversation, in tokens.
    pub total: usize,
    /// The generation prompt ends inside an open `<think>` section.
    pub starts_thinking: bool,
}

#[derive(Debug, thiserror::Error)]
#[error(
    "the conversation is {tokens} tokens, which leaves no room in the context of {n_ctx} \
     (/reset to start over, or raise -c/--ctx)"
)]
pub struct ConversationTooLong {
    pub tokens: usize,
    pub n_ctx: usize,
}

pub struct Session<'m> {
    model: &'m Model<RuntimeBackend>,
    tokenizer: &'m Tokenizer,
    template: ChatTemplate,
    specials: SpecialTokens,
    kwargs: Map<String, Value>,
    /// Holds the conversation's tokens so far (`seq.tokens()`), reused by the next turn.
    seq: Sequence<RuntimeBackend>,
    system: Option<String>,
    /// User and assistant messages, in order (the system message is added when rendering).
    messages: Vec<Value>,
    /// Speculative decoding's drafter, if asked for.
    draft: Option<(Box<dyn Drafter>, DraftLimits)>,
}

impl<'m> Session<'m> {
    /// Drafts with `drafter` from the next answer on. Its state (a draft model's sequence, the
    /// MTP head's cache) follows the conversation: before each draft it is cut back to what it
    /// shares with the conversation's tokens, so a turn that reuses the cache, or cuts it back
    /// where the template renders history differently, or a `/reset`, leaves it consistent.
    pub fn set_drafter(&mut self, drafter: Box<dyn Drafter>, limits: DraftLimits) {
        self.draft = Some((drafter, limits));
    }

    pub fn new(
        model: &'m Model<RuntimeBackend>,
        tokenizer: &'m Tokenizer,
        n_ctx: usize,
        kwargs: Map<String, Value>,
        system: Option<String>,
    ) -> Result<Session<'m>> {
        let source = model
            .file
            .metadata()
            .get_str("tokenizer.chat_template")
            .context("the model has no chat template (tokenizer.chat_template)")?;
        let template =
            ChatTemplate::new(source).context("the model's chat template does not compile")?;
        Ok(Session {
            model,
            tokenizer,
            template,
            specials: tokenizer.template_specials(),
            kwargs,
            seq: model.new_sequence(n_ctx)?,
            system,
            messages: Vec::new(),
            draft: None,
        })
    }

    pub fn n_ctx(&self) -> usize {
        self.seq.n_ctx()
    }

    /// Forgets the conversation. The cache is left alone: the next turn reuses whatever prefix
    /// (e.g. the system prompt) still matches.
    pub fn reset(&mut self) {
        self.messages.clear();
    }

    pub fn set_system(&mut self, system: Option<String>) {
        self.system = system;
        self.reset();
    }

    /// The conversation as a chat request (`{"messages": [...]}`, system message first), the
    /// shape `oxibonsai template` and the OpenAI API read.
    pub fn to_json(&self) -> Value {
        json!({ "messages": self.all_messages() })
    }

    fn all_messages(&self) -> Vec<Value> {
        let system = self
            .system
            .as_ref()
            .map(|text| json!({"role": "system", "content": text}));
        system
            .into_iter()
            .chain(self.messages.iter().cloned())
            .collect()
    }

    /// Adds the user's message and works out what to feed; on error the message is taken back.
    pub fn begin_turn(&mut self, user: &str) -> Result<Turn> {
        self.messages.push(json!({"role": "user", "content": user}));
        let turn = self.plan_turn();
        if turn.is_err() {
            self.messages.pop();
        }
        turn
    }

    fn plan_turn(&mut self) -> Result<Turn> {
        let request = ChatRequest {
            messages: self.all_messages(),
            tools: None,
            add_generation_prompt: true,
            extra_kwargs: self.kwargs.clone(),
        };
        let text = self.template.render(&request, &self.specials)?;
        let tokens = self.tokenizer.encode(&text, true, true)?;
        // One free position at least, for the first answer token.
        if tokens.len() >= self.n_ctx() {
            return Err(ConversationTooLong {
                tokens: tokens.len(),
                n_ctx: self.n_ctx(),
            }
            .into());
        }
        // A model with recurrent layers goes back to its latest checkpoint at or before the
        // shared prefix; the tokens from there on are fed with the turn.
        let reused = self
            .seq
            .truncate(reusable_prefix(self.seq.tokens(), &tokens));
        Ok(Turn {
            feed: tokens[reused..].to_vec(),
            reused,
            total: tokens.len(),
            starts_thinking: text.trim_end().ends_with("<think>"),
        })
    }

    /// Generates the answer of `turn`, streaming it to `on_text`; the answer (partial when
    /// cancelled) joins the conversation. If the model fails, the turn is taken back and the
    /// cache forgotten, since it may hold part of the failed batch.
    pub fn answer(
        &mut self,
        turn: Turn,
        options: &GenerateOptions,
        cancel: &AtomicBool,
        mut on_text: impl FnMut(&str),
    ) -> Result<GenerationStats> {
        let mut answer = String::new();
        let mut speculation = self
            .draft
            .as_mut()
            .map(|(drafter, limits)| Speculation::new(&mut **drafter, *limits));
        let outcome = generate_speculative(
            self.model,
            &mut self.seq,
            self.tokenizer,
            &turn.feed,
            options,
            None,
            speculation.as_mut(),
            cancel,
            |piece| {
                answer.push_str(piece);
                on_text(piece);
                true
            },
        );
        match outcome {
            Ok(stats) => {
                // The sequence holds the tokens that went through the model (the last sampled
                // token never did, nor, after a cancel, maybe others).
                self.messages
                    .push(json!({"role": "assistant", "content": answer}));
                Ok(stats)
            }
            Err(err) => {
                self.messages.pop();
                self.seq.clear();
                Err(err.into())
            }
        }
    }
}

/// How many cached tokens a turn can keep: the longest common prefix of what the cache holds and
/// the newly rendered conversation, leaving at least one token to feed (generation starts from
/// the logits of a fed token).
pub fn reusable_prefix(cached: &[u32], rendered: &[u32]) -> usize {
    let common = cached
        .iter()
        .zip(rendered)
        .take_while(|(a, b)| a == b)
        .count();
    common.min(rendered.len().saturating_sub(1))
}

#[cfg(test)]
mod tests {
    use super::reusable_prefix;

    #[test]
    fn reuses_the_common_prefix_and_always_feeds_one_token() {
        assert_eq!(reusable_prefix(&[], &[1, 2, 3]), 0);
        assert_eq!(reusable_prefix(&[1, 2], &[1, 2, 3, 4]), 2);
        // The template re-rendered earlier text differently: cut back to where they part.
        assert_eq!(reusable_prefix(&[1, 2, 9, 9, 9], &[1, 2, 3, 4]), 2);
        // Everything cached: the last token is fed again to get its logits.
        assert_eq!(reusable_prefix(&[1, 2, 3], &[1, 2, 3]), 2);
        assert_eq!(reusable_prefix(&[1, 2, 3, 4], &[1, 2]), 1);
        assert_eq!(reusable_prefix(&[5], &[]), 0);
    }

    #[test]
    fn prefix_matches_a_scalar_twin_on_generated_cases() {
        // Twin: the first index where the sequences differ, by plain indexing.
        let mut state = 0x9e37_79b9_u32;
        let mut next = move || {
            state ^= state << 13;
            state ^= state >> 17;
            state ^= state << 5;
            state
        };
        for _ in 0..500 {
            let a: Vec<u32> = (0..next() % 12).map(|_| next() % 3).collect();
            let b: Vec<u32> = (0..next() % 12).map(|_| next() % 3).collect();
            let mut first_difference = 0;
            while first_difference < a.len()
                && first_difference < b.len()
                && a[first_difference] == b[first_difference]
            {
                first_difference += 1;
            }
            let expected = if first_difference == b.len() && !b.is_empty() {
                b.len() - 1
            } else {
                first_difference
            };
            assert_eq!(reusable_prefix(&a, &b), expected, "{a:?} {b:?}");
        }
    }
}
