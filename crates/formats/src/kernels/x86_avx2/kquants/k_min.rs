//! The K-quants with a minimum per sub-block (Q4_K, Q5_K, Q2_K) × Q8_K on AVX2. A value is
//! `d·scale·code − dmin·min`; the minimums' part is Σ min·bsums over the activation's stored
//! sums of 16 codes, one `madd` per block (exact in 32 bits for any stored sums).

use core::arch::x86_64::*;

use super::{bits_to, madd_acc, run, splat_u8_pair, two_halves, RowBlock, Q8K, Q8_K_BYTES};

/// Q4_K / Q5_K's twelve bytes of 6-bit scales and minimums unpacked to bytes: scales 0..8 in
/// bytes 0..8, minimums in bytes 8..16 (the layout of `kquant_common::scale_min`). Reads 16
/// bytes at `p`: the block's code bytes follow its scales.
#[inline(always)]
pub(in crate::kernels) unsafe fn scales_k4(p: *const u8) -> __m128i {
    let v = _mm_loadu_si128(p.cast());
    // Dwords a0, a1, a2 of the packing. Scales / minimums 0..4 are the low six bits of a0 / a1;
    // 4..8 take their low nibbles from a2 (low / high nibbles) ...
    let low = _mm_and_si128(
        _mm_srlv_epi32(
            _mm_shuffle_epi32::<0b10_01_10_00>(v),
            _mm_setr_epi32(0, 0, 0, 4),
        ),
        _mm_setr_epi32(0x3f3f_3f3f, 0x0f0f_0f0f, 0x3f3f_3f3f, 0x0f0f_0f0f),
    );
    // ... and their top two bits from bits 6–7 of a0 / a1, moved to bits 4–5.
    let high = _mm_and_si128(
        _mm_srli_epi32::<2>(_mm_shuffle_epi32::<0b01_01_00_00>(v)),
        _mm_setr_epi32(0, 0x3030_3030, 0, 0x3030_3030),
    );
    _mm_or_si128(low, high)
}

/// Σ min·bsum per dword lane, for Q4_K / Q5_K: `b` holds [scales | minimums] in both 128-bit
/// lanes, and minimum j covers sums 2j and 2j+1.
#[inline(always)]
pub(in crate::kernels) unsafe fn min_sums_k4(b: __m256i, bsums: __m256i) -> __m256i {
    let idx = _mm256_setr_epi8(
        8, -128, 8, -128, 9, -128, 9, -128, 10, -128, 10, -128, 11, -128, 11, -128, 12, -128, 12,
        -128, 13, -128, 13, -128, 14, -128, 14, -128, 15, -128, 15, -128,
    );
    _mm256_madd_epi16(bsums, _mm256_shuffle_epi8(b, idx))
}

/// `acc + d·dy·sumi − dmin·dy·min_sums`, the f16 pair (d, dmin) at `dm`.
#[inline(always)]
unsafe fn finish(dm: *const u8, dy: f32, sumi: __m256i, min_sums: __m256i, acc: __m256) -> __m256 {
    let s = _mm_mul_ps(two_halves(dm), _mm_set1_ps(dy));
    let acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sumi), _mm256_broadcastss_ps(s), acc);
    let dmin = _mm256_broadcastss_ps(_mm_movehdup_ps(s));
    _mm256_fnmadd_ps(_mm256_cvtepi32_ps(min_sums), dmin, acc)
}

/// The Q4_K / Q5_K body: `codes(p)` gives the 64 codes of sub-blocks 2p and 2p+1.
#[inline(always)]
unsafe fn block_k4<const VNNI: bool>(
    x: *const u8,
    y: &Q8K,
    acc: __m256,
    codes: impl Fn(usize) -> (__m256i, __m256i),
) -> __m256 {
    let b = _mm256_broadcastsi128_si256(scales_k4(x.add(4)));
    let mut sumi = _mm256_setzero_si256();
    for p in 0..4 {
        let (lo, hi) = codes(p);
        let s_lo = splat_u8_pair(b, 2 * p, 2 * p);
        let s_hi = splat_u8_pair(b, 2 * p + 1, 2 * p + 1);
        sumi = madd_acc::<VNNI>(sumi, _mm256_maddubs_epi16(lo, y.q[2 * p]), s_lo);
        sumi = madd_acc::<VNNI>(sumi, _mm256_maddubs_epi16(hi, y.q[2 * p + 1]), s_hi);
    }
    finish(x, y.d, sumi, min_sums_k4(b, y.bsums), acc)
}

/// Low and high nibbles of 32 bytes: values 0..32 and 32..64 of a 64-value run.
#[inline(always)]
unsafe fn nibbles(q: __m256i) -> (__m256i, __m256i) {
    let m = _mm256_set1_epi8(0x0f);
    (
        _mm256_and_si256(q, m),
        _mm256_and_si256(_mm256_srli_epi16::<4>(q), m),
    )
}

struct Q4K;

impl RowBlock for Q4K {
    const BLOCK_BYTES: usize = 144;
    const ACT_BYTES: usize = Q8_K_BYTES;
    type Shared = Q8K;

    #[inline(always)]
    unsafe fn shared(y: *const u8) -> Q8K {
        Q8K::load(y)
    }

    #[inline(always)]
    unsafe fn block<const VNNI: bool>(x: *const u8, y: &Q8K, acc: __m256) -> __m256 {
        block_k4::<VNNI>(x, y, acc, |p| {
            nibbles(_mm256_loadu_si256(x.add(16 + 32 * p).cast()))
        })
    }
}

struct Q5K;

impl RowBlock for Q5K {
    const BLOCK_BYTES: usize = 176;
    const ACT_BYTES: usize = Q8_K_BYTES;
    type Shared = Q8K;

    #[inline(always)]
    unsafe fn shared(y: *const u8) -> Q8K {
        Q8K::load(y)
    }

    #[inline(always)]
    unsafe fn block<const VNNI: bool>(x: *const u8, y: &Q8K, acc: __m256) -> __m256 {
        let qh = _mm256_loadu_si256(x.add(16).cast());
        block_k4::<VNNI>(x, y, acc, |p| {
            let (lo, hi) = nibbles(_mm256_loadu_si256(x.add(48 + 32 * p).cast()));
            // The fifth bit of value l + 32k is bit k of qh[l].
            let k = 2 * p as u32;
            (
                _mm256_or_si256(lo, bits_to(qh, k, 4, 0x10)),
                _mm256_or_si256(hi, bits_to(qh, k + 1, 4, 0x10)),
            )
        })
    }
}

struct Q2K;

impl RowBlock for Q2K {
    const BLOCK_BYTES: usize = 84;
    const ACT_BYTES: usize = Q8_K_BYTES;
    type Shared = Q8K;

    #[inline(always)]
    unsafe fn shared(y: *const u8) -> Q8K {
        Q8K::load(y)
    }

    #[inline(always)]
    unsafe fn block<const VNNI: bool>(x: *const u8, y: &Q8K, acc: __m256) -> __m256 {
        let packed = _mm_loadu_si128(x.cast());
        let m4 = _mm_set1_epi8(0x0f);
        let b = _mm256_broadcastsi128_si256(_mm_and_si128(packed, m4));
        let mins = _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16::<4>(packed), m4));
        let three = _mm256_set1_epi8(3);
        let mut sumi = _mm256_setzero_si256();
        for h in 0..2 {
            let q = _mm256_loadu_si256(x.add(16 + 32 * h).cast());
            for k in 0..4 {
                // Values 128h + 32k + l sit at bits 2k of byte l; sub-blocks 8h+2k, 8h+2k+1.
                let c =
                    _mm256_and_si256(_mm256_srl_epi16(q, _mm_cvtsi32_si128(2 * k as i32)), three);
                let j = 8 * h + 2 * k;
                let p = _mm256_maddubs_epi16(c, y.q[4 * h + k]);
                sumi = madd_acc::<VNNI>(sumi, p, splat_u8_pair(b, j, j + 1));
            }
        }
        finish(x.add(80), y.d, sumi, _mm256_madd_epi16(y.bsums, mins), acc)
    }
}

/// # Safety
/// AVX2/FMA/F16C present; buffers checked against the `GemvFn` contract.
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn gemv_q4_k(w: &[u8], row_bytes: usize, a: &[u8], out: &mut [f32]) {
    run::<Q4K, false>(w, row_bytes, a, out)
}

/// # Safety
/// As [`gemv_q4_k`], plus AVX-VNNI.
#[target_feature(enable = "avx2,fma,f16c,avxvnni")]
pub(super) unsafe fn gemv_q4_k_vnni(w: &[u8], row_bytes: usize, a: &[u8], out: &mut [f32]) {
    run::<Q4K, true>(w, row_bytes, a, out)
}

/// # Safety
/// AVX2/FMA/F16C present; buffers checked against the `GemvFn` contract.
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn gemv_q5_k(w: &[u8], row_bytes: usize, a: &[u8], out: &mut [f32]) {
    run::<Q5K, false>(w, row_bytes, a, out)
}

/// # Safety
/// As [`gemv_q5_k`], plus AVX-VNNI.
#[target_feature(enable = "avx2,fma,f16c,avxvnni")]
pub(super) unsafe fn gemv_q5_k_vnni(w: &[u8], row_bytes: usize, a: &[u8], out: &mut [f32]) {
    run::<Q5K, true>(w, row_bytes, a, out)
}

/// # Safety
/// AVX2/FMA/F16C present; buffers checked against the `GemvFn` contract.
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn gemv_q2_k(w: &[u8], row_bytes: usize, a: &[u8], out: &mut [f32]) {
    run::<Q2K, false>(w, row_bytes, a, out)
}

/// # Safety
/// As [`gemv_q2_k`], plus AVX-VNNI.
#[target_feature(enable = "avx2,fma,f16c,avxvnni")]
pub(super) unsafe fn gemv_q2_k_vnni(w: &[u8], row_bytes: usize, a: &[u8], out: &mut [f32]) {
    run::<Q2K, true>(w, row_bytes, a, out)
}
