//! Matrix-matrix products on the `dotprod` (SDOT) and `i8mm` (SMMLA) tiers, on the shared
//! prepared-activation layout (`gemm_layout`: every token's codes in the weights' stored order,
//! FACTOR·scale per activation scale, the offset bias per weight block, built once per product).
//!
//! The weights are decoded once per call in groups of 8 rows into signed byte codes (the
//! formats' unsigned codes, or Q8_0's own signed ones) and rearranged for the instruction:
//! - `dotprod`: one 16-byte vector holds 4 consecutive codes of each of 4 rows, and
//!   `sdot v.4s, w.16b, a.4b[i]` adds the dot of those with the i-th 4 codes of a token;
//! - `i8mm`: one vector holds 8 consecutive codes of 2 rows, and `smmla` multiplies it by the
//!   same 8 values of 2 tokens (a 2×8 by 8×2 product: 4 results, 32 multiply-adds).
//!
//! Per activation scale the exact integer sums are converted once and added times
//! `d_weight · FACTOR·d_act` (plus the block bias, and `m · s` for the formats with a minimum);
//! the float order differs from the scalar `dot`'s, within the tests' tolerance (as on x86).
//! The K-quants (`gemm_kquants.rs`) take the same driver, decode and arrangement, and bring
//! through [`Decode`] their sub-block scales and their own tiles (sub-block sums scaled in
//! integers, one float step per 256-value block).
//! SDOT and SMMLA through inline assembly: their intrinsics are not stable Rust yet.

use core::arch::aarch64::*;
use core::arch::asm;
use core::cell::UnsafeCell;
use core::mem::size_of;

use super::q1_0::masks;
use super::standard::{five_bits, nibbles};
use crate::kernels::gemm_layout::formats::{
    PTQ1_0, Q1_0, Q2, Q2_K, Q3_K, Q4_0, Q4_1, Q4_K, Q5_0, Q5_1, Q5_K, Q6_K, TQ2_0,
};
use crate::kernels::gemm_layout::{self, GemmFormat, Layout, Partner, UNIT};
use crate::kernels::GemmKernel;
use crate::FormatKind;

/// Rows decoded (or packed) together.
pub(super) const GROUP: usize = 8;

/// Q8_0 with its codes signed as stored (value `d·code`): both instructions multiply signed
/// bytes, so the x86 kernels' sign flip (`formats::Q8_0`, codes q + 128) is not needed here.
pub(super) struct Q8_0Signed;
impl GemmFormat for Q8_0Signed {
    const BLOCK_BYTES: usize = size_of::<crate::q8_0::BlockQ8_0>();
    const UNITS_PER_BLOCK: usize = 1;
    const PARTNER: Partner = gemm_layout::Q8_0;
}

/// A weight format's decoder for these kernels.
pub(super) trait Decode: GemmFormat + Sized {
    /// The 64 codes of values 64p..64p+64 of the row at `row` as four 16-byte vectors, in the
    /// prepared activation's stored order (`gemm_layout::order`), each code in 0..=127 or, for
    /// Q8_0, the signed code.
    ///
    /// # Safety
    /// `row` points at a whole row holding value 64p + 63; NEON enabled.
    unsafe fn decode_pair(row: *const u8, p: usize) -> [int8x16_t; 4];

    /// Decodes what the format needs beyond codes and block scales (the K-quants' sub-block
    /// scales, in shape `S`'s row lanes) for rows `base..base + n_rows`, after [`decode_rows`].
    ///
    /// # Safety
    /// As [`decode_rows`].
    #[inline(always)]
    unsafe fn decode_extra<S: Shape>(
        _base: *const u8,
        _row_bytes: usize,
        _n_rows: usize,
        _n_values: usize,
        _dec: &mut Decoded,
    ) {
    }

    /// `T` tokens × the decoded group with SDOT ([`dotprod_tile`]; the K-quants their own).
    ///
    /// # Safety
    /// As [`dotprod_tile`].
    #[inline(always)]
    unsafe fn dotprod_tile<const T: usize>(
        dec: &Decoded,
        l: &Layout,
        prepared: *const u8,
        n_rows: usize,
        out: *mut f32,
        out_stride: usize,
    ) {
        dotprod_tile::<Self, Decoded, T>(dec, l, prepared, n_rows, out, out_stride)
    }

    /// `2U` tokens × the decoded group with SMMLA ([`i8mm_tile`]; the K-quants their own).
    ///
    /// # Safety
    /// As [`i8mm_tile`].
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
        i8mm_tile::<Self, U>(dec, l, tok, n_tok, n_rows, out, out_stride)
    }
}

impl Decode for Q1_0 {
    #[inline(always)]
    unsafe fn decode_pair(row: *const u8, p: usize) -> [int8x16_t; 4] {
        let bits = row.add(p / 2 * Self::BLOCK_BYTES + 2 + 8 * (p % 2));
        core::array::from_fn(|k| {
            let b = bits.add(2 * k).cast::<u16>().read_unaligned();
            vreinterpretq_s8_u8(vandq_u8(masks(b), vdupq_n_u8(1)))
        })
    }
}

impl<const PAIRS: usize> Decode for Q2<PAIRS> {
    #[inline(always)]
    unsafe fn decode_pair(row: *const u8, p: usize) -> [int8x16_t; 4] {
        let x = vld1q_u8(row.add(p / PAIRS * Self::BLOCK_BYTES + 2 + 16 * (p % PAIRS)));
        let three = vdupq_n_u8(3);
        // Decoded vector l holds the codes shifted by 2l bits: byte i ↔ value 4i + l.
        let d = [
            vandq_u8(x, three),
            vandq_u8(vshrq_n_u8::<2>(x), three),
            vandq_u8(vshrq_n_u8::<4>(x), three),
            vshrq_n_u8::<6>(x),
        ]
        .map(|v| vreinterpretq_u64_u8(v));
        // The stored order (`gemm_layout`'s 2-bit order): dwords 0,1,4,5 | 8,9,12,13 |
        // 2,3,6,7 | 10,11,14,15 of the decoded 16, i.e. the 8-byte halves of decoded vectors.
        [
            vzip1q_u64(d[0], d[1]),
            vzip1q_u64(d[2], d[3]),
            vzip2q_u64(d[0], d[1]),
            vzip2q_u64(d[2], d[3]),
        ]
        .map(|v| vreinterpretq_s8_u64(v))
    }
}

impl Decode for TQ2_0 {
    #[inline(always)]
    unsafe fn decode_pair(row: *const u8, p: usize) -> [int8x16_t; 4] {
        // Byte j of a 32-byte half, bits 2l, holds value 32l + j of the half's 128.
        let q = p % 4;
        let at = row.add(p / 4 * Self::BLOCK_BYTES + 32 * (q / 2));
        let x = [vld1q_u8(at), vld1q_u8(at.add(16))];
        let shift = vdupq_n_s8(-(4 * (q % 2) as i8));
        let lo = x.map(|x| vshlq_u8(x, shift));
        let three = vdupq_n_u8(3);
        [
            vandq_u8(lo[0], three),
            vandq_u8(lo[1], three),
            vandq_u8(vshrq_n_u8::<2>(lo[0]), three),
            vandq_u8(vshrq_n_u8::<2>(lo[1]), three),
        ]
        .map(|v| vreinterpretq_s8_u8(v))
    }
}

impl Decode for PTQ1_0 {
    #[inline(always)]
    unsafe fn decode_pair(row: *const u8, p: usize) -> [int8x16_t; 4] {
        let block = row.add(p / 2 * Self::BLOCK_BYTES);
        let [a, b] = super::ptq1_0::codes(block, 2 * (p % 2));
        let [c, d] = super::ptq1_0::codes(block, 2 * (p % 2) + 1);
        [a, b, c, d]
    }
}

impl Decode for Q8_0Signed {
    #[inline(always)]
    unsafe fn decode_pair(row: *const u8, p: usize) -> [int8x16_t; 4] {
        let a = row.add(2 * p * Self::BLOCK_BYTES + 2).cast::<i8>();
        let b = a.add(Self::BLOCK_BYTES);
        [
            vld1q_s8(a),
            vld1q_s8(a.add(16)),
            vld1q_s8(b),
            vld1q_s8(b.add(16)),
        ]
    }
}

/// The codes of two consecutive 32-value blocks whose codes start at `a` (`block_bytes`
/// apart), as four vectors: [`five_bits`] if `FIVE`, else [`nibbles`].
#[inline(always)]
unsafe fn two_blocks<const FIVE: bool>(a: *const u8, block_bytes: usize) -> [int8x16_t; 4] {
    // A Q5_* block's fifth bits are the four bytes just before its nibbles.
    let codes = |at: *const u8| {
        if FIVE {
            five_bits(at, at.sub(4))
        } else {
            nibbles(at)
        }
    };
    let [c0, c1] = codes(a);
    let [c2, c3] = codes(a.add(block_bytes));
    [c0, c1, c2, c3].map(|c| vreinterpretq_s8_u8(c))
}

impl Decode for Q4_0 {
    #[inline(always)]
    unsafe fn decode_pair(row: *const u8, p: usize) -> [int8x16_t; 4] {
        let a = row.add(2 * p * Self::BLOCK_BYTES + 2);
        two_blocks::<false>(a, Self::BLOCK_BYTES)
    }
}

impl Decode for Q4_1 {
    #[inline(always)]
    unsafe fn decode_pair(row: *const u8, p: usize) -> [int8x16_t; 4] {
        let a = row.add(2 * p * Self::BLOCK_BYTES + 4);
        two_blocks::<false>(a, Self::BLOCK_BYTES)
    }
}

impl Decode for Q5_0 {
    #[inline(always)]
    unsafe fn decode_pair(row: *const u8, p: usize) -> [int8x16_t; 4] {
        let a = row.add(2 * p * Self::BLOCK_BYTES + 6);
        two_blocks::<true>(a, Self::BLOCK_BYTES)
    }
}

impl Decode for Q5_1 {
    #[inline(always)]
    unsafe fn decode_pair(row: *const u8, p: usize) -> [int8x16_t; 4] {
        let a = row.add(2 * p * Self::BLOCK_BYTES + 8);
        two_blocks::<true>(a, Self::BLOCK_BYTES)
    }
}

/// A group's decoded rows.
#[derive(Default)]
pub(super) struct Decoded {
    /// Per 16 values of the rows, 8 vectors in the instruction's arrangement ([`Shape`]).
    pub codes: Vec<int8x16_t>,
    /// `[block]`: the rows' scales `d` (zero for absent rows).
    pub scales: Vec<[f32; GROUP]>,
    /// `[block]`: the rows' minimums `m` (formats with one; the K-quants' `dmin`).
    pub mins: Vec<[f32; GROUP]>,
    /// `[block][sub-block]`: the rows' integer sub-block scales (K-quants), in the shape's row
    /// lanes ([`Shape::row_lanes`]).
    pub sub_scales: Vec<[int32x4_t; 4]>,
    /// `[block][sub-block pair]`: the rows' integer sub-block minimums, two i16 an i32 lane,
    /// in the shape's row lanes.
    pub sub_mins: Vec<[int32x4_t; 4]>,
}

thread_local! {
    static DECODED: UnsafeCell<Decoded> = UnsafeCell::new(Decoded::default());
}

#[inline(always)]
unsafe fn f16_at(p: *const u8) -> f32 {
    super::f16::load1(p)
}

#[inline(always)]
pub(super) unsafe fn read_f32(p: *const u8) -> f32 {
    p.cast::<f32>().read_unaligned()
}

/// How a tier arranges a group's codes and multiplies them by tokens.
pub(super) trait Shape {
    /// The same 16 values of the group's 8 rows (`v[r]`: row r's) → the tile's 8 vectors.
    ///
    /// # Safety
    /// NEON enabled.
    unsafe fn arrange(v: &[int8x16_t; GROUP]) -> [int8x16_t; GROUP];

    /// One i32 per row of the group (`lo`: rows 0..4, `hi`: rows 4..8) in the lanes the tile's
    /// integer sums have: `dotprod` rows 0..4 and 4..8 (the last two vectors unused), `i8mm`
    /// vector q `[2q, 2q, 2q + 1, 2q + 1]`.
    ///
    /// # Safety
    /// NEON enabled.
    unsafe fn row_lanes(lo: int32x4_t, hi: int32x4_t) -> [int32x4_t; 4];

    /// Every token against the decoded group (`n_rows` ≤ 8 of its rows), results to
    /// `out[t·out_stride + r]`.
    ///
    /// # Safety
    /// `prepared` holds `n_tokens` prepared tokens of layout `l`; `out` has room for them; the
    /// tier's features are enabled.
    unsafe fn tokens<W: Decode>(
        dec: &Decoded,
        l: &Layout,
        prepared: *const u8,
        n_tokens: usize,
        n_rows: usize,
        out: *mut f32,
        out_stride: usize,
    );
}

/// Pair `p` (values 64p..64p + 64) of rows `base..base + n_rows` into `dec.codes`, arranged.
#[inline(always)]
unsafe fn decode_pair_rows<W: Decode, S: Shape>(
    base: *const u8,
    row_bytes: usize,
    n_rows: usize,
    p: usize,
    dec: &mut Decoded,
) {
    // `[vector k][row r]`.
    let mut v = [[vdupq_n_s8(0); GROUP]; 4];
    for r in 0..n_rows {
        let codes = W::decode_pair(base.add(r * row_bytes), p);
        for (v, c) in v.iter_mut().zip(codes) {
            v[r] = c;
        }
    }
    for (k, v) in v.iter().enumerate() {
        let arranged = S::arrange(v);
        let at = (4 * p + k) * GROUP;
        dec.codes[at..at + GROUP].copy_from_slice(&arranged);
    }
}

/// Decodes rows `base..base + n_rows` (n_rows ≤ 8; absent rows decode as zeros).
#[inline(always)]
unsafe fn decode_rows<W: Decode, S: Shape>(
    base: *const u8,
    row_bytes: usize,
    n_rows: usize,
    n_values: usize,
    dec: &mut Decoded,
) {
    let n_pairs = n_values / 64;
    let n_blocks = n_values / (W::UNITS_PER_BLOCK * UNIT);
    dec.codes.resize(n_pairs * 4 * GROUP, vdupq_n_s8(0));
    dec.scales.resize(n_blocks, [0.0; GROUP]);
    dec.mins.resize(n_blocks, [0.0; GROUP]);
    // Four pairs at a time, written out: `p % 4` (where the K-quants' bit positions depend on it)
    // is then a constant in each, their shifts immediates.
    let fours = n_pairs / 4;
    for q in 0..fours {
        decode_pair_rows::<W, S>(base, row_bytes, n_rows, 4 * q, dec);
        decode_pair_rows::<W, S>(base, row_bytes, n_rows, 4 * q + 1, dec);
        decode_pair_rows::<W, S>(base, row_bytes, n_rows, 4 * q + 2, dec);
        decode_pair_rows::<W, S>(base, row_bytes, n_rows, 4 * q + 3, dec);
    }
    for p in 4 * fours..n_pairs {
        decode_pair_rows::<W, S>(base, row_bytes, n_rows, p, dec);
    }
    W::decode_extra::<S>(base, row_bytes, n_rows, n_values, dec);
    for b in 0..n_blocks {
        let (d, m) = (&mut dec.scales[b], &mut dec.mins[b]);
        *d = [0.0; GROUP];
        *m = [0.0; GROUP];
        for r in 0..n_rows {
            let block = base.add(r * row_bytes + b * W::BLOCK_BYTES);
            d[r] = f16_at(block.add(W::SCALE_AT));
            if let Some(at) = W::MIN_AT {
                m[r] = f16_at(block.add(at));
            }
        }
    }
}

/// `acc + Σ_i SDOT(w[i], 4-byte lane i of a)`: 4 rows' codes (4 each in w[i]) against 16
/// consecutive codes of a token.
///
/// # Safety
/// The dot-product extension present.
#[target_feature(enable = "neon,dotprod")]
#[inline]
pub(super) unsafe fn sdot_lanes(mut acc: int32x4_t, w: [int8x16_t; 4], a: int8x16_t) -> int32x4_t {
    // SAFETY: register-only instructions of an extension the caller guarantees.
    unsafe {
        asm!(
            "sdot {acc:v}.4s, {w0:v}.16b, {a:v}.4b[0]",
            "sdot {acc:v}.4s, {w1:v}.16b, {a:v}.4b[1]",
            "sdot {acc:v}.4s, {w2:v}.16b, {a:v}.4b[2]",
            "sdot {acc:v}.4s, {w3:v}.16b, {a:v}.4b[3]",
            acc = inout(vreg) acc,
            w0 = in(vreg) w[0],
            w1 = in(vreg) w[1],
            w2 = in(vreg) w[2],
            w3 = in(vreg) w[3],
            a = in(vreg) a,
            options(pure, nomem, nostack, preserves_flags),
        );
    }
    acc
}

/// `acc + SMMLA(a, b)`: lane 2i + j gains the dot of the 8 bytes of half i of `a` with those of
/// half j of `b`.
///
/// # Safety
/// The int8 matrix-multiply extension present.
#[target_feature(enable = "neon,i8mm")]
#[inline]
pub(super) unsafe fn smmla(mut acc: int32x4_t, a: int8x16_t, b: int8x16_t) -> int32x4_t {
    // SAFETY: a register-only instruction of an extension the caller guarantees.
    unsafe {
        asm!(
            "smmla {acc:v}.4s, {a:v}.16b, {b:v}.16b",
            acc = inout(vreg) acc,
            a = in(vreg) a,
            b = in(vreg) b,
            options(pure, nomem, nostack, preserves_flags),
        );
    }
    acc
}

/// The per-format counts the tiles step by.
pub(super) struct Steps {
    n_blocks: usize,
    scales_per_block: usize,
    /// 16-value steps per activation scale.
    per_scale: usize,
}

pub(super) fn steps<W: GemmFormat>(l: &Layout) -> Steps {
    Steps {
        n_blocks: l.n_values / (W::UNITS_PER_BLOCK * UNIT),
        scales_per_block: W::UNITS_PER_BLOCK / W::PARTNER.units,
        per_scale: W::PARTNER.units * UNIT / 16,
    }
}

/// The `dotprod` arrangement: vector 2j + h holds dword j (codes 4j..4j+4) of rows 4h..4h+4.
pub(super) struct Dotprod;

impl Shape for Dotprod {
    #[inline(always)]
    unsafe fn arrange(v: &[int8x16_t; GROUP]) -> [int8x16_t; GROUP] {
        let mut out = [vdupq_n_s8(0); GROUP];
        for h in 0..2 {
            let [a, b, c, d] = core::array::from_fn(|i| vreinterpretq_s32_s8(v[4 * h + i]));
            let (t0, t1) = (vtrn1q_s32(a, b), vtrn2q_s32(a, b));
            let (t2, t3) = (vtrn1q_s32(c, d), vtrn2q_s32(c, d));
            let [t0, t1, t2, t3] = [t0, t1, t2, t3].map(|v| vreinterpretq_s64_s32(v));
            let dwords = [
                vtrn1q_s64(t0, t2),
                vtrn1q_s64(t1, t3),
                vtrn2q_s64(t0, t2),
                vtrn2q_s64(t1, t3),
            ];
            for (j, dw) in dwords.into_iter().enumerate() {
                out[2 * j + h] = vreinterpretq_s8_s64(dw);
            }
        }
        out
    }

    #[inline(always)]
    unsafe fn row_lanes(lo: int32x4_t, hi: int32x4_t) -> [int32x4_t; 4] {
        [lo, hi, lo, hi]
    }

    #[inline(always)]
    unsafe fn tokens<W: Decode>(
        dec: &Decoded,
        l: &Layout,
        prepared: *const u8,
        n_tokens: usize,
        n_rows: usize,
        out: *mut f32,
        out_stride: usize,
    ) {
        let mut t0 = 0;
        while t0 < n_tokens {
            let p = prepared.add(t0 * l.bytes);
            let o = out.add(t0 * out_stride);
            t0 += if n_tokens - t0 >= 4 {
                W::dotprod_tile::<4>(dec, l, p, n_rows, o, out_stride);
                4
            } else if n_tokens - t0 >= 2 {
                W::dotprod_tile::<2>(dec, l, p, n_rows, o, out_stride);
                2
            } else {
                W::dotprod_tile::<1>(dec, l, p, n_rows, o, out_stride);
                1
            };
        }
    }
}

/// Where a `dotprod` tile takes a group's weights from: the rows decoded per call
/// ([`Decoded`]) or a group of packed weights (`packed.rs`).
pub(super) trait Source {
    /// Whether [`Source::step`] gives the codes negated (the tile negates its exact integer
    /// sums back before any float arithmetic).
    const NEGATED: bool = false;
    /// The group's block scales `d` of block `b` (rows 0..4, 4..8; zero for absent rows).
    ///
    /// # Safety
    /// `b` is a block of the rows; NEON enabled.
    unsafe fn scales(&self, b: usize) -> [float32x4_t; 2];
    /// The minimums `m` of block `b` (formats with one), as [`Source::scales`].
    ///
    /// # Safety
    /// As [`Source::scales`].
    unsafe fn mins(&self, b: usize) -> [float32x4_t; 2];
    /// The codes of values 16i..16i+16 of the rows (in the stored order) in the `dotprod`
    /// arrangement: vector 2j + h holds dword j of rows 4h..4h+4.
    ///
    /// # Safety
    /// Values 16i..16i+16 lie in the rows; NEON enabled.
    unsafe fn step(&self, i: usize) -> [int8x16_t; GROUP];
}

impl Source for Decoded {
    #[inline(always)]
    unsafe fn scales(&self, b: usize) -> [float32x4_t; 2] {
        let d = self.scales[b].as_ptr();
        [vld1q_f32(d), vld1q_f32(d.add(4))]
    }

    #[inline(always)]
    unsafe fn mins(&self, b: usize) -> [float32x4_t; 2] {
        let m = self.mins[b].as_ptr();
        [vld1q_f32(m), vld1q_f32(m.add(4))]
    }

    #[inline(always)]
    unsafe fn step(&self, i: usize) -> [int8x16_t; GROUP] {
        let w = self.codes.as_ptr().add(GROUP * i);
        core::array::from_fn(|k| *w.add(k))
    }
}

/// `T` tokens × a group of 8 rows (from `src`) with SDOT; results for the first `n_rows` rows
/// go to `out[t·out_stride + r]`.
///
/// # Safety
/// `prepared` holds `T` prepared tokens of layout `l`, `src` the rows of `l.n_values` values
/// each, `out` room for the results; NEON and the dot-product extension enabled.
#[inline(always)]
pub(super) unsafe fn dotprod_tile<W: GemmFormat, S: Source, const T: usize>(
    src: &S,
    l: &Layout,
    prepared: *const u8,
    n_rows: usize,
    out: *mut f32,
    out_stride: usize,
) {
    let st = steps::<W>(l);
    let tok: [*const u8; T] = core::array::from_fn(|t| prepared.add(t * l.bytes));
    let mut acc = [[vdupq_n_f32(0.0); 2]; T];
    let mut i = 0;
    for b in 0..st.n_blocks {
        let d = src.scales(b);
        let m = if W::MIN_AT.is_some() {
            src.mins(b)
        } else {
            [vdupq_n_f32(0.0); 2]
        };
        for t in 0..T {
            let bias = read_f32(tok[t].add(l.bias_at + 4 * b));
            let sum = if W::MIN_AT.is_some() {
                read_f32(tok[t].add(l.sums_at + 4 * b))
            } else {
                0.0
            };
            for h in 0..2 {
                acc[t][h] = vfmaq_n_f32(acc[t][h], d[h], bias);
                if W::MIN_AT.is_some() {
                    acc[t][h] = vfmaq_n_f32(acc[t][h], m[h], sum);
                }
            }
        }
        for s in 0..st.scales_per_block {
            let scale_index = b * st.scales_per_block + s;
            let mut isum = [[vdupq_n_s32(0); 2]; T];
            for _ in 0..st.per_scale {
                let wv = src.step(i);
                for t in 0..T {
                    let a = vld1q_s8(tok[t].add(l.codes_at + 16 * i).cast());
                    for h in 0..2 {
                        isum[t][h] =
                            sdot_lanes(isum[t][h], [wv[h], wv[2 + h], wv[4 + h], wv[6 + h]], a);
                    }
                }
                i += 1;
            }
            for t in 0..T {
                let fd = read_f32(tok[t].add(l.scales_at + 4 * scale_index));
                for h in 0..2 {
                    let scale = vmulq_n_f32(d[h], fd);
                    let isum = if S::NEGATED {
                        vnegq_s32(isum[t][h])
                    } else {
                        isum[t][h]
                    };
                    acc[t][h] = vfmaq_f32(acc[t][h], vcvtq_f32_s32(isum), scale);
                }
            }
        }
    }
    store_rows(&acc, n_rows, out, out_stride);
}

/// A `dotprod` tile's results (`acc[t]`: rows 0..4, 4..8 of token t) for the first `n_rows`
/// rows to `out[t·out_stride + r]`.
///
/// # Safety
/// `out` has room for them; NEON enabled.
#[inline(always)]
pub(super) unsafe fn store_rows<const T: usize>(
    acc: &[[float32x4_t; 2]; T],
    n_rows: usize,
    out: *mut f32,
    out_stride: usize,
) {
    for (t, acc) in acc.iter().enumerate() {
        let mut v = [0.0f32; GROUP];
        vst1q_f32(v.as_mut_ptr(), acc[0]);
        vst1q_f32(v.as_mut_ptr().add(4), acc[1]);
        core::ptr::copy_nonoverlapping(v.as_ptr(), out.add(t * out_stride), n_rows);
    }
}

/// The `i8mm` arrangement: vector 4c + q holds codes 8c..8c+8 of rows 2q and 2q + 1.
pub(super) struct I8mm;

impl Shape for I8mm {
    #[inline(always)]
    unsafe fn arrange(v: &[int8x16_t; GROUP]) -> [int8x16_t; GROUP] {
        core::array::from_fn(|i| {
            let (c, q) = (i / 4, i % 4);
            let (a, b) = (
                vreinterpretq_s64_s8(v[2 * q]),
                vreinterpretq_s64_s8(v[2 * q + 1]),
            );
            vreinterpretq_s8_s64(if c == 0 {
                vzip1q_s64(a, b)
            } else {
                vzip2q_s64(a, b)
            })
        })
    }

    #[inline(always)]
    unsafe fn row_lanes(lo: int32x4_t, hi: int32x4_t) -> [int32x4_t; 4] {
        [
            vzip1q_s32(lo, lo),
            vzip2q_s32(lo, lo),
            vzip1q_s32(hi, hi),
            vzip2q_s32(hi, hi),
        ]
    }

    #[inline(always)]
    unsafe fn tokens<W: Decode>(
        dec: &Decoded,
        l: &Layout,
        prepared: *const u8,
        n_tokens: usize,
        n_rows: usize,
        out: *mut f32,
        out_stride: usize,
    ) {
        let mut t0 = 0;
        while t0 < n_tokens {
            let left = n_tokens - t0;
            let tok = |t: usize| prepared.add((t0 + t.min(left - 1)) * l.bytes);
            let toks = [tok(0), tok(1), tok(2), tok(3)];
            let o = out.add(t0 * out_stride);
            // An odd last token goes with itself as the pair's second (its results dropped).
            t0 += if left >= 4 {
                W::i8mm_tile::<2>(dec, l, &toks, 4, n_rows, o, out_stride);
                4
            } else {
                let n = left.min(2);
                W::i8mm_tile::<1>(dec, l, &toks, n, n_rows, o, out_stride);
                n
            };
        }
    }
}

/// `2U` tokens (`tok`, the first `n_tok` of them real) × the decoded group with SMMLA.
///
/// # Safety
/// Each of `tok` is a prepared token of layout `l`, `dec` holds rows of `l.n_values` values,
/// `out` has room for the results; NEON and the int8 matrix-multiply extension enabled.
#[inline(always)]
pub(super) unsafe fn i8mm_tile<W: Decode, const U: usize>(
    dec: &Decoded,
    l: &Layout,
    tok: &[*const u8; 4],
    n_tok: usize,
    n_rows: usize,
    out: *mut f32,
    out_stride: usize,
) {
    let st = steps::<W>(l);
    let pair_f32 = |u: usize, at: usize| pair_f32(tok, u, at);
    // acc[u][q]: rows 2q, 2q + 1 × tokens 2u, 2u + 1, lanes (r0t0, r0t1, r1t0, r1t1).
    let mut acc = [[vdupq_n_f32(0.0); 4]; U];
    let mut w = dec.codes.as_ptr();
    let mut at = l.codes_at;
    for b in 0..st.n_blocks {
        let d = row_pairs(&dec.scales[b]);
        let m = row_pairs(&dec.mins[b]);
        for (u, acc) in acc.iter_mut().enumerate() {
            let bias = pair_f32(u, l.bias_at + 4 * b);
            for q in 0..4 {
                acc[q] = vfmaq_f32(acc[q], d[q], bias);
                if W::MIN_AT.is_some() {
                    acc[q] = vfmaq_f32(acc[q], m[q], pair_f32(u, l.sums_at + 4 * b));
                }
            }
        }
        for s in 0..st.scales_per_block {
            let scale_index = b * st.scales_per_block + s;
            let mut isum = [[vdupq_n_s32(0); 4]; U];
            for _ in 0..st.per_scale {
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
            for (u, (acc, isum)) in acc.iter_mut().zip(&isum).enumerate() {
                let fd = pair_f32(u, l.scales_at + 4 * scale_index);
                for q in 0..4 {
                    let scale = vmulq_f32(d[q], fd);
                    acc[q] = vfmaq_f32(acc[q], vcvtq_f32_s32(isum[q]), scale);
                }
            }
        }
    }
    store_pairs(&acc, n_tok, n_rows, out, out_stride);
}

/// The f32 at `at` of token pair `u` (tokens `tok[2u]`, `tok[2u + 1]`) as `[t0, t1, t0, t1]`:
/// the `i8mm` lanes' token order.
///
/// # Safety
/// Both tokens readable at `at`; NEON enabled.
#[inline(always)]
pub(super) unsafe fn pair_f32(tok: &[*const u8; 4], u: usize, at: usize) -> float32x4_t {
    let v = [
        read_f32(tok[2 * u].add(at)),
        read_f32(tok[2 * u + 1].add(at)),
    ];
    let h = vld1_f32(v.as_ptr());
    vcombine_f32(h, h)
}

/// Row pair q's values as `[r0, r0, r1, r1]`: the `i8mm` lanes' row order.
///
/// # Safety
/// NEON enabled.
#[inline(always)]
pub(super) unsafe fn row_pairs(v: &[f32; GROUP]) -> [float32x4_t; 4] {
    core::array::from_fn(|q| vcombine_f32(vdup_n_f32(v[2 * q]), vdup_n_f32(v[2 * q + 1])))
}

/// An `i8mm` tile's results (`acc[u][q]`: rows 2q, 2q + 1 × tokens 2u, 2u + 1, lanes
/// `(r0t0, r0t1, r1t0, r1t1)`) for the first `n_tok` tokens and `n_rows` rows to
/// `out[t·out_stride + r]`.
///
/// # Safety
/// `out` has room for them; NEON enabled.
#[inline(always)]
pub(super) unsafe fn store_pairs<const U: usize>(
    acc: &[[float32x4_t; 4]; U],
    n_tok: usize,
    n_rows: usize,
    out: *mut f32,
    out_stride: usize,
) {
    for (u, acc) in acc.iter().enumerate() {
        for (q, acc) in acc.iter().enumerate() {
            let mut v = [0.0f32; 4];
            vst1q_f32(v.as_mut_ptr(), *acc);
            for (i, &x) in v.iter().enumerate() {
                let (r, t) = (2 * q + i / 2, 2 * u + i % 2);
                if r < n_rows && t < n_tok {
                    *out.add(t * out_stride + r) = x;
                }
            }
        }
    }
}

#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn gemm<W: Decode, S: Shape>(
    l: &Layout,
    weights: *const u8,
    row_bytes: usize,
    n_rows: usize,
    prepared: *const u8,
    n_tokens: usize,
    out: *mut f32,
    out_stride: usize,
) {
    // SAFETY: this thread's own buffer; the function does not re-enter itself.
    let dec = &mut *DECODED.with(UnsafeCell::get);
    let mut r0 = 0;
    while r0 < n_rows {
        let rows = GROUP.min(n_rows - r0);
        decode_rows::<W, S>(
            weights.add(r0 * row_bytes),
            row_bytes,
            rows,
            l.n_values,
            dec,
        );
        S::tokens::<W>(dec, l, prepared, n_tokens, rows, out.add(r0), out_stride);
        r0 += rows;
    }
}

/// The registered kernels of format `$w` (`DOTPROD`, `I8MM`): the shared registration of
/// `entries::gemm_entry!` around [`gemm`].
macro_rules! entry {
    ($name:ident, $w:ty) => {
        $crate::kernels::entries::gemm_entry!(
            $name,
            $w,
            DOTPROD: "neon,dotprod" => gemm[Dotprod],
            I8MM: "neon,dotprod,i8mm" => gemm[I8mm],
        );
    };
}

entry!(k_q1_0, Q1_0);
entry!(k_q2_0, Q2<1>);
entry!(k_pq2_0, Q2<2>);
entry!(k_tq2_0, TQ2_0);
entry!(k_ptq1_0, PTQ1_0);
entry!(k_q8_0, Q8_0Signed);
entry!(k_q4_0, Q4_0);
entry!(k_q4_1, Q4_1);
entry!(k_q5_0, Q5_0);
entry!(k_q5_1, Q5_1);
entry!(k_q2_k, Q2_K);
entry!(k_q3_k, Q3_K);
entry!(k_q4_k, Q4_K);
entry!(k_q5_k, Q5_K);
entry!(k_q6_k, Q6_K);

/// The `dotprod` (`I8MM` false) or `i8mm` matrix-matrix kernel of a format.
fn kernel<const I8MM: bool>(kind: FormatKind) -> Option<GemmKernel> {
    let pick = |k: (GemmKernel, GemmKernel)| Some(if I8MM { k.1 } else { k.0 });
    match kind {
        FormatKind::Q1_0 => pick((k_q1_0::DOTPROD, k_q1_0::I8MM)),
        FormatKind::Q2_0 => pick((k_q2_0::DOTPROD, k_q2_0::I8MM)),
        FormatKind::PQ2_0 | FormatKind::Q2_0G128Legacy => pick((k_pq2_0::DOTPROD, k_pq2_0::I8MM)),
        FormatKind::TQ2_0 => pick((k_tq2_0::DOTPROD, k_tq2_0::I8MM)),
        FormatKind::PTQ1_0 => pick((k_ptq1_0::DOTPROD, k_ptq1_0::I8MM)),
        FormatKind::Q8_0 => pick((k_q8_0::DOTPROD, k_q8_0::I8MM)),
        FormatKind::Q4_0 => pick((k_q4_0::DOTPROD, k_q4_0::I8MM)),
        FormatKind::Q4_1 => pick((k_q4_1::DOTPROD, k_q4_1::I8MM)),
        FormatKind::Q5_0 => pick((k_q5_0::DOTPROD, k_q5_0::I8MM)),
        FormatKind::Q5_1 => pick((k_q5_1::DOTPROD, k_q5_1::I8MM)),
        FormatKind::Q2_K => pick((k_q2_k::DOTPROD, k_q2_k::I8MM)),
        FormatKind::Q3_K => pick((k_q3_k::DOTPROD, k_q3_k::I8MM)),
        FormatKind::Q4_K => pick((k_q4_k::DOTPROD, k_q4_k::I8MM)),
        FormatKind::Q5_K => pick((k_q5_k::DOTPROD, k_q5_k::I8MM)),
        FormatKind::Q6_K => pick((k_q6_k::DOTPROD, k_q6_k::I8MM)),
        _ => None,
    }
}

/// The `dotprod` tier's matrix-matrix kernels (SDOT).
pub(super) fn gemm_dotprod(kind: FormatKind) -> Option<GemmKernel> {
    kernel::<false>(kind)
}

/// The `i8mm` tier's matrix-matrix kernels (SMMLA).
pub(super) fn gemm_i8mm(kind: FormatKind) -> Option<GemmKernel> {
    kernel::<true>(kind)
}
