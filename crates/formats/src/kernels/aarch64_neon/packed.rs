//! Kernels on packed weights (`packed_layout.rs`) on the `dotprod` tier (and `i8mm`, which
//! inherits them), groups of 8 rows: a unit's packed codes are already transposed (4 codes of
//! each row a dword, rows in order), so the 32 bytes of one packed dword vector are the two
//! vectors (rows 0..4, 4..8) SDOT takes; nibbles and 2-bit codes are only spread (Q5's
//! nibbles joined by their fifth bits from the bit planes), bits spread
//! to −1 where set (the negated codes, a bit test saving the masking to 1; the tile negates the
//! exact integer sums back), Q8_0's codes flipped back to the signed ones stored. The tile, its
//! float arithmetic and the prepared activation are the plain matrix-matrix kernel's (`gemm.rs`),
//! so a packed product is bit-identical to it, whatever the token count. One token of 2-bit codes
//! in value order (TQ2_0 / TQ1_0, PTQ1_0: what decode runs) takes [`crumbs_token`] instead, which
//! sums the same exact integers with one operation per SDOT instead of two.

use core::arch::aarch64::*;
use core::arch::asm;

use super::gemm::{dotprod_tile, read_f32, sdot_lanes, Q8_0Signed, Source, GROUP};
use crate::kernels::gemm_layout::{self, formats, GemmFormat, Layout, UNIT};
use crate::kernels::packed_layout::{
    self, block_header, scales_ahead, unit_bytes, Codes, PackedFormat,
};
use crate::kernels::{PackPlan, PackedKernel};
use crate::FormatKind;

/// One packed group of format `F`, read in place.
struct Group<F> {
    /// The group's first block (past the scales kept ahead, for trits).
    at: *const u8,
    /// Trits: the group's block scales, `d[GROUP]` per block (`packed_layout`).
    scales_ahead: *const u8,
    _format: core::marker::PhantomData<F>,
}

impl<F: PackedFormat> Group<F> {
    const HEADER: usize = block_header::<F>(GROUP);
    const UNIT_BYTES: usize = unit_bytes(F::CODES, GROUP);
    const STRIDE: usize = Self::HEADER + F::UNITS_PER_BLOCK * Self::UNIT_BYTES;

    /// The group starting at `group`, of rows of `n_blocks` blocks.
    fn new(group: *const u8, n_blocks: usize) -> Self {
        Group {
            at: group.wrapping_add(scales_ahead(F::TRITS, GROUP, n_blocks)),
            scales_ahead: group,
            _format: core::marker::PhantomData,
        }
    }
}

/// The 8 f16 at `p` widened exactly.
///
/// # Safety
/// `p` readable for 16 bytes; NEON present.
#[inline(always)]
unsafe fn f16x8(p: *const u8) -> [float32x4_t; 2] {
    super::f16::widen8(vld1q_u16(p.cast()))
}

/// The 2-bit codes at bits `2·shift` of `c`'s bytes.
///
/// # Safety
/// NEON present.
#[inline(always)]
unsafe fn crumbs(c: [uint8x16_t; 2], shift: usize) -> [uint8x16_t; 2] {
    let s = vdupq_n_s8(-2 * shift as i8);
    c.map(|c| vandq_u8(vshlq_u8(c, s), vdupq_n_u8(3)))
}

impl<F: PackedFormat> Source for Group<F> {
    const NEGATED: bool = matches!(F::CODES, Codes::Bits);

    #[inline(always)]
    unsafe fn scales(&self, b: usize) -> [float32x4_t; 2] {
        if F::TRITS {
            f16x8(self.scales_ahead.add(2 * GROUP * b))
        } else {
            f16x8(self.at.add(b * Self::STRIDE))
        }
    }

    #[inline(always)]
    unsafe fn mins(&self, b: usize) -> [float32x4_t; 2] {
        f16x8(self.at.add(b * Self::STRIDE + 2 * GROUP))
    }

    #[inline(always)]
    unsafe fn step(&self, i: usize) -> [int8x16_t; GROUP] {
        let (unit, half) = (i / 2, i % 2);
        let (b, u) = (unit / F::UNITS_PER_BLOCK, unit % F::UNITS_PER_BLOCK);
        let codes = self
            .at
            .add(b * Self::STRIDE + Self::HEADER + u * Self::UNIT_BYTES);
        // Stored dwords 4·half + j of the unit, j < 4: `dword(k)` gives dword k's two vectors.
        let v: [[uint8x16_t; 2]; 4] = core::array::from_fn(|j| {
            let k = 4 * half + j;
            let pair = |p: *const u8| [vld1q_u8(p), vld1q_u8(p.add(16))];
            match F::CODES {
                Codes::Bytes { flip } => {
                    // Undo the packing's flip: the code as stored, signed.
                    let x = vdupq_n_u8(flip);
                    pair(codes.add(32 * k)).map(|c| veorq_u8(c, x))
                }
                Codes::Nibbles => {
                    let c = pair(codes.add(32 * (k % 4)));
                    if k < 4 {
                        c.map(|c| vandq_u8(c, vdupq_n_u8(0x0F)))
                    } else {
                        c.map(|c| vshrq_n_u8::<4>(c))
                    }
                }
                Codes::Fives => {
                    // Q5_0 / Q5_1: the nibbles as Q4's; the fifth bits of dword k are bit k of
                    // the planes (one vector pair after the nibbles), tested and masked to 16,
                    // then put above the nibble: a select keeping the low nibble, or a shift
                    // inserting the high one.
                    let c = pair(codes.add(32 * (k % 4)));
                    let planes = pair(codes.add(4 * 32));
                    let fifth =
                        planes.map(|p| vandq_u8(vtstq_u8(p, vdupq_n_u8(1 << k)), vdupq_n_u8(0x10)));
                    core::array::from_fn(|h| {
                        if k < 4 {
                            vbslq_u8(vdupq_n_u8(0x0F), c[h], fifth[h])
                        } else {
                            vsriq_n_u8::<4>(fifth[h], c[h])
                        }
                    })
                }
                Codes::Bits => {
                    // The step's four dwords are the unit's bytes 16·half.. (one load: the
                    // same address for every j); bytes 4j..4j+4 hold dword k, 8 bits a row.
                    // Each bit becomes −1 where set (a lookup spreading its byte, a bit test):
                    // the codes negated, which the tile undoes (`Source::NEGATED`).
                    const SELECT: [u8; 16] =
                        [1, 2, 4, 8, 16, 32, 64, 128, 1, 2, 4, 8, 16, 32, 64, 128];
                    let bits = vld1q_u8(codes.add(16 * half));
                    let select = vld1q_u8(SELECT.as_ptr());
                    let spread = |b: u8| {
                        let index = vcombine_u8(vdup_n_u8(b), vdup_n_u8(b + 1));
                        vtstq_u8(vqtbl1q_u8(bits, index), select)
                    };
                    [spread(4 * j as u8), spread(4 * j as u8 + 2)]
                }
                // TQ1_0 is packed as TQ2_0 on ARM (`packed_layout::Spec::of_kind`).
                Codes::Base3 => unreachable!("no ARM packed kernel reads base-3 codes"),
                Codes::Crumbs if F::TRITS => {
                    // Byte 4r + i of packed vector v of a unit holds values 16v + 4s + i at
                    // bits 2s: step i is vector i % 2 of unit i / 2, dword j its shift by 2j.
                    crumbs(pair(codes.add(32 * half)), j)
                }
                Codes::Crumbs if !F::PERMUTED => {
                    // TQ2_0 (natural order): code byte 32H + m of a block holds values
                    // 128H + 32l + m at bits 2l, and packed vector v of unit u its bytes
                    // 8u + 4v..: values 16i + 4j.. are vector j % 2 of unit 4H + 2(i % 2) + j / 2
                    // shifted by 2l, with H, l the step's (i % 16 = 8H + 2l + i % 2).
                    let step = i % (2 * F::UNITS_PER_BLOCK);
                    let (h, l) = (step / 8, step % 8 / 2);
                    let u = 4 * h + 2 * (step % 2) + j / 2;
                    let unit_at = self
                        .at
                        .add(b * Self::STRIDE + Self::HEADER + u * Self::UNIT_BYTES);
                    crumbs(pair(unit_at.add(32 * (j % 2))), l)
                }
                Codes::Crumbs => {
                    // Stored dword k of a unit is packed dword k % 2 shifted by 2·(k / 2).
                    crumbs(pair(codes.add(32 * (k % 2))), k / 2)
                }
            }
        });
        core::array::from_fn(|x| vreinterpretq_s8_u8(v[x / 2][x % 2]))
    }
}

/// `acc + SDOT(w, 4-byte lane LANE of a)`: 4 rows' codes (4 each in `w`) against one dword of
/// a token.
///
/// # Safety
/// The dot-product extension present.
#[target_feature(enable = "neon,dotprod")]
#[inline]
unsafe fn sdot_lane<const LANE: i32>(mut acc: int32x4_t, w: uint8x16_t, a: int8x16_t) -> int32x4_t {
    // SAFETY: a register-only instruction of an extension the caller guarantees.
    unsafe {
        asm!(
            "sdot {acc:v}.4s, {w:v}.16b, {a:v}.4b[{lane}]",
            acc = inout(vreg) acc,
            w = in(vreg) w,
            a = in(vreg) a,
            lane = const LANE,
            options(pure, nomem, nostack, preserves_flags),
        );
    }
    acc
}

/// Whether `F`'s packed codes are 2-bit codes in value order (TQ2_0, and TQ1_0 packed as it;
/// PTQ1_0's trits), which [`crumbs_token`] reads.
const fn value_order_crumbs<F: PackedFormat>() -> bool {
    matches!(F::CODES, Codes::Crumbs) && (F::TRITS || !F::PERMUTED)
}

/// One token × a packed group of 2-bit codes in value order, the codes masked in place
/// instead of shifted down: a byte's crumbs at bits 0, 2, 4 are taken as 1, 4, 16 times the
/// code (one AND each; the top one by one shift), each into an accumulator of its own, and
/// per activation scale the three exact sums are brought together by exact shifts before
/// the same float step as [`dotprod_tile`] — so the result is bit-identical to it, with a
/// mask or a shift per SDOT instead of both.
///
/// TQ2_0: packed vector q of units 4H + 2p, 4H + 2p + 1 of a block, shifted by 2s, holds
/// dword q of values 128H + 32s + 16p.. — so one activation vector serves four vectors at one
/// shift (one class), a lane each. PTQ1_0: vector k of unit u shifted by 2s holds dword
/// 4k + s of the unit — one activation vector serves one vector at four shifts.
///
/// # Safety
/// As [`dotprod_tile`] with one token; `F` takes this path (`value_order_crumbs`).
#[inline(always)]
unsafe fn crumbs_token<F: PackedFormat>(
    g: &Group<F>,
    l: &Layout,
    tok: *const u8,
    n_rows: usize,
    out: *mut f32,
) {
    let n_blocks = l.n_values / (F::UNITS_PER_BLOCK * UNIT);
    let units_per_scale = F::PARTNER.units;
    let masks = [0x03, 0x0C, 0x30].map(|m| vdupq_n_u8(m));
    let mut acc = [vdupq_n_f32(0.0); 2];
    for b in 0..n_blocks {
        let d = g.scales(b);
        let bias = read_f32(tok.add(l.bias_at + 4 * b));
        for h in 0..2 {
            acc[h] = vfmaq_n_f32(acc[h], d[h], bias);
        }
        let codes = g.at.add(b * Group::<F>::STRIDE + Group::<F>::HEADER);
        for sc in 0..F::UNITS_PER_BLOCK / units_per_scale {
            // `[h][class]`: shifts 0 and 3 (×1), shift 1 (×4), shift 2 (×16).
            let mut cls = [[vdupq_n_s32(0); 3]; 2];
            if F::TRITS {
                for u in sc * units_per_scale..(sc + 1) * units_per_scale {
                    let unit_index = b * F::UNITS_PER_BLOCK + u;
                    for k in 0..2 {
                        let w = codes.add(u * Group::<F>::UNIT_BYTES + 32 * k);
                        let a = vld1q_s8(tok.add(l.codes_at + 32 * unit_index + 16 * k).cast());
                        for (h, c) in cls.iter_mut().enumerate() {
                            let w = vld1q_u8(w.add(16 * h));
                            c[0] = sdot_lane::<0>(c[0], vandq_u8(w, masks[0]), a);
                            c[1] = sdot_lane::<1>(c[1], vandq_u8(w, masks[1]), a);
                            c[2] = sdot_lane::<2>(c[2], vandq_u8(w, masks[2]), a);
                            c[0] = sdot_lane::<3>(c[0], vshrq_n_u8::<6>(w), a);
                        }
                    }
                }
            } else {
                // The scale is the whole block (Q8_K): its four quads (H, p).
                for quad in 0..F::UNITS_PER_BLOCK / 2 {
                    let (hh, p) = (quad / 2, quad % 2);
                    let w = codes.add(quad * 2 * Group::<F>::UNIT_BYTES);
                    let w: [[uint8x16_t; 4]; 2] = core::array::from_fn(|h| {
                        core::array::from_fn(|q| vld1q_u8(w.add(32 * q + 16 * h)))
                    });
                    let act = tok.add(l.codes_at + 256 * b + 128 * hh + 16 * p);
                    for s in 0..4 {
                        let a = vld1q_s8(act.add(32 * s).cast());
                        let class = if s == 3 { 0 } else { s };
                        for (c, w) in cls.iter_mut().zip(&w) {
                            let x = w.map(|w| {
                                vreinterpretq_s8_u8(if s == 3 {
                                    vshrq_n_u8::<6>(w)
                                } else {
                                    vandq_u8(w, masks[class])
                                })
                            });
                            c[class] = sdot_lanes(c[class], x, a);
                        }
                    }
                }
            }
            let scale_index = b * (F::UNITS_PER_BLOCK / units_per_scale) + sc;
            let fd = read_f32(tok.add(l.scales_at + 4 * scale_index));
            for h in 0..2 {
                let [c0, c1, c2] = cls[h];
                let isum = vaddq_s32(vaddq_s32(c0, vshrq_n_s32::<2>(c1)), vshrq_n_s32::<4>(c2));
                acc[h] = vfmaq_f32(acc[h], vcvtq_f32_s32(isum), vmulq_n_f32(d[h], fd));
            }
        }
    }
    let mut v = [0.0f32; GROUP];
    vst1q_f32(v.as_mut_ptr(), acc[0]);
    vst1q_f32(v.as_mut_ptr().add(4), acc[1]);
    core::ptr::copy_nonoverlapping(v.as_ptr(), out, n_rows);
}

/// Every token × the groups of `n_rows` rows.
///
/// # Safety
/// Lengths checked by `packed_layout::check_run` for `F` and `l` (the layout of `P`, the format
/// whose preparation the kernel takes); NEON and the dot-product extension enabled.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn run<F: PackedFormat, P: GemmFormat>(
    l: &Layout,
    group_bytes: usize,
    groups: *const u8,
    n_rows: usize,
    prepared: *const u8,
    n_tokens: usize,
    out: *mut f32,
    out_stride: usize,
) {
    let block_values = F::UNITS_PER_BLOCK * UNIT;
    let mut r0 = 0;
    while r0 < n_rows {
        let rows = GROUP.min(n_rows - r0);
        let g = Group::<F>::new(
            groups.add(r0 / GROUP * group_bytes),
            l.n_values / block_values,
        );
        let mut t0 = 0;
        while t0 < n_tokens {
            let p = prepared.add(t0 * l.bytes);
            let o = out.add(t0 * out_stride + r0);
            t0 += if n_tokens - t0 >= 4 {
                dotprod_tile::<P, _, 4>(&g, l, p, rows, o, out_stride);
                4
            } else if n_tokens - t0 >= 2 {
                dotprod_tile::<P, _, 2>(&g, l, p, rows, o, out_stride);
                2
            } else {
                if value_order_crumbs::<F>() {
                    crumbs_token(&g, l, p, rows, o);
                } else {
                    dotprod_tile::<P, _, 1>(&g, l, p, rows, o, out_stride);
                }
                1
            };
        }
        r0 += rows;
    }
}

/// The registered kernel of packed format `$f`, its tokens prepared as for `$p` (the plain
/// kernel's format: the same but for Q8_0, whose codes are used signed).
macro_rules! entry {
    ($name:ident, $f:ty, $p:ty) => {
        mod $name {
            use super::*;

            #[target_feature(enable = "neon,dotprod")]
            #[allow(clippy::too_many_arguments)]
            unsafe fn dotprod(
                l: &Layout,
                gb: usize,
                g: &[u8],
                n: usize,
                p: &[u8],
                t: usize,
                o: &mut [f32],
                s: usize,
            ) {
                run::<$f, $p>(l, gb, g.as_ptr(), n, p.as_ptr(), t, o.as_mut_ptr(), s)
            }

            fn run_dotprod(
                plan: &PackPlan,
                groups: &[u8],
                n_rows: usize,
                prepared: &[u8],
                n_tokens: usize,
                out: &mut [f32],
                out_stride: usize,
            ) {
                let Some((l, gb)) = packed_layout::check_run::<$f>(
                    plan, GROUP, groups, n_rows, prepared, n_tokens, out, out_stride,
                ) else {
                    return;
                };
                const { assert!(<$f>::BLOCK_BYTES == <$p>::BLOCK_BYTES) };
                // SAFETY: registered only through `Kernels::new(Isa::Dotprod | Isa::I8mm)`, which
                // checked NEON and the dot product; `check_run` checked the lengths (`l` is also
                // `$p`'s layout: the two differ only in the codes' offset, not in the sizes).
                unsafe { dotprod(&l, gb, groups, n_rows, prepared, n_tokens, out, out_stride) }
            }

            pub(super) const DOTPROD: PackedKernel = PackedKernel {
                group_rows: GROUP,
                prepared_bytes: gemm_layout::prepared_bytes::<$p>,
                prepare: gemm_layout::prepare_row::<$p>,
                run: run_dotprod,
            };
        }
    };
}

entry!(k_q8_0, formats::Q8_0, Q8_0Signed);
entry!(k_q4_0, formats::Q4_0, formats::Q4_0);
entry!(k_q4_1, formats::Q4_1, formats::Q4_1);
entry!(k_q5_0, formats::Q5_0, formats::Q5_0);
entry!(k_q5_1, formats::Q5_1, formats::Q5_1);
entry!(k_q1_0, formats::Q1_0, formats::Q1_0);
entry!(k_q2_0, formats::Q2<1>, formats::Q2<1>);
entry!(k_pq2_0, formats::Q2<2>, formats::Q2<2>);
entry!(k_tq2_0, formats::TQ2_0, formats::TQ2_0);
entry!(k_ptq1_0, formats::PTQ1_0, formats::PTQ1_0);

/// The `dotprod` tier's packed kernels.
pub(super) fn packed_dotprod(kind: FormatKind) -> Option<PackedKernel> {
    match kind {
        FormatKind::Q8_0 => Some(k_q8_0::DOTPROD),
        FormatKind::Q4_0 => Some(k_q4_0::DOTPROD),
        FormatKind::Q4_1 => Some(k_q4_1::DOTPROD),
        FormatKind::Q5_0 => Some(k_q5_0::DOTPROD),
        FormatKind::Q5_1 => Some(k_q5_1::DOTPROD),
        FormatKind::Q1_0 => Some(k_q1_0::DOTPROD),
        FormatKind::Q2_0 => Some(k_q2_0::DOTPROD),
        FormatKind::PQ2_0 | FormatKind::Q2_0G128Legacy => Some(k_pq2_0::DOTPROD),
        // TQ1_0 is packed as TQ2_0 (`packed_layout`).
        FormatKind::TQ2_0 | FormatKind::TQ1_0 => Some(k_tq2_0::DOTPROD),
        FormatKind::PTQ1_0 => Some(k_ptq1_0::DOTPROD),
        _ => None,
    }
}

const _: () = assert!(UNIT == 32 && GROUP == 8);
