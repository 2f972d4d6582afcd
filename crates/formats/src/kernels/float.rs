//! The float kernels of attention and SwiGLU (softmax, weighted sum, SiLU gate): their
//! function-pointer types, the scalar twins, and what the vector tiers share (the exponential's
//! polynomial, the safe entry points over a tier's `unsafe` kernels).

use half::f16;

/// Attention's softmax numerator in place: `s ← exp(scale·s − max)` where `max` is the largest
/// `scale·s`; returns the sum of the new values (the denominator).
pub type SoftmaxFn = fn(scores: &mut [f32], scale: f32) -> f32;

/// The vector tiers' exponential for `x ≤ 0`: `x = n·ln 2 + r` with ln 2 split in a part exact
/// in few bits and the rest (so `r` is exact to f32), `|r| ≤ ln 2 / 2`, `exp(r)` by its Taylor
/// polynomial to degree 7 (Horner, highest first; truncation below 1e-8 relative).
#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
pub(crate) mod exp_poly {
    pub const LN2_HI: f32 = 0.693_359_4;
    pub const LN2_LO: f32 = -2.121_944_4e-4;
    pub const HIGHEST: f32 = 1.0 / 5040.0;
    pub const REST: [f32; 7] = [
        1.0 / 720.0,
        1.0 / 120.0,
        1.0 / 24.0,
        1.0 / 6.0,
        0.5,
        1.0,
        1.0,
    ];
}

/// The safe entry points of a vector tier's float kernels — attention's weighted sum and softmax,
/// SwiGLU's gate — over `$float`, the tier's module of `unsafe` kernels of the same names. Each
/// checks the lengths its kernel relies on; `Kernels::new` registers them for that tier only.
#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
macro_rules! float_entries {
    ($float:ident) => {
        /// The value side of attention, `out[c] = Σ_j weights[j] · rows[j·out.len() + c]`.
        pub(crate) fn weighted_sum(weights: &[f32], rows: &[half::f16], out: &mut [f32]) {
            assert!(
                rows.len() >= weights.len() * out.len(),
                "weighted_sum: {} rows of {} values asked from {} values",
                weights.len(),
                out.len(),
                rows.len()
            );
            // SAFETY: registered only through `Kernels::new` for this tier, which checked the
            // CPU; the lengths were just checked.
            unsafe { $float::weighted_sum(weights, rows, out) }
        }

        /// Attention's softmax numerator in place (`Kernels::softmax`).
        pub(crate) fn softmax(scores: &mut [f32], scale: f32) -> f32 {
            // SAFETY: as above; the kernel reads and writes `scores` only.
            unsafe { $float::softmax(scores, scale) }
        }

        /// SwiGLU's gate in place (`Kernels::silu_mul`).
        pub(crate) fn silu_mul(gate: &mut [f32], up: &[f32]) {
            assert_eq!(gate.len(), up.len(), "silu_mul: gate and up lengths");
            // SAFETY: as above; the lengths were just checked.
            unsafe { $float::silu_mul(gate, up) }
        }
    };
}
#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
pub(crate) use float_entries;

/// SwiGLU's gate in place: `gate ← silu(gate) · up`, `silu(g) = g / (1 + exp(−g))`.
pub type SiluMulFn = fn(gate: &mut [f32], up: &[f32]);

/// The scalar SwiGLU gate: the reference for the fast ones (`f32::exp`).
pub fn silu_mul_scalar(gate: &mut [f32], up: &[f32]) {
    for (g, &u) in gate.iter_mut().zip(up) {
        *g = (*g / (1.0 + (-*g).exp())) * u;
    }
}

/// The scalar softmax numerator: the reference for the fast ones (`f32::exp`).
pub fn softmax_scalar(scores: &mut [f32], scale: f32) -> f32 {
    let mut max = f32::NEG_INFINITY;
    for s in scores.iter_mut() {
        *s *= scale;
        max = max.max(*s);
    }
    let mut sum = 0.0f32;
    for s in scores.iter_mut() {
        *s = (*s - max).exp();
        sum += *s;
    }
    sum
}

/// `out[c] = Σ_j weights[j] · rows[j·out.len() + c]` (attention's weighted sum of value rows,
/// read from the f16 cache as they are stored; each value widened exactly to f32).
pub type WeightedSumFn = fn(weights: &[f32], rows: &[f16], out: &mut [f32]);

/// The scalar weighted sum: the reference for the fast ones.
pub fn weighted_sum_scalar(weights: &[f32], rows: &[f16], out: &mut [f32]) {
    let dim = out.len();
    out.fill(0.0);
    for (j, &w) in weights.iter().enumerate() {
        for (o, &x) in out.iter_mut().zip(&rows[j * dim..(j + 1) * dim]) {
            *o += w * x.to_f32();
        }
    }
}
