//! The K-quants with signed codes and signed sub-block scales (Q6_K: code − 32, Q3_K: code − 4)
//! × Q8_K on AVX2. Codes are multiplied unsigned and the offset taken back as `maddubs(k, q8)`,
//! computed once per activation block; the 16-bit difference is exact (it equals
//! Σ (code − k)·q8 over a pair of values, at most 2·32·128 in magnitude) even where the two
//! terms wrap.

use core::arch::x86_64::*;

use super::{bits_to, half, madd_acc, run, splat_i8_pair, RowBlock, Q8K, Q8_K_BYTES};

/// A Q8_K block with `maddubs(CENTER, q)` per 32 codes.
pub(super) struct Centered<const CENTER: i8> {
    y: Q8K,
    offset: [__m256i; 8],
}

impl<const CENTER: i8> Centered<CENTER> {
    #[inline(always)]
    unsafe fn load(y: *const u8) -> Self {
        let y = Q8K::load(y);
        let k = _mm256_set1_epi8(CENTER);
        let offset = core::array::from_fn(|i| _mm256_maddubs_epi16(k, y.q[i]));
        Centered { y, offset }
    }

    /// Σ (code − CENTER)·q8 per 16-bit pair, for codes 32i..32i+32 of the block.
    #[inline(always)]
    unsafe fn pairs(&self, codes: __m256i, i: usize) -> __m256i {
        _mm256_sub_epi16(_mm256_maddubs_epi16(codes, self.y.q[i]), self.offset[i])
    }
}

struct Q6K;

impl RowBlock for Q6K {
    const BLOCK_BYTES: usize = 210;
    const ACT_BYTES: usize = Q8_K_BYTES;
    type Shared = Centered<32>;

    #[inline(always)]
    unsafe fn shared(y: *const u8) -> Self::Shared {
        Centered::load(y)
    }

    #[inline(always)]
    unsafe fn block<const VNNI: bool>(x: *const u8, y: &Self::Shared, acc: __m256) -> __m256 {
        let b = _mm_loadu_si128(x.add(192).cast());
        let m4 = _mm256_set1_epi8(0x0f);
        let mut sumi = _mm256_setzero_si256();
        for h in 0..2 {
            let q0 = _mm256_loadu_si256(x.add(64 * h).cast());
            let q1 = _mm256_loadu_si256(x.add(64 * h + 32).cast());
            let qh = _mm256_loadu_si256(x.add(128 + 32 * h).cast());
            // Value 128h + 32k + l: low nibble from ql[l + 32(k & 1)] (high nibble for k ≥ 2),
            // top two bits from qh[l] bits 2k.
            let low = [
                _mm256_and_si256(q0, m4),
                _mm256_and_si256(q1, m4),
                _mm256_and_si256(_mm256_srli_epi16::<4>(q0), m4),
                _mm256_and_si256(_mm256_srli_epi16::<4>(q1), m4),
            ];
            for (k, low) in low.into_iter().enumerate() {
                let codes = _mm256_or_si256(low, bits_to(qh, 2 * k as u32, 4, 0x30));
                let i = 4 * h + k;
                let scales = splat_i8_pair(b, 2 * i, 2 * i + 1);
                sumi = madd_acc::<VNNI>(sumi, y.pairs(codes, i), scales);
            }
        }
        let d = _mm256_set1_ps(half(x.add(208)) * y.y.d);
        _mm256_fmadd_ps(_mm256_cvtepi32_ps(sumi), d, acc)
    }
}

/// Q3_K's sixteen packed 6-bit scales as signed bytes (level − 32): scale j keeps its low
/// nibble in byte j % 8 (high nibble for j ≥ 8) and its top two bits at bit 2(j / 4) of byte
/// 8 + j % 4.
#[inline(always)]
pub(in crate::kernels) unsafe fn scales_k3(p: *const u8) -> __m128i {
    let word = |k: usize| p.add(4 * k).cast::<u32>().read_unaligned();
    let (a0, a1, a2) = (word(0), word(1), word(2));
    let (n, t) = (0x0f0f_0f0f, 0x0303_0303);
    let s0 = (a0 & n) | ((a2 & t) << 4);
    let s1 = (a1 & n) | (((a2 >> 2) & t) << 4);
    let s2 = ((a0 >> 4) & n) | (((a2 >> 4) & t) << 4);
    let s3 = ((a1 >> 4) & n) | (((a2 >> 6) & t) << 4);
    let levels = _mm_setr_epi32(s0 as i32, s1 as i32, s2 as i32, s3 as i32);
    _mm_sub_epi8(levels, _mm_set1_epi8(32))
}

struct Q3K;

impl RowBlock for Q3K {
    const BLOCK_BYTES: usize = 110;
    const ACT_BYTES: usize = Q8_K_BYTES;
    type Shared = Centered<4>;

    #[inline(always)]
    unsafe fn shared(y: *const u8) -> Self::Shared {
        Centered::load(y)
    }

    #[inline(always)]
    unsafe fn block<const VNNI: bool>(x: *const u8, y: &Self::Shared, acc: __m256) -> __m256 {
        let b = scales_k3(x.add(96));
        let hmask = _mm256_loadu_si256(x.cast());
        let three = _mm256_set1_epi8(3);
        let mut sumi = _mm256_setzero_si256();
        for h in 0..2 {
            let q = _mm256_loadu_si256(x.add(32 + 32 * h).cast());
            for k in 0..4 {
                // Value 128h + 32k + l: low bits 2k of qs[32h + l], third bit 4h + k of hmask[l].
                let i = 4 * h + k;
                let low =
                    _mm256_and_si256(_mm256_srl_epi16(q, _mm_cvtsi32_si128(2 * k as i32)), three);
                let codes = _mm256_or_si256(low, bits_to(hmask, i as u32, 2, 0x04));
                let scales = splat_i8_pair(b, 2 * i, 2 * i + 1);
                sumi = madd_acc::<VNNI>(sumi, y.pairs(codes, i), scales);
            }
        }
        let d = _mm256_set1_ps(half(x.add(108)) * y.y.d);
        _mm256_fmadd_ps(_mm256_cvtepi32_ps(sumi), d, acc)
    }
}

/// # Safety
/// AVX2/FMA/F16C present; buffers checked against the `GemvFn` contract.
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn gemv_q6_k(w: &[u8], row_bytes: usize, a: &[u8], out: &mut [f32]) {
    run::<Q6K, false>(w, row_bytes, a, out)
}

/// # Safety
/// As [`gemv_q6_k`], plus AVX-VNNI.
#[target_feature(enable = "avx2,fma,f16c,avxvnni")]
pub(super) unsafe fn gemv_q6_k_vnni(w: &[u8], row_bytes: usize, a: &[u8], out: &mut [f32]) {
    run::<Q6K, true>(w, row_bytes, a, out)
}

/// # Safety
/// AVX2/FMA/F16C present; buffers checked against the `GemvFn` contract.
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn gemv_q3_k(w: &[u8], row_bytes: usize, a: &[u8], out: &mut [f32]) {
    run::<Q3K, false>(w, row_bytes, a, out)
}

/// # Safety
/// As [`gemv_q3_k`], plus AVX-VNNI.
#[target_feature(enable = "avx2,fma,f16c,avxvnni")]
pub(super) unsafe fn gemv_q3_k_vnni(w: &[u8], row_bytes: usize, a: &[u8], out: &mut [f32]) {
    run::<Q3K, true>(w, row_bytes, a, out)
}
