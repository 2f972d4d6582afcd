//! The kernel table of one tier ([`Kernels`]): what the CPU backend calls in its hot path, one
//! slot per format kind, with the scalar code of the registry behind every empty slot.

use half::f16;

use super::attention::ATTENTION_WIDE_DIM;
use super::attention::{attention_values_blocks_scalar, BlockValuesFn};
use super::attention::{check_attention_scores, values_per_query, ScoresFn, ValuesFn};
use super::delta_rule::{delta_rule_scalar, DeltaRuleFn};
use super::float::{silu_mul_scalar, softmax_scalar, weighted_sum_scalar};
use super::float::{SiluMulFn, SoftmaxFn, WeightedSumFn};
use super::fwht::{fwht_scalar, FwhtFn};
use super::isa::{Isa, IsaError};
use super::tier::{TierTable, TIERS};
use super::{GemmKernel, GemvFn, PackPlan, Packed, PackedKernel};
use crate::{format, Format, FormatKind, QuantizeFn, REGISTRY};

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
    /// Weighted sums over a block format's value rows, per format (the scalar twin where empty).
    block_values: [Option<BlockValuesFn>; N_KINDS],
    fwht: FwhtFn,
    delta_rule: DeltaRuleFn,
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
        // Start from the scalar tier, then let each better tier up to `isa` override what it
        // provides (`TIERS` is lowest first; a tier below `isa` is available when `isa` is). Only
        // the scalar tier and `isa`'s own architecture's tiers are folded (`Isa::folds`).
        let mut kernels = Kernels {
            isa,
            gemv: [None; N_KINDS],
            quantize_activation: [None; N_KINDS],
            gemm: [None; N_KINDS],
            packed: [None; N_KINDS],
            weighted_sum: weighted_sum_scalar,
            softmax: softmax_scalar,
            silu_mul: silu_mul_scalar,
            attention_scores: None,
            attention_values: None,
            block_values: [None; N_KINDS],
            fwht: fwht_scalar,
            delta_rule: delta_rule_scalar,
        };
        for tier in TIERS.iter().filter(|tier| isa.folds(tier.isa)) {
            kernels.fold(tier);
        }
        Some(kernels)
    }

    /// `tier`'s kernels in place of those it provides.
    fn fold(&mut self, tier: &TierTable) {
        for f in REGISTRY {
            let i = slot(f.kind);
            self.gemv[i] = (tier.gemv)(f.kind).or(self.gemv[i]);
            self.quantize_activation[i] =
                (tier.quantize_activation)(f.kind).or(self.quantize_activation[i]);
            self.gemm[i] = (tier.gemm)(f.kind).or(self.gemm[i]);
            self.packed[i] = (tier.packed)(f.kind).or(self.packed[i]);
            self.block_values[i] = (tier.block_values)(f.kind).or(self.block_values[i]);
        }
        self.weighted_sum = tier.weighted_sum.unwrap_or(self.weighted_sum);
        self.softmax = tier.softmax.unwrap_or(self.softmax);
        self.silu_mul = tier.silu_mul.unwrap_or(self.silu_mul);
        self.attention_scores = tier.attention_scores.or(self.attention_scores);
        self.attention_values = tier.attention_values.or(self.attention_values);
        self.fwht = tier.fwht.unwrap_or(self.fwht);
        self.delta_rule = tier.delta_rule.unwrap_or(self.delta_rule);
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

    /// Attention's weighted sums over value rows of block format `values` (a quantized value
    /// cache, read in place): `out[i·dim + c] = Σ_{j < lens[i]} weights[i·w_stride + j] ·
    /// value(row j)[c]`, rows `row_bytes` apart, `dim = out.len() / lens.len()` (whole blocks, at
    /// most 2048). A query's result does not depend on which other queries share the call.
    #[allow(clippy::too_many_arguments)]
    pub fn attention_values_blocks(
        &self,
        values: &Format,
        weights: &[f32],
        w_stride: usize,
        lens: &[usize],
        rows: &[u8],
        row_bytes: usize,
        out: &mut [f32],
    ) {
        match self.block_values[slot(values.kind)] {
            Some(fast) => fast(weights, w_stride, lens, rows, row_bytes, out),
            None => attention_values_blocks_scalar(
                values, weights, w_stride, lens, rows, row_bytes, out,
            ),
        }
    }

    /// Whether this tier reads value rows of `kind` with a fast kernel (else the scalar twin).
    pub fn has_fast_block_values(&self, kind: FormatKind) -> bool {
        self.block_values[slot(kind)].is_some()
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

    /// The blockwise normalised Walsh–Hadamard transform of `prism.hadamard`, in place, on each
    /// `width`-value row of `rows`: `row ← (1/√block)·S_block·(row ⊙ signs)` per `block`-value
    /// chunk (`S[r][c] = (−1)^popcount(r & c)`; `signs` of `width` values, `None` for all +1).
    /// Every tier gives the scalar twin's bits. Panics when `block` is not a power of two in
    /// 2..=65536, `width` not whole blocks or `rows` not whole rows (a caller's bug).
    pub fn fwht(&self, rows: &mut [f32], width: usize, block: usize, signs: Option<&[f32]>) {
        assert!(
            width > 0 && rows.len().is_multiple_of(width),
            "fwht: {} values are not whole rows of {width}",
            rows.len()
        );
        for row in rows.chunks_exact_mut(width) {
            (self.fwht)(row, block, signs)
        }
    }

    /// One step of the gated delta rule on one head's `S×S` state, `state[j·S + i] = M[i][j]`
    /// (`S = k.len()`; every length is checked): `M ← decay·M; δ = β·(v − Mᵀk); M ← M + k⊗δ;
    /// out = Mᵀq`. The vector tiers sum in another order than the scalar twin.
    #[allow(clippy::too_many_arguments)]
    pub fn delta_rule(
        &self,
        state: &mut [f32],
        k: &[f32],
        v: &[f32],
        q: &[f32],
        decay: f32,
        beta: f32,
        out: &mut [f32],
    ) {
        (self.delta_rule)(state, k, v, q, decay, beta, out)
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
