//! Q1_0 × Q8_0 on NEON. Each Q1_0 block (128 signs, one f16 scale) spans four Q8_0 blocks
//! (32 codes, one f16 scale each). Per Q8_0 block the 32 sign bits are spread to one byte each
//! (table lookup, then test against the bit's position) and select the codes they cover; the
//! block's integer sum is `2·Σ(selected) − Σ(all)` (= Σ ±q, exact), and the float arithmetic
//! after it is the scalar `dot`'s, in the same order, so the result is bit-identical to it.

use core::arch::aarch64::*;
use core::arch::asm;

use crate::common::F16Le;

const Q1_0_BYTES: usize = core::mem::size_of::<crate::q1_0::BlockQ1_0>();
const Q8_0_BYTES: usize = core::mem::size_of::<crate::q8_0::BlockQ8_0>();
/// Q8_0 blocks per Q1_0 block.
const SPAN: usize = crate::q1_0::QK1_0 / crate::q8_0::QK8_0;

/// The f16 scale at `p` (two bytes, little-endian) widened exactly.
///
/// # Safety
/// `p` is readable for two bytes.
#[inline(always)]
unsafe fn scale(p: *const u8) -> f32 {
    F16Le(p.cast::<[u8; 2]>().read_unaligned()).to_f32()
}

/// The bytes of `bits` (two of them, lowest first) spread to 16 lanes, each 0xFF where its bit
/// is set: lane `i` holds bit `i % 8` of byte `i / 8`.
///
/// # Safety
/// NEON present.
#[inline(always)]
pub(super) unsafe fn masks(bits: u16) -> uint8x16_t {
    const SPREAD: [u8; 16] = [0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1];
    const SELECT: [u8; 16] = [1, 2, 4, 8, 16, 32, 64, 128, 1, 2, 4, 8, 16, 32, 64, 128];
    let bytes = vreinterpretq_u8_u16(vdupq_n_u16(bits));
    let spread = vqtbl1q_u8(bytes, vld1q_u8(SPREAD.as_ptr()));
    vtstq_u8(spread, vld1q_u8(SELECT.as_ptr()))
}

/// Σ ±q over one Q8_0 block's 32 codes at `codes`, the signs from the 32 bits at `bits`.
///
/// # Safety
/// NEON present; `codes` readable for 32 bytes, `bits` for 4.
#[inline(always)]
unsafe fn block_sum_neon(bits: *const u8, codes: *const u8) -> i32 {
    let b = bits.cast::<u32>().read_unaligned();
    let q0 = vld1q_s8(codes.cast::<i8>());
    let q1 = vld1q_s8(codes.add(16).cast::<i8>());
    let m0 = vreinterpretq_s8_u8(masks(b as u16));
    let m1 = vreinterpretq_s8_u8(masks((b >> 16) as u16));
    // Widening sums of 16 codes each (|Σ| ≤ 16·128, no overflow in i16).
    let set = i32::from(vaddlvq_s8(vandq_s8(q0, m0))) + i32::from(vaddlvq_s8(vandq_s8(q1, m1)));
    let all = i32::from(vaddlvq_s8(q0)) + i32::from(vaddlvq_s8(q1));
    2 * set - all
}

/// `acc + SDOT(a, b)`: each 32-bit lane gains the sum of the four products of its bytes. Inline
/// assembly because `vdotq_s32` is not stable Rust yet (`stdarch_neon_dotprod`).
///
/// # Safety
/// The dot-product extension present.
#[target_feature(enable = "neon,dotprod")]
#[inline]
unsafe fn sdot(mut acc: int32x4_t, a: int8x16_t, b: int8x16_t) -> int32x4_t {
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

/// [`block_sum_neon`] with SDOT.
///
/// # Safety
/// NEON and the dot-product extension present; `codes` readable for 32 bytes, `bits` for 4.
#[target_feature(enable = "neon,dotprod")]
#[inline]
unsafe fn block_sum_dotprod(bits: *const u8, codes: *const u8) -> i32 {
    let b = bits.cast::<u32>().read_unaligned();
    let q0 = vld1q_s8(codes.cast::<i8>());
    let q1 = vld1q_s8(codes.add(16).cast::<i8>());
    let m0 = vreinterpretq_s8_u8(masks(b as u16));
    let m1 = vreinterpretq_s8_u8(masks((b >> 16) as u16));
    let ones = vdupq_n_s8(1);
    let zero = vdupq_n_s32(0);
    let set = sdot(sdot(zero, vandq_s8(q0, m0), ones), vandq_s8(q1, m1), ones);
    let all = sdot(sdot(zero, q0, ones), q1, ones);
    2 * vaddvq_s32(set) - vaddvq_s32(all)
}

/// One row: the scalar `dot`'s float arithmetic around `block_sum`'s exact integer sums.
///
/// # Safety
/// `row` readable for `n_blocks` Q1_0 blocks, `act` for `SPAN · n_blocks` Q8_0 blocks; the CPU
/// has what `block_sum` needs.
#[inline(always)]
unsafe fn row_dot(
    row: *const u8,
    act: *const u8,
    n_blocks: usize,
    block_sum: impl Fn(*const u8, *const u8) -> i32,
) -> f32 {
    let mut sumf = 0.0f32;
    for b in 0..n_blocks {
        let x = row.add(b * Q1_0_BYTES);
        let mut sum_scaled = 0.0f32;
        for k in 0..SPAN {
            let y = act.add((b * SPAN + k) * Q8_0_BYTES);
            let sumi = block_sum(x.add(2 + 4 * k), y.add(2));
            sum_scaled += scale(y) * sumi as f32;
        }
        sumf += scale(x) * sum_scaled;
    }
    sumf
}

/// Every row of `weights` against `activation`, through `block_sum`.
///
/// # Safety
/// Buffers checked against the `GemvFn` contract (`check_lengths`): `out.len()` rows of
/// `row_bytes` in `weights` and `SPAN` Q8_0 blocks of activation per Q1_0 block of a row; the CPU
/// has what `block_sum` needs.
#[inline(always)]
unsafe fn rows(
    weights: &[u8],
    row_bytes: usize,
    activation: &[u8],
    out: &mut [f32],
    block_sum: impl Fn(*const u8, *const u8) -> i32 + Copy,
) {
    let n_blocks = row_bytes / Q1_0_BYTES;
    for (r, o) in out.iter_mut().enumerate() {
        // SAFETY: row `r` and the activation are within the checked buffers (see above).
        *o = unsafe {
            row_dot(
                weights.as_ptr().add(r * row_bytes),
                activation.as_ptr(),
                n_blocks,
                block_sum,
            )
        };
    }
}

/// # Safety
/// NEON present; buffers checked against the `GemvFn` contract (`check_lengths`).
#[target_feature(enable = "neon")]
pub(super) unsafe fn gemv(weights: &[u8], row_bytes: usize, activation: &[u8], out: &mut [f32]) {
    // SAFETY: the caller's contract; NEON was checked.
    unsafe {
        rows(weights, row_bytes, activation, out, |bits, codes| {
            block_sum_neon(bits, codes)
        })
    }
}

/// # Safety
/// As [`gemv`], plus the dot-product extension.
#[target_feature(enable = "neon,dotprod")]
pub(super) unsafe fn gemv_dotprod(
    weights: &[u8],
    row_bytes: usize,
    activation: &[u8],
    out: &mut [f32],
) {
    // SAFETY: the caller's contract; NEON and the dot-product extension were checked.
    unsafe {
        rows(weights, row_bytes, activation, out, |bits, codes| {
            block_sum_dotprod(bits, codes)
        })
    }
}
