//! Attention's weighted sums over value rows of the 32-value block formats on NEON: the shared
//! driver (`kernels/block_values.rs`) over 4-lane vectors, each block's codes (the standard
//! formats' `codes`, as their dot products take them) widened to eight vectors of floats.

use core::arch::aarch64::*;

use super::f16::load1;
use super::standard::{nibbles, Format, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0};
use crate::kernels::block_values::{block_values_rows, ValueBlock, ValueLanes};
use crate::kernels::block_values_entry;
use crate::kernels::BlockValuesFn;
use crate::FormatKind;

pub(super) struct Neon;

impl ValueLanes for Neon {
    const LANES: usize = 4;
    type V = float32x4_t;
    type Block = [float32x4_t; 8];

    #[inline(always)]
    unsafe fn zero() -> [float32x4_t; 8] {
        [vdupq_n_f32(0.0); 8]
    }
    #[inline(always)]
    unsafe fn splat(x: f32) -> float32x4_t {
        vdupq_n_f32(x)
    }
    #[inline(always)]
    unsafe fn mul_add(acc: float32x4_t, c: float32x4_t, v: float32x4_t) -> float32x4_t {
        vfmaq_f32(acc, c, v)
    }
    #[inline(always)]
    unsafe fn add(a: float32x4_t, b: float32x4_t) -> float32x4_t {
        vaddq_f32(a, b)
    }
    #[inline(always)]
    unsafe fn load(p: *const f32) -> float32x4_t {
        // SAFETY: the caller's (4 readable floats).
        unsafe { vld1q_f32(p) }
    }
    #[inline(always)]
    unsafe fn store(p: *mut f32, v: float32x4_t) {
        // SAFETY: the caller's (4 writable floats).
        unsafe { vst1q_f32(p, v) }
    }
    #[inline(always)]
    unsafe fn half(p: *const u8) -> f32 {
        // SAFETY: the caller's (2 readable bytes).
        unsafe { load1(p) }
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

/// The standard formats' codes are their dot products'.
macro_rules! standard_block {
    ($($format:ident: $min:literal),*) => {$(
        impl ValueBlock<Neon> for $format {
            const BYTES: usize = <$format as Format>::W_BYTES;
            const MIN: bool = $min;
            #[inline(always)]
            unsafe fn widen(blk: *const u8) -> [float32x4_t; 8] {
                // SAFETY: as the caller's.
                unsafe { widen(<$format as Format>::codes(blk)) }
            }
        }
    )*};
}
standard_block!(Q8_0: false, Q4_0: false, Q5_0: false, Q4_1: true, Q5_1: true);

struct Iq4Nl;
impl ValueBlock<Neon> for Iq4Nl {
    const BYTES: usize = size_of::<crate::iq4_nl::BlockIq4Nl>();
    const MIN: bool = false;
    #[inline(always)]
    unsafe fn widen(blk: *const u8) -> [float32x4_t; 8] {
        // SAFETY: 16 index bytes follow the scale; the table is 16 bytes.
        unsafe {
            let levels = vld1q_s8(crate::iq4_nl::LEVELS.as_ptr());
            widen(nibbles(blk.add(2)).map(|n| vqtbl1q_s8(levels, n)))
        }
    }
}

/// The `BlockValuesFn` contract for format `B` (lengths checked by the caller).
///
/// # Safety
/// NEON; the lengths as [`crate::kernels::check_block_values`] checks them.
#[target_feature(enable = "neon")]
unsafe fn values<B: ValueBlock<Neon>>(
    weights: &[f32],
    w_stride: usize,
    lens: &[usize],
    rows: &[u8],
    row_bytes: usize,
    out: &mut [f32],
) {
    // SAFETY: the caller's contract, NEON enabled here.
    unsafe { block_values_rows::<Neon, B>(weights, w_stride, lens, rows, row_bytes, out) }
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
