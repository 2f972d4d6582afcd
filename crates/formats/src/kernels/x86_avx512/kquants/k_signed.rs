//! The K-quants with signed codes and signed sub-block scales (Q6_K: code − 32, Q3_K: code − 4)
//! × Q8_K on AVX-512, 64 values a register. As on AVX2, codes are multiplied unsigned and the
//! offset taken back as `maddubs(k, q8)` per activation block; the 16-bit difference is
//! Σ (code − k)·q8 over a pair of values, at most 2·32·128 in magnitude, so it is exact.

use core::arch::x86_64::*;

use super::{bit_set, broadcast_32, madd_acc, run, splat_i8_lanes, RowStep, Q8K, Q8_K_BYTES};
use crate::kernels::x86_avx2::kquants::k_signed::scales_k3;

/// A Q8_K block with `maddubs(CENTER, q)` per 64 codes.
struct Centered<const CENTER: i8> {
    y: Q8K,
    offset: [__m512i; 4],
}

impl<const CENTER: i8> Centered<CENTER> {
    #[inline(always)]
    unsafe fn load(y: *const u8) -> Self {
        let y = Q8K::load(y);
        let k = _mm512_set1_epi8(CENTER);
        let offset = core::array::from_fn(|i| _mm512_maddubs_epi16(k, y.q[i]));
        Centered { y, offset }
    }

    /// `acc` plus Σ scale·(code − CENTER)·q8 per dword lane, for codes 64i..64i+64 of the
    /// block; `b` holds the sixteen signed scales in every 128-bit lane.
    #[inline(always)]
    unsafe fn dot<const VNNI: bool>(
        &self,
        acc: __m512i,
        codes: __m512i,
        i: usize,
        b: __m512i,
    ) -> __m512i {
        let pairs = _mm512_sub_epi16(_mm512_maddubs_epi16(codes, self.y.q[i]), self.offset[i]);
        // 128-bit lane L holds sub-block 4i + L.
        let scales = splat_i8_lanes(b, [0, 1, 2, 3].map(|l| 4 * i + l));
        madd_acc::<VNNI>(acc, pairs, scales)
    }
}

/// Shifts of each 64-bit lane: `lo` in the low half of the register, `hi` in the high half.
#[inline(always)]
unsafe fn halves(lo: i64, hi: i64) -> __m512i {
    _mm512_setr_epi64(lo, lo, lo, lo, hi, hi, hi, hi)
}

struct Q6K;

impl RowStep for Q6K {
    const BLOCK_BYTES: usize = 210;
    const ACT_BYTES: usize = Q8_K_BYTES;
    const BLOCKS_PER_STEP: usize = 1;
    type Shared = Centered<32>;

    #[inline(always)]
    unsafe fn shared(y: *const u8, _: bool) -> Self::Shared {
        Centered::load(y)
    }

    #[inline(always)]
    unsafe fn step<const VNNI: bool>(
        x: *const u8,
        y: &Self::Shared,
        _: bool,
        acc: __m512,
    ) -> __m512 {
        let b = _mm512_broadcast_i32x4(_mm_loadu_si128(x.add(192).cast()));
        let (m4, m2) = (_mm512_set1_epi8(0x0f), _mm512_set1_epi8(0x30));
        let mut sumi = _mm512_setzero_si512();
        for h in 0..2 {
            // Value 128h + 32k + l: low nibble from ql[l + 32(k & 1)] (high nibble for k ≥ 2),
            // top two bits from qh[l] bits 2k. The 64 bytes of ql give values 0..64 from their
            // low nibbles and 64..128 from their high nibbles.
            let ql = _mm512_loadu_si512(x.add(64 * h).cast());
            let qh = broadcast_32(x.add(128 + 32 * h));
            let first = _mm512_or_si512(
                _mm512_and_si512(ql, m4),
                _mm512_and_si512(_mm512_sllv_epi64(qh, halves(4, 2)), m2),
            );
            let second = _mm512_or_si512(
                _mm512_and_si512(_mm512_srli_epi16::<4>(ql), m4),
                _mm512_and_si512(_mm512_srlv_epi64(qh, halves(0, 2)), m2),
            );
            sumi = y.dot::<VNNI>(sumi, first, 2 * h, b);
            sumi = y.dot::<VNNI>(sumi, second, 2 * h + 1, b);
        }
        let d = half(x.add(208)) * y.y.d;
        _mm512_fmadd_ps(_mm512_cvtepi32_ps(sumi), _mm512_set1_ps(d), acc)
    }
}

struct Q3K;

impl RowStep for Q3K {
    const BLOCK_BYTES: usize = 110;
    const ACT_BYTES: usize = Q8_K_BYTES;
    const BLOCKS_PER_STEP: usize = 1;
    type Shared = Centered<4>;

    #[inline(always)]
    unsafe fn shared(y: *const u8, _: bool) -> Self::Shared {
        Centered::load(y)
    }

    #[inline(always)]
    unsafe fn step<const VNNI: bool>(
        x: *const u8,
        y: &Self::Shared,
        _: bool,
        acc: __m512,
    ) -> __m512 {
        let b = _mm512_broadcast_i32x4(scales_k3(x.add(96)));
        let hmask = broadcast_32(x);
        let (three, four) = (_mm512_set1_epi8(3), _mm512_set1_epi8(4));
        let mut sumi = _mm512_setzero_si512();
        for h in 0..2 {
            // Value 128h + 32k + l: low bits 2k of qs[32h + l], third bit 4h + k of hmask[l].
            let q = broadcast_32(x.add(32 + 32 * h));
            for i in 0..2 {
                let s = 4 * i as i64;
                let low = _mm512_and_si512(_mm512_srlv_epi64(q, halves(s, s + 2)), three);
                let chunk = 2 * h + i;
                let high = bit_set(hmask, 2 * chunk as u32, 2 * chunk as u32 + 1);
                let codes = _mm512_mask_add_epi8(low, high, low, four);
                sumi = y.dot::<VNNI>(sumi, codes, chunk, b);
            }
        }
        let d = half(x.add(108)) * y.y.d;
        _mm512_fmadd_ps(_mm512_cvtepi32_ps(sumi), _mm512_set1_ps(d), acc)
    }
}

/// One f16 at `p`, widened.
#[inline(always)]
unsafe fn half(p: *const u8) -> f32 {
    let bits = i32::from(p.cast::<u16>().read_unaligned());
    _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(bits)))
}

/// # Safety
/// AVX-512 F/BW/VL/DQ and AVX2/FMA/F16C present; buffers checked against the `GemvFn` contract.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq")]
pub(super) unsafe fn gemv_q6_k(w: &[u8], row_bytes: usize, a: &[u8], out: &mut [f32]) {
    run::<Q6K, false>(w, row_bytes, a, out)
}

/// # Safety
/// As [`gemv_q6_k`], plus AVX-512 VNNI.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq,avx512vnni")]
pub(super) unsafe fn gemv_q6_k_vnni(w: &[u8], row_bytes: usize, a: &[u8], out: &mut [f32]) {
    run::<Q6K, true>(w, row_bytes, a, out)
}

/// # Safety
/// AVX-512 F/BW/VL/DQ and AVX2/FMA/F16C present; buffers checked against the `GemvFn` contract.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq")]
pub(super) unsafe fn gemv_q3_k(w: &[u8], row_bytes: usize, a: &[u8], out: &mut [f32]) {
    run::<Q3K, false>(w, row_bytes, a, out)
}

/// # Safety
/// As [`gemv_q3_k`], plus AVX-512 VNNI.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq,avx512vnni")]
pub(super) unsafe fn gemv_q3_k_vnni(w: &[u8], row_bytes: usize, a: &[u8], out: &mut [f32]) {
    run::<Q3K, true>(w, row_bytes, a, out)
}
