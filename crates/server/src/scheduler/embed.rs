//! Embedding jobs on the engine thread: which of their inputs join a step, and what becomes of
//! the pooled rows the step gives back.

use std::collections::VecDeque;
use std::ops::Range;
use std::time::Instant;

use oxibonsai_engine::embed::{normalize, Pooling};

use crate::metrics::Metrics;

/// An embedding request: whole inputs (each at most a slot's context, checked by the handler), one
/// vector (or score list, for rank pooling) per input, normalized as `embd_normalize` says.
pub struct EmbedJob {
    pub inputs: Vec<Vec<u32>>,
    pub pooling: Pooling,
    pub embd_normalize: i32,
    /// The vectors in input order, or what went wrong.
    pub reply: tokio::sync::oneshot::Sender<Result<Vec<Vec<f32>>, String>>,
    pub received: Instant,
}

/// An embedding job being computed: the inputs done so far.
pub(super) struct Embedding {
    pub job: EmbedJob,
    pub done: Vec<Vec<f32>>,
}

impl Embedding {
    pub fn new(job: EmbedJob) -> Embedding {
        Embedding {
            done: Vec::with_capacity(job.inputs.len()),
            job,
        }
    }
}

/// The inputs of the first waiting job that join this step: as many whole inputs as `budget`
/// prompt tokens allow, or one however long when the step has its whole budget (`step_budget`)
/// left; empty when none fits.
pub(super) fn pick(
    embeddings: &VecDeque<Embedding>,
    budget: usize,
    step_budget: usize,
) -> Range<usize> {
    let Some(e) = embeddings.front() else {
        return 0..0;
    };
    let first = e.done.len();
    let mut end = first;
    let mut left = budget;
    for ids in &e.job.inputs[first..] {
        let alone = end == first && budget == step_budget;
        if ids.len() > left && !alone {
            break;
        }
        left = left.saturating_sub(ids.len());
        end += 1;
    }
    first..end
}

/// Files the pooled rows of the front job's inputs `picked` (`width` floats a row, a row per
/// token for pooling none), normalized; answers the job once all its inputs are done.
pub(super) fn deliver(
    embeddings: &mut VecDeque<Embedding>,
    picked: Range<usize>,
    pooled: &[f32],
    width: usize,
    metrics: &Metrics,
) {
    let Some(e) = embeddings.front_mut() else {
        return;
    };
    let mut at = 0;
    for ids in &e.job.inputs[picked] {
        metrics.prompt_tokens.add(ids.len() as u64);
        let len = if e.job.pooling == Pooling::None {
            ids.len() * width
        } else {
            width
        };
        let mut v = pooled[at..at + len].to_vec();
        for row in v.chunks_exact_mut(width) {
            normalize(row, e.job.embd_normalize);
        }
        e.done.push(v);
        at += len;
    }
    if e.done.len() == e.job.inputs.len() {
        let e = embeddings.pop_front().expect("the front job");
        metrics.requests_finished.inc();
        let _ = e.job.reply.send(Ok(e.done));
    }
}
