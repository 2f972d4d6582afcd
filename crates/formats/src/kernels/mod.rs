//! Fast kernels, chosen once per process by runtime CPU detection (or `OXIBONSAI_ISA`), and
//! always tested against the scalar reference functions of the registry.
//!
//! A tier is a set of function pointers per format: `gemv` (several weight rows against one
//! activation row) and `quantize_activation` (f32 → partner format, byte-identical to the scalar
//! conversion), `gemm` (many tokens against a band of rows) and, for some formats, a kernel on
//! weights repacked once at load (`pack` → [`Packed`], `packed_gemm` for any token count; the
//! layout is described in `packed_layout.rs`, a tier without one keeps the plain rows). A
//! format without a fast kernel in a tier uses the scalar code, so every tier computes every
//! format. Each ISA lives in its own folder with one file per format (`x86_avx2/q1_0.rs`, …);
//! `aarch64_neon/` will join once it can be built and tested.

mod gemm_layout;
mod packed_layout;
#[cfg(test)]
mod test_data;
#[cfg(target_arch = "x86_64")]
mod x86_avx2;
#[cfg(target_arch = "x86_64")]
mod x86_avx512;

use crate::{format, Format, FormatKind, QuantizeFn, REGISTRY};
use half::f16;

pub use packed_layout::{PackPlan, Packed};

/// `out[r] = dot(weights[r * row_bytes..][..row_bytes], activation)` for every `r < out.len()`.
/// `weights` holds at least `out.len()` rows of `row_bytes` (whole blocks of the weight format);
/// `activation` is one row in the partner format of the same element count.
pub type GemvFn = fn(weights: &[u8], row_bytes: usize, activation: &[u8], out: &mut [f32]);

/// A matrix-matrix kernel: many tokens against a band of weight rows. Activations are prepared
/// once per product (`prepare`, one token at a time, into `prepared_bytes(n_values)` bytes), then
/// `run` multiplies rows by every prepared token. Each function checks the lengths it is given.
#[derive(Clone, Copy, Debug)]
pub struct GemmKernel {
    /// Bytes of one prepared token for rows of `n_values` values; `None` for a row length the
    /// kernel does not take (the caller falls back to the matrix-vector kernel).
    pub(crate) prepared_bytes: fn(n_values: usize) -> Option<usize>,
    /// One partner-format activation row → its prepared form.
    pub(crate) prepare: fn(n_values: usize, activation: &[u8], dst: &mut [u8]),
    /// `out[t·out_stride + r] = dot(row r, token t)` for `r < n_rows`, `t < n_tokens`.
    #[allow(clippy::type_complexity)]
    pub(crate) run: fn(
        n_values: usize,
        weights: &[u8],
        n_rows: usize,
        prepared: &[u8],
        n_tokens: usize,
        out: &mut [f32],
        out_stride: usize,
    ),
}

/// A kernel on packed weights ([`Packed`]): any number of tokens (one included) against whole
/// groups of rows, with the activations prepared as for the plain matrix-matrix kernel.
#[derive(Clone, Copy, Debug)]
pub struct PackedKernel {
    /// Rows per packed group in this tier.
    pub(crate) group_rows: usize,
    pub(crate) prepared_bytes: fn(n_values: usize) -> Option<usize>,
    pub(crate) prepare: fn(n_values: usize, activation: &[u8], dst: &mut [u8]),
    /// `out[t·out_stride + r] = dot(row r, token t)` for `r < n_rows` of the groups given.
    #[allow(clippy::type_complexity)]
    pub(crate) run: fn(
        plan: &PackPlan,
        groups: &[u8],
        n_rows: usize,
        prepared: &[u8],
        n_tokens: usize,
        out: &mut [f32],
        out_stride: usize,
    ),
}

/// Instruction-set tiers, lowest first.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Isa {
    Scalar,
    /// AVX2 + FMA + F16C.
    Avx2,
    /// AVX-512 F/BW/VL/DQ (+ VNNI where the CPU has it, chosen inside the kernels).
    Avx512,
}

#[derive(Debug, thiserror::Error)]
pub enum IsaError {
    #[error("OXIBONSAI_ISA='{value}' is not a tier: use scalar, avx2 or avx512")]
    Unknown { value: String },
    #[error("OXIBONSAI_ISA={isa} but this CPU lacks it (best available: {best})")]
    Unsupported {
        isa: &'static str,
        best: &'static str,
    },
}

impl Isa {
    pub const ALL: [Isa; 3] = [Isa::Scalar, Isa::Avx2, Isa::Avx512];

    pub fn name(self) -> &'static str {
        match self {
            Isa::Scalar => "scalar",
            Isa::Avx2 => "avx2",
            Isa::Avx512 => "avx512",
        }
    }

    pub fn parse(value: &str) -> Result<Isa, IsaError> {
        Isa::ALL
            .into_iter()
            .find(|isa| isa.name().eq_ignore_ascii_case(value.trim()))
            .ok_or_else(|| IsaError::Unknown {
                value: value.to_owned(),
            })
    }

    /// Whether this CPU can run the tier.
    pub fn available(self) -> bool {
        match self {
            Isa::Scalar => true,
            #[cfg(target_arch = "x86_64")]
            Isa::Avx2 => {
                std::arch::is_x86_feature_detected!("avx2")
                    && std::arch::is_x86_feature_detected!("fma")
                    && std::arch::is_x86_feature_detected!("f16c")
            }
            #[cfg(target_arch = "x86_64")]
            Isa::Avx512 => {
                Isa::Avx2.available()
                    && std::arch::is_x86_feature_detected!("avx512f")
                    && std::arch::is_x86_feature_detected!("avx512bw")
                    && std::arch::is_x86_feature_detected!("avx512vl")
                    && std::arch::is_x86_feature_detected!("avx512dq")
            }
            #[cfg(not(target_arch = "x86_64"))]
            _ => false,
        }
    }

    /// The best tier this CPU runs.
    pub fn best() -> Isa {
        Isa::ALL
            .into_iter()
            .rev()
            .find(|isa| isa.available())
            .unwrap_or(Isa::Scalar)
    }

    /// `OXIBONSAI_ISA` if set (an error if it names an unknown tier or one this CPU lacks),
    /// otherwise the best tier.
    pub fn from_env() -> Result<Isa, IsaError> {
        match std::env::var("OXIBONSAI_ISA") {
            Ok(value) if !value.trim().is_empty() => {
                let isa = Isa::parse(&value)?;
                if !isa.available() {
                    return Err(IsaError::Unsupported {
                        isa: isa.name(),
                        best: Isa::best().name(),
                    });
                }
                Ok(isa)
            }
            _ => Ok(Isa::best()),
        }
    }
}

/// Slots per table: at least the number of `FormatKind`s (a registry test checks every kind fits).
pub const N_KINDS: usize = 32;

/// The kernels of one tier: what the CPU backend calls in its hot path.
#[derive(Clone, Debug)]
pub struct Kernels {
    isa: Isa,
    gemv: [Option<GemvFn>; N_KINDS],
    quantize_activation: [Option<QuantizeFn>; N_KINDS],
    gemm: [Option<GemmKernel>; N_KINDS],
    packed: [Option<PackedKernel>; N_KINDS],
    weighted_sum: WeightedSumFn,
    softmax: SoftmaxFn,
    silu_mul: SiluMulFn,
    /// Several queries' scores / values at once, on the tiers that have them (the others take
    /// one query at a time through `gemv` and `weighted_sum`).
    attention_scores: Option<ScoresFn>,
    attention_values: Option<ValuesFn>,
}

/// The widest head the several-query scores kernels take (their widened queries live on the
/// stack); wider heads go one query at a time through `gemv`.
pub(crate) const ATTENTION_WIDE_DIM: usize = 2048;

/// `out[i·out_stride + j] = Σ_d queries[i·dim + d] · keys[j·dim + d]` for every query `i`
/// (`lens.len()` of them) and key `j < lens[i]`: attention's scores on the f16 cache.
pub type ScoresFn = fn(
    keys: &[f16],
    queries: &[f16],
    dim: usize,
    lens: &[usize],
    out: &mut [f32],
    out_stride: usize,
);

/// `out[i·dim + c] = Σ_{j < lens[i]} weights[i·w_stride + j] · rows[j·dim + c]` with `dim =
/// out.len() / lens.len()`: attention's weighted sums of f16 value rows for several queries.
pub type ValuesFn =
    fn(weights: &[f32], w_stride: usize, lens: &[usize], rows: &[f16], out: &mut [f32]);

/// The lengths every `attention_scores` reads and writes, checked before any kernel runs
/// (a caller's bug otherwise).
pub(crate) fn check_attention_scores(
    keys: &[f16],
    queries: &[f16],
    dim: usize,
    lens: &[usize],
    out: &[f32],
    out_stride: usize,
) {
    let n_keys = lens.iter().copied().max().unwrap_or(0);
    assert!(
        queries.len() >= lens.len() * dim && keys.len() >= n_keys * dim,
        "attention_scores: {} queries and {n_keys} keys of {dim} values asked from {} and {}",
        lens.len(),
        queries.len(),
        keys.len()
    );
    check_query_rows("attention_scores", "scores", lens, out_stride, out.len());
}

/// Row `i` of a buffer of `len` values, `stride` apart, holds `lens[i]` values for each query
/// (a caller's bug otherwise: `what` names the kernel, `holds` the buffer's values).
fn check_query_rows(what: &str, holds: &str, lens: &[usize], stride: usize, len: usize) {
    for (i, &n) in lens.iter().enumerate() {
        assert!(
            i * stride + n <= len,
            "{what}: query {i}'s {n} {holds} do not fit"
        );
    }
}

/// The lengths every `attention_values` reads and writes (see [`check_attention_scores`]).
pub(crate) fn check_attention_values(
    weights: &[f32],
    w_stride: usize,
    lens: &[usize],
    rows: &[f16],
    out: &[f32],
) {
    let n_keys = lens.iter().copied().max().unwrap_or(0);
    let dim = if lens.is_empty() {
        0
    } else {
        out.len() / lens.len()
    };
    assert!(
        out.len() == lens.len() * dim && rows.len() >= n_keys * dim,
        "attention_values: {} queries of {dim} values over {n_keys} rows asked from {} values",
        lens.len(),
        rows.len()
    );
    check_query_rows("attention_values", "weights", lens, w_stride, weights.len());
}

/// The scalar scores (each dot summed in f64): the reference for the fast ones.
pub fn attention_scores_scalar(
    keys: &[f16],
    queries: &[f16],
    dim: usize,
    lens: &[usize],
    out: &mut [f32],
    out_stride: usize,
) {
    check_attention_scores(keys, queries, dim, lens, out, out_stride);
    for (i, &len) in lens.iter().enumerate() {
        let q = &queries[i * dim..(i + 1) * dim];
        for (j, o) in out[i * out_stride..i * out_stride + len]
            .iter_mut()
            .enumerate()
        {
            let k = &keys[j * dim..(j + 1) * dim];
            let dot: f64 = q
                .iter()
                .zip(k)
                .map(|(a, b)| f64::from(a.to_f32()) * f64::from(b.to_f32()))
                .sum();
            *o = dot as f32;
        }
    }
}

/// The scalar weighted sums of several queries: the reference for the fast ones.
pub fn attention_values_scalar(
    weights: &[f32],
    w_stride: usize,
    lens: &[usize],
    rows: &[f16],
    out: &mut [f32],
) {
    values_per_query(weights, w_stride, lens, rows, out, weighted_sum_scalar)
}

/// Several queries' weighted sums, each through `one` (a one-query weighted sum): the scalar
/// twin, and the tiers without a several-query kernel.
fn values_per_query(
    weights: &[f32],
    w_stride: usize,
    lens: &[usize],
    rows: &[f16],
    out: &mut [f32],
    one: impl Fn(&[f32], &[f16], &mut [f32]),
) {
    check_attention_values(weights, w_stride, lens, rows, out);
    let Some(dim) = out.len().checked_div(lens.len()) else {
        return;
    };
    for (i, (&len, o)) in lens
        .iter()
        .zip(out.chunks_exact_mut(dim.max(1)))
        .enumerate()
    {
        one(
            &weights[i * w_stride..i * w_stride + len],
            rows,
            &mut o[..dim],
        );
    }
}

/// Attention's softmax numerator in place: `s ← exp(scale·s − max)` where `max` is the largest
/// `scale·s`; returns the sum of the new values (the denominator).
pub type SoftmaxFn = fn(scores: &mut [f32], scale: f32) -> f32;

/// The vector tiers' exponential for `x ≤ 0`: `x = n·ln 2 + r` with ln 2 split in a part exact
/// in few bits and the rest (so `r` is exact to f32), `|r| ≤ ln 2 / 2`, `exp(r)` by its Taylor
/// polynomial to degree 7 (Horner, highest first; truncation below 1e-8 relative).
#[cfg(target_arch = "x86_64")]
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

/// The safe entry points of an x86 tier's float kernels — attention's weighted sum and softmax,
/// SwiGLU's gate — over `$float`, the tier's module of `unsafe` kernels of the same names. Each
/// checks the lengths its kernel relies on; `Kernels::new` registers them for that tier only.
#[cfg(target_arch = "x86_64")]
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
#[cfg(target_arch = "x86_64")]
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

fn slot(kind: FormatKind) -> usize {
    kind as usize
}

impl Kernels {
    /// The kernels of `isa`, or `None` if this CPU cannot run it. Holding a `Kernels` is the
    /// proof that its fast functions may be called.
    pub fn new(isa: Isa) -> Option<Kernels> {
        if !isa.available() {
            return None;
        }
        let mut kernels = Kernels {
            isa,
            gemv: [None; N_KINDS],
            quantize_activation: [None; N_KINDS],
            gemm: [None; N_KINDS],
            packed: [None; N_KINDS],
            weighted_sum: match isa {
                #[cfg(target_arch = "x86_64")]
                Isa::Avx512 => x86_avx512::weighted_sum,
                #[cfg(target_arch = "x86_64")]
                Isa::Avx2 => x86_avx2::weighted_sum,
                _ => weighted_sum_scalar,
            },
            softmax: match isa {
                #[cfg(target_arch = "x86_64")]
                Isa::Avx512 => x86_avx512::softmax,
                #[cfg(target_arch = "x86_64")]
                Isa::Avx2 => x86_avx2::softmax,
                _ => softmax_scalar,
            },
            silu_mul: match isa {
                #[cfg(target_arch = "x86_64")]
                Isa::Avx512 => x86_avx512::silu_mul,
                #[cfg(target_arch = "x86_64")]
                Isa::Avx2 => x86_avx2::silu_mul,
                _ => silu_mul_scalar,
            },
            attention_scores: match isa {
                #[cfg(target_arch = "x86_64")]
                Isa::Avx512 => Some(x86_avx512::attention_scores),
                _ => None,
            },
            attention_values: match isa {
                #[cfg(target_arch = "x86_64")]
                Isa::Avx512 => Some(x86_avx512::attention_values),
                _ => None,
            },
        };
        for f in REGISTRY {
            let i = slot(f.kind);
            kernels.gemv[i] = match isa {
                Isa::Scalar => None,
                #[cfg(target_arch = "x86_64")]
                Isa::Avx2 => x86_avx2::gemv(f.kind),
                #[cfg(target_arch = "x86_64")]
                Isa::Avx512 => x86_avx512::gemv(f.kind).or_else(|| x86_avx2::gemv(f.kind)),
                #[cfg(not(target_arch = "x86_64"))]
                _ => None,
            };
            kernels.quantize_activation[i] = match isa {
                Isa::Scalar => None,
                #[cfg(target_arch = "x86_64")]
                Isa::Avx2 => x86_avx2::quantize_activation(f.kind),
                #[cfg(target_arch = "x86_64")]
                Isa::Avx512 => x86_avx512::quantize_activation(f.kind)
                    .or_else(|| x86_avx2::quantize_activation(f.kind)),
                #[cfg(not(target_arch = "x86_64"))]
                _ => None,
            };
            kernels.gemm[i] = match isa {
                #[cfg(target_arch = "x86_64")]
                Isa::Avx2 => x86_avx2::gemm(f.kind),
                #[cfg(target_arch = "x86_64")]
                Isa::Avx512 => x86_avx512::gemm(f.kind).or_else(|| x86_avx2::gemm(f.kind)),
                _ => None,
            };
            kernels.packed[i] = match isa {
                #[cfg(target_arch = "x86_64")]
                Isa::Avx2 => x86_avx2::packed(f.kind),
                #[cfg(target_arch = "x86_64")]
                Isa::Avx512 => x86_avx512::packed(f.kind).or_else(|| x86_avx2::packed(f.kind)),
                _ => None,
            };
        }
        Some(kernels)
    }

    /// The tier chosen from `OXIBONSAI_ISA` or the CPU.
    pub fn from_env() -> Result<Kernels, IsaError> {
        let isa = Isa::from_env()?;
        Ok(Kernels::new(isa).expect("Isa::from_env returns an available tier"))
    }

    pub fn isa(&self) -> Isa {
        self.isa
    }

    /// Whether `kind` has a fast matrix-vector kernel in this tier (else the scalar one runs).
    pub fn has_fast_gemv(&self, kind: FormatKind) -> bool {
        self.gemv[slot(kind)].is_some()
    }

    /// `out[r] = dot(row r of weights, activation)` with this tier's kernel for `weights_format`.
    pub fn gemv(
        &self,
        weights_format: &Format,
        weights: &[u8],
        row_bytes: usize,
        activation: &[u8],
        out: &mut [f32],
    ) {
        assert!(
            weights.len() >= out.len() * row_bytes,
            "gemv: weights shorter than the rows asked for"
        );
        match self.gemv[slot(weights_format.kind)] {
            Some(fast) => fast(weights, row_bytes, activation, out),
            None => {
                for (r, o) in out.iter_mut().enumerate() {
                    *o = (weights_format.dot)(
                        &weights[r * row_bytes..(r + 1) * row_bytes],
                        activation,
                    );
                }
            }
        }
    }

    /// `out[c] = Σ_j weights[j] · rows[j·out.len() + c]` with this tier's kernel.
    pub fn weighted_sum(&self, weights: &[f32], rows: &[f16], out: &mut [f32]) {
        (self.weighted_sum)(weights, rows, out)
    }

    /// Attention's scores for several queries over the same f16 keys (the query heads that share
    /// a key head, the tokens of a prompt): `out[i·out_stride + j] = Σ_d queries[i·dim + d] ·
    /// keys[j·dim + d]` for `j < lens[i]`. A score depends only on its query and key, never on
    /// which other queries share the call (so a token's attention is the same alone or batched).
    pub fn attention_scores(
        &self,
        keys: &[f16],
        queries: &[f16],
        dim: usize,
        lens: &[usize],
        out: &mut [f32],
        out_stride: usize,
    ) {
        if let Some(fast) = self.attention_scores.filter(|_| dim <= ATTENTION_WIDE_DIM) {
            return fast(keys, queries, dim, lens, out, out_stride);
        }
        check_attention_scores(keys, queries, dim, lens, out, out_stride);
        let f16_format = format(FormatKind::F16);
        for (i, &len) in lens.iter().enumerate() {
            self.gemv(
                f16_format,
                bytemuck::cast_slice(&keys[..len * dim]),
                2 * dim,
                bytemuck::cast_slice(&queries[i * dim..(i + 1) * dim]),
                &mut out[i * out_stride..i * out_stride + len],
            );
        }
    }

    /// Attention's weighted sums of f16 value rows for several queries: `out[i·dim + c] =
    /// Σ_{j < lens[i]} weights[i·w_stride + j] · rows[j·dim + c]`, `dim = out.len() /
    /// lens.len()`; each query's result is [`Kernels::weighted_sum`]'s.
    pub fn attention_values(
        &self,
        weights: &[f32],
        w_stride: usize,
        lens: &[usize],
        rows: &[f16],
        out: &mut [f32],
    ) {
        match self.attention_values {
            Some(fast) => fast(weights, w_stride, lens, rows, out),
            None => values_per_query(weights, w_stride, lens, rows, out, |w, r, o| {
                self.weighted_sum(w, r, o)
            }),
        }
    }

    /// Attention's softmax numerator in place, `s ← exp(scale·s − max)`; returns their sum. The
    /// vector tiers' exponential is a polynomial within 2 ulp of `f32::exp` (as the reference's
    /// vectorized softmax uses its own), and they sum in another order than the scalar twin.
    pub fn softmax(&self, scores: &mut [f32], scale: f32) -> f32 {
        (self.softmax)(scores, scale)
    }

    /// SwiGLU's gate in place, `gate ← silu(gate) · up` (equal lengths: a caller's bug otherwise),
    /// with the vector tiers' exponential (as [`Kernels::softmax`]).
    pub fn silu_mul(&self, gate: &mut [f32], up: &[f32]) {
        assert_eq!(gate.len(), up.len(), "silu_mul: gate and up lengths");
        (self.silu_mul)(gate, up)
    }

    /// Bytes of one token prepared for the matrix-matrix kernel of `weights_format` at rows of
    /// `n_values`, or `None` when this tier has no such kernel (use [`Kernels::gemv`] per token).
    pub fn gemm_prepared_bytes(&self, weights_format: &Format, n_values: usize) -> Option<usize> {
        self.gemm[slot(weights_format.kind)].and_then(|k| (k.prepared_bytes)(n_values))
    }

    /// Prepares one token (a row of `weights_format`'s partner format, `n_values` values) for
    /// [`Kernels::gemm`]. Panics when `gemm_prepared_bytes` is `None` (a caller's bug).
    pub fn gemm_prepare(
        &self,
        weights_format: &Format,
        n_values: usize,
        activation: &[u8],
        dst: &mut [u8],
    ) {
        let k = self.gemm[slot(weights_format.kind)].expect("gemm_prepare without a gemm kernel");
        (k.prepare)(n_values, activation, dst)
    }

    /// `out[t·out_stride + r] = dot(row r of weights, token t)` for `r < n_rows`, `t < n_tokens`,
    /// with `prepared` holding `n_tokens` tokens of `gemm_prepared_bytes` bytes each.
    #[allow(clippy::too_many_arguments)]
    pub fn gemm(
        &self,
        weights_format: &Format,
        n_values: usize,
        weights: &[u8],
        n_rows: usize,
        prepared: &[u8],
        n_tokens: usize,
        out: &mut [f32],
        out_stride: usize,
    ) {
        let k = self.gemm[slot(weights_format.kind)].expect("gemm without a gemm kernel");
        (k.run)(
            n_values, weights, n_rows, prepared, n_tokens, out, out_stride,
        )
    }

    /// The packed layout of `n_rows` rows of `n_in` values of `weights_format` in this tier, or
    /// `None` when the tier has no packed kernel for them (keep the plain rows then).
    pub fn pack_plan(
        &self,
        weights_format: &Format,
        n_in: usize,
        n_rows: usize,
    ) -> Option<PackPlan> {
        let k = self.packed[slot(weights_format.kind)]?;
        PackPlan::new(weights_format.kind, self.isa, k.group_rows, n_in, n_rows)
    }

    /// `rows` (`n_rows` rows of `n_in` values of `weights_format`) repacked on this thread for
    /// [`Kernels::packed_gemm`], or `None` as for [`Kernels::pack_plan`].
    pub fn pack(
        &self,
        weights_format: &Format,
        n_in: usize,
        rows: &[u8],
        n_rows: usize,
    ) -> Option<Packed> {
        let plan = self.pack_plan(weights_format, n_in, n_rows)?;
        Some(Packed::pack(plan, rows))
    }

    fn packed_kernel(&self, plan: &PackPlan) -> PackedKernel {
        assert_eq!(plan.isa, self.isa, "packed weights of another tier");
        self.packed[slot(plan.kind)].expect("a plan comes from a tier with a packed kernel")
    }

    /// Bytes of one token prepared for [`Kernels::packed_gemm`] on `w`.
    pub fn packed_prepared_bytes(&self, w: &Packed) -> usize {
        let k = self.packed_kernel(w.plan());
        (k.prepared_bytes)(w.plan().n_in()).expect("a plan has a prepared layout")
    }

    /// Prepares one token (a row of the partner format) for [`Kernels::packed_gemm`] on `w`.
    pub fn packed_prepare(&self, w: &Packed, activation: &[u8], dst: &mut [u8]) {
        let k = self.packed_kernel(w.plan());
        (k.prepare)(w.plan().n_in(), activation, dst)
    }

    /// `out[t·out_stride + r] = dot(row first_row + r of w, token t)` for `r < n_rows`,
    /// `t < n_tokens`; `first_row` must be a multiple of the plan's `group_rows`. A row's result
    /// is the same whatever `n_tokens` (and the same as [`Kernels::gemm`] on the plain rows).
    #[allow(clippy::too_many_arguments)]
    pub fn packed_gemm(
        &self,
        w: &Packed,
        first_row: usize,
        n_rows: usize,
        prepared: &[u8],
        n_tokens: usize,
        out: &mut [f32],
        out_stride: usize,
    ) {
        let plan = w.plan();
        let k = self.packed_kernel(plan);
        assert!(
            first_row.is_multiple_of(plan.group_rows()) && first_row + n_rows <= plan.n_rows(),
            "packed gemm: rows {first_row}..+{n_rows} are not whole groups of the matrix"
        );
        let gb = plan.group_bytes();
        let groups = &w.storage()[first_row / plan.group_rows() * gb..];
        (k.run)(plan, groups, n_rows, prepared, n_tokens, out, out_stride)
    }

    /// Converts one f32 row into `partner` (an activation format) with this tier's kernel;
    /// byte-identical to the scalar conversion.
    pub fn quantize_activation(&self, partner: &Format, src: &[f32], dst: &mut [u8]) {
        match self.quantize_activation[slot(partner.kind)] {
            Some(fast) => fast(src, dst),
            None => {
                let scalar = partner
                    .quantize_activation
                    .expect("partner formats have an activation conversion (registry test)");
                scalar(src, dst)
            }
        }
    }
}

/// The partner format of a weight format (convenience for callers holding a `FormatKind`).
pub fn partner_of(kind: FormatKind) -> &'static Format {
    format(format(kind).partner)
}
