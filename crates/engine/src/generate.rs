//! The generation loop: prompt processed as one batch, then one token at a time — sample, stop on
//! an end-of-generation token or a stop string, stream text that is complete (never half a UTF-8
//! character, never a stop string or a part of one). With a drafter ([`crate::speculative`]) each
//! step verifies several drafted tokens in one pass; the kept tokens go through the same checks.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use oxibonsai_tokenizer::Tokenizer;

use crate::backend::Backend;
use crate::constraint::Constraint;
use crate::error::EngineError;
use crate::model::{Logits, Model, Sequence};
use crate::sampling::{Sampler, SamplingParams, StopStrings, Verdict};
use crate::speculative::{Draft, Speculation};

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
    /// Speculative decoding: drafted tokens that verification reached (a stop inside a run
    /// leaves the rest of the draft unchecked), and how many of them were kept.
    pub draft_tokens: usize,
    pub draft_accepted: usize,
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
    constraint: Option<&mut Constraint>,
    cancel: &AtomicBool,
    on_text: impl FnMut(&str) -> bool,
) -> Result<GenerationStats, EngineError> {
    generate_speculative(
        model, seq, tokenizer, prompt, options, constraint, None, cancel, on_text,
    )
}

/// Mixed into the seed of the draft's sampler, so its draws are not the target's.
const DRAFT_SEED: u64 = 0x9E37_79B9_7F4A_7C15;

/// [`generate_constrained`] with speculative decoding when `speculation` is given: each step the
/// drafter proposes tokens, the last token and the draft go through the model in one pass with
/// logits for every row, and each row verifies its drafted token
/// ([`Sampler::verify`](crate::sampling::Sampler::verify)) until one is rejected; the positions
/// of rejected tokens are cut from `seq`. Every kept token passes the same checks as without a
/// drafter (mask, end of generation, stop strings, `n_predict`, context), in order, so greedy
/// output is the same token for token and a stop inside a run of accepted tokens cuts there.
/// A token the constraint forbids has probability 0 and is never kept: it ends the draft.
#[allow(clippy::too_many_arguments)]
pub fn generate_speculative<B: Backend>(
    model: &Model<B>,
    seq: &mut Sequence<B>,
    tokenizer: &Tokenizer,
    prompt: &[u32],
    options: &GenerateOptions,
    mut constraint: Option<&mut Constraint>,
    mut speculation: Option<&mut Speculation<'_>>,
    cancel: &AtomicBool,
    mut on_text: impl FnMut(&str) -> bool,
) -> Result<GenerationStats, EngineError> {
    let n_vocab = model.config.n_vocab;
    let mut sampler = Sampler::new(options.sampling.clone(), n_vocab)?;
    for &t in prompt {
        sampler.accept(t);
    }
    let mut draft_sampler = match speculation {
        Some(_) => Some(Sampler::new(
            SamplingParams {
                seed: Some(sampler.seed() ^ DRAFT_SEED),
                ..options.sampling.clone()
            },
            n_vocab,
        )?),
        None => None,
    };
    let mut stops = StopStrings::new(options.stop.clone());
    let mut decoder = tokenizer.stream_decoder(options.render_special);

    let (base, n_ctx) = (seq.n_past(), seq.n_ctx());
    // What the drafter continues: the sequence's tokens, the prompt and every generated one.
    let mut context = match speculation {
        Some(_) => [seq.tokens(), prompt].concat(),
        None => Vec::new(),
    };
    if speculation
        .as_ref()
        .is_some_and(|s| s.drafter.reads_hidden())
    {
        seq.keep_hidden();
    }
    let start = Instant::now();
    let mut logits = model.forward(seq, prompt, Logits::Last)?;
    if let Some(s) = speculation.as_deref_mut() {
        s.drafter.prefill(&context)?;
    }
    let prompt_time = start.elapsed();
    let gen_start = Instant::now();
    let mut tokens = Vec::new();
    // Text ready to hand out this step; one buffer for the whole generation.
    let mut text = String::new();
    // The masked copy of each row of logits; allocated once.
    let mut masked = Vec::new();
    // The drafted tokens the rows of `logits` verify (row i verifies token i; the last row
    // follows them), and the tokens fed to verify them.
    let mut draft = Draft::default();
    let mut feed = Vec::new();
    let (mut drafted, mut accepted) = (0, 0);
    // Whether the last generated token was not fed to the model (a stop after sampling).
    let mut last_unfed;
    let stop_reason = 'steps: loop {
        let mut kept = 0;
        for row in 0..=draft.len() {
            last_unfed = false;
            if options.n_predict.is_some_and(|n| tokens.len() >= n) {
                break 'steps StopReason::Length;
            }
            if cancel.load(Ordering::Relaxed) {
                break 'steps StopReason::Cancelled;
            }
            let row_logits = &logits[row * n_vocab..(row + 1) * n_vocab];
            let row_logits = match constraint.as_deref_mut() {
                Some(constraint) => {
                    masked.clear();
                    masked.extend_from_slice(row_logits);
                    constraint.mask(&mut masked)?;
                    &masked[..]
                }
                None => row_logits,
            };
            let (token, agreed) = match draft.tokens.get(row) {
                Some(&x) => {
                    drafted += 1;
                    match sampler.verify(row_logits, x, draft.probs[row].as_deref())? {
                        Verdict::Accept => (x, true),
                        Verdict::Reject(t) => (t, false),
                    }
                }
                None => (sampler.sample(row_logits)?, false),
            };
            kept += usize::from(agreed);
            accepted += usize::from(agreed);
            last_unfed = true;
            sampler.accept(token);
            tokens.push(token);
            if speculation.is_some() {
                context.push(token);
            }
            if tokenizer.is_eog(token) {
                break 'steps StopReason::EndOfGeneration;
            }
            if let Some(constraint) = constraint.as_deref_mut() {
                constraint.accept(token)?;
            }
            text.clear();
            let stopped = stops.push_into(decoder.push(token)?, &mut text);
            if !text.is_empty() && !on_text(&text) {
                break 'steps StopReason::Cancelled;
            }
            if stopped {
                break 'steps StopReason::StopString;
            }
            if options.n_predict.is_some_and(|n| tokens.len() >= n) {
                break 'steps StopReason::Length;
            }
            if base + prompt.len() + tokens.len() > n_ctx {
                break 'steps StopReason::ContextFull;
            }
            if !agreed {
                break;
            }
        }
        if let Some(s) = speculation.as_deref_mut() {
            s.lookahead.record(draft.len(), kept);
        }
        // The positions of the rejected tokens go; the last token is fed next.
        cut(
            model,
            seq,
            base + prompt.len() + tokens.len() - 1,
            &mut speculation,
        )?;
        let last = tokens[tokens.len() - 1];
        draft.clear();
        if let (Some(s), Some(draft_sampler)) = (speculation.as_deref_mut(), &mut draft_sampler) {
            let room = (n_ctx - seq.n_past() - 1).min(
                options
                    .n_predict
                    .map_or(usize::MAX, |n| n - tokens.len() - 1),
            );
            let want = s.lookahead.next_for(&*s.drafter).min(room);
            if want > 0 {
                s.drafter.draft_with_hidden(
                    &context,
                    seq.hidden(),
                    want,
                    draft_sampler,
                    &mut draft,
                )?;
                draft.truncate(want);
                if draft.len() < s.lookahead.limits().min {
                    draft.clear();
                }
            }
        }
        feed.clear();
        feed.push(last);
        feed.extend_from_slice(&draft.tokens);
        let rows = if draft.is_empty() {
            Logits::Last
        } else {
            // A recurrent state cannot be cut back: save it before the pass, so dropping
            // rejected positions recomputes only the accepted ones.
            seq.checkpoint();
            Logits::All
        };
        logits = model.forward(seq, &feed, rows)?;
    };
    if speculation.is_some() {
        // As without a drafter: every generated token fed except one sampled last.
        let fed = base + prompt.len() + tokens.len() - usize::from(last_unfed);
        cut(model, seq, fed, &mut speculation)?;
    }
    if let Some(s) = speculation {
        s.drafted += drafted;
        s.accepted += accepted;
    }
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
        draft_tokens: drafted,
        draft_accepted: accepted,
    })
}

/// Cuts `seq` back to `n` positions when it holds more (a recurrent model computes again from
/// its checkpoint; the count goes to the speculation's statistics).
fn cut<B: Backend>(
    model: &Model<B>,
    seq: &mut Sequence<B>,
    n: usize,
    speculation: &mut Option<&mut Speculation<'_>>,
) -> Result<(), EngineError> {
    if seq.n_past() > n {
        let restore = seq.rewind(model, n)?;
        if let Some(s) = speculation.as_deref_mut() {
            s.recomputed += restore.recomputed;
        }
    }
    Ok(())
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
