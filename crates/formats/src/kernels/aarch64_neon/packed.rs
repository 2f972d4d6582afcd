//! Kernels on packed weights (`packed_layout.rs`) on the `dotprod` tier (and `i8mm`, which
//! inherits them), groups of 8 rows: a unit's packed codes are already transposed (4 codes of
//! each row a dword, rows in order), so the 32 bytes of one packed dword vector are the two
//! vectors (rows 0..4, 4..8) SDOT takes; nibbles and 2-bit codes are only spread, bits spread
//! to −1 where set (the negated codes, a bit test saving the masking to 1; the tile negates the
//! exact integer sums back), Q8_0's codes flipped back to the signed ones stored. The tile, its float arithmetic and the prepared
//! activation are the plain matrix-matrix kernel's (`gemm.rs`), so a packed product is
//! bit-identical to it, whatever the token count.

use core::arch::aarch64::*;

use super::gemm::{dotprod_tile, Q8_0Signed, Source, GROUP};
use crate::kernels::gemm_layout::{self, formats, GemmFormat, Layout, UNIT};
use crate::kernels::packed_layout::{self, header_bytes, unit_bytes, Codes, PackedFormat};
use crate::kernels::{PackPlan, PackedKernel};
use crate::FormatKind;

/// One packed group of format `F`, read in place.
struct Group<F> {
    at: *const u8,
    _format: core::marker::PhantomData<F>,
}

impl<F: PackedFormat> Group<F> {
    const HEADER: usize = header_bytes(F::CODES, F::MIN_AT.is_some(), GROUP);
    const UNIT_BYTES: usize = unit_bytes(F::CODES, GROUP);
    const STRIDE: usize = Self::HEADER + F::UNITS_PER_BLOCK * Self::UNIT_BYTES;
}

/// The 8 f16 at `p` widened exactly.
///
/// # Safety
/// `p` readable for 16 bytes; NEON present.
#[inline(always)]
unsafe fn f16x8(p: *const u8) -> [float32x4_t; 2] {
    super::f16::widen8(vld1q_u16(p.cast()))
}

impl<F: PackedFormat> Source for Group<F> {
    const NEGATED: bool = matches!(F::CODES, Codes::Bits);

    #[inline(always)]
    unsafe fn scales(&self, b: usize) -> [float32x4_t; 2] {
        f16x8(self.at.add(b * Self::STRIDE))
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
                Codes::Crumbs => {
                    // Stored dword k of a unit is packed dword k % 2 shifted by 2·(k / 2).
                    let c = pair(codes.add(32 * (k % 2)));
                    let shift = vdupq_n_s8(-2 * (k / 2) as i8);
                    c.map(|c| vandq_u8(vshlq_u8(c, shift), vdupq_n_u8(3)))
                }
            }
        });
        core::array::from_fn(|x| vreinterpretq_s8_u8(v[x / 2][x % 2]))
    }
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
    let mut r0 = 0;
    while r0 < n_rows {
        let rows = GROUP.min(n_rows - r0);
        let g = Group::<F> {
            at: groups.add(r0 / GROUP * group_bytes),
            _format: core::marker::PhantomData,
        };
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
                dotprod_tile::<P, _, 1>(&g, l, p, rows, o, out_stride);
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
entry!(k_q1_0, formats::Q1_0, formats::Q1_0);
entry!(k_q2_0, formats::Q2<1>, formats::Q2<1>);
entry!(k_pq2_0, formats::Q2<2>, formats::Q2<2>);

/// The `dotprod` tier's packed kernels.
pub(super) fn packed_dotprod(kind: FormatKind) -> Option<PackedKernel> {
    match kind {
        FormatKind::Q8_0 => Some(k_q8_0::DOTPROD),
        FormatKind::Q4_0 => Some(k_q4_0::DOTPROD),
        FormatKind::Q4_1 => Some(k_q4_1::DOTPROD),
        FormatKind::Q1_0 => Some(k_q1_0::DOTPROD),
        FormatKind::Q2_0 => Some(k_q2_0::DOTPROD),
        FormatKind::PQ2_0 | FormatKind::Q2_0G128Legacy => Some(k_pq2_0::DOTPROD),
        _ => None,
    }
}

const _: () = assert!(UNIT == 32 && GROUP == 8);
