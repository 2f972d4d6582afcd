//! Attention's weighted sums over value rows of the 32-value block formats (a quantized value
//! cache), read in place: each block's codes (the standard formats' `codes`, as their dot
//! products take them) widen once to 32 floats, and every query of the pass adds them scaled by
//! `weight · d` (its `weight · m` terms summed apart and added to the whole block at the end, for
//! the formats with a minimum). Keys go a tile at a time, so a tile's rows stay in L1 while every
//! column block of them is summed.

use core::arch::aarch64::*;

use super::f16::load1 as half;
use super::standard::{nibbles, Format, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0};
use crate::kernels::block_values_entry;
use crate::kernels::BlockValuesFn;
use crate::FormatKind;

/// Keys per tile: 64 rows of a 128-value Q8_0 head are 8.5 KiB.
const TILE: usize = 64;
/// Queries per pass: two sets of eight accumulators beside the block's eight vectors.
const G: usize = 2;

/// A format's value rows: value `i` is `d · code_i (+ m)`, `d` the f16 at offset 0.
trait Block {
    const W_BYTES: usize;
    /// Whether the block holds a minimum `m` (the f16 at offset 2).
    const MIN: bool;
    /// The block's 32 codes as signed bytes in value order.
    ///
    /// # Safety
    /// NEON present; `blk` readable for one block.
    unsafe fn codes(blk: *const u8) -> [int8x16_t; 2];
}

/// The standard formats' codes are their dot products'.
macro_rules! standard_block {
    ($($format:ident: $min:literal),*) => {$(
        impl Block for $format {
            const W_BYTES: usize = <$format as Format>::W_BYTES;
            const MIN: bool = $min;
            #[inline(always)]
            unsafe fn codes(blk: *const u8) -> [int8x16_t; 2] {
                // SAFETY: as the caller's.
                unsafe { <$format as Format>::codes(blk) }
            }
        }
    )*};
}
standard_block!(Q8_0: false, Q4_0: false, Q5_0: false, Q4_1: true, Q5_1: true);

struct Iq4Nl;
impl Block for Iq4Nl {
    const W_BYTES: usize = size_of::<crate::iq4_nl::BlockIq4Nl>();
    const MIN: bool = false;
    #[inline(always)]
    unsafe fn codes(blk: *const u8) -> [int8x16_t; 2] {
        // SAFETY: 16 index bytes follow the scale; the table is 16 bytes.
        unsafe {
            let levels = vld1q_s8(crate::iq4_nl::LEVELS.as_ptr());
            nibbles(blk.add(2)).map(|n| vqtbl1q_s8(levels, n))
        }
    }
}

/// 32 signed bytes as 8 vectors of 4 floats, in order.
#[inline(always)]
unsafe fn widen(codes: [int8x16_t; 2]) -> [float32x4_t; 8] {
    let mut v = [vdupq_n_f32(0.0); 8];
    for (h, c) in codes.into_iter().enumerate() {
        let (lo, hi) = (vmovl_s8(vget_low_s8(c)), vmovl_high_s8(c));
        v[4 * h] = vcvtq_f32_s32(vmovl_s16(vget_low_s16(lo)));
        v[4 * h + 1] = vcvtq_f32_s32(vmovl_high_s16(lo));
        v[4 * h + 2] = vcvtq_f32_s32(vmovl_s16(vget_low_s16(hi)));
        v[4 * h + 3] = vcvtq_f32_s32(vmovl_high_s16(hi));
    }
    v
}

/// The `BlockValuesFn` contract for format `B` (lengths checked by the caller).
///
/// # Safety
/// NEON; the lengths as [`crate::kernels::check_block_values`] checks them.
#[target_feature(enable = "neon")]
unsafe fn values<B: Block>(
    weights: &[f32],
    w_stride: usize,
    lens: &[usize],
    rows: &[u8],
    row_bytes: usize,
    out: &mut [f32],
) {
    out.fill(0.0);
    let n_q = lens.len();
    if n_q == 0 {
        return;
    }
    let dim = out.len() / n_q;
    let n_blocks = dim / 32;
    let n_keys = lens.iter().copied().max().unwrap_or(0);
    let (w, r, o) = (weights.as_ptr(), rows.as_ptr(), out.as_mut_ptr());
    let mut t0 = 0;
    while t0 < n_keys {
        let t1 = (t0 + TILE).min(n_keys);
        for first in (0..n_q).step_by(G) {
            let here = G.min(n_q - first);
            let ends: [usize; G] =
                core::array::from_fn(|g| if g < here { lens[first + g].min(t1) } else { 0 });
            let end = ends.iter().copied().max().unwrap_or(0);
            for b in 0..n_blocks {
                let mut acc = [[vdupq_n_f32(0.0); 8]; G];
                let mut mins = [0.0f32; G];
                for j in t0..end {
                    // SAFETY: row j < max(lens) of whole blocks, block b inside the row; one
                    // block readable there.
                    let (blk, v, d) = unsafe {
                        let blk = r.add(j * row_bytes + b * B::W_BYTES);
                        (blk, widen(B::codes(blk)), half(blk))
                    };
                    for g in 0..G {
                        if j < ends[g] {
                            // SAFETY: weights row first + g holds lens[first + g] > j values.
                            let p = unsafe { *w.add((first + g) * w_stride + j) };
                            let c = vdupq_n_f32(p * d);
                            for (a, v) in acc[g].iter_mut().zip(&v) {
                                *a = vfmaq_f32(*a, c, *v);
                            }
                            if B::MIN {
                                // SAFETY: the minimum follows the scale.
                                mins[g] += p * unsafe { half(blk.add(2)) };
                            }
                        }
                    }
                }
                for g in 0..here {
                    let m = vdupq_n_f32(mins[g]);
                    for (u, a) in acc[g].iter().enumerate() {
                        // SAFETY: out row first + g, columns 32b + 4u.. inside `dim`.
                        unsafe {
                            let at = o.add((first + g) * dim + 32 * b + 4 * u);
                            vst1q_f32(at, vaddq_f32(vld1q_f32(at), vaddq_f32(*a, m)));
                        }
                    }
                }
            }
        }
        t0 = t1;
    }
}

/// This tier's kernel for value rows of `kind`, if it has one.
pub(super) fn block_values(kind: FormatKind) -> Option<BlockValuesFn> {
    Some(match kind {
        FormatKind::Q8_0 => block_values_entry!(Q8_0, values::<Q8_0>),
        FormatKind::Q4_0 => block_values_entry!(Q4_0, values::<Q4_0>),
        FormatKind::Q4_1 => block_values_entry!(Q4_1, values::<Q4_1>),
        FormatKind::Q5_0 => block_values_entry!(Q5_0, values::<Q5_0>),
        FormatKind::Q5_1 => block_values_entry!(Q5_1, values::<Q5_1>),
        FormatKind::IQ4_NL => block_values_entry!(IQ4_NL, values::<Iq4Nl>),
        _ => return None,
    })
}
