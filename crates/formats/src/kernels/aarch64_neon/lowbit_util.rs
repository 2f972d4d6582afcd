//! What the NEON kernels of the 1-, 2-bit and ternary formats share: the SDOT instruction (inline
//! assembly, `vdotq_s32` being unstable), exact f16 → f32 scales, and the two row-band drivers —
//! one for the formats dotted with Q8_0 (Q1_0, the Q2_0 family, PTQ1_0), one for those dotted with Q8_K
//! (TQ1_0, TQ2_0).
//!
//! Both drivers compute [`BAND`] rows a pass, one row per lane: each activation block is loaded
//! once for the band (its Σ q taken once too: from its codes for Q8_0, from its stored `bsums`
//! for Q8_K), each row's integer sum over it is exact, and the four rows' sums are gathered into
//! one vector by pairwise adds. The float arithmetic after that is
//! the scalar `dot`'s, operation for operation and in the same order (one row a lane, separate
//! multiplies and adds), so every kernel built on them is bit-identical to its scalar twin.

use core::arch::aarch64::*;
use core::arch::asm;
use core::mem::size_of;

use super::f16::widen4 as widen;

use crate::q8_0::BlockQ8_0;
use crate::q8_k::BlockQ8_K;

/// Rows a pass (one per f32 lane).
pub(super) const BAND: usize = 4;
const Q8_0_BYTES: usize = size_of::<BlockQ8_0>();
const Q8_K_BYTES: usize = size_of::<BlockQ8_K>();

/// `acc + SDOT(a, b)`: each 32-bit lane gains the sum of the four products of its bytes. Inline
/// assembly because `vdotq_s32` is not stable Rust yet (`stdarch_neon_dotprod`).
///
/// # Safety
/// The dot-product extension present.
#[target_feature(enable = "neon,dotprod")]
#[inline]
pub(super) unsafe fn sdot(mut acc: int32x4_t, a: int8x16_t, b: int8x16_t) -> int32x4_t {
    // SAFETY: a register-only instruction of an extension the caller guarantees.
    unsafe {
        asm!(
            "sdot {acc:v}.4s, {a:v}.16b, {b:v}.16b",
            acc = inout(vreg) acc,
            a = in(vreg) a,
            b = in(vreg) b,
            options(pure, nomem, nostack, preserves_flags),
        );
    }
    acc
}

/// `acc` plus the 16 products `a·b` spread over its lanes (only their total is meaningful):
/// SDOT when `DOT`, else widening multiplies and a pairwise widening add. Exact while every
/// pair of products fits in i16: `|a·b| ≤ 16383` per byte (codes of at most 3 against i8, or
/// anything against ±1).
///
/// # Safety
/// NEON present, and the dot-product extension when `DOT`.
#[inline(always)]
pub(super) unsafe fn dot_bytes<const DOT: bool>(
    acc: int32x4_t,
    a: int8x16_t,
    b: int8x16_t,
) -> int32x4_t {
    if DOT {
        sdot(acc, a, b)
    } else {
        let p = vmull_s8(vget_low_s8(a), vget_low_s8(b));
        vpadalq_s16(acc, vmlal_high_s8(p, a, b))
    }
}

/// The sum of the 32 bytes of `a` and `b`, spread over the lanes.
///
/// # Safety
/// NEON present, and the dot-product extension when `DOT`.
#[inline(always)]
pub(super) unsafe fn sum_bytes<const DOT: bool>(a: int8x16_t, b: int8x16_t) -> int32x4_t {
    if DOT {
        let ones = vdupq_n_s8(1);
        sdot(sdot(vdupq_n_s32(0), a, ones), b, ones)
    } else {
        vpaddlq_s16(vpadalq_s8(vpaddlq_s8(a), b))
    }
}

/// The f16 (two bytes, little-endian) at `p`.
///
/// # Safety
/// `p` readable for two bytes.
#[inline(always)]
unsafe fn f16_bits(p: *const u8) -> u16 {
    u16::from_le_bytes(p.cast::<[u8; 2]>().read_unaligned())
}

/// The f16 scale at `p`, widened exactly into every lane.
///
/// # Safety
/// NEON present; `p` readable for two bytes.
#[inline(always)]
pub(super) unsafe fn scale_splat(p: *const u8) -> float32x4_t {
    widen(vdup_n_u16(f16_bits(p)))
}

/// The f16 scales at `p[r] + offset`, widened exactly into lane `r`.
///
/// # Safety
/// NEON present; each `p[r] + offset` readable for two bytes.
#[inline(always)]
pub(super) unsafe fn scales(p: [*const u8; BAND], offset: usize) -> float32x4_t {
    let bits: [u16; BAND] = core::array::from_fn(|r| f16_bits(p[r].add(offset)));
    widen(vld1_u16(bits.as_ptr()))
}

/// Lane `r` = the total of `parts[r]`'s lanes.
///
/// # Safety
/// NEON present.
#[inline(always)]
pub(super) unsafe fn totals(parts: [int32x4_t; BAND]) -> int32x4_t {
    vpaddq_s32(
        vpaddq_s32(parts[0], parts[1]),
        vpaddq_s32(parts[2], parts[3]),
    )
}

/// The rows of band `band` (starting at row `BAND · band` of `weights`), the ones past `rows`
/// repeating the last: they are read, never stored, and stay within the rows asked for.
///
/// # Safety
/// `rows` ≥ 1 rows of `row_bytes` readable at `weights`, and `BAND · band < rows`.
#[inline(always)]
unsafe fn band_rows(
    weights: *const u8,
    row_bytes: usize,
    band: usize,
    rows: usize,
) -> [*const u8; BAND] {
    core::array::from_fn(|r| weights.add((BAND * band + r).min(rows - 1) * row_bytes))
}

/// Stores the lanes of `v` that are rows of `out`.
#[inline(always)]
unsafe fn store(v: float32x4_t, out: &mut [f32]) {
    let mut lanes = [0f32; BAND];
    vst1q_f32(lanes.as_mut_ptr(), v);
    for (o, l) in out.iter_mut().zip(lanes) {
        *o = l;
    }
}

/// A weight format dotted with Q8_0, one 32-value Q8_0 block (a group) at a time.
pub(super) trait Q8_0Weights {
    const BLOCK_BYTES: usize;
    /// Q8_0 blocks a weight block spans.
    const SPAN: usize;
    /// Where the block keeps its f16 scale (first for all but PTQ1_0, which keeps it last).
    const SCALE_OFFSET: usize = 0;
    /// One Q8_0 block's codes as the format's `group_dot` takes them, prepared once per band.
    type Act;
    /// # Safety
    /// NEON (and SDOT when `DOT`) present; `codes` readable for 32 bytes.
    unsafe fn load_act<const DOT: bool>(codes: *const u8) -> Self::Act;
    /// Partial sums (only their total counts) of group `k` of the weight block at `block`.
    ///
    /// # Safety
    /// As `load_act`; `block` points at a whole block.
    unsafe fn group_dot<const DOT: bool>(block: *const u8, k: usize, act: &Self::Act) -> int32x4_t;
    /// Σ value·q of each row (one a lane) from the totals of its `group_dot`.
    ///
    /// # Safety
    /// NEON present.
    unsafe fn finish(totals: int32x4_t, act: &Self::Act) -> int32x4_t;
}

/// The whole `GemvFn` contract for a Q8_0-partner format: per block
/// `sumf += dx · Σₖ (dyₖ · sumiₖ)`, as the scalar `dot`.
///
/// # Safety
/// Buffers checked against the `GemvFn` contract (`check_lengths`); NEON (and SDOT when `DOT`)
/// present.
#[inline(always)]
pub(super) unsafe fn gemv_q8_0<W: Q8_0Weights, const DOT: bool>(
    weights: &[u8],
    row_bytes: usize,
    activation: &[u8],
    out: &mut [f32],
) {
    let n_blocks = row_bytes / W::BLOCK_BYTES;
    let rows = out.len();
    for (band, out) in out.chunks_mut(BAND).enumerate() {
        let band = band_rows(weights.as_ptr(), row_bytes, band, rows);
        let mut sumf = vdupq_n_f32(0.0);
        for b in 0..n_blocks {
            let blocks: [*const u8; BAND] =
                core::array::from_fn(|r| band[r].add(b * W::BLOCK_BYTES));
            let mut sum_scaled = vdupq_n_f32(0.0);
            for k in 0..W::SPAN {
                let y = activation.as_ptr().add((b * W::SPAN + k) * Q8_0_BYTES);
                let act = W::load_act::<DOT>(y.add(2));
                let mut parts = [vdupq_n_s32(0); BAND];
                for (part, &x) in parts.iter_mut().zip(&blocks) {
                    *part = W::group_dot::<DOT>(x, k, &act);
                }
                let sumi = W::finish(totals(parts), &act);
                let dy = scale_splat(y);
                sum_scaled = vaddq_f32(sum_scaled, vmulq_f32(dy, vcvtq_f32_s32(sumi)));
            }
            sumf = vaddq_f32(sumf, vmulq_f32(scales(blocks, W::SCALE_OFFSET), sum_scaled));
        }
        store(sumf, out);
    }
}

/// A ternary format dotted with Q8_K, one 256-value block of the band's rows at a time.
pub(super) trait Q8KWeights {
    const BLOCK_BYTES: usize;
    const SCALE_OFFSET: usize;
    /// Σ code·q of each row (one a lane) over its block at `blocks[r]`, the value being
    /// code − 1; `codes` holds the Q8_K block's 256 codes in order. Each activation vector is
    /// loaded once and dotted with all the band's rows, into several accumulators a row so that
    /// no dot product waits on the one before.
    ///
    /// # Safety
    /// NEON (and SDOT when `DOT`) present; each `blocks[r]` points at a whole block, `codes` at
    /// 256 readable bytes.
    unsafe fn band_dot<const DOT: bool>(blocks: [*const u8; BAND], codes: *const u8) -> int32x4_t;
}

/// Σ q over a Q8_K block from its stored `bsums` (16 sums of 16 codes each, i16 at byte 260):
/// what `quantize_activation` writes, so equal to the sum of the codes without the 16 dot
/// products that summing them would take.
///
/// # Safety
/// NEON present; `y` points at a whole Q8_K block.
#[inline(always)]
unsafe fn q8_k_code_sum(y: *const u8) -> i32 {
    // Two bsums make at most 2 · 16 · 128 in magnitude: no i16 overflow in the pairwise add.
    let pairs = vaddq_s16(vld1q_s16(y.add(260).cast()), vld1q_s16(y.add(276).cast()));
    vaddlvq_s16(pairs)
}

/// The whole `GemvFn` contract for a Q8_K-partner format: per block
/// `sumf += sumi · (dy · dx)`, as the scalar `dot`, with `sumi = Σ code·q − Σ q` (Σ q from the
/// activation's `bsums`).
///
/// # Safety
/// As [`gemv_q8_0`].
#[inline(always)]
pub(super) unsafe fn gemv_q8_k<W: Q8KWeights, const DOT: bool>(
    weights: &[u8],
    row_bytes: usize,
    activation: &[u8],
    out: &mut [f32],
) {
    const { assert!(Q8_K_BYTES == 292) };
    let n_blocks = row_bytes / W::BLOCK_BYTES;
    let rows = out.len();
    for (band, out) in out.chunks_mut(BAND).enumerate() {
        let band = band_rows(weights.as_ptr(), row_bytes, band, rows);
        let mut sumf = vdupq_n_f32(0.0);
        for b in 0..n_blocks {
            let y = activation.as_ptr().add(b * Q8_K_BYTES);
            let dy = vdupq_n_f32(f32::from_le_bytes(y.cast::<[u8; 4]>().read_unaligned()));
            let blocks: [*const u8; BAND] =
                core::array::from_fn(|r| band[r].add(b * W::BLOCK_BYTES));
            let sum_code_q = W::band_dot::<DOT>(blocks, y.add(4));
            let sumi = vsubq_s32(sum_code_q, vdupq_n_s32(q8_k_code_sum(y)));
            let d = vmulq_f32(dy, scales(blocks, W::SCALE_OFFSET));
            sumf = vaddq_f32(sumf, vmulq_f32(vcvtq_f32_s32(sumi), d));
        }
        store(sumf, out);
    }
}
