//! The 32-value standard formats on NEON: Q8_0, Q4_0, Q5_0, IQ4_NL × Q8_0 and Q4_1, Q5_1 × Q8_1,
//! four rows a pass so each activation block (two vector loads) serves them all.
//!
//! Each weight block widens to 32 signed bytes in value order (nibbles, plus the fifth bit
//! spread from `qh` for Q5_*, minus the format's offset where it has one; IQ4_NL's nibbles looked
//! up among its 16 levels by `tbl`); the block's integer
//! sum Σ w·a is exact (widening products `smull` + pairwise `sadalp`, or SDOT on `dotprod`), the
//! four rows' sums land in one vector, and the float arithmetic after it is the scalar `dot`'s,
//! operation for operation and in the same order (lane `r` is row `r`; no fused multiply-add),
//! so every result is bit-identical to the scalar twin's. The rows past the last whole band of
//! four go one at a time.

use core::arch::aarch64::*;

// Rows a pass: the four-row band of the low-bit drivers; `halves(blocks, offset)`: the f16 at
// `offset` of each row's block widened into its lane; `half`: one f16 widened.
use super::f16::load1 as half;
use super::lowbit_util::{scales as halves, sdot, BAND as ROWS};

/// How a tier sums the products of 32 signed bytes: exactly, into the lanes of an int32 vector.
trait Sum32: Copy {
    /// # Safety
    /// The CPU has what the implementation's instructions need.
    unsafe fn sum32(self, w: [int8x16_t; 2], a: [int8x16_t; 2]) -> int32x4_t;
}

/// Plain NEON: widening products, summed pairwise into int32 (exact for any bytes).
#[derive(Clone, Copy)]
struct Neon;

impl Sum32 for Neon {
    #[inline(always)]
    unsafe fn sum32(self, w: [int8x16_t; 2], a: [int8x16_t; 2]) -> int32x4_t {
        let mut acc = vdupq_n_s32(0);
        for (w, a) in w.into_iter().zip(a) {
            acc = vpadalq_s16(acc, vmull_s8(vget_low_s8(w), vget_low_s8(a)));
            acc = vpadalq_s16(acc, vmull_high_s8(w, a));
        }
        acc
    }
}

/// The dot-product extension: SDOT.
#[derive(Clone, Copy)]
struct Dotprod;

/// # Safety
/// NEON and the dot-product extension present.
#[target_feature(enable = "neon,dotprod")]
#[inline]
unsafe fn sum32_dotprod(w: [int8x16_t; 2], a: [int8x16_t; 2]) -> int32x4_t {
    sdot(sdot(vdupq_n_s32(0), w[0], a[0]), w[1], a[1])
}

impl Sum32 for Dotprod {
    #[inline(always)]
    unsafe fn sum32(self, w: [int8x16_t; 2], a: [int8x16_t; 2]) -> int32x4_t {
        // SAFETY: only used by the `dotprod` kernels, which checked the extension.
        unsafe { sum32_dotprod(w, a) }
    }
}

/// One 32-value format against its activation partner.
pub(super) trait Format {
    /// Bytes of a weight block and of an activation block.
    const W_BYTES: usize;
    const A_BYTES: usize;
    /// Where an activation block's 32 codes start.
    const A_CODES: usize;
    /// The block's 32 codes at `blk` as signed bytes in value order (offset already removed).
    ///
    /// # Safety
    /// NEON present; `blk` readable for one weight block.
    unsafe fn codes(blk: *const u8) -> [int8x16_t; 2];
    /// The scalar `dot`'s float step for four rows at once: `sumi` holds each row's integer sum
    /// of this block, `blocks` the rows' weight blocks, `act` the activation block.
    ///
    /// # Safety
    /// NEON present; the blocks readable.
    unsafe fn step(
        sumf: float32x4_t,
        sumi: float32x4_t,
        blocks: [*const u8; ROWS],
        act: *const u8,
    ) -> float32x4_t;
}

/// The 32 nibbles of the 16 bytes at `qs` (low nibbles first: value order).
///
/// # Safety
/// NEON present; `qs` readable for 16 bytes.
#[inline(always)]
pub(super) unsafe fn nibbles(qs: *const u8) -> [uint8x16_t; 2] {
    let q = vld1q_u8(qs);
    [vandq_u8(q, vdupq_n_u8(0x0f)), vshrq_n_u8::<4>(q)]
}

/// Byte `i` of entry `b` is 0x10 where bit `i` of `b` is set (`SET`) or clear (`!SET`): a
/// fifth-bit byte spread to its 8 values' bytes by one table load, on the load pipes rather
/// than the vector ones (llama.cpp's `table_b2b` idea; 2 KiB each, in L1).
const fn fifth_bit_table<const SET: bool>() -> [u64; 256] {
    let mut table = [0u64; 256];
    let mut b = 0;
    while b < 256 {
        let mut i = 0;
        while i < 8 {
            if ((b >> i) & 1 == 1) == SET {
                table[b] |= 0x10 << (8 * i);
            }
            i += 1;
        }
        b += 1;
    }
    table
}
static FIFTH_SET: [u64; 256] = fifth_bit_table::<true>();
static FIFTH_CLEAR: [u64; 256] = fifth_bit_table::<false>();

/// The 32 bytes of `table` for the fifth bits in the little-endian u32 at `qh` (value `i`'s at
/// bit `i`).
///
/// # Safety
/// NEON present; `qh` readable for 4 bytes.
#[inline(always)]
unsafe fn fifth_bits(table: &[u64; 256], qh: *const u8) -> [uint8x16_t; 2] {
    let bits = qh.cast::<u32>().read_unaligned();
    let at = |k: u32| {
        vld1_u8(
            table
                .as_ptr()
                .add(((bits >> (8 * k)) & 0xff) as usize)
                .cast(),
        )
    };
    [vcombine_u8(at(0), at(1)), vcombine_u8(at(2), at(3))]
}

/// The 32 five-bit codes of a Q5_* block: nibbles at `qs`, fifth bits in the little-endian u32
/// at `qh` (value `i`'s at bit `i`).
///
/// # Safety
/// NEON present; `qs` readable for 16 bytes, `qh` for 4.
#[inline(always)]
pub(super) unsafe fn five_bits(qs: *const u8, qh: *const u8) -> [uint8x16_t; 2] {
    let n = nibbles(qs);
    let h = fifth_bits(&FIFTH_SET, qh);
    [vorrq_u8(n[0], h[0]), vorrq_u8(n[1], h[1])]
}

/// Q5_0's codes minus its offset 16, as signed bytes: the nibble, less 16 where the fifth bit
/// is clear (one subtraction instead of an OR and a subtraction).
///
/// # Safety
/// As [`five_bits`].
#[inline(always)]
unsafe fn five_bits_minus_16(qs: *const u8, qh: *const u8) -> [int8x16_t; 2] {
    let n = nibbles(qs);
    let h = fifth_bits(&FIFTH_CLEAR, qh);
    core::array::from_fn(|k| vreinterpretq_s8_u8(vsubq_u8(n[k], h[k])))
}

/// `codes − offset` as signed bytes.
///
/// # Safety
/// NEON present.
#[inline(always)]
unsafe fn minus(c: [uint8x16_t; 2], offset: i8) -> [int8x16_t; 2] {
    c.map(|c| vsubq_s8(vreinterpretq_s8_u8(c), vdupq_n_s8(offset)))
}

/// `codes` (at most 31) as signed bytes.
///
/// # Safety
/// NEON present.
#[inline(always)]
unsafe fn signed(c: [uint8x16_t; 2]) -> [int8x16_t; 2] {
    c.map(|c| vreinterpretq_s8_u8(c))
}

const Q8_0_BYTES: usize = core::mem::size_of::<crate::q8_0::BlockQ8_0>();
const Q8_1_BYTES: usize = core::mem::size_of::<crate::q8_1::BlockQ8_1>();

pub(super) struct Q8_0;
impl Format for Q8_0 {
    const W_BYTES: usize = Q8_0_BYTES;
    const A_BYTES: usize = Q8_0_BYTES;
    const A_CODES: usize = 2;
    #[inline(always)]
    unsafe fn codes(blk: *const u8) -> [int8x16_t; 2] {
        let q = blk.add(2).cast::<i8>();
        [vld1q_s8(q), vld1q_s8(q.add(16))]
    }
    /// `sumf += sumi · (dx·dy)`.
    #[inline(always)]
    unsafe fn step(
        sumf: float32x4_t,
        sumi: float32x4_t,
        blocks: [*const u8; ROWS],
        act: *const u8,
    ) -> float32x4_t {
        let dxdy = vmulq_f32(halves(blocks, 0), vdupq_n_f32(half(act)));
        vaddq_f32(sumf, vmulq_f32(sumi, dxdy))
    }
}

pub(super) struct Q4_0;
impl Format for Q4_0 {
    const W_BYTES: usize = core::mem::size_of::<crate::q4_0::BlockQ4_0>();
    const A_BYTES: usize = Q8_0_BYTES;
    const A_CODES: usize = 2;
    #[inline(always)]
    unsafe fn codes(blk: *const u8) -> [int8x16_t; 2] {
        minus(nibbles(blk.add(2)), 8)
    }
    /// `sumf += sumi · dx · dy`.
    #[inline(always)]
    unsafe fn step(
        sumf: float32x4_t,
        sumi: float32x4_t,
        blocks: [*const u8; ROWS],
        act: *const u8,
    ) -> float32x4_t {
        let t = vmulq_f32(vmulq_f32(sumi, halves(blocks, 0)), vdupq_n_f32(half(act)));
        vaddq_f32(sumf, t)
    }
}

pub(super) struct Q5_0;
impl Format for Q5_0 {
    const W_BYTES: usize = core::mem::size_of::<crate::q5_0::BlockQ5_0>();
    const A_BYTES: usize = Q8_0_BYTES;
    const A_CODES: usize = 2;
    #[inline(always)]
    unsafe fn codes(blk: *const u8) -> [int8x16_t; 2] {
        five_bits_minus_16(blk.add(6), blk.add(2))
    }
    /// `sumf += (dx·dy) · sumi`.
    #[inline(always)]
    unsafe fn step(
        sumf: float32x4_t,
        sumi: float32x4_t,
        blocks: [*const u8; ROWS],
        act: *const u8,
    ) -> float32x4_t {
        let dxdy = vmulq_f32(halves(blocks, 0), vdupq_n_f32(half(act)));
        vaddq_f32(sumf, vmulq_f32(dxdy, sumi))
    }
}

/// Q4_1's / Q5_1's float step: `sumf += (dx·dy)·sumi + m·s`.
///
/// # Safety
/// NEON present; the weight blocks hold `d`, `m` at 0, 2 and the Q8_1 block `d`, `s` at 0, 2.
#[inline(always)]
unsafe fn step_with_min(
    sumf: float32x4_t,
    sumi: float32x4_t,
    blocks: [*const u8; ROWS],
    act: *const u8,
) -> float32x4_t {
    let dxdy = vmulq_f32(halves(blocks, 0), vdupq_n_f32(half(act)));
    let ms = vmulq_f32(halves(blocks, 2), vdupq_n_f32(half(act.add(2))));
    vaddq_f32(sumf, vaddq_f32(vmulq_f32(dxdy, sumi), ms))
}

pub(super) struct Q4_1;
impl Format for Q4_1 {
    const W_BYTES: usize = core::mem::size_of::<crate::q4_1::BlockQ4_1>();
    const A_BYTES: usize = Q8_1_BYTES;
    const A_CODES: usize = 4;
    #[inline(always)]
    unsafe fn codes(blk: *const u8) -> [int8x16_t; 2] {
        signed(nibbles(blk.add(4)))
    }
    #[inline(always)]
    unsafe fn step(
        sumf: float32x4_t,
        sumi: float32x4_t,
        blocks: [*const u8; ROWS],
        act: *const u8,
    ) -> float32x4_t {
        step_with_min(sumf, sumi, blocks, act)
    }
}

pub(super) struct Q5_1;
impl Format for Q5_1 {
    const W_BYTES: usize = core::mem::size_of::<crate::q5_1::BlockQ5_1>();
    const A_BYTES: usize = Q8_1_BYTES;
    const A_CODES: usize = 4;
    #[inline(always)]
    unsafe fn codes(blk: *const u8) -> [int8x16_t; 2] {
        signed(five_bits(blk.add(8), blk.add(4)))
    }
    #[inline(always)]
    unsafe fn step(
        sumf: float32x4_t,
        sumi: float32x4_t,
        blocks: [*const u8; ROWS],
        act: *const u8,
    ) -> float32x4_t {
        step_with_min(sumf, sumi, blocks, act)
    }
}

pub(super) struct Iq4Nl;
impl Format for Iq4Nl {
    const W_BYTES: usize = core::mem::size_of::<crate::iq4_nl::BlockIq4Nl>();
    const A_BYTES: usize = Q8_0_BYTES;
    const A_CODES: usize = 2;
    /// Each nibble looked up among the 16 levels (`tbl`).
    #[inline(always)]
    unsafe fn codes(blk: *const u8) -> [int8x16_t; 2] {
        let levels = vld1q_s8(crate::iq4_nl::LEVELS.as_ptr());
        nibbles(blk.add(2)).map(|n| vqtbl1q_s8(levels, n))
    }
    /// `sumf += (dx·dy) · sumi`, Q8_0's.
    #[inline(always)]
    unsafe fn step(
        sumf: float32x4_t,
        sumi: float32x4_t,
        blocks: [*const u8; ROWS],
        act: *const u8,
    ) -> float32x4_t {
        Q8_0::step(sumf, sumi, blocks, act)
    }
}

/// `R` (1..=[`ROWS`]) rows from `first` against `activation`: lane `r` of the result is row `r`
/// (the lanes past `R` are zero).
///
/// # Safety
/// `R` rows of `n_blocks` `F` blocks from `first` (`row_bytes` apart) and `n_blocks` activation
/// blocks readable; the CPU has NEON and what `S` needs.
#[inline(always)]
unsafe fn band<F: Format, S: Sum32, const R: usize>(
    sum: S,
    first: *const u8,
    row_bytes: usize,
    activation: *const u8,
    n_blocks: usize,
) -> [f32; ROWS] {
    // The lanes past `R` read row 0 again (for its scales only) and sum nothing.
    let rows: [*const u8; ROWS] = core::array::from_fn(|k| {
        let k = if k < R { k } else { 0 };
        // SAFETY: row `k < R` lies inside the readable rows.
        unsafe { first.add(k * row_bytes) }
    });
    let mut sumf = vdupq_n_f32(0.0);
    for b in 0..n_blocks {
        // SAFETY: block `b` of each row and activation block `b` are readable (see above).
        unsafe {
            let act = activation.add(b * F::A_BYTES);
            let codes = act.add(F::A_CODES).cast::<i8>();
            let av = [vld1q_s8(codes), vld1q_s8(codes.add(16))];
            let blocks = rows.map(|r| r.add(b * F::W_BYTES));
            let s: [int32x4_t; ROWS] = core::array::from_fn(|k| {
                if k < R {
                    sum.sum32(F::codes(blocks[k]), av)
                } else {
                    vdupq_n_s32(0)
                }
            });
            let sumi = vpaddq_s32(vpaddq_s32(s[0], s[1]), vpaddq_s32(s[2], s[3]));
            sumf = F::step(sumf, vcvtq_f32_s32(sumi), blocks, act);
        }
    }
    let mut lanes = [0.0f32; ROWS];
    // SAFETY: four floats into `lanes`.
    unsafe { vst1q_f32(lanes.as_mut_ptr(), sumf) };
    lanes
}

/// Every row of `weights` against `activation`: [`ROWS`] a pass, the rest one at a time.
///
/// # Safety
/// Buffers checked against the `GemvFn` contract (`check_blocks`): `out.len()` rows of
/// `row_bytes` (whole `F` blocks) in `weights`, one activation block per weight block of a row;
/// the CPU has NEON and what `S` needs.
#[inline(always)]
unsafe fn gemv_rows<F: Format, S: Sum32>(
    sum: S,
    weights: &[u8],
    row_bytes: usize,
    activation: &[u8],
    out: &mut [f32],
) {
    let n_blocks = row_bytes / F::W_BYTES;
    let (w, a) = (weights.as_ptr(), activation.as_ptr());
    let mut r = 0;
    while r + ROWS <= out.len() {
        // SAFETY: rows r..r + ROWS lie inside `weights` (the contract).
        let v = unsafe { band::<F, S, ROWS>(sum, w.add(r * row_bytes), row_bytes, a, n_blocks) };
        out[r..r + ROWS].copy_from_slice(&v);
        r += ROWS;
    }
    while r < out.len() {
        // SAFETY: as above, one row.
        out[r] = unsafe { band::<F, S, 1>(sum, w.add(r * row_bytes), row_bytes, a, n_blocks) }[0];
        r += 1;
    }
}

/// A plain NEON kernel and its SDOT twin for one format.
macro_rules! kernels {
    ($($format:ident: $neon:ident, $dotprod:ident;)*) => {$(
        /// # Safety
        /// NEON present; buffers checked against the `GemvFn` contract (`check_blocks`).
        #[target_feature(enable = "neon")]
        pub(super) unsafe fn $neon(
            weights: &[u8],
            row_bytes: usize,
            activation: &[u8],
            out: &mut [f32],
        ) {
            // SAFETY: the caller's contract; NEON was checked.
            unsafe { gemv_rows::<$format, Neon>(Neon, weights, row_bytes, activation, out) }
        }

        /// # Safety
        /// As the plain kernel, plus the dot-product extension.
        #[target_feature(enable = "neon,dotprod")]
        pub(super) unsafe fn $dotprod(
            weights: &[u8],
            row_bytes: usize,
            activation: &[u8],
            out: &mut [f32],
        ) {
            // SAFETY: the caller's contract; NEON and the dot-product extension were checked.
            unsafe { gemv_rows::<$format, Dotprod>(Dotprod, weights, row_bytes, activation, out) }
        }
    )*};
}

kernels! {
    Q8_0: gemv_q8_0, gemv_q8_0_dotprod;
    Q4_0: gemv_q4_0, gemv_q4_0_dotprod;
    Q4_1: gemv_q4_1, gemv_q4_1_dotprod;
    Q5_0: gemv_q5_0, gemv_q5_0_dotprod;
    Q5_1: gemv_q5_1, gemv_q5_1_dotprod;
    Iq4Nl: gemv_iq4_nl, gemv_iq4_nl_dotprod;
}
