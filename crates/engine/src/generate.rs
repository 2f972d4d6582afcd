//! The generation loop: prompt processed as one batch, then one token at a time — sample, stop on
//! an end-of-generation token or a stop string, stream text that is complete (never half a UTF-8
//! character, never a stop string or a part of one).

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use oxibonsai_tokenizer::Tokenizer;

use crate::backend::Backend;
use crate::constraint::Constraint;
use crate::error::EngineError;
use crate::model::{Logits, Model, Sequence};
use crate::sampling::{Sampler, SamplingParams, StopStrings};

#[derive(Clone, Debug)]
pub struct GenerateOptions {
    /// Tokens to generate at most (`None`: until the context is full or generation ends).
    pub n_predict: Option<usize>,
    pub sampling: SamplingParams,
    pub stop: Vec<String>,
    /// Render control tokens (e.g. `<|im_end|>`) as text when they are generated.
    pub render_special: bool,
}

/// Why generation stopped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StopReason {
    /// The model produced an end-of-generation token.
    EndOfGeneration,
    /// A stop string was produced.
    StopString,
    /// `n_predict` tokens were generated.
    Length,
    /// The context is full.
    ContextFull,
    /// The caller asked to stop.
    Cancelled,
}

#[derive(Clone, Debug)]
pub struct GenerationStats {
    pub prompt_tokens: usize,
    pub prompt_time: Duration,
    pub generated_tokens: usize,
    pub generation_time: Duration,
    pub stop_reason: StopReason,
    pub tokens: Vec<u32>,
}

impl GenerationStats {
    pub fn prompt_tokens_per_s(&self) -> f64 {
        self.prompt_tokens as f64 / self.prompt_time.as_secs_f64().max(1e-9)
    }
    /// Decode speed: the first generated token comes from the prompt pass, so it is not counted.
    pub fn generation_tokens_per_s(&self) -> f64 {
        self.generated_tokens.saturating_sub(1) as f64
            / self.generation_time.as_secs_f64().max(1e-9)
    }
}

/// Generates from `prompt` (token ids, already tokenized) on `seq`, calling `on_text` with each
/// piece of text as soon as it is final; `on_text` returns `false` to stop.
pub fn generate<B: Backend>(
    model: &Model<B>,
    seq: &mut Sequence<B>,
    tokenizer: &Tokenizer,
    prompt: &[u32],
    options: &GenerateOptions,
    on_text: impl FnMut(&str) -> bool,
) -> Result<GenerationStats, EngineError> {
    let never = AtomicBool::new(false);
    generate_cancellable(model, seq, tokenizer, prompt, options, &never, on_text)
}

/// [`generate`], also stopping with [`StopReason::Cancelled`] once `cancel` is set — from another
/// thread or a signal handler (Ctrl-C), which cannot reach the `on_text` callback. It is checked
/// before each token is sampled, so a token that decodes to no visible text does not delay it.
/// On return `seq.n_past()` counts the prompt and every generated token that went through the model.
pub fn generate_cancellable<B: Backend>(
    model: &Model<B>,
    seq: &mut Sequence<B>,
    tokenizer: &Tokenizer,
    prompt: &[u32],
    options: &GenerateOptions,
    cancel: &AtomicBool,
    on_text: impl FnMut(&str) -> bool,
) -> Result<GenerationStats, EngineError> {
    generate_constrained(
        model, seq, tokenizer, prompt, options, None, cancel, on_text,
    )
}

/// [`generate_cancellable`] with the output held to a grammar: each step the tokens that cannot
/// continue `constraint` are masked out before sampling, and the sampled token advances it. Once
/// the grammar is complete only end-of-generation tokens remain, so the run ends with
/// [`StopReason::EndOfGeneration`] unless `n_predict`, the context, a stop string or `cancel`
/// cut it first ([`Constraint::is_accepting`] then tells whether the output is complete).
///
/// The constraint is a separate `&mut` argument, not an option: it is one request's state,
/// advanced token by token, while the options are read-only settings.
#[allow(clippy::too_many_arguments)]
pub fn generate_constrained<B: Backend>(
    model: &Model<B>,
    seq: &mut Sequence<B>,
    tokenizer: &Tokenizer,
    prompt: &[u32],
    options: &GenerateOptions,
    mut constraint: Option<&mut Constraint>,
    cancel: &AtomicBool,
    mut on_text: impl FnMut(&str) -> bool,
) -> Result<GenerationStats, EngineError> {
    let n_vocab = model.config.n_vocab;
    let mut sampler = Sampler::new(options.sampling.clone(), n_vocab)?;
    for &t in prompt {
        sampler.accept(t);
    }
    let mut stops = StopStrings::new(options.stop.clone());
    let mut decoder = tokenizer.stream_decoder(options.render_special);

    let start = Instant::now();
    let mut logits = model.forward(seq, prompt, Logits::Last)?;
    let prompt_time = start.elapsed();
    let gen_start = Instant::now();
    let mut tokens = Vec::new();
    // Text ready to hand out this step; one buffer for the whole generation.
    let mut text = String::new();
    // The masked copy of each step's logits; allocated once.
    let mut masked = Vec::new();
    let stop_reason = loop {
        if options.n_predict.is_some_and(|n| tokens.len() >= n) {
            break StopReason::Length;
        }
        if cancel.load(Ordering::Relaxed) {
            break StopReason::Cancelled;
        }
        let token = match constraint.as_deref_mut() {
            Some(constraint) => {
                masked.clear();
                masked.extend_from_slice(logits);
                constraint.mask(&mut masked)?;
                sampler.sample(&masked)?
            }
            None => sampler.sample(logits)?,
        };
        sampler.accept(token);
        tokens.push(token);
        if tokenizer.is_eog(token) {
            break StopReason::EndOfGeneration;
        }
        if let Some(constraint) = constraint.as_deref_mut() {
            constraint.accept(token)?;
        }
        text.clear();
        let stopped = stops.push_into(decoder.push(token)?, &mut text);
        if !text.is_empty() && !on_text(&text) {
            break StopReason::Cancelled;
        }
        if stopped {
            break StopReason::StopString;
        }
        if options.n_predict.is_some_and(|n| tokens.len() >= n) {
            break StopReason::Length;
        }
        if seq.n_past() >= seq.n_ctx() {
            break StopReason::ContextFull;
        }
        logits = model.forward(seq, &[token], Logits::Last)?;
    };
    if matches!(
        stop_reason,
        StopReason::Length | StopReason::ContextFull | StopReason::EndOfGeneration
    ) {
        text.clear();
        stops.push_into(decoder.finish(), &mut text);
        text.push_str(&stops.finish());
        if !text.is_empty() {
            on_text(&text);
        }
    }
    Ok(GenerationStats {
        prompt_tokens: prompt.len(),
        prompt_time,
        generated_tokens: tokens.len(),
        generation_time: gen_start.elapsed(),
        stop_reason,
        tokens,
    })
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use oxibonsai_gguf::GgufFile;

    use super::*;
    use crate::CpuBackend;

    fn options() -> GenerateOptions {
        GenerateOptions {
            n_predict: Some(6),
            sampling: SamplingParams {
                temperature: 0.0,
                ..SamplingParams::default()
            },
            stop: Vec::new(),
            render_special: false,
        }
    }

    #[test]
    fn cancel_flag_stops_before_the_next_token_and_unset_changes_nothing() {
        let file =
            Arc::new(GgufFile::open(oxibonsai_testkit::golden("models/qwen3-q1_0.gguf")).unwrap());
        let tokenizer = Tokenizer::from_gguf(&file).unwrap();
        let model = Model::load(file, CpuBackend::new(1).unwrap()).unwrap();
        let prompt = [1u32, 2, 3, 4];
        let run = |cancel: &AtomicBool, cancel_on_text: bool| {
            let mut seq = model.new_sequence(64).unwrap();
            let stats = generate_cancellable(
                &model,
                &mut seq,
                &tokenizer,
                &prompt,
                &options(),
                cancel,
                |_| {
                    // Stands for a Ctrl-C handler: sets the flag without stopping the callback.
                    if cancel_on_text {
                        cancel.store(true, Ordering::Relaxed);
                    }
                    true
                },
            )
            .unwrap();
            (stats, seq.n_past())
        };

        let mut seq = model.new_sequence(64).unwrap();
        let plain = generate(&model, &mut seq, &tokenizer, &prompt, &options(), |_| true).unwrap();
        assert_eq!(plain.stop_reason, StopReason::Length);
        // The last sampled token is never run through the model.
        assert_eq!(seq.n_past(), prompt.len() + plain.tokens.len() - 1);

        let (unset, _) = run(&AtomicBool::new(false), false);
        assert_eq!(unset.tokens, plain.tokens);

        // Set while generating: the tokens so far, each run through the model, and no more.
        let (stopped, n_past) = run(&AtomicBool::new(false), true);
        assert_eq!(stopped.stop_reason, StopReason::Cancelled);
        assert!(!stopped.tokens.is_empty());
        assert_eq!(stopped.tokens, plain.tokens[..stopped.tokens.len()]);
        assert_eq!(n_past, prompt.len() + stopped.tokens.len());

        let (cancelled, n_past) = run(&AtomicBool::new(true), false);
        assert_eq!(cancelled.stop_reason, StopReason::Cancelled);
        assert!(cancelled.tokens.is_empty());
        assert_eq!(n_past, prompt.len());
    }
}
