//! Matrix-matrix products of the K-quants (Q2_K … Q6_K) × Q8_K on `dotprod` (SDOT) and `i8mm`
//! (SMMLA): the groups of 8 rows of `gemm.rs` (decoded once per call into unsigned codes ≤ 63,
//! arranged for the instruction), with the scheme of the x86 tiers' `gemm_kquants.rs` — per
//! sub-block an exact integer code sum per row and token, times the rows' integer sub-block
//! scales (the values of `gemm_layout::SubScales`, decoded once per group in vectors into the
//! shape's row lanes: [`group_sub_scales`]); the minimum term `Σ min·bsum` as 16-bit products
//! with the token's prepared sub-block sums; one conversion and one multiply-add per 256-value block, row and token. Q3_K / Q6_K take their
//! codes unsigned, the offset (4, 32) being a minimum of 4·sc / 32·sc on `d`, so their block is
//! `d·(Σ sc·isum − Σ min·bsum)`; Q2_K / Q4_K / Q5_K's is `d·Σ sc·isum − dmin·Σ min·bsum`.
//! The integers equal the scalar `dot`'s; the float order per block differs (as on x86).

use core::arch::aarch64::*;

use super::gemm::{
    pair_f32, read_f32, row_pairs, sdot_lanes, smmla, store_pairs, store_rows, Decode, Decoded,
    Shape, GROUP,
};
use crate::kernels::gemm_layout::formats::{Q2_K, Q3_K, Q4_K, Q5_K, Q6_K};
use crate::kernels::gemm_layout::{self, GemmFormat as _, Layout, SubScales, UNIT};

/// Where a format's sub-block minimums come from, for [`group_sub_scales`].
enum Mins {
    /// Bytes 8..16 of the scale vector (Q4_K / Q5_K: 8 sub-blocks).
    Beside,
    /// Their own vector (Q2_K).
    Own,
    /// The scale times 2^k (Q3_K: 4·sc, Q6_K: 32·sc, the code offset on `d`).
    Shifted(i16),
}

/// A K-quant's sub-block scales of one row's block as bytes, the inner step of
/// [`group_sub_scales`].
trait ScaleBytes: SubScales {
    const MINS: Mins;
    /// The block at `block`'s scales (sub-block j in byte j, as i8; Q4_K / Q5_K: the minimums
    /// in bytes 8..16) and, for [`Mins::Own`], its minimums (else unused).
    ///
    /// # Safety
    /// `block` points at a whole block; NEON enabled.
    unsafe fn scale_bytes(block: *const u8) -> [int8x16_t; 2];
}

#[inline(always)]
unsafe fn packed12(p: *const u8) -> [u8; 12] {
    p.cast::<[u8; 12]>().read_unaligned()
}

#[inline(always)]
unsafe fn word_vector(w: [u32; 4]) -> int8x16_t {
    vreinterpretq_s8_u32(vld1q_u32(w.as_ptr()))
}

impl ScaleBytes for Q4_K {
    const MINS: Mins = Mins::Beside;
    #[inline(always)]
    unsafe fn scale_bytes(block: *const u8) -> [int8x16_t; 2] {
        let v = word_vector(gemm_layout::k4_scale_min_words(&packed12(block.add(4))));
        [v, v]
    }
}

impl ScaleBytes for Q5_K {
    const MINS: Mins = Mins::Beside;
    #[inline(always)]
    unsafe fn scale_bytes(block: *const u8) -> [int8x16_t; 2] {
        Q4_K::scale_bytes(block)
    }
}

impl ScaleBytes for Q2_K {
    const MINS: Mins = Mins::Own;
    #[inline(always)]
    unsafe fn scale_bytes(block: *const u8) -> [int8x16_t; 2] {
        // Scale in the low nibble, minimum in the high one, of bytes 0..16.
        let v = vld1q_u8(block);
        [vandq_u8(v, vdupq_n_u8(0x0F)), vshrq_n_u8::<4>(v)].map(|v| vreinterpretq_s8_u8(v))
    }
}

impl ScaleBytes for Q3_K {
    const MINS: Mins = Mins::Shifted(2);
    #[inline(always)]
    unsafe fn scale_bytes(block: *const u8) -> [int8x16_t; 2] {
        let at = core::mem::offset_of!(crate::q3_k::BlockQ3_K, scales);
        let levels = word_vector(gemm_layout::q3_k_level_words(&packed12(block.add(at))));
        let v = vsubq_s8(levels, vdupq_n_s8(32));
        [v, v]
    }
}

impl ScaleBytes for Q6_K {
    const MINS: Mins = Mins::Shifted(5);
    #[inline(always)]
    unsafe fn scale_bytes(block: *const u8) -> [int8x16_t; 2] {
        let at = core::mem::offset_of!(crate::q6_k::BlockQ6_K, scales);
        let v = vld1q_s8(block.add(at).cast());
        [v, v]
    }
}

/// The 16 bytes of the group's 8 rows (`v[r]`: row r's) by column, widened: `out[j]` holds
/// byte j of rows 0..8. Three transposition steps (bytes, halfwords, words) of 8 each.
#[inline(always)]
unsafe fn columns(v: &[int8x16_t; GROUP]) -> [int16x8_t; 16] {
    // Bytes: b[2i] / b[2i + 1] = the even / odd bytes of rows 2i, 2i + 1, interleaved.
    let b: [int16x8_t; GROUP] = core::array::from_fn(|k| {
        let (x, y) = (v[k / 2 * 2], v[k / 2 * 2 + 1]);
        vreinterpretq_s16_s8(if k % 2 == 0 {
            vtrn1q_s8(x, y)
        } else {
            vtrn2q_s8(x, y)
        })
    });
    // Halfwords: h[4q + 2p + e] holds, for rows 4q..4q + 4, columns ≡ e + 2p (mod 4) — a
    // column a word.
    let h: [int32x4_t; GROUP] = core::array::from_fn(|k| {
        let (q, p, e) = (k / 4, (k / 2) % 2, k % 2);
        let (x, y) = (b[4 * q + e], b[4 * q + 2 + e]);
        vreinterpretq_s32_s16(if p == 0 {
            vtrn1q_s16(x, y)
        } else {
            vtrn2q_s16(x, y)
        })
    });
    // Words: rows 0..4 with rows 4..8 of the same columns, a column a half.
    let mut out = [vdupq_n_s16(0); 16];
    for k in 0..4 {
        // h[k] (rows 0..4) and h[4 + k] (rows 4..8) hold columns c, c + 4, c + 8, c + 12.
        let (c, x, y) = (k, h[k], h[4 + k]);
        let lo = vreinterpretq_s8_s32(vtrn1q_s32(x, y)); // columns c, c + 8
        let hi = vreinterpretq_s8_s32(vtrn2q_s32(x, y)); // columns c + 4, c + 12
        out[c] = vmovl_s8(vget_low_s8(lo));
        out[c + 8] = vmovl_high_s8(lo);
        out[c + 4] = vmovl_s8(vget_low_s8(hi));
        out[c + 12] = vmovl_high_s8(hi);
    }
    out
}

/// The sub-block scales and minimum pairs of every block of rows `base..base + n_rows` into
/// `dec`, in shape `S`'s row lanes (zero for absent rows) — what the tiles multiply by, as
/// `gemm_layout::decode_sub_scales` gives the x86 tiers — vectorized: per block each row's
/// scales as one vector of bytes ([`ScaleBytes`]), the group's 8 transposed to a vector of
/// rows per sub-block, widened.
///
/// # Safety
/// The rows hold `n_values` values in whole blocks; NEON enabled.
#[inline(always)]
unsafe fn group_sub_scales<W: ScaleBytes, S: Shape>(
    base: *const u8,
    row_bytes: usize,
    n_rows: usize,
    n_values: usize,
    dec: &mut Decoded,
) {
    let n_blocks = n_values / (W::UNITS_PER_BLOCK * UNIT);
    let (n_sub, n_pairs) = (W::N_SUB, W::N_SUB / 2);
    let zero = vdupq_n_s32(0);
    dec.sub_scales.resize(n_blocks * n_sub, [zero; 4]);
    dec.sub_mins.resize(n_blocks * n_pairs, [zero; 4]);
    let rows =
        |lanes: int16x8_t| S::row_lanes(vmovl_s16(vget_low_s16(lanes)), vmovl_high_s16(lanes));
    for b in 0..n_blocks {
        let v: [[int8x16_t; 2]; GROUP] = core::array::from_fn(|r| {
            if r < n_rows {
                W::scale_bytes(base.add(r * row_bytes + b * W::BLOCK_BYTES))
            } else {
                [vdupq_n_s8(0); 2]
            }
        });
        let (sc, mn) = (v.map(|v| v[0]), v.map(|v| v[1]));
        let cols = columns(&sc);
        let scales = &mut dec.sub_scales[b * n_sub..(b + 1) * n_sub];
        for (out, &c) in scales.iter_mut().zip(&cols) {
            *out = rows(c);
        }
        let mins: [int16x8_t; 16] = match W::MINS {
            Mins::Beside => core::array::from_fn(|j| cols[(8 + j) % 16]),
            Mins::Own => columns(&mn),
            Mins::Shifted(k) => cols.map(|c| vshlq_s16(c, vdupq_n_s16(k))),
        };
        // A pair of minimums, two i16 an i32 lane (the first in the low half).
        let pairs = &mut dec.sub_mins[b * n_pairs..(b + 1) * n_pairs];
        for (i, out) in pairs.iter_mut().enumerate() {
            let (x, y) = (mins[2 * i], mins[2 * i + 1]);
            *out = S::row_lanes(
                vreinterpretq_s32_s16(vzip1q_s16(x, y)),
                vreinterpretq_s32_s16(vzip2q_s16(x, y)),
            );
        }
    }
}

#[inline(always)]
unsafe fn dword_at(p: *const u8) -> i32 {
    p.cast::<i32>().read_unaligned()
}

/// A block's float result for 4 lanes (rows × tokens): `d·scaled − dmin·mins` where the format
/// has a `dmin`, else `d·(scaled − mins)`.
#[inline(always)]
unsafe fn block_lanes<W: SubScales>(
    d: float32x4_t,
    dmin: float32x4_t,
    scaled: int32x4_t,
    mins: int32x4_t,
) -> float32x4_t {
    if W::MIN_AT.is_some() {
        vfmsq_f32(
            vmulq_f32(d, vcvtq_f32_s32(scaled)),
            dmin,
            vcvtq_f32_s32(mins),
        )
    } else {
        vmulq_f32(d, vcvtq_f32_s32(vsubq_s32(scaled, mins)))
    }
}

/// `T` tokens × the decoded group of a K-quant with SDOT (the `dotprod` arrangement: vector
/// 2j + h holds dword j of rows 4h..4h+4).
///
/// # Safety
/// As `gemm::dotprod_tile`; `dec` decoded by this format's `decode_extra` for `Dotprod`.
#[inline(always)]
unsafe fn k_dotprod_tile<W: SubScales, const T: usize>(
    dec: &Decoded,
    l: &Layout,
    prepared: *const u8,
    n_rows: usize,
    out: *mut f32,
    out_stride: usize,
) {
    let n_blocks = l.n_values / (W::UNITS_PER_BLOCK * UNIT);
    let steps_per_sub = W::SUB_VALUES / 16;
    let tok: [*const u8; T] = core::array::from_fn(|t| prepared.add(t * l.bytes));
    let zero = vdupq_n_s32(0);
    let mut acc = [[vdupq_n_f32(0.0); 2]; T];
    let mut w = dec.codes.as_ptr();
    let mut at = l.codes_at;
    let mut sub_sums = l.sub_sums_at;
    for b in 0..n_blocks {
        let mut scaled = [[zero; 2]; T];
        for j in 0..W::N_SUB {
            let mut isum = [[zero; 2]; T];
            for _ in 0..steps_per_sub {
                let wv: [int8x16_t; GROUP] = core::array::from_fn(|k| *w.add(k));
                w = w.add(GROUP);
                for t in 0..T {
                    let a = vld1q_s8(tok[t].add(at).cast());
                    for h in 0..2 {
                        isum[t][h] =
                            sdot_lanes(isum[t][h], [wv[h], wv[2 + h], wv[4 + h], wv[6 + h]], a);
                    }
                }
                at += 16;
            }
            let sc = dec.sub_scales[b * W::N_SUB + j];
            for t in 0..T {
                for h in 0..2 {
                    scaled[t][h] = vmlaq_s32(scaled[t][h], isum[t][h], sc[h]);
                }
            }
        }
        // Σ min·bsum: lanes (row r, first of the pair), (r, second), (r + 1, …), summed
        // pairwise at the end.
        let (mut lo, mut hi) = ([[zero; 2]; T], [[zero; 2]; T]);
        for i in 0..W::N_SUB / 2 {
            let m = dec.sub_mins[b * W::N_SUB / 2 + i];
            for t in 0..T {
                let s = vreinterpretq_s16_s32(vdupq_n_s32(dword_at(tok[t].add(sub_sums))));
                for h in 0..2 {
                    let mh = vreinterpretq_s16_s32(m[h]);
                    lo[t][h] = vmlal_s16(lo[t][h], vget_low_s16(mh), vget_low_s16(s));
                    hi[t][h] = vmlal_high_s16(hi[t][h], mh, s);
                }
            }
            sub_sums += 4;
        }
        let d = dec.scales[b].as_ptr();
        let d = [vld1q_f32(d), vld1q_f32(d.add(4))];
        let m = dec.mins[b].as_ptr();
        let m = [vld1q_f32(m), vld1q_f32(m.add(4))];
        for t in 0..T {
            let da = read_f32(tok[t].add(l.scales_at + 4 * b));
            for h in 0..2 {
                let mins = vpaddq_s32(lo[t][h], hi[t][h]);
                let rows = block_lanes::<W>(d[h], m[h], scaled[t][h], mins);
                acc[t][h] = vfmaq_n_f32(acc[t][h], rows, da);
            }
        }
    }
    store_rows(&acc, n_rows, out, out_stride);
}

/// `2U` tokens (`tok`, the first `n_tok` real) × the decoded group of a K-quant with SMMLA (the
/// `i8mm` arrangement: vector 4c + q holds codes 8c..8c+8 of rows 2q, 2q + 1; lanes of the
/// sums `(r0t0, r0t1, r1t0, r1t1)`).
///
/// # Safety
/// As `gemm::i8mm_tile`; `dec` decoded by this format's `decode_extra` for `I8mm`.
#[inline(always)]
unsafe fn k_i8mm_tile<W: SubScales, const U: usize>(
    dec: &Decoded,
    l: &Layout,
    tok: &[*const u8; 4],
    n_tok: usize,
    n_rows: usize,
    out: *mut f32,
    out_stride: usize,
) {
    let n_blocks = l.n_values / (W::UNITS_PER_BLOCK * UNIT);
    let steps_per_sub = W::SUB_VALUES / 16;
    let zero = vdupq_n_s32(0);
    let mut acc = [[vdupq_n_f32(0.0); 4]; U];
    let mut w = dec.codes.as_ptr();
    let mut at = l.codes_at;
    let mut sub_sums = l.sub_sums_at;
    for b in 0..n_blocks {
        let mut scaled = [[zero; 4]; U];
        for j in 0..W::N_SUB {
            let mut isum = [[zero; 4]; U];
            for _ in 0..steps_per_sub {
                let wv: [int8x16_t; GROUP] = core::array::from_fn(|i| *w.add(i));
                w = w.add(GROUP);
                for (u, isum) in isum.iter_mut().enumerate() {
                    let a0 = vreinterpretq_s64_u8(vld1q_u8(tok[2 * u].add(at)));
                    let a1 = vreinterpretq_s64_u8(vld1q_u8(tok[2 * u + 1].add(at)));
                    let c =
                        [vzip1q_s64(a0, a1), vzip2q_s64(a0, a1)].map(|v| vreinterpretq_s8_s64(v));
                    for q in 0..4 {
                        isum[q] = smmla(isum[q], wv[q], c[0]);
                        isum[q] = smmla(isum[q], wv[4 + q], c[1]);
                    }
                }
                at += 16;
            }
            let sc = dec.sub_scales[b * W::N_SUB + j];
            for (scaled, isum) in scaled.iter_mut().zip(&isum) {
                for q in 0..4 {
                    scaled[q] = vmlaq_s32(scaled[q], isum[q], sc[q]);
                }
            }
        }
        // Σ min·bsum: the rows' minimum pairs (lanes [r0, r0, r1, r1]) against the pair's two
        // tokens' sum pairs [t0, t1]; lanes (r0t0 first, r0t0 second, r0t1 …), summed pairwise.
        let (mut lo, mut hi) = ([[zero; 4]; U], [[zero; 4]; U]);
        for i in 0..W::N_SUB / 2 {
            let m = dec.sub_mins[b * W::N_SUB / 2 + i];
            for u in 0..U {
                let pair = [
                    dword_at(tok[2 * u].add(sub_sums)),
                    dword_at(tok[2 * u + 1].add(sub_sums)),
                ];
                let x = vreinterpret_s16_s32(vld1_s32(pair.as_ptr()));
                let xx = vcombine_s16(x, x);
                for q in 0..4 {
                    let mq = vreinterpretq_s16_s32(m[q]);
                    lo[u][q] = vmlal_s16(lo[u][q], vget_low_s16(mq), x);
                    hi[u][q] = vmlal_high_s16(hi[u][q], mq, xx);
                }
            }
            sub_sums += 4;
        }
        let d = row_pairs(&dec.scales[b]);
        let m = row_pairs(&dec.mins[b]);
        for u in 0..U {
            let da = pair_f32(tok, u, l.scales_at + 4 * b);
            for q in 0..4 {
                let mins = vpaddq_s32(lo[u][q], hi[u][q]);
                let rows = block_lanes::<W>(d[q], m[q], scaled[u][q], mins);
                acc[u][q] = vfmaq_f32(acc[u][q], rows, da);
            }
        }
    }
    store_pairs(&acc, n_tok, n_rows, out, out_stride);
}

/// The K-quant parts of [`Decode`] beyond `decode_pair`.
macro_rules! sub_scaled {
    () => {
        #[inline(always)]
        unsafe fn decode_extra<S: Shape>(
            base: *const u8,
            row_bytes: usize,
            n_rows: usize,
            n_values: usize,
            dec: &mut Decoded,
        ) {
            group_sub_scales::<Self, S>(base, row_bytes, n_rows, n_values, dec)
        }

        #[inline(always)]
        unsafe fn dotprod_tile<const T: usize>(
            dec: &Decoded,
            l: &Layout,
            prepared: *const u8,
            n_rows: usize,
            out: *mut f32,
            out_stride: usize,
        ) {
            k_dotprod_tile::<Self, T>(dec, l, prepared, n_rows, out, out_stride)
        }

        #[inline(always)]
        unsafe fn i8mm_tile<const U: usize>(
            dec: &Decoded,
            l: &Layout,
            tok: &[*const u8; 4],
            n_tok: usize,
            n_rows: usize,
            out: *mut f32,
            out_stride: usize,
        ) {
            k_i8mm_tile::<Self, U>(dec, l, tok, n_tok, n_rows, out, out_stride)
        }
    };
}

/// `(x >> shift) & mask` per byte, the shift known only at run time.
#[inline(always)]
unsafe fn bits(x: uint8x16_t, shift: u32, mask: u8) -> uint8x16_t {
    vandq_u8(vshlq_u8(x, vdupq_n_s8(-(shift as i8))), vdupq_n_u8(mask))
}

#[inline(always)]
unsafe fn signed(v: [uint8x16_t; 4]) -> [int8x16_t; 4] {
    v.map(|v| vreinterpretq_s8_u8(v))
}

/// Q4_K / Q5_K's low four bits of a pair: the 32 bytes of `qs` whose low nibbles are the
/// pair's first 32 values and high nibbles the next 32.
#[inline(always)]
unsafe fn k4_low(qs: *const u8) -> [uint8x16_t; 4] {
    let (a, b) = (vld1q_u8(qs), vld1q_u8(qs.add(16)));
    let low = vdupq_n_u8(0x0F);
    [
        vandq_u8(a, low),
        vandq_u8(b, low),
        vshrq_n_u8::<4>(a),
        vshrq_n_u8::<4>(b),
    ]
}

/// Q3_K / Q5_K's top code bit of pair `p` (value 32k + l of a block has it at bit k of byte l
/// of the 32 bytes at `top`; here k = 2·(p % 4), then k + 1), as 0 / 1.
#[inline(always)]
unsafe fn top_bits(top: *const u8, p: usize) -> [uint8x16_t; 4] {
    let k = 2 * (p % 4) as u32;
    let (a, b) = (vld1q_u8(top), vld1q_u8(top.add(16)));
    [
        bits(a, k, 1),
        bits(b, k, 1),
        bits(a, k + 1, 1),
        bits(b, k + 1, 1),
    ]
}

/// The two-bit codes of pair `p` in Q2_K / Q3_K, whose `qs` (64 bytes) starts at `qs`: pair
/// p % 4 is half h = (p % 4) / 2 of the block, values 32k + l of the half at bits 2k of
/// qs[32h + l], for k = 2·(p % 2) and k + 1.
#[inline(always)]
unsafe fn crumbs(qs: *const u8, p: usize) -> [uint8x16_t; 4] {
    let at = qs.add(32 * ((p % 4) / 2));
    let (a, b) = (vld1q_u8(at), vld1q_u8(at.add(16)));
    let k = 4 * (p % 2) as u32;
    [
        bits(a, k, 3),
        bits(b, k, 3),
        bits(a, k + 2, 3),
        bits(b, k + 2, 3),
    ]
}

impl Decode for Q4_K {
    #[inline(always)]
    unsafe fn decode_pair(row: *const u8, p: usize) -> [int8x16_t; 4] {
        signed(k4_low(
            row.add(p / 4 * Self::BLOCK_BYTES + 16 + 32 * (p % 4)),
        ))
    }
    sub_scaled!();
}

impl Decode for Q5_K {
    #[inline(always)]
    unsafe fn decode_pair(row: *const u8, p: usize) -> [int8x16_t; 4] {
        let block = row.add(p / 4 * Self::BLOCK_BYTES);
        let low = k4_low(block.add(48 + 32 * (p % 4)));
        let top = top_bits(block.add(16), p);
        signed(core::array::from_fn(|i| vsliq_n_u8::<4>(low[i], top[i])))
    }
    sub_scaled!();
}

impl Decode for Q2_K {
    #[inline(always)]
    unsafe fn decode_pair(row: *const u8, p: usize) -> [int8x16_t; 4] {
        signed(crumbs(row.add(p / 4 * Self::BLOCK_BYTES + 16), p))
    }
    sub_scaled!();
}

impl Decode for Q3_K {
    #[inline(always)]
    unsafe fn decode_pair(row: *const u8, p: usize) -> [int8x16_t; 4] {
        let block = row.add(p / 4 * Self::BLOCK_BYTES);
        let low = crumbs(block.add(32), p);
        let top = top_bits(block, p);
        signed(core::array::from_fn(|i| vsliq_n_u8::<2>(low[i], top[i])))
    }
    sub_scaled!();
}

impl Decode for Q6_K {
    #[inline(always)]
    unsafe fn decode_pair(row: *const u8, p: usize) -> [int8x16_t; 4] {
        // Pair p % 4 is half h = (p % 4) / 2 of the block, values 32k + l for k = 2·(p % 2)
        // and k + 1: nibble (p % 2) of ql[64h + l] / ql[64h + 32 + l], top bits 2k of qh[32h + l].
        let block = row.add(p / 4 * Self::BLOCK_BYTES);
        let h = (p % 4) / 2;
        let nibble = 4 * (p % 2) as u32;
        let ql = block.add(64 * h);
        let ql = [ql, ql.add(16), ql.add(32), ql.add(48)].map(|at| vld1q_u8(at));
        let qh = block.add(128 + 32 * h);
        let qh = [vld1q_u8(qh), vld1q_u8(qh.add(16))];
        signed(core::array::from_fn(|i| {
            let top = bits(qh[i % 2], nibble + 2 * (i / 2) as u32, 3);
            vsliq_n_u8::<4>(bits(ql[i], nibble, 0x0F), top)
        }))
    }
    sub_scaled!();
}
