//! How many prompt tokens the engine's next step may compute.
//!
//! A step computes every decoding slot's next token together with a chunk of the prompts being
//! prefilled, so a stream's gap between two tokens is the whole step's time. A fixed token budget
//! cannot bound that gap: the same chunk costs ten times more on a 1.7B model than on a 135M one,
//! and more as a prompt's context grows. So while any slot is decoding, the chunk is sized from
//! what steps have been measured to cost, to keep a step under `--step-target-ms` (vLLM's
//! `max_num_batched_tokens` with the number derived from a latency goal); with nothing decoding
//! nobody waits, and the chunk is `--prefill-chunk`, the most a step computes.
//!
//! The cost model is a step's time = weight reads + per-row compute: `fixed` from steps of
//! decoding rows only (every weight read once, little compute), `per_row` from steps with prompt
//! rows as (time − fixed) ÷ rows. Both are running averages, so they follow the context's growth.

use std::time::Duration;

/// `--prefill-chunk`'s default: the largest step, used when no stream is waiting on it.
pub const DEFAULT_PREFILL_CHUNK: usize = 512;

/// `--step-target-ms`'s default: a step's time while streams are decoding, which leaves room
/// under a 250 ms worst token gap for the model's misestimates and the host's noise.
pub const DEFAULT_STEP_TARGET: Duration = Duration::from_millis(100);

/// The fewest prompt tokens a step computes (a prompt always advances).
const MIN_CHUNK: usize = 8;

/// Weight of the newest measurement in the running averages.
const SMOOTHING: f64 = 0.5;

#[derive(Debug, Clone)]
pub(crate) struct StepBudget {
    max_chunk: usize,
    /// Zero: the chunk is always `max_chunk`.
    target: Duration,
    /// Seconds of a step of decoding rows only.
    fixed: Option<f64>,
    /// Seconds per row beyond `fixed`.
    per_row: Option<f64>,
}

impl StepBudget {
    pub(crate) fn new(max_chunk: usize, target: Duration) -> StepBudget {
        StepBudget {
            max_chunk: max_chunk.max(1),
            target,
            fixed: None,
            per_row: None,
        }
    }

    /// Prompt tokens the next step may compute beside `decoding` slots' tokens.
    pub(crate) fn prompt_tokens(&self, decoding: usize) -> usize {
        if decoding == 0 || self.target.is_zero() {
            return self.max_chunk;
        }
        let floor = MIN_CHUNK.min(self.max_chunk);
        let Some(per_row) = self.per_row else {
            // Nothing measured yet: a small step, which measures.
            return floor;
        };
        let room = self.target.as_secs_f64() - self.fixed.unwrap_or(0.0);
        let rows = (room / per_row.max(1e-9)).max(0.0);
        // `as` saturates: a tiny cost cannot overflow the count.
        (rows as usize)
            .saturating_sub(decoding)
            .clamp(floor, self.max_chunk)
    }

    /// Records a step of `decoding` one-token rows and `prompt` prompt tokens that took `elapsed`.
    pub(crate) fn record(&mut self, decoding: usize, prompt: usize, elapsed: Duration) {
        let secs = elapsed.as_secs_f64();
        let blend =
            |old: Option<f64>, new: f64| Some(old.map_or(new, |old| old + SMOOTHING * (new - old)));
        if prompt == 0 {
            if decoding > 0 {
                self.fixed = blend(self.fixed, secs);
            }
            return;
        }
        let rows = (decoding + prompt) as f64;
        let compute = (secs - self.fixed.unwrap_or(0.0)).max(secs * 0.1);
        self.per_row = blend(self.per_row, compute / rows);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: fn(u64) -> Duration = Duration::from_millis;

    #[test]
    fn nothing_decoding_takes_the_whole_chunk() {
        let mut budget = StepBudget::new(512, MS(100));
        assert_eq!(budget.prompt_tokens(0), 512);
        budget.record(0, 512, MS(2000));
        assert_eq!(budget.prompt_tokens(0), 512);
    }

    #[test]
    fn the_first_step_beside_a_stream_is_small_then_sized_by_its_cost() {
        let mut budget = StepBudget::new(512, MS(100));
        budget.record(1, 0, MS(10));
        assert_eq!(budget.prompt_tokens(1), MIN_CHUNK);
        // 1 + 8 rows in 28 ms: 10 ms of weight reads, 2 ms a row.
        budget.record(1, 8, MS(28));
        // (100 − 10) / 2 = 45 rows, one of them the stream's.
        assert_eq!(budget.prompt_tokens(1), 44);
        assert_eq!(budget.prompt_tokens(3), 42);
    }

    #[test]
    fn the_estimate_follows_a_growing_cost_and_stays_within_its_bounds() {
        let mut budget = StepBudget::new(64, MS(100));
        budget.record(1, 0, MS(10));
        budget.record(1, 8, MS(12));
        // 0.22 ms a row: 409 rows fit, capped at the chunk.
        assert_eq!(budget.prompt_tokens(1), 64);
        // Attention over a longer context: each step costs more, the chunk shrinks.
        for _ in 0..8 {
            budget.record(1, 40, MS(10 + 41 * 9));
        }
        let n = budget.prompt_tokens(1);
        assert!((MIN_CHUNK..=10).contains(&n), "{n}");
        // A step slower than the target on its own never stops the prompt.
        budget.record(1, 8, MS(5000));
        assert_eq!(budget.prompt_tokens(1), MIN_CHUNK);
    }

    #[test]
    fn a_zero_target_keeps_fixed_chunks() {
        let mut budget = StepBudget::new(128, Duration::ZERO);
        budget.record(1, 128, MS(900));
        assert_eq!(budget.prompt_tokens(4), 128);
    }
}
