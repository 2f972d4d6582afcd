//! The CPU backend's Gated DeltaNet operations: the causal convolution with its rolling history,
//! the gates, the delta rule (value heads across the pool, each head's step one kernel call of
//! the tier) and the sigmoid output gate of gated attention. Each follows llama.cpp's CPU code
//! in its order of summation (`ssm_conv`, `gated_delta_net`), so results agree to rounding.

use rayon::prelude::*;

use super::pool::PARALLEL_ELEMENTS;
use super::CpuBackend;
use crate::backend::DeltaShape;
use crate::config::MAX_CONV_KERNEL;

/// `log(1 + eˣ)`, as ggml computes it (the identity above 20, where the sum rounds to x).
fn softplus(x: f32) -> f32 {
    if x > 20.0 {
        x
    } else {
        x.exp().ln_1p()
    }
}

fn sigmoid(x: f32) -> f32 {
    1.0 / (1.0 + (-x).exp())
}

impl CpuBackend {
    /// [`crate::Backend::conv1d_silu`].
    pub(super) fn conv1d_silu_rows(
        &self,
        x: &mut [f32],
        history: &mut [f32],
        kernel: &[f32],
        d_conv: usize,
    ) {
        let kept = d_conv - 1;
        let channels = kernel.len() / d_conv;
        assert!(
            history.len() == channels * kept && x.len().is_multiple_of(channels),
            "conv1d_silu: {} history values and {} inputs for {channels} channels of width {d_conv}",
            history.len(),
            x.len()
        );
        // Per channel: the window of the last d_conv inputs slides over the rows; the history
        // keeps its last d_conv − 1 afterwards.
        assert!(
            d_conv <= MAX_CONV_KERNEL,
            "conv1d_silu: width {d_conv} (the configuration allows {MAX_CONV_KERNEL})"
        );
        let mut window = [0.0f32; MAX_CONV_KERNEL];
        let window = &mut window[..d_conv];
        for c in 0..channels {
            let w = &kernel[c * d_conv..(c + 1) * d_conv];
            let h = &mut history[c * kept..(c + 1) * kept];
            window[..kept].copy_from_slice(h);
            for row in x.chunks_exact_mut(channels) {
                window[kept] = row[c];
                let mut sum = 0.0f32;
                for (a, b) in window.iter().zip(w) {
                    sum += a * b;
                }
                row[c] = sum * sigmoid(sum);
                window.copy_within(1.., 0);
            }
            h.copy_from_slice(&window[..kept]);
        }
    }

    /// [`crate::Backend::gdn_gates`].
    pub(super) fn gdn_gate_rows(
        &self,
        alpha: &mut [f32],
        beta: &mut [f32],
        dt_bias: &[f32],
        ssm_a: &[f32],
    ) {
        let n = dt_bias.len();
        for row in alpha.chunks_exact_mut(n) {
            for ((a, &bias), &scale) in row.iter_mut().zip(dt_bias).zip(ssm_a) {
                *a = softplus(*a + bias) * scale;
            }
        }
        for b in beta.iter_mut() {
            *b = sigmoid(*b);
        }
    }

    /// [`crate::Backend::delta_rule`].
    pub(super) fn delta_rule_rows(
        &self,
        ssm: &mut [f32],
        qkv: &[f32],
        log_decay: &[f32],
        beta: &[f32],
        shape: DeltaShape,
        out: &mut [f32],
    ) {
        let DeltaShape {
            d_state: s,
            n_k_head,
            n_v_head,
        } = shape;
        let key_dim = s * n_k_head;
        let row = 2 * key_dim + s * n_v_head;
        let n = qkv.len() / row;
        assert!(
            ssm.len() == n_v_head * s * s
                && log_decay.len() == n * n_v_head
                && beta.len() == n * n_v_head
                && out.len() == n * n_v_head * s,
            "delta_rule: a state of {} values and {n} tokens do not fit {shape:?}",
            ssm.len()
        );
        let scale = 1.0 / (s as f32).sqrt();
        let kernels = &self.kernels;
        for (t, (x, o)) in qkv
            .chunks_exact(row)
            .zip(out.chunks_exact_mut(n_v_head * s))
            .enumerate()
        {
            let (q, rest) = x.split_at(key_dim);
            let (k, v) = rest.split_at(key_dim);
            let step = |(h, (state, o)): (usize, (&mut [f32], &mut [f32]))| {
                let kh = h % n_k_head;
                let (q, k) = (&q[kh * s..(kh + 1) * s], &k[kh * s..(kh + 1) * s]);
                let decay = log_decay[t * n_v_head + h].exp();
                kernels.delta_rule(
                    state,
                    k,
                    &v[h * s..(h + 1) * s],
                    q,
                    decay,
                    beta[t * n_v_head + h],
                    o,
                );
                o.iter_mut().for_each(|y| *y *= scale);
            };
            // Heads are independent: across the pool when the state is large (a decode step of
            // a big model), on this thread when a pass would cost more than it saves.
            if ssm.len() < PARALLEL_ELEMENTS {
                ssm.chunks_exact_mut(s * s)
                    .zip(o.chunks_exact_mut(s))
                    .enumerate()
                    .for_each(step);
            } else {
                self.pool.install(|| {
                    ssm.par_chunks_exact_mut(s * s)
                        .zip(o.par_chunks_exact_mut(s))
                        .enumerate()
                        .for_each(step)
                });
            }
        }
    }

    /// [`crate::Backend::sigmoid_mul`].
    pub(super) fn sigmoid_mul_rows(&self, x: &mut [f32], gate: &[f32]) {
        let chunk = PARALLEL_ELEMENTS / 2;
        self.element_wise(x, chunk, gate, chunk, |x, gate| {
            for (a, &g) in x.iter_mut().zip(gate) {
                *a *= sigmoid(g);
            }
        });
    }
}
