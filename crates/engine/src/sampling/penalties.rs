//! The repeat / presence / frequency penalties over the last `repeat_last_n` accepted tokens,
//! with llama.cpp's semantics (its `penalties` sampler).

use std::collections::VecDeque;

use super::params::SamplingParams;

/// The window of recently accepted tokens. It grows with the tokens actually accepted (never
/// more than `last_n`), so a huge `repeat_last_n` costs nothing until the text is that long.
#[derive(Debug, Clone, Default)]
pub(super) struct PenaltyWindow {
    last_n: usize,
    tokens: VecDeque<u32>,
    /// Sorted copy of `tokens`: equal ids form runs whose lengths are the counts, which needs no
    /// per-vocabulary table and no allocation once it has reached the window's size.
    sorted: Vec<u32>,
}

impl PenaltyWindow {
    pub(super) fn new(last_n: usize) -> Self {
        PenaltyWindow {
            last_n,
            ..Self::default()
        }
    }

    pub(super) fn accept(&mut self, token: u32) {
        if self.last_n == 0 {
            return;
        }
        if self.tokens.len() == self.last_n {
            self.tokens.pop_front();
        }
        self.tokens.push_back(token);
    }

    pub(super) fn clear(&mut self) {
        self.tokens.clear();
    }

    /// Penalises `logits` (indexed by token id) for each distinct token of the window.
    pub(super) fn apply(&mut self, params: &SamplingParams, logits: &mut [f32]) {
        if !params.penalties_active() || self.tokens.is_empty() {
            return;
        }
        self.sorted.clear();
        self.sorted.extend(self.tokens.iter().copied());
        self.sorted.sort_unstable();
        for run in self.sorted.chunk_by(|a, b| a == b) {
            let token = run[0];
            // An accepted id outside the vocabulary (a caller's mistake) matches no logit.
            let Some(logit) = logits.get_mut(token as usize) else {
                continue;
            };
            let count = run.len() as f32;
            // Dividing a negative logit would make the token *more* likely, hence the sign test;
            // zero takes the multiply branch, as in llama.cpp (it stays zero either way).
            if *logit <= 0.0 {
                *logit *= params.repeat_penalty;
            } else {
                *logit /= params.repeat_penalty;
            }
            *logit -= count * params.frequency_penalty + params.presence_penalty;
        }
    }
}
