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
//! each folder exports one tier table (`tier.rs`): `x86_avx2/`, `x86_avx512/` and
//! `aarch64_neon/` (the `neon`, `dotprod` and `i8mm` tables).
//!
//! The modules: `isa` (tier detection), `tier` (each ISA's tier table and their fold order),
//! `table` (the [`Kernels`] table of a tier, folded from the tier tables), `entries` (what the
//! ISA folders' registrations share), `lowbit_rows` (the ternary row-band drivers, generic over
//! a tier's `Lanes`), `attention`, `float` and `delta_rule` (the attention / SwiGLU / Gated DeltaNet
//! kernels' types and scalar twins), `block_values` (the driver the tiers share for weighted sums
//! over quantized value rows, generic over a tier's `ValueLanes`), `fwht` (the Walsh–Hadamard transform of the `prism.hadamard`
//! rotation: its scalar twin and the driver the tiers share), `gemm_layout` / `packed_layout` (the prepared-activation and
//! repacked-weight layouts), and one folder per ISA.

// The shared pieces below serve the vector tiers' folders. The aarch64 tiers use some of them
// (the length checks and `safe_gemv!`, `float_entries!` / `exp_poly`, the attention checks, the
// prepared layout of `gemm_layout`, `packed_layout`'s plans) and not others (the x86 variant
// lists and row-band drivers): every piece is still compiled (and type-checked) everywhere, with
// the dead-code lints quiet off x86.
#[cfg(target_arch = "aarch64")]
mod aarch64_neon;
mod attention;
#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
mod block_values;
mod delta_rule;
#[cfg_attr(
    not(target_arch = "x86_64"),
    allow(dead_code, unused_imports, unused_macros)
)]
mod entries;
mod float;
mod fwht;
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
mod gemm_layout;
mod isa;
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
mod lowbit_rows;
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
mod packed_layout;
mod table;
#[cfg(test)]
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
mod test_data;
mod tier;
#[cfg(target_arch = "x86_64")]
mod x86_avx2;
#[cfg(target_arch = "x86_64")]
mod x86_avx512;

#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
pub(crate) use attention::{
    attention_entries, block_values_entry, check_attention_scores, check_attention_values,
    check_block_values, ATTENTION_WIDE_DIM,
};
pub use attention::{
    attention_scores_scalar, attention_values_blocks_scalar, attention_values_scalar,
    BlockValuesFn, ScoresFn, ValuesFn,
};
#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
pub(crate) use delta_rule::{check_delta_rule, delta_rule_entry};
pub use delta_rule::{delta_rule_scalar, DeltaRuleFn};
#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
pub(crate) use float::{exp_poly, float_entries};
pub use float::{
    silu_mul_scalar, softmax_scalar, weighted_sum_scalar, SiluMulFn, SoftmaxFn, WeightedSumFn,
};
#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
pub(crate) use fwht::fwht_entry;
pub use fwht::{check_fwht, fwht_scalar, fwht_scale, FwhtFn, FWHT_BLOCKS};
pub use isa::{Isa, IsaError};
pub use packed_layout::{PackPlan, Packed};
pub use table::{partner_of, Kernels, N_KINDS};

/// `out[r] = dot(weights[r * row_bytes..][..row_bytes], activation)` for every `r < out.len()`.
/// `weights` holds at least `out.len()` rows of `row_bytes` (whole blocks of the weight format);
/// `activation` is one row in the partner format of the same element count, as the partner's
/// `quantize_activation` writes it: kernels may read its stored sums instead of recomputing them
/// (Q8_K's `bsums`, Q8_1's `s`), so a hand-made activation whose sums disagree with its codes
/// gives a wrong product.
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
