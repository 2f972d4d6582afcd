//! Q4_0 × Q8_0, Q4_1 × Q8_1, Q8_0 × Q8_0 and IQ4_NL × Q8_0 with AVX-512 VNNI (+VBMI for the
//! byte shuffle): two blocks per 512-bit register, four rows per pass so each activation pair
//! serves them all.
//!
//! A pair of weight blocks is fetched with one masked load (masked-off bytes are never read, so
//! the last block of the last row cannot read past the data), `vpermb` lays the code bytes out
//! as [block j low nibbles | block j high nibbles | block j+1 low | block j+1 high] — the
//! activations' own order — and `vpdpbusd` multiplies the unsigned codes by the signed int8
//! activations exactly. Offsets that make codes signed (Q4_0's −8, Q8_0's sign) are folded into
//! the accumulator's starting value, −k·Σa per lane, computed once per pair for all rows; IQ4_NL
//! is Q4_0's layout whose nibbles `vpshufb` turns into its levels + 128 (the offset −128).

use crate::kernels::entries::row_band_kernel;
use std::arch::x86_64::*;

const ROWS: usize = 4;

/// Byte indices into the loaded pair: lanes 0 and 1 take block j's codes (at `first`), lanes 2
/// and 3 block j+1's (at `first + stride`); odd lanes are shifted down to the high nibble.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx512vbmi,avx2,fma,f16c")]
fn code_index(first: u8, stride: u8) -> __m512i {
    let mut idx = [0u8; 64];
    for (i, v) in idx.iter_mut().enumerate() {
        let lane = i / 16;
        let block = if lane < 2 { 0 } else { stride };
        *v = first + block + (i % 16) as u8;
    }
    // SAFETY: `idx` is 64 bytes.
    unsafe { _mm512_loadu_si512(idx.as_ptr().cast()) }
}

/// Widened lanes [a; 8 times, b; 8 times] of `pair` = [a, b, ..] (f16 bits in the low 32 bits).
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx512vbmi,avx2,fma,f16c")]
fn spread(halves: __m128i, first: i32, second: i32) -> __m512 {
    let v = _mm512_zextps128_ps512(_mm_cvtph_ps(halves));
    let idx = _mm512_setr_epi32(
        first, first, first, first, first, first, first, first, second, second, second, second,
        second, second, second, second,
    );
    _mm512_permutexvar_ps(idx, v)
}

/// The 32 activation codes of blocks j and (if `pair`) j+1, zeros for a missing j+1.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx512vbmi,avx2,fma,f16c")]
unsafe fn activation_pair(first: *const u8, second: *const u8, pair: bool) -> __m512i {
    // SAFETY: the caller guarantees 32 readable bytes at `first`, and at `second` when `pair`
    // (a zero mask reads nothing).
    unsafe {
        let lo = _mm256_loadu_si256(first.cast());
        let hi = _mm256_maskz_loadu_epi8(if pair { u32::MAX } else { 0 }, second.cast());
        _mm512_inserti64x4::<1>(_mm512_castsi256_si512(lo), hi)
    }
}

/// Reads an unaligned little-endian u16.
#[inline(always)]
unsafe fn u16_at(p: *const u8) -> i32 {
    // SAFETY: the caller guarantees 2 readable bytes.
    i32::from(unsafe { p.cast::<u16>().read_unaligned() })
}

#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx512vbmi,avx2,fma,f16c")]
unsafe fn rows_nibbles<const IQ4_NL: bool, const R: usize>(
    w: *const u8,
    row_bytes: usize,
    a: &[u8],
) -> [f32; R] {
    let nb = a.len() / 34;
    let idx_q = code_index(2, 18);
    let shift = _mm512_setr_epi64(0, 0, 4, 4, 0, 0, 4, 4);
    let nibble = _mm512_set1_epi8(0x0f);
    // d of block j is word 0 of the pair, of block j+1 word 9.
    let idx_d = _mm512_setr_epi32(
        0,
        0,
        0,
        0,
        0x0009_0009,
        0x0009_0009,
        0x0009_0009,
        0x0009_0009,
        0,
        0,
        0,
        0,
        0,
        0,
        0,
        0,
    );
    // Q4_0's codes mean code − 8; IQ4_NL's levels + 128 (1..=241, unsigned for `vpdpbusd`),
    // looked up in each 128-bit lane, mean level.
    let offset = _mm512_set1_epi8(if IQ4_NL { -128 } else { 8 });
    let levels = if IQ4_NL {
        // SAFETY: `LEVELS` is 16 bytes.
        let l = unsafe { _mm_loadu_si128(crate::iq4_nl::LEVELS.as_ptr().cast()) };
        _mm512_broadcast_i32x4(_mm_xor_si128(l, _mm_set1_epi8(-128)))
    } else {
        _mm512_setzero_si512()
    };
    let mut acc = [_mm512_setzero_ps(); R];
    let mut j = 0;
    while j < nb {
        let pair = j + 1 < nb;
        let mask: u64 = if pair { (1 << 36) - 1 } else { (1 << 18) - 1 };
        // SAFETY: block j (and j+1 when `pair`) of the activation exist.
        let (av, dy) = unsafe {
            let ab = a.as_ptr().add(34 * j);
            let d2 = if pair { u16_at(ab.add(34)) } else { 0 };
            (
                activation_pair(ab.add(2), ab.add(36), pair),
                (u16_at(ab) | (d2 << 16)),
            )
        };
        let dy = spread(_mm_cvtsi32_si128(dy), 0, 1);
        let start = _mm512_sub_epi32(
            _mm512_setzero_si512(),
            _mm512_dpbusd_epi32(_mm512_setzero_si512(), offset, av),
        );
        for (r, acc) in acc.iter_mut().enumerate() {
            // SAFETY: the masked bytes are blocks j (and j+1) of row r; the rest is not read.
            let l = unsafe { _mm512_maskz_loadu_epi8(mask, w.add(r * row_bytes + 18 * j).cast()) };
            let mut q = _mm512_and_si512(
                _mm512_srlv_epi64(_mm512_permutexvar_epi8(idx_q, l), shift),
                nibble,
            );
            if IQ4_NL {
                q = _mm512_shuffle_epi8(levels, q);
            }
            let dp = _mm512_dpbusd_epi32(start, q, av);
            let dx = _mm512_cvtph_ps(_mm512_castsi512_si256(_mm512_permutexvar_epi16(idx_d, l)));
            *acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dp), _mm512_mul_ps(dx, dy), *acc);
        }
        j += 2;
    }
    let mut out = [0.0; R];
    for r in 0..R {
        out[r] = _mm512_reduce_add_ps(acc[r]);
    }
    out
}

#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx512vbmi,avx2,fma,f16c")]
unsafe fn rows_q4_1<const R: usize>(w: *const u8, row_bytes: usize, a: &[u8]) -> [f32; R] {
    let nb = a.len() / 36;
    let idx_q = code_index(4, 20);
    let shift = _mm512_setr_epi64(0, 0, 4, 4, 0, 0, 4, 4);
    let nibble = _mm512_set1_epi8(0x0f);
    // Words 0..16: d_j ×8 (word 0), d_j+1 ×8 (word 10). Words 16..32: m_j (word 1) and m_j+1
    // (word 11) at lanes 0 and 8, else word 31, which the masked load left zero.
    let idx_dm = _mm512_setr_epi32(
        0,
        0,
        0,
        0,
        0x000a_000a,
        0x000a_000a,
        0x000a_000a,
        0x000a_000a,
        0x001f_0001,
        0x001f_001f,
        0x001f_001f,
        0x001f_001f,
        0x001f_000b,
        0x001f_001f,
        0x001f_001f,
        0x001f_001f,
    );
    let mut acc = [_mm512_setzero_ps(); R];
    let mut j = 0;
    while j < nb {
        let pair = j + 1 < nb;
        let mask: u64 = if pair { (1 << 40) - 1 } else { (1 << 20) - 1 };
        // SAFETY: block j (and j+1 when `pair`) of the activation exist; a head is d then s.
        let (av, heads) = unsafe {
            let ab = a.as_ptr().add(36 * j);
            let h2 = if pair {
                ab.add(36).cast::<i32>().read_unaligned()
            } else {
                0
            };
            let h1 = ab.cast::<i32>().read_unaligned();
            (
                activation_pair(ab.add(4), ab.add(40), pair),
                _mm_setr_epi32(h1, h2, 0, 0),
            )
        };
        let dy = spread(heads, 0, 2);
        let sy = spread(heads, 1, 3);
        for (r, acc) in acc.iter_mut().enumerate() {
            // SAFETY: the masked bytes are blocks j (and j+1) of row r; the rest is not read.
            let l = unsafe { _mm512_maskz_loadu_epi8(mask, w.add(r * row_bytes + 20 * j).cast()) };
            let q = _mm512_and_si512(
                _mm512_srlv_epi64(_mm512_permutexvar_epi8(idx_q, l), shift),
                nibble,
            );
            let dp = _mm512_dpbusd_epi32(_mm512_setzero_si512(), q, av);
            let dm = _mm512_permutexvar_epi16(idx_dm, l);
            let dx = _mm512_cvtph_ps(_mm512_castsi512_si256(dm));
            let mx = _mm512_cvtph_ps(_mm512_extracti64x4_epi64::<1>(dm));
            *acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dp), _mm512_mul_ps(dx, dy), *acc);
            *acc = _mm512_fmadd_ps(mx, sy, *acc);
        }
        j += 2;
    }
    let mut out = [0.0; R];
    for r in 0..R {
        out[r] = _mm512_reduce_add_ps(acc[r]);
    }
    out
}

#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx512vbmi,avx2,fma,f16c")]
unsafe fn rows_q8_0<const R: usize>(w: *const u8, row_bytes: usize, a: &[u8]) -> [f32; R] {
    let nb = a.len() / 34;
    let bias = _mm512_set1_epi8(-128);
    let mut acc = [_mm512_setzero_ps(); R];
    let mut j = 0;
    while j < nb {
        let pair = j + 1 < nb;
        // SAFETY: block j (and j+1 when `pair`) of the activation exist.
        let (av, dy) = unsafe {
            let ab = a.as_ptr().add(34 * j);
            let d2 = if pair { u16_at(ab.add(34)) } else { 0 };
            (
                activation_pair(ab.add(2), ab.add(36), pair),
                (u16_at(ab) | (d2 << 16)),
            )
        };
        let dy = spread(_mm_cvtsi32_si128(dy), 0, 1);
        // Codes w + 128 are unsigned; Σ(w + 128)·a − 128·Σa = Σ w·a.
        let start = _mm512_sub_epi32(
            _mm512_setzero_si512(),
            _mm512_dpbusd_epi32(_mm512_setzero_si512(), bias, av),
        );
        for (r, acc) in acc.iter_mut().enumerate() {
            // SAFETY: blocks j (and j+1 when `pair`) of row r; a missing j+1 is not read.
            let (q, dx) = unsafe {
                let blk = w.add(r * row_bytes + 34 * j);
                let d2 = if pair { u16_at(blk.add(34)) } else { 0 };
                (
                    activation_pair(blk.add(2), blk.add(36), pair),
                    u16_at(blk) | (d2 << 16),
                )
            };
            let dp = _mm512_dpbusd_epi32(start, _mm512_xor_si512(q, bias), av);
            let dx = spread(_mm_cvtsi32_si128(dx), 0, 1);
            *acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dp), _mm512_mul_ps(dx, dy), *acc);
        }
        j += 2;
    }
    let mut out = [0.0; R];
    for r in 0..R {
        out[r] = _mm512_reduce_add_ps(acc[r]);
    }
    out
}

row_band_kernel!(
    /// # Safety
    /// AVX-512 F/BW/VL/DQ, VNNI and VBMI (and AVX2/FMA/F16C) must be available; `weights`
    /// holds `out.len()` rows of `row_bytes` in whole blocks matching `activation`.
    gemv_q4_0,
    "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx512vbmi,avx2,fma,f16c",
    ROWS,
    rows_nibbles,
    false
);
row_band_kernel!(
    /// # Safety
    /// AVX-512 F/BW/VL/DQ, VNNI and VBMI (and AVX2/FMA/F16C) must be available; `weights`
    /// holds `out.len()` rows of `row_bytes` in whole blocks matching `activation`.
    gemv_iq4_nl,
    "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx512vbmi,avx2,fma,f16c",
    ROWS,
    rows_nibbles,
    true
);
row_band_kernel!(
    /// # Safety
    /// AVX-512 F/BW/VL/DQ, VNNI and VBMI (and AVX2/FMA/F16C) must be available; `weights`
    /// holds `out.len()` rows of `row_bytes` in whole blocks matching `activation`.
    gemv_q4_1,
    "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx512vbmi,avx2,fma,f16c",
    ROWS,
    rows_q4_1
);
row_band_kernel!(
    /// # Safety
    /// AVX-512 F/BW/VL/DQ, VNNI and VBMI (and AVX2/FMA/F16C) must be available; `weights`
    /// holds `out.len()` rows of `row_bytes` in whole blocks matching `activation`.
    gemv_q8_0,
    "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx512vbmi,avx2,fma,f16c",
    ROWS,
    rows_q8_0
);
