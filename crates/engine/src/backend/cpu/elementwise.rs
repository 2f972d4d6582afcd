//! The CPU backend's element-wise operations: RMS norm, RoPE, SwiGLU and residual adds, rows
//! across the pool (or on the calling thread when they are few).

use super::pool::PARALLEL_ELEMENTS;
use super::CpuBackend;
use crate::config::RopeStyle;

/// Rows of one RMS norm step (their sums interleaved).
const NORM_ROWS: usize = 8;

impl CpuBackend {
    /// [`crate::Backend::rms_norm`].
    pub(super) fn rms_norm_rows(&self, x: &[f32], weight: &[f32], eps: f32, out: &mut [f32]) {
        // The reference sums each row's f32 squares in double precision, in order, then scales
        // in f32. Rows go up to `NORM_ROWS` at a time with their sums interleaved: each sum keeps
        // its order (so a row's result does not depend on its neighbours), and the rows' additions
        // overlap instead of waiting on each other.
        let n = weight.len();
        self.element_wise(out, NORM_ROWS * n, x, NORM_ROWS * n, |dst, rows| {
            let mut sums = [0.0f64; NORM_ROWS];
            let sums = &mut sums[..rows.len() / n];
            for i in 0..n {
                for (r, sum) in sums.iter_mut().enumerate() {
                    let v = rows[r * n + i];
                    *sum += f64::from(v * v);
                }
            }
            for ((dst, row), &sum) in dst
                .chunks_exact_mut(n)
                .zip(rows.chunks_exact(n))
                .zip(&*sums)
            {
                let mean = (sum / n as f64) as f32;
                let scale = 1.0 / (mean + eps).sqrt();
                for ((d, &v), &g) in dst.iter_mut().zip(row).zip(weight) {
                    *d = (v * scale) * g;
                }
            }
        });
    }

    /// [`crate::Backend::rope`].
    pub(super) fn rope_rows(
        &self,
        x: &mut [f32],
        n_heads: usize,
        head_dim: usize,
        cos_sin: &[(f32, f32)],
        style: RopeStyle,
    ) {
        let n_tokens = x.len() / (n_heads * head_dim);
        let pairs = cos_sin.len() / n_tokens.max(1);
        self.element_wise(x, n_heads * head_dim, cos_sin, pairs, |token, cos_sin| {
            for head in token.chunks_exact_mut(head_dim) {
                for (i, &(c, s)) in cos_sin.iter().enumerate() {
                    let (a, b) = match style {
                        RopeStyle::Adjacent => (2 * i, 2 * i + 1),
                        RopeStyle::NeoX => (i, i + pairs),
                    };
                    let (x0, x1) = (head[a], head[b]);
                    head[a] = x0 * c - x1 * s;
                    head[b] = x0 * s + x1 * c;
                }
            }
        });
    }

    /// [`crate::Backend::swiglu`].
    pub(super) fn swiglu_rows(&self, gate: &mut [f32], up: &[f32]) {
        let chunk = PARALLEL_ELEMENTS / 2;
        self.element_wise(gate, chunk, up, chunk, |gate, up| {
            self.kernels.silu_mul(gate, up)
        });
    }

    /// [`crate::Backend::add`].
    pub(super) fn add_rows(&self, x: &mut [f32], y: &[f32]) {
        let chunk = PARALLEL_ELEMENTS / 2;
        self.element_wise(x, chunk, y, chunk, |x, y| {
            for (a, &b) in x.iter_mut().zip(y) {
                *a += b;
            }
        });
    }
}
