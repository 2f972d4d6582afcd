//! The K-quants × Q8_K on the dot-product extension (the `dotprod` tier's kernels; the plain
//! NEON ones are in `kquants.rs`), one row at a time.
//!
//! Each group of 16 values (a scale's span; the 32-value sub-blocks of Q4_K / Q5_K are two) goes
//! through one SDOT into its own accumulator; pairwise adds bring four groups' accumulators into
//! one vector of four group sums, which one multiply-add scales by a vector of four widened
//! scales (no per-group broadcast of a scale, no per-group reduction). A block's scaled sums
//! stay in four exact int32 lanes and meet the block's float scale once. Q6_K's codes are taken
//! unsigned (`ql | qh << 4`), Q3_K's too (`crumb | high << 2`): the offset's share (−32, −4),
//! offset · Σ scale · (group sum of activations), comes from the activation's stored `bsums`,
//! as the minimum terms of Q2_K / Q4_K / Q5_K do. Integer totals equal the scalar's; Q2_K's
//! float steps are the scalar's too (bit-identical), the others add the same integers in
//! another float order than the scalar's eight lanes (within the last bits, as the tests bound).
//!
//! Rows run one after another, not in bands: a row's eight or sixteen group accumulators, its
//! scales and the activation vectors fill the 32 vector registers, so a band's extra rows would
//! spill; the activation row is re-read from L1 instead.

use core::arch::aarch64::*;

use super::f16::load1 as half;
use super::lowbit_util::sdot;

const QK_K: usize = crate::q8_k::QK_K;
/// Where a Q8_K block's codes and group sums start.
const A_CODES: usize = 4;
const A_SUMS: usize = A_CODES + QK_K;
const A_BYTES: usize = core::mem::size_of::<crate::q8_k::BlockQ8_K>();

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

/// The three little-endian words of 12 packed scale bytes.
#[inline(always)]
fn words(bytes: &[u8; 12]) -> [u32; 3] {
    core::array::from_fn(|i| {
        u32::from_le_bytes([
            bytes[4 * i],
            bytes[4 * i + 1],
            bytes[4 * i + 2],
            bytes[4 * i + 3],
        ])
    })
}

/// Eight unsigned bytes (`lo` then `hi`, little-endian) widened to two int32 vectors.
///
/// # Safety
/// NEON present.
#[inline(always)]
unsafe fn widen8(lo: u32, hi: u32) -> [int32x4_t; 2] {
    let b = vmovl_u8(vcreate_u8(u64::from(lo) | (u64::from(hi) << 32)));
    [
        vreinterpretq_s32_u32(vmovl_u16(vget_low_u16(b))),
        vreinterpretq_s32_u32(vmovl_high_u16(b)),
    ]
}

/// Sixteen signed bytes widened to four int32 vectors, in order.
///
/// # Safety
/// NEON present.
#[inline(always)]
unsafe fn widen16(s: int8x16_t) -> [int32x4_t; 4] {
    let lo = vmovl_s8(vget_low_s8(s));
    let hi = vmovl_high_s8(s);
    [
        vmovl_s16(vget_low_s16(lo)),
        vmovl_high_s16(lo),
        vmovl_s16(vget_low_s16(hi)),
        vmovl_high_s16(hi),
    ]
}

/// `[Σ a, Σ b, Σ c, Σ d]`.
///
/// # Safety
/// NEON present.
#[inline(always)]
unsafe fn sums4(a: int32x4_t, b: int32x4_t, c: int32x4_t, d: int32x4_t) -> int32x4_t {
    vpaddq_s32(vpaddq_s32(a, b), vpaddq_s32(c, d))
}

/// Σ_g scale_g · bsums_g over the block's sixteen 16-value groups (`scales` as int16), as four
/// int32 lanes of partial sums.
///
/// # Safety
/// NEON present; `y` readable for one Q8_K block.
#[inline(always)]
unsafe fn sums_times(y: *const u8, scales: [int16x8_t; 2]) -> int32x4_t {
    let b = y.add(A_SUMS).cast::<i16>();
    let (b0, b1) = (vld1q_s16(b), vld1q_s16(b.add(8)));
    let p = vmull_s16(vget_low_s16(b0), vget_low_s16(scales[0]));
    let p = vmlal_high_s16(p, b0, scales[0]);
    let p = vmlal_s16(p, vget_low_s16(b1), vget_low_s16(scales[1]));
    vmlal_high_s16(p, b1, scales[1])
}

/// Σ scale · Σ w·a over one half (128 values, `h`) of a block of 16-value groups: `w[l][k]` are
/// the codes of values `128h + 32k + 16l ..+16` (group `8h + 2k + l`), `sc` the half's eight
/// scales as two vectors.
///
/// # Safety
/// NEON and the dot-product extension present; `y` readable for one Q8_K block.
#[inline(always)]
unsafe fn half16(
    acc: int32x4_t,
    y: *const u8,
    h: usize,
    w: [[uint8x16_t; 4]; 2],
    sc: [int32x4_t; 2],
) -> int32x4_t {
    // Plain loops, not closures: a closure would not inherit the caller's target features,
    // and `sdot` would become a call.
    let z = vdupq_n_s32(0);
    let mut s = [[z; 2]; 4];
    for k in 0..4 {
        for l in 0..2 {
            let a = act16(y, 128 * h + 32 * k + 16 * l);
            s[k][l] = sdot(z, vreinterpretq_s8_u8(w[l][k]), a);
        }
    }
    let acc = vmlaq_s32(acc, sums4(s[0][0], s[0][1], s[1][0], s[1][1]), sc[0]);
    vmlaq_s32(acc, sums4(s[2][0], s[2][1], s[3][0], s[3][1]), sc[1])
}

/// The four 2-bit fields of `q` (value order: bits 0–1, 2–3, 4–5, 6–7).
///
/// # Safety
/// NEON present.
#[inline(always)]
unsafe fn crumbs(q: uint8x16_t) -> [uint8x16_t; 4] {
    let three = vdupq_n_u8(3);
    [
        vandq_u8(q, three),
        vandq_u8(vshrq_n_u8::<2>(q), three),
        vandq_u8(vshrq_n_u8::<4>(q), three),
        vshrq_n_u8::<6>(q),
    ]
}

/// Q4_K (`FIFTH`: Q5_K, with its `qh`) rows: per block `d·y.d · Σ scale·Σ w·a − dmin·y.d ·
/// Σ bsums·min` (the scalar `dot_scale_min`'s terms).
///
/// # Safety
/// NEON and the dot-product extension present; `R` rows of `n` blocks from `first`,
/// `row_bytes` apart, and `n` Q8_K blocks at `act` readable.
#[inline(always)]
unsafe fn rows_scale_min<const FIFTH: bool, const R: usize>(
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
    let low = vdupq_n_u8(0x0f);
    let one = vdupq_n_u8(1);
    let two = vdupq_n_u8(2);
    let mut out = [0.0f32; R];
    for (r, out) in out.iter_mut().enumerate() {
        let row = first.add(r * row_bytes);
        let mut lanes = vdupq_n_f32(0.0);
        let mut min_lanes = vdupq_n_f32(0.0);
        for b in 0..n {
            let x = row.add(b * block_bytes);
            let y = act.add(b * A_BYTES);
            // The eight 6-bit scales and minimums four at a time (`scale_min`'s fields).
            let [u0, u1, u2] = words(&x.add(4).cast::<[u8; 12]>().read_unaligned());
            let (m6, m4, m2) = (0x3f3f_3f3f_u32, 0x0f0f_0f0f_u32, 0x0303_0303_u32);
            let sc = widen8(u0 & m6, (u2 & m4) | (((u0 >> 6) & m2) << 4));
            let mins =
                u64::from(u1 & m6) | (u64::from(((u2 >> 4) & m4) | (((u1 >> 6) & m2) << 4)) << 32);
            let mut qh = if FIFTH {
                [vld1q_u8(x.add(16)), vld1q_u8(x.add(32))]
            } else {
                [low; 2]
            };
            let mut acc = vdupq_n_s32(0);
            for (half4, &sc) in sc.iter().enumerate() {
                let z = vdupq_n_s32(0);
                let mut s = [z; 4];
                for pp in 0..2 {
                    let p = 2 * half4 + pp;
                    let qs = x.add(qs_at + 32 * p);
                    let q = [vld1q_u8(qs), vld1q_u8(qs.add(16))];
                    let (lo, hi): ([uint8x16_t; 2], [uint8x16_t; 2]) = if FIFTH {
                        // Bit 2p of qh above the low nibble, bit 2p + 1 above the high one.
                        let mut lo = q;
                        let mut hi = q;
                        for i in 0..2 {
                            lo[i] = vsliq_n_u8::<4>(q[i], vandq_u8(qh[i], one));
                            hi[i] = vsriq_n_u8::<4>(vshlq_n_u8::<3>(vandq_u8(qh[i], two)), q[i]);
                            qh[i] = vshrq_n_u8::<2>(qh[i]);
                        }
                        (lo, hi)
                    } else {
                        (
                            [vandq_u8(q[0], low), vandq_u8(q[1], low)],
                            [vshrq_n_u8::<4>(q[0]), vshrq_n_u8::<4>(q[1])],
                        )
                    };
                    let v = 64 * p;
                    let s_lo = sdot(z, vreinterpretq_s8_u8(lo[0]), act16(y, v));
                    s[2 * pp] = sdot(s_lo, vreinterpretq_s8_u8(lo[1]), act16(y, v + 16));
                    let s_hi = sdot(z, vreinterpretq_s8_u8(hi[0]), act16(y, v + 32));
                    s[2 * pp + 1] = sdot(s_hi, vreinterpretq_s8_u8(hi[1]), act16(y, v + 48));
                }
                acc = vmlaq_s32(acc, sums4(s[0], s[1], s[2], s[3]), sc);
            }
            let yd = act_scale(y);
            lanes = vfmaq_n_f32(lanes, vcvtq_f32_s32(acc), half(x) * yd);
            // Σ bsums · min: adjacent group sums share a minimum (|pair| ≤ 2·16·128).
            let bs = y.add(A_SUMS).cast::<i16>();
            let pairs = vpaddq_s16(vld1q_s16(bs), vld1q_s16(bs.add(8)));
            let m = vreinterpretq_s16_u16(vmovl_u8(vcreate_u8(mins)));
            let p = vmlal_high_s16(vmull_s16(vget_low_s16(pairs), vget_low_s16(m)), pairs, m);
            min_lanes = vfmaq_n_f32(min_lanes, vcvtq_f32_s32(p), half(x.add(2)) * yd);
        }
        *out = vaddvq_f32(lanes) - vaddvq_f32(min_lanes);
    }
    out
}

/// [`rows_scale_min`] for Q4_K.
///
/// # Safety
/// As [`rows_scale_min`].
#[inline(always)]
pub(super) unsafe fn rows_q4_k<const R: usize>(
    first: *const u8,
    row_bytes: usize,
    act: *const u8,
    n: usize,
) -> [f32; R] {
    rows_scale_min::<false, R>(first, row_bytes, act, n)
}

/// [`rows_scale_min`] for Q5_K.
///
/// # Safety
/// As [`rows_scale_min`].
#[inline(always)]
pub(super) unsafe fn rows_q5_k<const R: usize>(
    first: *const u8,
    row_bytes: usize,
    act: *const u8,
    n: usize,
) -> [f32; R] {
    rows_scale_min::<true, R>(first, row_bytes, act, n)
}

/// Q6_K rows: codes `ql | qh << 4` unsigned, per block `d·y.d · (Σ scale·Σ q·a − 32·Σ
/// scale·bsums)` (the scalar `q6_k::dot`'s integers, codes there `q − 32`).
///
/// # Safety
/// As [`rows_scale_min`].
#[inline(always)]
pub(super) unsafe fn rows_q6_k<const R: usize>(
    first: *const u8,
    row_bytes: usize,
    act: *const u8,
    n: usize,
) -> [f32; R] {
    let block_bytes = core::mem::size_of::<crate::q6_k::BlockQ6_K>();
    let three = vdupq_n_u8(3);
    let top = vdupq_n_u8(0x30);
    let mut out = [0.0f32; R];
    for (r, out) in out.iter_mut().enumerate() {
        let row = first.add(r * row_bytes);
        let mut lanes = vdupq_n_f32(0.0);
        for b in 0..n {
            let x = row.add(b * block_bytes);
            let y = act.add(b * A_BYTES);
            let scales = vld1q_s8(x.add(192).cast());
            let sc = widen16(scales);
            let mut acc = vdupq_n_s32(0);
            for h in 0..2 {
                let mut w = [[vdupq_n_u8(0); 4]; 2];
                for (l, w) in w.iter_mut().enumerate() {
                    let ql = x.add(64 * h + 16 * l);
                    let (qa, qb) = (vld1q_u8(ql), vld1q_u8(ql.add(32)));
                    let hi = vld1q_u8(x.add(128 + 32 * h + 16 * l));
                    let hi2 = vshrq_n_u8::<2>(hi);
                    // Bits 0–1, 2–3, 4–5, 6–7 of qh above the four nibbles.
                    w[0] = vsliq_n_u8::<4>(qa, vandq_u8(hi, three));
                    w[1] = vsliq_n_u8::<4>(qb, vandq_u8(hi2, three));
                    w[2] = vsriq_n_u8::<4>(vandq_u8(hi, top), qa);
                    w[3] = vsriq_n_u8::<4>(vandq_u8(hi2, top), qb);
                }
                acc = half16(acc, y, h, w, [sc[2 * h], sc[2 * h + 1]]);
            }
            // The offset's share in the same int32 lanes (|lane| < 2^31: the block's total is).
            let offset = sums_times(y, [vmovl_s8(vget_low_s8(scales)), vmovl_high_s8(scales)]);
            let acc = vmlsq_n_s32(acc, offset, 32);
            lanes = vfmaq_n_f32(lanes, vcvtq_f32_s32(acc), half(x.add(208)) * act_scale(y));
        }
        *out = vaddvq_f32(lanes);
    }
    out
}

/// Q3_K rows: codes `crumb | high << 2` unsigned, per block `d·y.d · (Σ scale·Σ q·a − 4·Σ
/// scale·bsums)` (the scalar `q3_k::dot`'s integers, codes there `crumb + 4·high − 4`).
///
/// # Safety
/// As [`rows_scale_min`].
#[inline(always)]
pub(super) unsafe fn rows_q3_k<const R: usize>(
    first: *const u8,
    row_bytes: usize,
    act: *const u8,
    n: usize,
) -> [f32; R] {
    let block_bytes = core::mem::size_of::<crate::q3_k::BlockQ3_K>();
    let one = vdupq_n_u8(1);
    let mut out = [0.0f32; R];
    for (r, out) in out.iter_mut().enumerate() {
        let row = first.add(r * row_bytes);
        let mut lanes = vdupq_n_f32(0.0);
        for b in 0..n {
            let x = row.add(b * block_bytes);
            let y = act.add(b * A_BYTES);
            // The sixteen 6-bit scales (`BlockQ3_K::signed_scales` + 32), four at a time.
            let [a0, a1, a2] = words(&x.add(96).cast::<[u8; 12]>().read_unaligned());
            let (m4, m2) = (0x0f0f_0f0f_u32, 0x0303_0303_u32);
            let u = [
                (a0 & m4) | ((a2 & m2) << 4),
                (a1 & m4) | (((a2 >> 2) & m2) << 4),
                ((a0 >> 4) & m4) | (((a2 >> 4) & m2) << 4),
                ((a1 >> 4) & m4) | (((a2 >> 6) & m2) << 4),
            ];
            let levels = vreinterpretq_u8_u32(vld1q_u32(u.as_ptr()));
            let scales = vsubq_s8(vreinterpretq_s8_u8(levels), vdupq_n_s8(32));
            let sc = widen16(scales);
            let mut hm = [vld1q_u8(x), vld1q_u8(x.add(16))];
            let mut acc = vdupq_n_s32(0);
            for h in 0..2 {
                let mut w = [[vdupq_n_u8(0); 4]; 2];
                for (l, w) in w.iter_mut().enumerate() {
                    // `sli` below keeps only the low two bits: no mask on the crumbs.
                    let q = vld1q_u8(x.add(32 + 32 * h + 16 * l));
                    let c = [
                        q,
                        vshrq_n_u8::<2>(q),
                        vshrq_n_u8::<4>(q),
                        vshrq_n_u8::<6>(q),
                    ];
                    let m = hm[l];
                    let hb = [
                        m,
                        vshrq_n_u8::<1>(m),
                        vshrq_n_u8::<2>(m),
                        vshrq_n_u8::<3>(m),
                    ];
                    for ((w, c), hb) in w.iter_mut().zip(c).zip(hb) {
                        // Bit 4h + k of hmask as bit 2 of the code.
                        *w = vsliq_n_u8::<2>(c, vandq_u8(hb, one));
                    }
                }
                hm = [vshrq_n_u8::<4>(hm[0]), vshrq_n_u8::<4>(hm[1])];
                acc = half16(acc, y, h, w, [sc[2 * h], sc[2 * h + 1]]);
            }
            // The offset's share in the same int32 lanes (|lane| < 2^31: the block's total is).
            let offset = sums_times(y, [vmovl_s8(vget_low_s8(scales)), vmovl_high_s8(scales)]);
            let acc = vmlsq_n_s32(acc, offset, 4);
            lanes = vfmaq_n_f32(lanes, vcvtq_f32_s32(acc), half(x.add(108)) * act_scale(y));
        }
        *out = vaddvq_f32(lanes);
    }
    out
}

/// Q2_K rows: per block `y.d·d · Σ scale·Σ code·q8 − y.d·dmin · Σ bsums·min`, the scalar
/// `q2_k::dot`'s exact integers and float steps.
///
/// # Safety
/// As [`rows_scale_min`].
#[inline(always)]
pub(super) unsafe fn rows_q2_k<const R: usize>(
    first: *const u8,
    row_bytes: usize,
    act: *const u8,
    n: usize,
) -> [f32; R] {
    let block_bytes = core::mem::size_of::<crate::q2_k::BlockQ2_K>();
    let low = vdupq_n_u8(0x0f);
    let mut out = [0.0f32; R];
    for (r, out) in out.iter_mut().enumerate() {
        let row = first.add(r * row_bytes);
        let mut sumf = 0.0f32;
        for b in 0..n {
            let x = row.add(b * block_bytes);
            let y = act.add(b * A_BYTES);
            let packed = vld1q_u8(x);
            let sc = widen16(vreinterpretq_s8_u8(vandq_u8(packed, low)));
            let mut acc = vdupq_n_s32(0);
            for h in 0..2 {
                let mut w = [[vdupq_n_u8(0); 4]; 2];
                for (l, w) in w.iter_mut().enumerate() {
                    *w = crumbs(vld1q_u8(x.add(16 + 32 * h + 16 * l)));
                }
                acc = half16(acc, y, h, w, [sc[2 * h], sc[2 * h + 1]]);
            }
            let mins = vshrq_n_u8::<4>(packed);
            let mins = [
                vreinterpretq_s16_u16(vmovl_u8(vget_low_u8(mins))),
                vreinterpretq_s16_u16(vmovl_high_u8(mins)),
            ];
            let summs = vaddvq_s32(sums_times(y, mins));
            let isum = vaddvq_s32(acc);
            let yd = act_scale(y);
            let dall = yd * half(x.add(80));
            let dmin = yd * half(x.add(82));
            sumf += dall * isum as f32 - dmin * summs as f32;
        }
        *out = sumf;
    }
    out
}
