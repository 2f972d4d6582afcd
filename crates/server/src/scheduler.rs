//! The engine thread: it alone owns the model, a fixed set of KV slots and the queue of jobs.
//!
//! Each step gathers every active slot's next input — a chunk of its prompt while prefilling, its
//! last sampled token while decoding — into one [`Model::forward_batch`], so all sequences share
//! each weight read; then samples one token per slot whose prompt is complete. New jobs join at
//! step boundaries, finished or abandoned ones (the client's channel closed) leave at once.
//!
//! Embedding jobs ([`EmbedJob`]) join the same pass: whole inputs, as many as the step's prefill
//! budget leaves (at least one input when nothing else prefills), each through its own short
//! sequence after the slots' entries ([`Model::forward_batch_embedding`]) — so streams get a token
//! every step while embeddings are computed, as they do beside a long prompt.
//!
//! With a drafter (`serve --model-draft` / `--draft-ngram` / `--draft-mtp`) a decoding slot's
//! input is its last token and the tokens drafted after it; the pass returns logits for each of them
//! ([`Model::forward_batch_rows`]); each row is sampled by the job's own sampler, as without a
//! draft, and a drafted token stands while it equals that draw (llama-server's rule, so a seed
//! gives the same answer with or without drafting); the positions after the first mismatch are
//! cut from the slot's sequence. Several slots' drafts are verified in the same pass. Each slot
//! has a drafter of its own, tied to the slot's sequence: a draft model's sequence or the
//! multi-token-prediction head's cache is cut back, before each draft, to what it shares with
//! the slot's tokens, whatever happened to them since (a new job, a prefix copied from another
//! slot, a cancelled job, a restored file); the head reads the trunk's hidden states, which the
//! slot's sequence keeps and which follow its cuts and copies.
//!
//! A slot keeps the tokens in its KV cache after its job ends. A new job goes to the free slot
//! whose cached tokens share the longest prefix with its prompt (an empty slot before one whose
//! cache it would mostly overwrite); when another slot, busy or free, holds a longer prefix, its
//! keys and values are copied over. Only the rest of the prompt is computed (the prompt-prefix
//! cache).

use std::collections::VecDeque;
use std::ops::Range;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::sync::Arc;
use std::time::{Duration, Instant};

use oxibonsai_engine::model::common_prefix;
use oxibonsai_engine::sampling::{Sampler, SamplingParams, StopStrings, TokenProb};
use oxibonsai_engine::speculative::{Draft, DraftLimits, Drafter, Lookahead, MtpDrafter};
use oxibonsai_engine::Pooling;
use oxibonsai_engine::{
    BatchEntry, CheckpointPolicy, Constraint, Model, RuntimeBackend, Sequence, Workspace,
};
use oxibonsai_tokenizer::{StreamDecoder, Tokenizer};
use tokio::sync::mpsc::UnboundedSender;

use crate::metrics::Metrics;
use crate::sleep::Sleep;

use crate::step_budget::StepBudget;
pub use crate::step_budget::{DEFAULT_PREFILL_CHUNK, DEFAULT_STEP_TARGET};

mod embed;
mod slots;
pub use embed::EmbedJob;
use embed::{deliver, pick, Embedding};
pub use slots::{SlotAction, SlotAnswer, SlotCommand, SlotError, SlotInfo};

/// One request, as the engine sees it.
pub struct Job {
    pub prompt: Vec<u32>,
    pub sampling: SamplingParams,
    pub max_tokens: usize,
    pub stop: Vec<String>,
    /// `Some(n)`: report each chosen token's log-probability and the `n` most likely alternatives.
    pub logprobs: Option<usize>,
    /// Those log-probabilities are of the distribution the sampler chain drew from (truncated,
    /// after temperature; llama-server's `post_sampling_probs`), not the model's.
    pub post_sampling_probs: bool,
    /// The grammar every generated token must keep (a token mask each step).
    pub constraint: Option<Constraint>,
    pub events: UnboundedSender<Event>,
    pub received: Instant,
    /// The slot the job must run in (llama-server's `id_slot`); it waits for that slot.
    pub slot: Option<usize>,
}

/// What the engine thread is asked to do.
pub enum Work {
    Generate(Box<Job>),
    Embed(EmbedJob),
    Slot(SlotCommand),
    /// Load the model again if it sleeps (`--sleep-idle-seconds`); nothing otherwise.
    Wake,
}

#[derive(Debug, Clone)]
pub struct TopLogprob {
    pub id: u32,
    pub token: Vec<u8>,
    pub logprob: f32,
}

#[derive(Debug, Clone)]
pub struct TokenLogprob {
    pub id: u32,
    pub token: Vec<u8>,
    pub logprob: f32,
    pub top: Vec<TopLogprob>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Finish {
    /// An end-of-generation token or a stop string.
    Stop,
    /// `max_tokens`, or the slot's context is full.
    Length,
}

#[derive(Debug, Clone)]
pub struct Usage {
    pub prompt_tokens: usize,
    pub completion_tokens: usize,
    /// Prompt tokens whose KV came from the prefix cache.
    pub cached_tokens: usize,
    /// With speculative decoding: drafted tokens verified, and how many were kept.
    pub draft: Option<(usize, usize)>,
    /// The stop string that ended the answer (llama-server's `stopping_word`).
    pub stop_word: Option<String>,
    /// The slot the job ran in.
    pub slot: usize,
    /// Generation stopped because the slot's context was full (llama-server's `truncated`).
    pub truncated: bool,
}

/// What the engine sends back for a job, in order: tokens, then one `Done` or `Error`.
#[derive(Debug)]
pub enum Event {
    Token {
        /// Text completed by this token (possibly empty: held back by a partial character or a
        /// possible stop string).
        text: String,
        logprob: Option<TokenLogprob>,
    },
    Done {
        finish: Finish,
        /// Text released at the end (held back for a stop string that did not come).
        text: String,
        usage: Usage,
    },
    Error(String),
}

/// A job in a slot.
struct Active<'t> {
    job: Job,
    /// The slot's number.
    slot: usize,
    sampler: Sampler,
    /// Prompt tokens whose KV is in the slot (the reused prefix included).
    fed: usize,
    cached_prefix: usize,
    /// The token sampled last, to be fed next step.
    next: Option<u32>,
    generated: usize,
    decoder: StreamDecoder<'t>,
    stops: StopStrings,
    text: String,
    last_token_at: Option<Instant>,
    /// The token the last row of logits gave (kept or not).
    last_sampled: Option<u32>,
    spec: Option<SlotDraft>,
}

/// A job's speculative decoding: the draft the next pass verifies, and the counts.
struct SlotDraft {
    lookahead: Lookahead,
    /// The draft's own sampler (its draws are verified against the job's).
    sampler: Sampler,
    draft: Draft,
    /// The sequence's tokens and the next one: what the drafter continues.
    context: Vec<u32>,
    drafted: usize,
    accepted: usize,
    /// The drafter failed: the job goes on without drafts (warned once).
    failed: bool,
}

struct Slot<'t> {
    /// Holds the tokens of the slot's last job (`seq.tokens()`), reused by the next one.
    seq: Sequence<RuntimeBackend>,
    active: Option<Active<'t>>,
    drafter: Option<Box<dyn Drafter>>,
}

/// Mixed into the seed of a draft's sampler, so its draws are not the job's.
const DRAFT_SEED: u64 = 0x9E37_79B9_7F4A_7C15;

pub struct SchedulerConfig {
    pub slots: usize,
    pub ctx_per_slot: usize,
    /// The most prompt tokens a step computes over all slots (at least 1).
    pub prefill_chunk: usize,
    /// While any slot is decoding, prompt chunks are sized to keep a step this long (zero:
    /// always `prefill_chunk`); see `step_budget`.
    pub step_target: Duration,
    /// How each slot of a model with recurrent layers saves its state for the prefix cache.
    pub checkpoints: CheckpointPolicy,
    /// Speculative decoding: a drafter (forked for each slot) and how much it drafts.
    pub drafter: Option<DraftSetup>,
    /// When the engine unloads the model while idle (`--sleep-idle-seconds`).
    pub sleep: Arc<Sleep>,
}

/// Loads the model again after it slept.
pub type Reload<'r> =
    &'r mut dyn FnMut() -> Result<Model<RuntimeBackend>, oxibonsai_engine::EngineError>;

/// Why [`run_awake`] returned.
enum Awake {
    Stopped,
    /// Idle past `--sleep-idle-seconds`: the model may be dropped.
    Idle,
}

/// A drafter and its limits, as `serve --model-draft` / `--draft-ngram` / `--draft-mtp` set them.
pub type DraftSetup = (Drafters, DraftLimits);

/// Where each slot's drafter comes from.
pub enum Drafters {
    /// One drafter forked for each slot (a draft model's weights shared, each slot's sequence
    /// its own).
    Fork(Box<dyn Drafter>),
    /// The model's own multi-token-prediction head, loaded with the model
    /// ([`Model::load_mtp`], again after a sleep): each slot drafts with it on a cache of its own.
    Mtp { p_min: f32 },
}

impl Drafters {
    /// A slot's drafter, for a sequence of `n_ctx` positions of `model`.
    fn for_slot(
        &self,
        model: &Arc<Model<RuntimeBackend>>,
        n_ctx: usize,
    ) -> Result<Box<dyn Drafter>, oxibonsai_engine::EngineError> {
        match self {
            Drafters::Fork(d) => d.fork(n_ctx),
            Drafters::Mtp { p_min } => {
                Ok(Box::new(MtpDrafter::new(Arc::clone(model), n_ctx, *p_min)?))
            }
        }
    }
}

/// Runs until `jobs` is closed (every sender dropped) or `shutdown` is set. With
/// `config.sleep` set, the model and the slots are dropped after that long idle, and `reload`
/// brings the model back when work arrives.
pub fn run(
    model: Model<RuntimeBackend>,
    reload: Reload<'_>,
    tokenizer: Arc<Tokenizer>,
    config: SchedulerConfig,
    jobs: Receiver<Work>,
    metrics: Arc<Metrics>,
    shutdown: Arc<AtomicBool>,
) -> Result<(), oxibonsai_engine::EngineError> {
    let mut model = Some(model);
    let mut first = None;
    loop {
        let awake = match model.take() {
            Some(m) => m,
            None => {
                let started = Instant::now();
                let m = reload()?;
                tracing::info!(
                    seconds = started.elapsed().as_secs_f64(),
                    "awake: model reloaded"
                );
                m
            }
        };
        config.sleep.set_sleeping(false);
        // Shared with the slots' MTP drafters, which end with `run_awake`.
        let awake = Arc::new(awake);
        let ran = run_awake(
            &awake,
            &tokenizer,
            &config,
            &jobs,
            &metrics,
            &shutdown,
            first.take(),
        )?;
        if let Awake::Stopped = ran {
            return Ok(());
        }
        drop(awake);
        config.sleep.set_sleeping(true);
        tracing::info!("sleeping: the model is unloaded until a request needs it");
        loop {
            if shutdown.load(Ordering::Relaxed) {
                return Ok(());
            }
            match jobs.recv_timeout(Duration::from_millis(200)) {
                Ok(Work::Wake) => break,
                Ok(work) => {
                    first = Some(work);
                    break;
                }
                Err(RecvTimeoutError::Timeout) => continue,
                Err(RecvTimeoutError::Disconnected) => return Ok(()),
            }
        }
    }
}

/// The engine with the model loaded: returns when stopped, or idle past the sleep delay (then
/// no job is waiting or running). `first`: work that arrived while the model slept.
fn run_awake(
    model: &Arc<Model<RuntimeBackend>>,
    tokenizer: &Tokenizer,
    config: &SchedulerConfig,
    jobs: &Receiver<Work>,
    metrics: &Arc<Metrics>,
    shutdown: &AtomicBool,
    first: Option<Work>,
) -> Result<Awake, oxibonsai_engine::EngineError> {
    let mut slots: Vec<Slot<'_>> = Vec::with_capacity(config.slots);
    let limits = config.drafter.as_ref().map(|(_, limits)| *limits);
    for _ in 0..config.slots {
        let drafter = match &config.drafter {
            Some((d, _)) => Some(d.for_slot(model, config.ctx_per_slot)?),
            None => None,
        };
        let mut seq = model.new_sequence(config.ctx_per_slot)?;
        seq.set_checkpoint_policy(config.checkpoints);
        if drafter.as_ref().is_some_and(|d| d.reads_hidden()) {
            // From the empty start: every position the slot will hold has its state.
            seq.keep_hidden();
        }
        slots.push(Slot {
            seq,
            active: None,
            drafter,
        });
    }
    let mut waiting: VecDeque<Job> = VecDeque::new();
    let mut embeddings: VecDeque<Embedding> = VecDeque::new();
    let mut commands: VecDeque<SlotCommand> = VecDeque::new();
    let mut work = Workspace::default();
    let n_vocab = model.config.n_vocab;
    let mut step = StepInputs::default();
    let mut budget = StepBudget::new(config.prefill_chunk, config.step_target);
    let mut idle_since = Instant::now();
    let mut first = first;
    loop {
        if shutdown.load(Ordering::Relaxed) {
            return Ok(Awake::Stopped);
        }
        // Take what arrived; wait only when there is nothing to do.
        let idle = waiting.is_empty()
            && embeddings.is_empty()
            && commands.is_empty()
            && slots.iter().all(|s| s.active.is_none());
        let take = |work: Work,
                    waiting: &mut VecDeque<Job>,
                    embeddings: &mut VecDeque<_>,
                    commands: &mut VecDeque<SlotCommand>| match work {
            Work::Generate(job) => waiting.push_back(*job),
            Work::Embed(job) => embeddings.push_back(Embedding::new(job)),
            Work::Slot(cmd) => commands.push_back(cmd),
            Work::Wake => {}
        };
        if let Some(work) = first.take() {
            take(work, &mut waiting, &mut embeddings, &mut commands);
        } else if idle {
            // The gauges were last set before the step that finished the last job.
            metrics.queue_depth.set(0);
            metrics.active_slots.set(0);
            match jobs.recv_timeout(Duration::from_millis(200)) {
                Ok(work) => take(work, &mut waiting, &mut embeddings, &mut commands),
                Err(RecvTimeoutError::Timeout) if config.sleep.due(idle_since) => {
                    return Ok(Awake::Idle)
                }
                Err(RecvTimeoutError::Timeout) => continue,
                Err(RecvTimeoutError::Disconnected) => return Ok(Awake::Stopped),
            }
        }
        idle_since = Instant::now();
        while let Ok(work) = jobs.try_recv() {
            take(work, &mut waiting, &mut embeddings, &mut commands);
        }
        drop_abandoned(&mut slots, &mut waiting, metrics);
        // Slot commands run between steps, on idle slots; the others wait for their slot.
        commands = std::mem::take(&mut commands)
            .into_iter()
            .filter_map(|cmd| slots::handle(&mut slots, cmd))
            .collect();
        embeddings.retain(|e| !e.job.reply.is_closed());
        admit(
            &mut slots,
            &mut waiting,
            tokenizer,
            n_vocab,
            limits,
            metrics,
        );
        metrics.queue_depth.set(waiting.len() as u64);
        metrics
            .active_slots
            .set(slots.iter().filter(|s| s.active.is_some()).count() as u64);

        let decoding = slots
            .iter()
            .filter(|s| s.active.as_ref().is_some_and(|a| a.next.is_some()))
            .count();
        let step_budget = budget.prompt_tokens(decoding);
        let mut prompt_tokens = step.gather(&slots, step_budget);
        let embedding = pick(&embeddings, step_budget - prompt_tokens, step_budget);
        if !embedding.is_empty() && step.rows.iter().any(|&r| r > 1) {
            // The embedding pass returns one row per sequence: drafts wait for the next step.
            for a in slots.iter_mut().filter_map(|s| s.active.as_mut()) {
                if let Some(sd) = a.spec.as_mut() {
                    sd.draft.clear();
                }
            }
            prompt_tokens = step.gather(&slots, step_budget);
        }
        if step.inputs.is_empty() && embedding.is_empty() {
            continue;
        }
        let front = embeddings.front().filter(|_| !embedding.is_empty());
        let embed_inputs: Vec<&[u32]> = front
            .map(|e| {
                e.job.inputs[embedding.clone()]
                    .iter()
                    .map(Vec::as_slice)
                    .collect()
            })
            .unwrap_or_default();
        let pooling = front.map_or(Pooling::Mean, |e| e.job.pooling);
        let started = Instant::now();
        let result = forward(model, &mut slots, &step, &embed_inputs, pooling, &mut work);
        let embed_tokens: usize = embed_inputs.iter().map(|ids| ids.len()).sum();
        let elapsed = started.elapsed();
        budget.record(decoding, prompt_tokens + embed_tokens, elapsed);
        metrics.steps.inc();
        metrics.busy_slots.add(step.inputs.len() as u64);
        if prompt_tokens > 0 {
            metrics.prompt_us.add(elapsed.as_micros() as u64);
        }
        if decoding > 0 {
            metrics.generation_us.add(elapsed.as_micros() as u64);
        }
        let (logits, pooled) = match result {
            Ok(out) => out,
            Err(err) => {
                // Every input was checked when the job was admitted; an error here is a bug,
                // reported to the jobs concerned rather than taking the server down.
                tracing::error!(%err, "batched forward pass failed");
                for (i, _) in &step.inputs {
                    if let Some(a) = slots[*i].active.take() {
                        let _ = a.job.events.send(Event::Error(err.to_string()));
                    }
                }
                if !embedding.is_empty() {
                    if let Some(e) = embeddings.pop_front() {
                        let _ = e.job.reply.send(Err(err.to_string()));
                    }
                }
                continue;
            }
        };
        if !embedding.is_empty() {
            let width = model
                .embedding_width(pooling)
                .unwrap_or(model.config.n_embd);
            deliver(&mut embeddings, embedding, pooled, width, metrics);
        }
        let mut row = 0;
        for ((i, range), &rows) in step.inputs.iter().zip(&step.rows) {
            let slot = &mut slots[*i];
            let tokens = &step.tokens[range.clone()];
            let logits = &mut logits[row * n_vocab..(row + rows) * n_vocab];
            row += rows;
            after_forward(model, slot, tokens, logits, tokenizer, metrics);
        }
    }
}

/// Frees the slots of clients that left, and drops their queued jobs.
fn drop_abandoned(slots: &mut [Slot<'_>], waiting: &mut VecDeque<Job>, metrics: &Metrics) {
    for slot in slots {
        if slot
            .active
            .as_ref()
            .is_some_and(|a| a.job.events.is_closed())
        {
            slot.active = None;
            metrics.cancelled.inc();
        }
    }
    let before = waiting.len();
    waiting.retain(|job| !job.events.is_closed());
    metrics.cancelled.add((before - waiting.len()) as u64);
}

/// One step's inputs: for each slot that has one, its range of `tokens` and how many rows of
/// logits it needs (its drafted tokens and one more). All reused from step to step.
#[derive(Default)]
struct StepInputs {
    inputs: Vec<(usize, Range<usize>)>,
    tokens: Vec<u32>,
    rows: Vec<usize>,
}

impl StepInputs {
    /// Each active slot's next input, in slot order: its last sampled token while decoding, else
    /// the next chunk of its prompt while this step's prefill budget lasts. Returns the number
    /// of prompt tokens gathered.
    fn gather(&mut self, slots: &[Slot<'_>], prefill_budget: usize) -> usize {
        self.inputs.clear();
        self.tokens.clear();
        self.rows.clear();
        let budget = prefill_budget.max(1);
        let mut prefill_budget = budget;
        for (i, slot) in slots.iter().enumerate() {
            let Some(a) = &slot.active else { continue };
            let start = self.tokens.len();
            let mut rows = 1;
            if let Some(next) = a.next {
                self.tokens.push(next);
                if let Some(sd) = &a.spec {
                    self.tokens.extend_from_slice(&sd.draft.tokens);
                    rows += sd.draft.len();
                }
            } else if prefill_budget > 0 {
                let end = (a.fed + prefill_budget).min(a.job.prompt.len());
                prefill_budget -= end - a.fed;
                self.tokens.extend_from_slice(&a.job.prompt[a.fed..end]);
            } else {
                continue;
            }
            self.inputs.push((i, start..self.tokens.len()));
            self.rows.push(rows);
        }
        budget - prefill_budget
    }
}

/// One batched forward pass over the step's inputs and `embed`'s whole inputs (each in a new
/// sequence of its length): a row of logits per step input, the pooled rows of `embed`.
fn forward<'w>(
    model: &Model<RuntimeBackend>,
    slots: &mut [Slot<'_>],
    step: &StepInputs,
    embed: &[&[u32]],
    pooling: Pooling,
    work: &'w mut Workspace<RuntimeBackend>,
) -> Result<(&'w mut [f32], &'w [f32]), oxibonsai_engine::EngineError> {
    // `inputs` is in slot order, so one pass pairs each input with its slot.
    let mut next_input = step.inputs.iter().peekable();
    let mut seqs = embed
        .iter()
        .map(|ids| model.new_sequence(ids.len()))
        .collect::<Result<Vec<_>, _>>()?;
    let mut entries: Vec<BatchEntry<'_, RuntimeBackend>> = Vec::with_capacity(step.inputs.len());
    for (i, slot) in slots.iter_mut().enumerate() {
        if let Some((_, range)) = next_input.next_if(|(j, _)| *j == i) {
            if range.len() > 1 && slot.active.as_ref().is_some_and(|a| a.next.is_some()) {
                // A recurrent state cannot be cut back: saved before a verification pass, so
                // dropping rejected positions recomputes only the accepted ones.
                slot.seq.checkpoint();
            }
            entries.push(BatchEntry {
                seq: &mut slot.seq,
                tokens: &step.tokens[range.clone()],
            });
        }
    }
    if embed.is_empty() {
        if step.rows.iter().any(|&r| r > 1) {
            return Ok((
                model.forward_batch_rows(&mut entries, &step.rows, work)?,
                &[],
            ));
        }
        return Ok((model.forward_batch(&mut entries, work)?, &[]));
    }
    let mut embedding: Vec<BatchEntry<'_, RuntimeBackend>> = seqs
        .iter_mut()
        .zip(embed)
        .map(|(seq, ids)| BatchEntry { seq, tokens: ids })
        .collect();
    model.forward_batch_embedding(&mut entries, &mut embedding, pooling, work)
}

/// Records the `tokens` the slot just computed; once its prompt is complete, samples from
/// `logits` (its rows: one, or one per drafted token and one more, each verifying its token
/// until one is rejected), cuts the rejected positions, drafts the next step's tokens and, if
/// the job ended, sends `Done` and frees the slot.
fn after_forward(
    model: &Model<RuntimeBackend>,
    slot: &mut Slot<'_>,
    tokens: &[u32],
    logits: &mut [f32],
    tokenizer: &Tokenizer,
    metrics: &Metrics,
) {
    let Some(a) = slot.active.as_mut() else {
        return;
    };
    if a.next.take().is_none() {
        a.fed += tokens.len();
        metrics.prompt_tokens.add(tokens.len() as u64);
        if a.fed < a.job.prompt.len() {
            return;
        }
    }
    let n_vocab = model.config.n_vocab;
    let rows = logits.len() / n_vocab;
    let draft = a.spec.as_mut().map(|sd| std::mem::take(&mut sd.draft));
    let (n_ctx, n_past) = (slot.seq.n_ctx(), slot.seq.n_past());
    let mut ended = None;
    let mut used = 0;
    let mut kept = 0;
    for (r, row) in logits.chunks_exact_mut(n_vocab).enumerate() {
        used = r + 1;
        a.last_sampled = None;
        // The room plain decoding would see after feeding this row's input.
        let room = n_ctx - (n_past + 1 + r - rows);
        let drafted = draft.as_ref().and_then(|d| d.tokens.get(r).copied());
        ended = step_slot(a, row, tokenizer, room, metrics);
        let agreed = drafted.is_some_and(|x| a.last_sampled == Some(x));
        if let (Some(sd), Some(_)) = (a.spec.as_mut(), drafted) {
            sd.drafted += 1;
            sd.accepted += usize::from(agreed);
            kept += usize::from(agreed);
            metrics.draft_tokens.inc();
            metrics.draft_accepted_tokens.add(u64::from(agreed));
        }
        if ended.is_some() || !agreed {
            break;
        }
    }
    if let (Some(sd), Some(mut draft)) = (a.spec.as_mut(), draft) {
        if !draft.is_empty() {
            metrics.draft_steps.inc();
        }
        sd.lookahead.record(draft.len(), kept);
        draft.clear();
        sd.draft = draft;
    }
    if used < rows {
        // The inputs after the last row used were rejected drafts.
        let keep = n_past - (rows - used);
        if let Err(err) = slot.seq.rewind(model, keep) {
            tracing::error!(%err, "cutting rejected drafts failed");
            let _ = a.job.events.send(Event::Error(err.to_string()));
            slot.seq.clear();
            slot.active = None;
            return;
        }
    }
    let Some((finish, text)) = ended else {
        if let (Some(drafter), Some(next)) = (slot.drafter.as_deref_mut(), a.next) {
            draft_next(a, drafter, &slot.seq, next);
        }
        return;
    };
    let a = slot.active.take().expect("active slot");
    // The context filled up (llama-server's test: one position left after the last token).
    let truncated = finish == Finish::Length && slot.seq.n_past() + 1 >= slot.seq.n_ctx();
    let usage = Usage {
        prompt_tokens: a.job.prompt.len(),
        completion_tokens: a.generated,
        cached_tokens: a.cached_prefix,
        draft: a.spec.as_ref().map(|sd| (sd.drafted, sd.accepted)),
        stop_word: a.stops.matched().map(str::to_owned),
        slot: a.slot,
        truncated,
    };
    let total = (usage.prompt_tokens + usage.completion_tokens) as u64;
    // The slot is free before its client hears so: a scrape right after the answer counts it so.
    let active = metrics.active_slots.get();
    metrics.active_slots.set(active.saturating_sub(1));
    let _ = a.job.events.send(Event::Done {
        finish,
        text,
        usage,
    });
    metrics.requests_finished.inc();
    metrics.tokens_max.raise(total);
}

/// Drafts the tokens the slot's next pass verifies after `next`, within the job's token limit
/// and the slot's context (a drafter that fails only means no draft).
fn draft_next(
    a: &mut Active<'_>,
    drafter: &mut dyn Drafter,
    seq: &Sequence<RuntimeBackend>,
    next: u32,
) {
    let Some(sd) = a.spec.as_mut() else {
        return;
    };
    sd.draft.clear();
    if sd.failed {
        return;
    }
    // The verification pass feeds `next` and the draft; the last row's token is a bonus.
    let room = (seq.n_ctx() - seq.n_past())
        .saturating_sub(1)
        .min(a.job.max_tokens.saturating_sub(a.generated + 1));
    let want = sd.lookahead.next_for(drafter).min(room);
    if want == 0 {
        return;
    }
    sd.context.clear();
    sd.context.extend_from_slice(seq.tokens());
    sd.context.push(next);
    if let Err(err) = drafter.draft_with_hidden(
        &sd.context,
        seq.hidden(),
        want,
        &mut sd.sampler,
        &mut sd.draft,
    ) {
        tracing::warn!(%err, "drafting failed: the job goes on without drafts");
        sd.failed = true;
        sd.draft.clear();
    }
    sd.draft.truncate(want);
    if sd.draft.len() < sd.lookahead.limits().min {
        sd.draft.clear();
    }
}

/// Puts waiting jobs into free slots, each into the one with the longest reusable prefix.
fn admit<'t>(
    slots: &mut [Slot<'t>],
    waiting: &mut VecDeque<Job>,
    tokenizer: &'t Tokenizer,
    n_vocab: usize,
    limits: Option<DraftLimits>,
    metrics: &Metrics,
) {
    while let Some(job) = waiting.front() {
        let best = slots
            .iter()
            .enumerate()
            .filter(|(i, s)| s.active.is_none() && job.slot.is_none_or(|want| want == *i))
            .map(|(i, s)| (i, common_prefix(s.seq.tokens(), &job.prompt)))
            // A slot whose cache the prompt mostly shares (at least half of it) beats one it would
            // mostly overwrite, so a free slot is taken before a useful cache is thrown away;
            // then the longest shared prefix; then the slot caching the least; then the lowest
            // number.
            .max_by_key(|&(i, common)| {
                let cached = slots[i].seq.n_past();
                (
                    2 * common >= cached,
                    common,
                    std::cmp::Reverse(cached),
                    std::cmp::Reverse(i),
                )
            });
        let Some((i, common)) = best else { break };
        let job = waiting.pop_front().expect("front exists");
        // At least the last prompt token is computed again: its logits start the generation.
        let last = job.prompt.len().saturating_sub(1);
        // A model with recurrent layers goes back to its latest checkpoint at or before that;
        // the tokens from there on are computed with the rest of the prompt.
        let matched = common.min(last);
        let mut reuse = slots[i].seq.truncate(matched);
        // Another slot (busy or not) may hold a longer prefix of the prompt — the same system
        // prompt, the same conversation so far: its keys and values are copied over instead of
        // computed again.
        let donor = slots
            .iter()
            .enumerate()
            .filter(|&(d, _)| d != i)
            .map(|(d, s)| (d, common_prefix(s.seq.tokens(), &job.prompt).min(last)))
            .max_by_key(|&(d, shared)| (shared, std::cmp::Reverse(d)));
        let mut matched_anywhere = matched;
        if let Some((d, shared)) = donor.filter(|&(_, shared)| shared > reuse) {
            let (slot, donor) = pair_mut(slots, i, d);
            match slot.seq.extend_from(&donor.seq, shared) {
                Ok(reached) => {
                    metrics
                        .copied_prompt_tokens
                        .add(reached.saturating_sub(reuse) as u64);
                    matched_anywhere = matched_anywhere.max(shared);
                    reuse = reached;
                }
                // Slots of one model always match; were it not so, the prompt is computed.
                Err(err) => tracing::warn!(%err, "prefix copy between slots refused"),
            }
        }
        let slot = &mut slots[i];
        let mut sampler = match Sampler::new(job.sampling.clone(), n_vocab) {
            Ok(s) => s,
            Err(err) => {
                let _ = job.events.send(Event::Error(err.to_string()));
                continue;
            }
        };
        for &t in &job.prompt {
            sampler.accept(t);
        }
        let spec = match limits {
            Some(limits) => {
                let params = SamplingParams {
                    seed: Some(sampler.seed() ^ DRAFT_SEED),
                    ..job.sampling.clone()
                };
                match Sampler::new(params, n_vocab) {
                    Ok(draft_sampler) => Some(SlotDraft {
                        lookahead: Lookahead::new(limits),
                        sampler: draft_sampler,
                        draft: Draft::default(),
                        context: Vec::new(),
                        drafted: 0,
                        accepted: 0,
                        failed: false,
                    }),
                    Err(err) => {
                        let _ = job.events.send(Event::Error(err.to_string()));
                        continue;
                    }
                }
            }
            None => None,
        };
        metrics.cached_prompt_tokens.add(reuse as u64);
        metrics
            .recomputed_prompt_tokens
            .add(matched_anywhere.saturating_sub(reuse) as u64);
        metrics
            .queue_seconds
            .observe(job.received.elapsed().as_secs_f64());
        slot.active = Some(Active {
            stops: StopStrings::new(job.stop.clone()),
            job,
            slot: i,
            sampler,
            fed: reuse,
            cached_prefix: reuse,
            next: None,
            generated: 0,
            decoder: tokenizer.stream_decoder(false),
            text: String::new(),
            last_token_at: None,
            last_sampled: None,
            spec,
        });
    }
}

/// Slot `i` mutably and slot `j` (≠ `i`) shared.
fn pair_mut<'s, 't>(
    slots: &'s mut [Slot<'t>],
    i: usize,
    j: usize,
) -> (&'s mut Slot<'t>, &'s Slot<'t>) {
    if i < j {
        let (a, b) = slots.split_at_mut(j);
        (&mut a[i], &b[0])
    } else {
        let (a, b) = slots.split_at_mut(i);
        (&mut b[0], &a[j])
    }
}

/// Samples the slot's next token from `logits` (the caller compares it with a drafted token) and
/// reports it; returns how the job ended, if it
/// did. `room` is how many more positions the slot's cache holds.
fn step_slot(
    a: &mut Active<'_>,
    logits: &mut [f32],
    tokenizer: &Tokenizer,
    room: usize,
    metrics: &Metrics,
) -> Option<(Finish, String)> {
    let now = Instant::now();
    match a.last_token_at {
        None => metrics
            .time_to_first_token
            .observe(now.duration_since(a.job.received).as_secs_f64()),
        Some(t) => metrics
            .time_per_output_token
            .observe(now.duration_since(t).as_secs_f64()),
    }
    a.last_token_at = Some(now);
    // The row is this step's own: the mask goes into it in place. A grammar that fails here, or
    // leaves no token once the request's logit_bias is applied, was accepted when it arrived (its
    // first step checked): the answer ends with the text so far, not an error.
    if let Some(c) = a.job.constraint.as_mut() {
        if let Err(err) = c.mask(logits) {
            tracing::warn!(%err, "the grammar failed mid-answer: ending it");
            return Some((Finish::Stop, flush(a)));
        }
    }
    let logits = &*logits;
    // The chain's distribution, taken before the draw changes the sampler's state.
    let drawn_from = match a.job.logprobs {
        Some(_) if a.job.post_sampling_probs => {
            a.sampler.candidates(logits).ok().map(<[_]>::to_vec)
        }
        _ => None,
    };
    // A drafted token is kept when the job's own sampler, drawing as it would without a draft,
    // picks it (llama-server's rule): the answer for a seed is the same with or without
    // drafting, at any temperature, and the draft only saves passes.
    let token = a.sampler.sample(logits);
    let token = match token {
        Ok(t) => t,
        Err(err) => {
            tracing::warn!(%err, "no token left to sample mid-answer: ending it");
            return Some((Finish::Stop, flush(a)));
        }
    };
    a.last_sampled = Some(token);
    a.sampler.accept(token);
    a.generated += 1;
    metrics.completion_tokens.inc();
    if tokenizer.is_eog(token) {
        // The constraint allows an end token only once its grammar is complete; the end token
        // itself is not part of the grammar's text.
        return Some((Finish::Stop, flush(a)));
    }
    if let Some(c) = a.job.constraint.as_mut() {
        if let Err(err) = c.accept(token) {
            tracing::warn!(%err, "the grammar refused a token it allowed: ending the answer");
            return Some((Finish::Stop, flush(a)));
        }
    }
    let logprob = a.job.logprobs.map(|n| match &drawn_from {
        Some(dist) => post_sampling_logprobs(dist, token, n, tokenizer),
        None => logprobs(logits, token, n, tokenizer),
    });
    let piece = match a.decoder.push(token) {
        Ok(text) => text.to_owned(),
        Err(err) => {
            let _ = a.job.events.send(Event::Error(err.to_string()));
            return Some((Finish::Stop, String::new()));
        }
    };
    a.text.clear();
    let stopped = a.stops.push_into(&piece, &mut a.text);
    let _ = a.job.events.send(Event::Token {
        text: std::mem::take(&mut a.text),
        logprob,
    });
    if stopped {
        return Some((Finish::Stop, String::new()));
    }
    if a.generated >= a.job.max_tokens || room == 0 {
        return Some((Finish::Length, flush(a)));
    }
    a.next = Some(token);
    None
}

/// The text still held back at the end: an incomplete character, then a possible stop string
/// that did not come.
fn flush(a: &mut Active<'_>) -> String {
    let mut out = String::new();
    let tail = a.decoder.finish().to_owned();
    if !a.stops.push_into(&tail, &mut out) {
        out.push_str(&a.stops.finish());
    }
    out
}

/// The chosen token's log-probability under the distribution the sampler chain drew from
/// (`dist`, most likely first) and the `n` most likely tokens' — only those the chain left a
/// chance (llama-server leaves out zero probabilities too).
fn post_sampling_logprobs(
    dist: &[TokenProb],
    token: u32,
    n: usize,
    tokenizer: &Tokenizer,
) -> TokenLogprob {
    let piece = |id: u32| {
        tokenizer
            .token_to_piece(id, false)
            .map(<[u8]>::to_vec)
            .unwrap_or_default()
    };
    let p = dist.iter().find(|t| t.id == token).map_or(0.0, |t| t.prob);
    TokenLogprob {
        id: token,
        token: piece(token),
        logprob: p.ln(),
        top: dist
            .iter()
            .take(n)
            .filter(|t| t.prob > 0.0)
            .map(|t| TopLogprob {
                id: t.id,
                token: piece(t.id),
                logprob: t.prob.ln(),
            })
            .collect(),
    }
}

/// The chosen token's log-probability under the model's distribution (log-softmax of the raw
/// logits) and the `n` most likely tokens'.
fn logprobs(logits: &[f32], token: u32, n: usize, tokenizer: &Tokenizer) -> TokenLogprob {
    let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let sum: f64 = logits.iter().map(|&l| f64::from(l - max).exp()).sum();
    let log_z = max as f64 + sum.ln();
    let lp = |id: u32| (f64::from(logits[id as usize]) - log_z) as f32;
    let piece = |id: u32| {
        tokenizer
            .token_to_piece(id, false)
            .map(<[u8]>::to_vec)
            .unwrap_or_default()
    };
    // The n (≤ 20) most likely, kept sorted in one pass: no vocabulary-sized buffer per token.
    let better = |a: u32, b: u32| {
        logits[a as usize]
            .total_cmp(&logits[b as usize])
            .then(b.cmp(&a))
            .is_gt()
    };
    let mut top: Vec<u32> = Vec::with_capacity(n + 1);
    for id in 0..logits.len() as u32 {
        if top.len() == n && top.last().is_none_or(|&worst| !better(id, worst)) {
            continue;
        }
        let at = top.partition_point(|&t| better(t, id));
        top.insert(at, id);
        top.truncate(n);
    }
    TokenLogprob {
        id: token,
        token: piece(token),
        logprob: lp(token),
        top: top
            .into_iter()
            .map(|id| TopLogprob {
                id,
                token: piece(id),
                logprob: lp(id),
            })
            .collect(),
    }
}
