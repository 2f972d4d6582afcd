//! Q4_0 × Q8_0, Q4_1 × Q8_1, Q8_0 × Q8_0 and IQ4_NL × Q8_0, four rows per pass so each
//! activation block serves them all. One block is 32 values: the 16 code bytes widen to [low
//! nibbles | high nibbles], which is the activation's own order, and `maddubs` multiplies the
//! unsigned codes by the signed int8 activations (at most 2·15·128 per pair, so its i16
//! saturation never bites). The signed codes (Q8_0's bytes, IQ4_NL's levels looked up from its
//! nibbles) go as |w| times the activation with w's sign.

use std::arch::x86_64::*;

use super::std_util::hsum_ps;
use crate::kernels::entries::row_band_kernel;

const ROWS: usize = 4;

/// The 32 codes of a block at `qs` as bytes 0..=15 in value order.
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

/// Two little-endian f16 at `p` widened: lanes 0 and 1.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn two_halves(p: *const u8) -> __m128 {
    // SAFETY: the caller guarantees 4 readable bytes.
    let bits = unsafe { p.cast::<i32>().read_unaligned() };
    _mm_cvtph_ps(_mm_cvtsi32_si128(bits))
}

#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn rows_q4_0<const R: usize>(w: *const u8, row_bytes: usize, a: &[u8]) -> [f32; R] {
    let ones = _mm256_set1_epi16(1);
    let eight = _mm256_set1_epi8(8);
    let mut acc = [_mm256_setzero_ps(); R];
    for (j, ab) in a.chunks_exact(34).enumerate() {
        // SAFETY: `ab` is one 34-byte Q8_0 block.
        let (av, dy) = unsafe {
            (
                _mm256_loadu_si256(ab.as_ptr().add(2).cast()),
                _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(i32::from(
                    ab.as_ptr().cast::<u16>().read_unaligned(),
                )))),
            )
        };
        // Codes mean code − 8: subtract 8·Σa once for all rows.
        let corr = _mm256_madd_epi16(_mm256_maddubs_epi16(eight, av), ones);
        for (r, acc) in acc.iter_mut().enumerate() {
            // SAFETY: block j of row r lies inside the row.
            let (q, d) = unsafe {
                let blk = w.add(r * row_bytes + 18 * j);
                (nibbles(blk.add(2)), two_halves(blk))
            };
            let s = _mm256_sub_epi32(_mm256_madd_epi16(_mm256_maddubs_epi16(q, av), ones), corr);
            let scale = _mm256_set1_ps(_mm_cvtss_f32(d) * dy);
            *acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), scale, *acc);
        }
    }
    let mut out = [0.0; R];
    for r in 0..R {
        out[r] = hsum_ps(acc[r]);
    }
    out
}

row_band_kernel!(
    /// # Safety
    /// AVX2, FMA and F16C must be available; `weights` holds `out.len()` rows of `row_bytes`.
    gemv_q4_0,
    "avx2,fma,f16c",
    ROWS,
    rows_q4_0
);

#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn rows_q4_1<const R: usize>(w: *const u8, row_bytes: usize, a: &[u8]) -> [f32; R] {
    let ones = _mm256_set1_epi16(1);
    let mut acc = [_mm256_setzero_ps(); R];
    // Lane 1 of each accumulates m·s, the offset term.
    let mut acc_m = [_mm_setzero_ps(); R];
    for (j, ab) in a.chunks_exact(36).enumerate() {
        // SAFETY: `ab` is one 36-byte Q8_1 block: d, s, 32 codes.
        let (av, ds) = unsafe {
            (
                _mm256_loadu_si256(ab.as_ptr().add(4).cast()),
                two_halves(ab.as_ptr()),
            )
        };
        for r in 0..R {
            // SAFETY: block j of row r lies inside the row.
            let (q, dm) = unsafe {
                let blk = w.add(r * row_bytes + 20 * j);
                (nibbles(blk.add(4)), two_halves(blk))
            };
            // [dx·dy, m·s, ..]
            let prod = _mm_mul_ps(dm, ds);
            let s = _mm256_madd_epi16(_mm256_maddubs_epi16(q, av), ones);
            acc[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), _mm256_broadcastss_ps(prod), acc[r]);
            acc_m[r] = _mm_add_ps(acc_m[r], prod);
        }
    }
    let mut out = [0.0; R];
    for r in 0..R {
        out[r] = hsum_ps(acc[r]) + _mm_cvtss_f32(_mm_movehdup_ps(acc_m[r]));
    }
    out
}

row_band_kernel!(
    /// # Safety
    /// AVX2, FMA and F16C must be available; `weights` holds `out.len()` rows of `row_bytes`.
    gemv_q4_1,
    "avx2,fma,f16c",
    ROWS,
    rows_q4_1
);

/// IQ4_NL's 16 levels in both 128-bit lanes, for `pshufb`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn iq4_nl_levels() -> __m256i {
    // SAFETY: `LEVELS` is 16 bytes.
    _mm256_broadcastsi128_si256(unsafe { _mm_loadu_si128(crate::iq4_nl::LEVELS.as_ptr().cast()) })
}

/// The formats of signed codes against Q8_0: Q8_0 (`IQ4_NL` false: the 32 code bytes follow
/// the scale) and IQ4_NL (16 index bytes follow the scale, each nibble looked up among the 16
/// levels by `pshufb`). Either way a block is 32 signed bytes in value order times `d`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn rows_signed<const IQ4_NL: bool, const R: usize>(
    w: *const u8,
    row_bytes: usize,
    a: &[u8],
) -> [f32; R] {
    let block_bytes = if IQ4_NL { 18 } else { 34 };
    let levels = if IQ4_NL {
        iq4_nl_levels()
    } else {
        _mm256_setzero_si256()
    };
    let ones = _mm256_set1_epi16(1);
    let mut acc = [_mm256_setzero_ps(); R];
    for (j, ab) in a.chunks_exact(34).enumerate() {
        // SAFETY: `ab` is one 34-byte Q8_0 block.
        let (av, dy) = unsafe {
            (
                _mm256_loadu_si256(ab.as_ptr().add(2).cast()),
                _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(i32::from(
                    ab.as_ptr().cast::<u16>().read_unaligned(),
                )))),
            )
        };
        for (r, acc) in acc.iter_mut().enumerate() {
            // SAFETY: block j of row r lies inside the row.
            let (q, d) = unsafe {
                let blk = w.add(r * row_bytes + block_bytes * j);
                let q = if IQ4_NL {
                    _mm256_shuffle_epi8(levels, nibbles(blk.add(2)))
                } else {
                    _mm256_loadu_si256(blk.add(2).cast())
                };
                (q, two_halves(blk))
            };
            // |w| · (a with w's sign): exact while |a| ≤ 127, which the activation conversion
            // guarantees for finite inputs (2·128·127 < 2¹⁵; IQ4_NL's levels are at most 127).
            let p = _mm256_maddubs_epi16(_mm256_abs_epi8(q), _mm256_sign_epi8(av, q));
            let s = _mm256_madd_epi16(p, ones);
            let scale = _mm256_set1_ps(_mm_cvtss_f32(d) * dy);
            *acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), scale, *acc);
        }
    }
    let mut out = [0.0; R];
    for r in 0..R {
        out[r] = hsum_ps(acc[r]);
    }
    out
}

row_band_kernel!(
    /// # Safety
    /// AVX2, FMA and F16C must be available; `weights` holds `out.len()` rows of `row_bytes`.
    gemv_q8_0,
    "avx2,fma,f16c",
    ROWS,
    rows_signed,
    false
);

row_band_kernel!(
    /// # Safety
    /// AVX2, FMA and F16C must be available; `weights` holds `out.len()` rows of `row_bytes`.
    gemv_iq4_nl,
    "avx2,fma,f16c",
    ROWS,
    rows_signed,
    true
);
