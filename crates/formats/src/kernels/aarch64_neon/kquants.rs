//! The K-quants on NEON: Q2_K, Q3_K, Q4_K, Q5_K, Q6_K × Q8_K, four rows a pass (the rows past
//! the last band of four one at a time) so each load of activation codes serves every row.
//!
//! Each group of 16 or 32 codes widens to signed bytes in value order (bit fields of `qs` /
//! `ql`, plus the high bits of `hmask` / `qh` where the format has them, minus its offset) and
//! meets the activation's codes. On plain NEON the widening products of a group are summed by
//! position within 8 values and scaled into eight int32 lanes (lane = value index mod 8), which
//! are exactly the scalar `dot`'s integer lanes, and the float arithmetic after them is the
//! scalar's in the same order, so the result is bit-identical to the scalar twin. The `dotprod`
//! kernels (SDOT, one row at a time) are in `kquants_sdot.rs`; these drive them.
//! The minimum terms (Q2_K, Q4_K, Q5_K) come from the activation's stored group sums, as the
//! scalar does.

use core::arch::aarch64::*;

use super::f16::load1 as half;
use super::kquants_sdot;
use crate::kquant_common::scale_min;

const QK_K: usize = crate::q8_k::QK_K;
/// Where a Q8_K block's codes and group sums start.
const A_CODES: usize = 4;
const A_SUMS: usize = A_CODES + QK_K;
const A_BYTES: usize = core::mem::size_of::<crate::q8_k::BlockQ8_K>();

/// Eight int32 lanes of a block's scaled integer sums.
type Lanes = [int32x4_t; 2];

/// How a tier adds `scale · Σ w·a` of a group of signed bytes into a block's lanes.
trait Groups: Copy {
    /// One group of 16 values.
    ///
    /// # Safety
    /// The CPU has what the implementation's instructions need.
    unsafe fn group16(self, acc: &mut Lanes, w: int8x16_t, a: int8x16_t, scale: i32);
    /// One group of 32 values.
    ///
    /// # Safety
    /// As [`Groups::group16`].
    unsafe fn group32(self, acc: &mut Lanes, w: [int8x16_t; 2], a: [int8x16_t; 2], scale: i32);
}

/// Plain NEON: int16 products summed by position (|Σ| ≤ 4·32·128 for the codes here), then
/// scaled into the lane of their position mod 8.
#[derive(Clone, Copy)]
struct Neon;

/// `acc += scale · p`, lane `i` of `p` into lane `i` of the eight.
///
/// # Safety
/// NEON present.
#[inline(always)]
unsafe fn scale_into(acc: &mut Lanes, p: int16x8_t, scale: i32) {
    let s = scale as i16;
    acc[0] = vmlal_n_s16(acc[0], vget_low_s16(p), s);
    acc[1] = vmlal_high_n_s16(acc[1], p, s);
}

impl Groups for Neon {
    #[inline(always)]
    unsafe fn group16(self, acc: &mut Lanes, w: int8x16_t, a: int8x16_t, scale: i32) {
        let p = vmlal_high_s8(vmull_s8(vget_low_s8(w), vget_low_s8(a)), w, a);
        scale_into(acc, p, scale);
    }
    #[inline(always)]
    unsafe fn group32(self, acc: &mut Lanes, w: [int8x16_t; 2], a: [int8x16_t; 2], scale: i32) {
        let p = vmlal_high_s8(vmull_s8(vget_low_s8(w[0]), vget_low_s8(a[0])), w[0], a[0]);
        let p = vmlal_s8(p, vget_low_s8(w[1]), vget_low_s8(a[1]));
        let p = vmlal_high_s8(p, w[1], a[1]);
        scale_into(acc, p, scale);
    }
}

/// The Q8_K block's f32 scale.
///
/// # Safety
/// `y` readable for four bytes.
#[inline(always)]
unsafe fn act_scale(y: *const u8) -> f32 {
    f32::from_le_bytes(y.cast::<[u8; 4]>().read_unaligned())
}

/// 16 activation codes at value `v` of the Q8_K block `y`.
///
/// # Safety
/// NEON present; `v + 16 ≤ 256`.
#[inline(always)]
unsafe fn act16(y: *const u8, v: usize) -> int8x16_t {
    vld1q_s8(y.add(A_CODES + v).cast())
}

/// `lanes += d · lanes_i` (as the scalar `*s += d * l as f32`, lane by lane).
///
/// # Safety
/// NEON present.
#[inline(always)]
unsafe fn scale_lanes(lanes: &mut [float32x4_t; 2], acc: Lanes, d: f32) {
    let d = vdupq_n_f32(d);
    for (l, a) in lanes.iter_mut().zip(acc) {
        *l = vaddq_f32(*l, vmulq_f32(d, vcvtq_f32_s32(a)));
    }
}

/// The eight float lanes in order.
///
/// # Safety
/// NEON present.
#[inline(always)]
unsafe fn to_array(lanes: [float32x4_t; 2]) -> [f32; 8] {
    let mut out = [0.0f32; 8];
    vst1q_f32(out.as_mut_ptr(), lanes[0]);
    vst1q_f32(out.as_mut_ptr().add(4), lanes[1]);
    out
}

/// Σ_j bsums[j] · mins[j / 2] over a Q8_K block's 16 group sums (Q4_K / Q5_K minimum term).
///
/// # Safety
/// NEON present; `y` readable for one Q8_K block.
#[inline(always)]
unsafe fn sums_times_pair_mins(y: *const u8, mins: [u8; 8]) -> i32 {
    let b = y.add(A_SUMS).cast::<i16>();
    // Adjacent pairs share a minimum (|pair| ≤ 2·16·128, no overflow).
    let pairs = vpaddq_s16(vld1q_s16(b), vld1q_s16(b.add(8)));
    let m = vreinterpretq_s16_u16(vmovl_u8(vld1_u8(mins.as_ptr())));
    let p = vmlal_high_s16(vmull_s16(vget_low_s16(pairs), vget_low_s16(m)), pairs, m);
    vaddvq_s32(p)
}

/// The first `R` rows from `first` (`row_bytes` apart), block `b` of each (`block_bytes`).
///
/// # Safety
/// The rows and their block `b` lie inside one allocation.
#[inline(always)]
unsafe fn blocks<const R: usize>(
    first: *const u8,
    row_bytes: usize,
    b: usize,
    block_bytes: usize,
) -> [*const u8; R] {
    // SAFETY: the caller's contract.
    core::array::from_fn(|r| unsafe { first.add(r * row_bytes + b * block_bytes) })
}

/// Q4_K and Q5_K bands (`FIFTH`: with Q5_K's `qh`): per row, `d·y.d` times the lanes, minus
/// `dmin·y.d·Σ bsums·min`, the lanes added to the sum at the end (the scalar `dot_scale_min`).
///
/// # Safety
/// NEON present (and what `G` needs); `R` rows of `n` blocks from `first`, `row_bytes` apart,
/// and `n` Q8_K blocks at `act` readable.
#[inline(always)]
unsafe fn band_scale_min<G: Groups, const FIFTH: bool, const R: usize>(
    g: G,
    first: *const u8,
    row_bytes: usize,
    act: *const u8,
    n: usize,
) -> [f32; R] {
    let (block_bytes, qs_at) = if FIFTH {
        (core::mem::size_of::<crate::q5_k::BlockQ5_K>(), 48)
    } else {
        (core::mem::size_of::<crate::q4_k::BlockQ4_K>(), 16)
    };
    let mut lanes = [[vdupq_n_f32(0.0); 2]; R];
    let mut sumf = [0.0f32; R];
    let low = vdupq_n_u8(0x0f);
    let sixteen = vdupq_n_u8(0x10);
    for b in 0..n {
        let x: [*const u8; R] = blocks(first, row_bytes, b, block_bytes);
        let y = act.add(b * A_BYTES);
        let mut scales = [[0u8; 8]; R];
        let mut mins = [[0u8; 8]; R];
        for r in 0..R {
            let packed = x[r].add(4).cast::<[u8; 12]>().read_unaligned();
            for j in 0..8 {
                (scales[r][j], mins[r][j]) = scale_min(&packed, j);
            }
        }
        let mut acc = [[vdupq_n_s32(0); 2]; R];
        for p in 0..4 {
            for k in 0..2 {
                let sub = 2 * p + k;
                let a = [act16(y, 32 * sub), act16(y, 32 * sub + 16)];
                for r in 0..R {
                    let qs = x[r].add(qs_at + 32 * p);
                    let q = [vld1q_u8(qs), vld1q_u8(qs.add(16))];
                    let mut w = if k == 0 {
                        q.map(|q| vandq_u8(q, low))
                    } else {
                        q.map(|q| vshrq_n_u8::<4>(q))
                    };
                    if FIFTH {
                        let bit = vdupq_n_u8(1 << sub);
                        let qh = [vld1q_u8(x[r].add(16)), vld1q_u8(x[r].add(32))];
                        for (w, h) in w.iter_mut().zip(qh) {
                            *w = vorrq_u8(*w, vandq_u8(vtstq_u8(h, bit), sixteen));
                        }
                    }
                    let w = w.map(|w| vreinterpretq_s8_u8(w));
                    g.group32(&mut acc[r], w, a, i32::from(scales[r][sub]));
                }
            }
        }
        let yd = act_scale(y);
        for r in 0..R {
            scale_lanes(&mut lanes[r], acc[r], half(x[r]) * yd);
            let dm = half(x[r].add(2)) * yd;
            sumf[r] -= dm * sums_times_pair_mins(y, mins[r]) as f32;
        }
    }
    core::array::from_fn(|r| {
        let mut s = sumf[r];
        // SAFETY: NEON present (the caller's contract).
        for l in unsafe { to_array(lanes[r]) } {
            s += l;
        }
        s
    })
}

/// [`band_scale_min`] for Q4_K.
///
/// # Safety
/// As [`band_scale_min`].
#[inline(always)]
unsafe fn band_q4_k<G: Groups, const R: usize>(
    g: G,
    first: *const u8,
    row_bytes: usize,
    act: *const u8,
    n: usize,
) -> [f32; R] {
    band_scale_min::<G, false, R>(g, first, row_bytes, act, n)
}

/// [`band_scale_min`] for Q5_K.
///
/// # Safety
/// As [`band_scale_min`].
#[inline(always)]
unsafe fn band_q5_k<G: Groups, const R: usize>(
    g: G,
    first: *const u8,
    row_bytes: usize,
    act: *const u8,
    n: usize,
) -> [f32; R] {
    band_scale_min::<G, true, R>(g, first, row_bytes, act, n)
}

/// Q6_K bands: per row, `d·y.d` times the lanes of signed codes under signed 8-bit scales per
/// 16 values, the lanes summed at the end (the scalar `q6_k::dot`).
///
/// # Safety
/// As [`band_scale_min`].
#[inline(always)]
unsafe fn band_q6_k<G: Groups, const R: usize>(
    g: G,
    first: *const u8,
    row_bytes: usize,
    act: *const u8,
    n: usize,
) -> [f32; R] {
    let block_bytes = core::mem::size_of::<crate::q6_k::BlockQ6_K>();
    let mut lanes = [[vdupq_n_f32(0.0); 2]; R];
    let low = vdupq_n_u8(0x0f);
    for b in 0..n {
        let x: [*const u8; R] = blocks(first, row_bytes, b, block_bytes);
        let y = act.add(b * A_BYTES);
        let scales: [[i8; 16]; R] = x.map(|x| x.add(192).cast::<[i8; 16]>().read_unaligned());
        let mut acc = [[vdupq_n_s32(0); 2]; R];
        for h in 0..2 {
            for l0 in [0, 16] {
                let a: [int8x16_t; 4] = core::array::from_fn(|k| act16(y, 128 * h + 32 * k + l0));
                for r in 0..R {
                    let ql = x[r].add(64 * h + l0);
                    let qa = vld1q_u8(ql);
                    let qb = vld1q_u8(ql.add(32));
                    let hi = vld1q_u8(x[r].add(128 + 32 * h + l0));
                    let w = [
                        vorrq_u8(
                            vandq_u8(qa, low),
                            vshlq_n_u8::<4>(vandq_u8(hi, vdupq_n_u8(3))),
                        ),
                        vorrq_u8(
                            vandq_u8(qb, low),
                            vshlq_n_u8::<2>(vandq_u8(hi, vdupq_n_u8(12))),
                        ),
                        vorrq_u8(vshrq_n_u8::<4>(qa), vandq_u8(hi, vdupq_n_u8(0x30))),
                        vorrq_u8(
                            vshrq_n_u8::<4>(qb),
                            vshrq_n_u8::<2>(vandq_u8(hi, vdupq_n_u8(0xc0))),
                        ),
                    ];
                    for (k, w) in w.into_iter().enumerate() {
                        let v = 128 * h + 32 * k + l0;
                        let w = vsubq_s8(vreinterpretq_s8_u8(w), vdupq_n_s8(32));
                        g.group16(&mut acc[r], w, a[k], i32::from(scales[r][v / 16]));
                    }
                }
            }
        }
        let yd = act_scale(y);
        for r in 0..R {
            scale_lanes(&mut lanes[r], acc[r], half(x[r].add(208)) * yd);
        }
    }
    // SAFETY: NEON present (the caller's contract).
    core::array::from_fn(|r| unsafe { to_array(lanes[r]) }.iter().sum())
}

/// Q3_K's sixteen signed scales (level − 32) from its 12 packed bytes (as
/// `BlockQ3_K::signed_scales`).
#[inline(always)]
fn q3_k_scales(packed: &[u8; 12]) -> [i8; 16] {
    core::array::from_fn(|j| {
        let low = if j < 8 {
            packed[j] & 0xf
        } else {
            packed[j - 8] >> 4
        };
        let high = (packed[8 + j % 4] >> (2 * (j / 4))) & 3;
        (low | (high << 4)) as i8 - 32
    })
}

/// Q3_K bands: per row, `d·y.d` times the lanes of codes `crumb + 4·high − 4` under signed 6-bit
/// scales per 16 values, the lanes summed at the end (the scalar `q3_k::dot`).
///
/// # Safety
/// As [`band_scale_min`].
#[inline(always)]
unsafe fn band_q3_k<G: Groups, const R: usize>(
    g: G,
    first: *const u8,
    row_bytes: usize,
    act: *const u8,
    n: usize,
) -> [f32; R] {
    let block_bytes = core::mem::size_of::<crate::q3_k::BlockQ3_K>();
    let mut lanes = [[vdupq_n_f32(0.0); 2]; R];
    let three = vdupq_n_u8(3);
    let four = vdupq_n_u8(4);
    for b in 0..n {
        let x: [*const u8; R] = blocks(first, row_bytes, b, block_bytes);
        let y = act.add(b * A_BYTES);
        let scales: [[i8; 16]; R] =
            x.map(|x| q3_k_scales(&x.add(96).cast::<[u8; 12]>().read_unaligned()));
        let mut acc = [[vdupq_n_s32(0); 2]; R];
        for h in 0..2 {
            for l0 in [0usize, 16] {
                let a: [int8x16_t; 4] = core::array::from_fn(|k| act16(y, 128 * h + 32 * k + l0));
                for r in 0..R {
                    let q = vld1q_u8(x[r].add(32 + 32 * h + l0));
                    let hmask = vld1q_u8(x[r].add(l0));
                    for (k, &a) in a.iter().enumerate() {
                        let v = 128 * h + 32 * k + l0;
                        let crumb = vandq_u8(vshlq_u8(q, vdupq_n_s8(-2 * k as i8)), three);
                        let high = vandq_u8(vtstq_u8(hmask, vdupq_n_u8(1 << (4 * h + k))), four);
                        let w = vsubq_s8(vreinterpretq_s8_u8(vorrq_u8(crumb, high)), vdupq_n_s8(4));
                        g.group16(&mut acc[r], w, a, i32::from(scales[r][v / 16]));
                    }
                }
            }
        }
        let yd = act_scale(y);
        for r in 0..R {
            scale_lanes(&mut lanes[r], acc[r], half(x[r].add(108)) * yd);
        }
    }
    // SAFETY: NEON present (the caller's contract).
    core::array::from_fn(|r| unsafe { to_array(lanes[r]) }.iter().sum())
}

/// Q2_K bands: per row and block `y.d·d · Σ scale·Σ code·q8 − y.d·dmin · Σ bsums·min` (the
/// scalar `q2_k::dot`, whose integer sums are exact in any order).
///
/// # Safety
/// As [`band_scale_min`].
#[inline(always)]
unsafe fn band_q2_k<G: Groups, const R: usize>(
    g: G,
    first: *const u8,
    row_bytes: usize,
    act: *const u8,
    n: usize,
) -> [f32; R] {
    let block_bytes = core::mem::size_of::<crate::q2_k::BlockQ2_K>();
    let mut sumf = [0.0f32; R];
    let three = vdupq_n_u8(3);
    for b in 0..n {
        let x: [*const u8; R] = blocks(first, row_bytes, b, block_bytes);
        let y = act.add(b * A_BYTES);
        let bs = y.add(A_SUMS).cast::<i16>();
        let (b0, b1) = (vld1q_s16(bs), vld1q_s16(bs.add(8)));
        let scales: [[u8; 16]; R] = x.map(|x| x.cast::<[u8; 16]>().read_unaligned());
        let mut acc = [[vdupq_n_s32(0); 2]; R];
        for h in 0..2 {
            for l0 in [0usize, 16] {
                let a: [int8x16_t; 4] = core::array::from_fn(|k| act16(y, 128 * h + 32 * k + l0));
                for r in 0..R {
                    let q = vld1q_u8(x[r].add(16 + 32 * h + l0));
                    for (k, &a) in a.iter().enumerate() {
                        let v = 128 * h + 32 * k + l0;
                        let w = vandq_u8(vshlq_u8(q, vdupq_n_s8(-2 * k as i8)), three);
                        let scale = i32::from(scales[r][v / 16] & 0xf);
                        g.group16(&mut acc[r], vreinterpretq_s8_u8(w), a, scale);
                    }
                }
            }
        }
        let yd = act_scale(y);
        for r in 0..R {
            // Σ bsums · (scale >> 4).
            let mins = vshrq_n_u8::<4>(vld1q_u8(x[r]));
            let m0 = vreinterpretq_s16_u16(vmovl_u8(vget_low_u8(mins)));
            let m1 = vreinterpretq_s16_u16(vmovl_high_u8(mins));
            let p = vmlal_high_s16(vmull_s16(vget_low_s16(b0), vget_low_s16(m0)), b0, m0);
            let p = vmlal_s16(p, vget_low_s16(b1), vget_low_s16(m1));
            let summs = vaddvq_s32(vmlal_high_s16(p, b1, m1));
            let isum = vaddvq_s32(vaddq_s32(acc[r][0], acc[r][1]));
            let dall = yd * half(x[r].add(80));
            let dmin = yd * half(x[r].add(82));
            sumf[r] += dall * isum as f32 - dmin * summs as f32;
        }
    }
    sumf
}

/// Every row of `weights` against `activation`: `four` computes four rows from a first row,
/// `one` a single row (each given that row and the blocks per row).
///
/// # Safety
/// Buffers checked against the `GemvFn` contract (`check_lengths`) for blocks of `block_bytes`;
/// `four` and `one` read only the rows they are given and the activation.
#[inline(always)]
unsafe fn drive(
    weights: &[u8],
    row_bytes: usize,
    out: &mut [f32],
    block_bytes: usize,
    four: impl Fn(*const u8, usize) -> [f32; 4],
    one: impl Fn(*const u8, usize) -> [f32; 1],
) {
    let n = row_bytes / block_bytes;
    let w = weights.as_ptr();
    let mut r = 0;
    while r + 4 <= out.len() {
        // SAFETY: rows r..r + 4 lie inside `weights` (the contract).
        out[r..r + 4].copy_from_slice(&four(unsafe { w.add(r * row_bytes) }, n));
        r += 4;
    }
    while r < out.len() {
        // SAFETY: as above, one row.
        out[r] = one(unsafe { w.add(r * row_bytes) }, n)[0];
        r += 1;
    }
}

/// A plain NEON kernel around `$band::<Neon, R>` and its SDOT twin around `kquants_sdot::$rows`.
macro_rules! kernels {
    ($($block:ty: $neon:ident, $dotprod:ident, $band:ident, $rows:ident;)*) => {$(
        /// # Safety
        /// NEON present; buffers checked against the `GemvFn` contract (`check_lengths`).
        #[target_feature(enable = "neon")]
        pub(super) unsafe fn $neon(
            weights: &[u8],
            row_bytes: usize,
            activation: &[u8],
            out: &mut [f32],
        ) {
            let a = activation.as_ptr();
            // SAFETY: the caller's contract; NEON was checked.
            unsafe {
                drive(
                    weights,
                    row_bytes,
                    out,
                    core::mem::size_of::<$block>(),
                    |w, n| $band::<Neon, 4>(Neon, w, row_bytes, a, n),
                    |w, n| $band::<Neon, 1>(Neon, w, row_bytes, a, n),
                )
            }
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
            let a = activation.as_ptr();
            // SAFETY: the caller's contract; NEON and the dot-product extension were checked.
            unsafe {
                drive(
                    weights,
                    row_bytes,
                    out,
                    core::mem::size_of::<$block>(),
                    |w, n| kquants_sdot::$rows::<4>(w, row_bytes, a, n),
                    |w, n| kquants_sdot::$rows::<1>(w, row_bytes, a, n),
                )
            }
        }
    )*};
}

kernels! {
    crate::q2_k::BlockQ2_K: gemv_q2_k, gemv_q2_k_dotprod, band_q2_k, rows_q2_k;
    crate::q3_k::BlockQ3_K: gemv_q3_k, gemv_q3_k_dotprod, band_q3_k, rows_q3_k;
    crate::q4_k::BlockQ4_K: gemv_q4_k, gemv_q4_k_dotprod, band_q4_k, rows_q4_k;
    crate::q5_k::BlockQ5_K: gemv_q5_k, gemv_q5_k_dotprod, band_q5_k, rows_q5_k;
    crate::q6_k::BlockQ6_K: gemv_q6_k, gemv_q6_k_dotprod, band_q6_k, rows_q6_k;
}
