//! Prometheus metrics: counters, gauges and histograms on atomics, rendered in the text format.

use std::fmt::Write;
use std::sync::atomic::{AtomicU64, Ordering};

#[derive(Default)]
pub struct Counter(AtomicU64);

impl Counter {
    pub fn inc(&self) {
        self.add(1);
    }
    pub fn add(&self, n: u64) {
        self.0.fetch_add(n, Ordering::Relaxed);
    }
    pub fn get(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}

#[derive(Default)]
pub struct Gauge(AtomicU64);

impl Gauge {
    pub fn set(&self, v: u64) {
        self.0.store(v, Ordering::Relaxed);
    }
    pub fn get(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}

/// Seconds, in fixed buckets (cumulative counts as Prometheus wants them when rendered).
pub struct Histogram {
    bounds: &'static [f64],
    counts: Vec<AtomicU64>,
    count: AtomicU64,
    /// Sum in microseconds (atomic integer).
    sum_us: AtomicU64,
}

const LATENCY_BOUNDS: &[f64] = &[
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
];

impl Default for Histogram {
    fn default() -> Self {
        Histogram {
            bounds: LATENCY_BOUNDS,
            counts: LATENCY_BOUNDS.iter().map(|_| AtomicU64::new(0)).collect(),
            count: AtomicU64::new(0),
            sum_us: AtomicU64::new(0),
        }
    }
}

impl Histogram {
    pub fn observe(&self, seconds: f64) {
        if let Some(i) = self.bounds.iter().position(|&b| seconds <= b) {
            self.counts[i].fetch_add(1, Ordering::Relaxed);
        }
        self.count.fetch_add(1, Ordering::Relaxed);
        self.sum_us
            .fetch_add((seconds.max(0.0) * 1e6) as u64, Ordering::Relaxed);
    }
    pub fn count(&self) -> u64 {
        self.count.load(Ordering::Relaxed)
    }
}

#[derive(Default)]
pub struct Metrics {
    pub requests: Counter,
    pub requests_failed: Counter,
    pub requests_finished: Counter,
    pub cancelled: Counter,
    pub prompt_tokens: Counter,
    pub cached_prompt_tokens: Counter,
    /// Of the cached ones, those copied from another slot's cache.
    pub copied_prompt_tokens: Counter,
    /// Prompt tokens the prefix cache matched but that were computed again: a model with
    /// recurrent layers can only go back to a checkpoint, not to any position.
    pub recomputed_prompt_tokens: Counter,
    pub completion_tokens: Counter,
    /// Speculative decoding: drafted tokens verified, and those kept.
    pub draft_tokens: Counter,
    pub draft_accepted_tokens: Counter,
    pub queue_depth: Gauge,
    pub active_slots: Gauge,
    pub slots: Gauge,
    pub time_to_first_token: Histogram,
    pub time_per_output_token: Histogram,
    pub queue_seconds: Histogram,
}

impl Metrics {
    /// The Prometheus text exposition.
    pub fn render(&self) -> String {
        let mut out = String::new();
        let counters: [(&str, &str, &Counter); 11] = [
            (
                "requests_total",
                "HTTP requests received on the API routes",
                &self.requests,
            ),
            (
                "requests_failed_total",
                "API requests answered with an error",
                &self.requests_failed,
            ),
            (
                "requests_finished_total",
                "Generation jobs completed",
                &self.requests_finished,
            ),
            (
                "requests_cancelled_total",
                "Generation jobs abandoned by their client",
                &self.cancelled,
            ),
            (
                "prompt_tokens_total",
                "Prompt tokens computed",
                &self.prompt_tokens,
            ),
            (
                "prompt_tokens_cached_total",
                "Prompt tokens reused from the prefix cache",
                &self.cached_prompt_tokens,
            ),
            (
                "prompt_tokens_copied_total",
                "Prompt tokens of the cached ones whose KV was copied from another slot",
                &self.copied_prompt_tokens,
            ),
            (
                "prompt_tokens_recomputed_total",
                "Prompt tokens matched by the prefix cache but computed again from a recurrent checkpoint",
                &self.recomputed_prompt_tokens,
            ),
            (
                "completion_tokens_total",
                "Tokens generated",
                &self.completion_tokens,
            ),
            (
                "draft_tokens_total",
                "Drafted tokens verified (speculative decoding)",
                &self.draft_tokens,
            ),
            (
                "draft_tokens_accepted_total",
                "Drafted tokens kept by verification (speculative decoding)",
                &self.draft_accepted_tokens,
            ),
        ];
        for (name, help, c) in counters {
            let _ = writeln!(out, "# HELP oxibonsai_{name} {help}\n# TYPE oxibonsai_{name} counter\noxibonsai_{name} {}", c.get());
        }
        let gauges: [(&str, &str, &Gauge); 3] = [
            ("queue_depth", "Jobs waiting for a slot", &self.queue_depth),
            ("active_slots", "Slots generating", &self.active_slots),
            ("slots", "Slots configured (--parallel)", &self.slots),
        ];
        for (name, help, g) in gauges {
            let _ = writeln!(out, "# HELP oxibonsai_{name} {help}\n# TYPE oxibonsai_{name} gauge\noxibonsai_{name} {}", g.get());
        }
        let histograms: [(&str, &str, &Histogram); 3] = [
            (
                "time_to_first_token_seconds",
                "From request to first generated token",
                &self.time_to_first_token,
            ),
            (
                "time_per_output_token_seconds",
                "Between consecutive generated tokens",
                &self.time_per_output_token,
            ),
            (
                "queue_time_seconds",
                "From request to a slot",
                &self.queue_seconds,
            ),
        ];
        for (name, help, h) in histograms {
            let _ = writeln!(
                out,
                "# HELP oxibonsai_{name} {help}\n# TYPE oxibonsai_{name} histogram"
            );
            let mut cumulative = 0;
            for (bound, count) in h.bounds.iter().zip(&h.counts) {
                cumulative += count.load(Ordering::Relaxed);
                let _ = writeln!(
                    out,
                    "oxibonsai_{name}_bucket{{le=\"{bound}\"}} {cumulative}"
                );
            }
            let _ = writeln!(out, "oxibonsai_{name}_bucket{{le=\"+Inf\"}} {}", h.count());
            let _ = writeln!(
                out,
                "oxibonsai_{name}_sum {}",
                h.sum_us.load(Ordering::Relaxed) as f64 / 1e6
            );
            let _ = writeln!(out, "oxibonsai_{name}_count {}", h.count());
        }
        out
    }
}
