//! Attention's weighted sums over value rows of the 32-value block formats (a quantized value
//! cache), read in place: each block widens once to 32 floats of its codes, and every query of
//! the pass adds them scaled by `weight · d` (its `weight · m` terms summed apart and added to
//! the whole block at the end, for the formats with a minimum). Keys go a tile at a time, so a
//! tile's rows stay in L1 while every column block of them is summed.

use std::arch::x86_64::*;

use crate::kernels::block_values_entry;
use crate::kernels::BlockValuesFn;
use crate::FormatKind;

/// Keys per tile: 64 rows of a 128-value Q8_0 head are 8.5 KiB.
const TILE: usize = 64;
/// Queries per pass: two sets of four accumulators beside the block's four vectors.
const G: usize = 2;

/// One 32-value block format whose value `i` is `d · code_i (+ m)`, `d` the f16 at offset 0.
trait Block {
    const BYTES: usize;
    /// Whether the block holds a minimum `m` (the f16 at offset 2).
    const MIN: bool;
    /// The block's 32 codes as signed bytes in value order.
    ///
    /// # Safety
    /// AVX2; `blk` readable for one block.
    unsafe fn codes(blk: *const u8) -> __m256i;
}

/// The 32 nibbles of the 16 bytes at `qs`, low nibbles first (value order).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn nibbles(qs: *const u8) -> __m256i {
    // SAFETY: the caller guarantees 16 readable bytes.
    let q = unsafe { _mm_loadu_si128(qs.cast()) };
    let m = _mm_set1_epi8(0x0f);
    let lo = _mm_and_si128(q, m);
    let hi = _mm_and_si128(_mm_srli_epi16::<4>(q), m);
    _mm256_inserti128_si256::<1>(_mm256_castsi128_si256(lo), hi)
}

/// The Q5_* codes: nibbles at `qs` with value `i`'s fifth bit (bit `i` of the little-endian u32
/// at `qh`) as 0x10.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn five_bits(qs: *const u8, qh: *const u8) -> __m256i {
    // SAFETY: the caller guarantees 4 readable bytes at `qh`, 16 at `qs`.
    let bits = unsafe { qh.cast::<i32>().read_unaligned() };
    // Byte k takes byte k/8 of the bits; OR-ing every bit but k%8 makes it all ones iff set.
    let spread = _mm256_shuffle_epi8(
        _mm256_set1_epi32(bits),
        _mm256_set_epi64x(
            0x0303_0303_0303_0303,
            0x0202_0202_0202_0202,
            0x0101_0101_0101_0101,
            0,
        ),
    );
    let set = _mm256_cmpeq_epi8(
        _mm256_or_si256(spread, _mm256_set1_epi64x(0x7fbf_dfef_f7fb_fdfe)),
        _mm256_set1_epi8(-1),
    );
    // SAFETY: as above.
    let n = unsafe { nibbles(qs) };
    _mm256_or_si256(n, _mm256_and_si256(set, _mm256_set1_epi8(0x10)))
}

struct Q8_0;
impl Block for Q8_0 {
    const BYTES: usize = size_of::<crate::q8_0::BlockQ8_0>();
    const MIN: bool = false;
    #[inline(always)]
    unsafe fn codes(blk: *const u8) -> __m256i {
        // SAFETY: 32 code bytes follow the scale.
        unsafe { _mm256_loadu_si256(blk.add(2).cast()) }
    }
}

struct Q4_0;
impl Block for Q4_0 {
    const BYTES: usize = size_of::<crate::q4_0::BlockQ4_0>();
    const MIN: bool = false;
    #[inline(always)]
    unsafe fn codes(blk: *const u8) -> __m256i {
        // SAFETY: 16 code bytes follow the scale; AVX2 as the caller's.
        unsafe { _mm256_sub_epi8(nibbles(blk.add(2)), _mm256_set1_epi8(8)) }
    }
}

struct Q4_1;
impl Block for Q4_1 {
    const BYTES: usize = size_of::<crate::q4_1::BlockQ4_1>();
    const MIN: bool = true;
    #[inline(always)]
    unsafe fn codes(blk: *const u8) -> __m256i {
        // SAFETY: 16 code bytes follow the scale and minimum.
        unsafe { nibbles(blk.add(4)) }
    }
}

struct Q5_0;
impl Block for Q5_0 {
    const BYTES: usize = size_of::<crate::q5_0::BlockQ5_0>();
    const MIN: bool = false;
    #[inline(always)]
    unsafe fn codes(blk: *const u8) -> __m256i {
        // SAFETY: d, qh[4], qs[16].
        unsafe { _mm256_sub_epi8(five_bits(blk.add(6), blk.add(2)), _mm256_set1_epi8(16)) }
    }
}

struct Q5_1;
impl Block for Q5_1 {
    const BYTES: usize = size_of::<crate::q5_1::BlockQ5_1>();
    const MIN: bool = true;
    #[inline(always)]
    unsafe fn codes(blk: *const u8) -> __m256i {
        // SAFETY: d, m, qh[4], qs[16].
        unsafe { five_bits(blk.add(8), blk.add(4)) }
    }
}

struct Iq4Nl;
impl Block for Iq4Nl {
    const BYTES: usize = size_of::<crate::iq4_nl::BlockIq4Nl>();
    const MIN: bool = false;
    #[inline(always)]
    unsafe fn codes(blk: *const u8) -> __m256i {
        // SAFETY: 16 index bytes follow the scale; the table is 16 bytes.
        unsafe {
            let levels = _mm_loadu_si128(crate::iq4_nl::LEVELS.as_ptr().cast());
            _mm256_shuffle_epi8(_mm256_broadcastsi128_si256(levels), nibbles(blk.add(2)))
        }
    }
}

/// One f16 at `p`, widened.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn half(p: *const u8) -> f32 {
    // SAFETY: the caller guarantees 2 readable bytes.
    let bits = unsafe { p.cast::<u16>().read_unaligned() };
    _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(i32::from(bits))))
}

/// The `BlockValuesFn` contract for format `B` (lengths checked by the caller).
///
/// # Safety
/// AVX2/FMA/F16C; the lengths as [`crate::kernels::check_block_values`] checks them.
#[target_feature(enable = "avx2,fma,f16c")]
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
                let mut acc = [[_mm256_setzero_ps(); 4]; G];
                let mut mins = [0.0f32; G];
                for j in t0..end {
                    // SAFETY: row j < max(lens) of whole blocks, block b inside the row.
                    let blk = unsafe { r.add(j * row_bytes + b * B::BYTES) };
                    // SAFETY: one block readable at `blk`.
                    let (codes, d) = unsafe { (B::codes(blk), half(blk)) };
                    let (lo, hi) = (
                        _mm256_castsi256_si128(codes),
                        _mm256_extracti128_si256::<1>(codes),
                    );
                    let v = [lo, _mm_srli_si128::<8>(lo), hi, _mm_srli_si128::<8>(hi)]
                        .map(|q| _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q)));
                    for g in 0..G {
                        if j < ends[g] {
                            // SAFETY: weights row first + g holds lens[first + g] > j values.
                            let p = unsafe { *w.add((first + g) * w_stride + j) };
                            let c = _mm256_set1_ps(p * d);
                            for (a, v) in acc[g].iter_mut().zip(&v) {
                                *a = _mm256_fmadd_ps(c, *v, *a);
                            }
                            if B::MIN {
                                // SAFETY: the minimum follows the scale.
                                mins[g] += p * unsafe { half(blk.add(2)) };
                            }
                        }
                    }
                }
                for g in 0..here {
                    let m = _mm256_set1_ps(mins[g]);
                    for (u, a) in acc[g].iter().enumerate() {
                        // SAFETY: out row first + g, columns 32b + 8u.. inside `dim`.
                        unsafe {
                            let at = o.add((first + g) * dim + 32 * b + 8 * u);
                            let sum = _mm256_add_ps(_mm256_loadu_ps(at), _mm256_add_ps(*a, m));
                            _mm256_storeu_ps(at, sum);
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
