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
    /// Raises the gauge to `v` if it is below (a high-water mark).
    pub fn raise(&self, v: u64) {
        self.0.fetch_max(v, Ordering::Relaxed);
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
    /// Verification passes of drafted tokens (llama-server's `spec_decode_num_drafts_total`).
    pub draft_steps: Counter,
    /// Engine steps (batched forward passes), and the generating slots summed over them.
    pub steps: Counter,
    pub busy_slots: Counter,
    /// Microseconds of steps that computed prompt tokens, and of steps that generated.
    pub prompt_us: Counter,
    pub generation_us: Counter,
    /// The longest sequence seen (prompt and answer).
    pub tokens_max: Gauge,
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
        self.render_llamacpp(&mut out);
        out
    }

    /// llama-server's series (`llamacpp:*`, its names and help texts), for dashboards built on
    /// them. Its per-slot prompt and generation times are, here, the time of the engine steps
    /// that computed prompt tokens and of those that generated (a step doing both counts for both).
    fn render_llamacpp(&self, out: &mut String) {
        let seconds = |c: &Counter| c.get() as f64 / 1e6;
        let rate = |n: &Counter, us: &Counter| {
            if us.get() == 0 {
                0.0
            } else {
                n.get() as f64 / seconds(us)
            }
        };
        let counters: [(&str, &str, f64); 10] = [
            (
                "prompt_tokens_total",
                "Number of prompt tokens processed, excluding cached tokens",
                self.prompt_tokens.get() as f64,
            ),
            (
                "prompt_tokens_cached_total",
                "Number of prompt tokens reused from the cache",
                self.cached_prompt_tokens.get() as f64,
            ),
            (
                "prompt_seconds_total",
                "Total time spent processing prompts",
                seconds(&self.prompt_us),
            ),
            (
                "tokens_predicted_total",
                "Number of generation tokens processed",
                self.completion_tokens.get() as f64,
            ),
            (
                "tokens_predicted_seconds_total",
                "Total time spent generating tokens",
                seconds(&self.generation_us),
            ),
            (
                "n_decode_total",
                "Total number of batched forward passes (llama_decode() calls)",
                self.steps.get() as f64,
            ),
            (
                "n_tokens_max",
                "Largest observed sequence length (prompt + generation)",
                self.tokens_max.get() as f64,
            ),
            (
                "spec_decode_num_draft_tokens_total",
                "Speculative: Total draft tokens generated",
                self.draft_tokens.get() as f64,
            ),
            (
                "spec_decode_num_accepted_tokens_total",
                "Speculative: Total draft tokens accepted by the target model",
                self.draft_accepted_tokens.get() as f64,
            ),
            (
                "spec_decode_num_drafts_total",
                "Speculative: Total speculative decoding verification steps",
                self.draft_steps.get() as f64,
            ),
        ];
        let gauges: [(&str, &str, f64); 5] = [
            (
                "prompt_tokens_seconds",
                "Average prompt throughput in tokens/s",
                rate(&self.prompt_tokens, &self.prompt_us),
            ),
            (
                "predicted_tokens_seconds",
                "Average generation throughput in tokens/s",
                rate(&self.completion_tokens, &self.generation_us),
            ),
            (
                "requests_processing",
                "Number of requests processing",
                self.active_slots.get() as f64,
            ),
            (
                "requests_deferred",
                "Number of requests deferred",
                self.queue_depth.get() as f64,
            ),
            (
                "n_busy_slots_per_decode",
                "Average number of busy slots per llama_decode() call",
                self.busy_slots.get() as f64 / (self.steps.get().max(1)) as f64,
            ),
        ];
        for (kind, items) in [("counter", &counters[..]), ("gauge", &gauges[..])] {
            for (name, help, value) in items {
                let _ = writeln!(out, "# HELP llamacpp:{name} {help}\n# TYPE llamacpp:{name} {kind}\nllamacpp:{name} {value}");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The text parsed as llama.cpp's test_metrics.py parses it: every `llamacpp:` sample has a
    /// TYPE line before it, and the values are the counters'.
    #[test]
    fn llamacpp_series_carry_the_counts() {
        let m = Metrics::default();
        m.prompt_tokens.add(12);
        m.cached_prompt_tokens.add(5);
        m.completion_tokens.add(7);
        m.generation_us.add(500_000);
        m.steps.add(4);
        m.busy_slots.add(6);
        let text = m.render();
        let mut types = std::collections::HashMap::new();
        let mut values = std::collections::HashMap::new();
        for line in text.lines() {
            if let Some(rest) = line.strip_prefix("# TYPE ") {
                let (name, kind) = rest.split_once(' ').unwrap();
                types.insert(name.to_owned(), kind.to_owned());
            } else if line.starts_with("llamacpp:") {
                let (name, value) = line.split_once(' ').unwrap();
                assert!(types.contains_key(name), "{name} has no TYPE line");
                assert!(
                    text.contains(&format!("# HELP {name} ")),
                    "{name} has no HELP line"
                );
                values.insert(name.to_owned(), value.parse::<f64>().unwrap());
            }
        }
        assert_eq!(values.len(), 15);
        assert_eq!(values["llamacpp:prompt_tokens_total"], 12.0);
        assert_eq!(values["llamacpp:prompt_tokens_cached_total"], 5.0);
        assert_eq!(values["llamacpp:tokens_predicted_total"], 7.0);
        assert_eq!(values["llamacpp:predicted_tokens_seconds"], 14.0);
        assert_eq!(values["llamacpp:n_busy_slots_per_decode"], 1.5);
        assert_eq!(values["llamacpp:prompt_tokens_seconds"], 0.0);
        assert_eq!(types["llamacpp:requests_deferred"], "gauge");
        assert_eq!(types["llamacpp:n_decode_total"], "counter");
        // Ours stay.
        assert!(text.contains("\noxibonsai_completion_tokens_total 7\n"));
    }
}
