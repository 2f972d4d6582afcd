//! The K-quants with a minimum per sub-block (Q4_K, Q5_K, Q2_K) × Q8_K on AVX-512, 64 values a
//! register. The minimums' part is the AVX2 tier's: one `madd` of the minimums against the
//! activation's stored sums of 16 codes.

use core::arch::x86_64::*;

use super::{bit_set, broadcast_32, madd_acc, run, splat_u8_lanes, RowStep, Q8K, Q8_K_BYTES};
use crate::kernels::x86_avx2::kquants::k_min::{min_sums_k4, scales_k4};

/// `acc + d·dy·sumi − dmin·dy·min_sums`, the f16 pair (d, dmin) at `dm`.
#[inline(always)]
unsafe fn finish(dm: *const u8, dy: f32, sumi: __m512i, min_sums: __m256i, acc: __m512) -> __m512 {
    let pair = _mm_cvtph_ps(_mm_cvtsi32_si128(dm.cast::<i32>().read_unaligned()));
    let s = _mm_mul_ps(pair, _mm_set1_ps(dy));
    let acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sumi), _mm512_broadcastss_ps(s), acc);
    let mins = _mm512_cvtepi32_ps(_mm512_zextsi256_si512(min_sums));
    _mm512_fnmadd_ps(mins, _mm512_broadcastss_ps(_mm_movehdup_ps(s)), acc)
}

/// The Q4_K / Q5_K body: `codes(p)` gives the 64 codes of sub-blocks 2p and 2p+1.
#[inline(always)]
unsafe fn block_k4<const VNNI: bool>(
    x: *const u8,
    y: &Q8K,
    acc: __m512,
    codes: impl Fn(usize) -> __m512i,
) -> __m512 {
    let packed = scales_k4(x.add(4));
    let b = _mm512_broadcast_i32x4(packed);
    let mut sumi = _mm512_setzero_si512();
    for p in 0..4 {
        // Lanes 0–1 hold sub-block 2p, lanes 2–3 sub-block 2p + 1.
        let s = splat_u8_lanes(b, [2 * p, 2 * p, 2 * p + 1, 2 * p + 1]);
        sumi = madd_acc::<VNNI>(sumi, _mm512_maddubs_epi16(codes(p), y.q[p]), s);
    }
    let min_sums = min_sums_k4(_mm512_castsi512_si256(b), y.bsums);
    finish(x, y.d, sumi, min_sums, acc)
}

/// Values 64p..64p+64 of a Q4_K-style run: the 32 bytes at `qs` in both halves, the high half
/// shifted down a nibble.
#[inline(always)]
unsafe fn nibbles(qs: *const u8) -> __m512i {
    let shifts = _mm512_setr_epi64(0, 0, 0, 0, 4, 4, 4, 4);
    let shifted = _mm512_srlv_epi64(broadcast_32(qs), shifts);
    _mm512_and_si512(shifted, _mm512_set1_epi8(0x0f))
}

struct Q4K;

impl RowStep for Q4K {
    const BLOCK_BYTES: usize = 144;
    const ACT_BYTES: usize = Q8_K_BYTES;
    const BLOCKS_PER_STEP: usize = 1;
    type Shared = Q8K;

    #[inline(always)]
    unsafe fn shared(y: *const u8, _: bool) -> Q8K {
        Q8K::load(y)
    }

    #[inline(always)]
    unsafe fn step<const VNNI: bool>(x: *const u8, y: &Q8K, _: bool, acc: __m512) -> __m512 {
        block_k4::<VNNI>(x, y, acc, |p| nibbles(x.add(16 + 32 * p)))
    }
}

struct Q5K;

impl RowStep for Q5K {
    const BLOCK_BYTES: usize = 176;
    const ACT_BYTES: usize = Q8_K_BYTES;
    const BLOCKS_PER_STEP: usize = 1;
    type Shared = Q8K;

    #[inline(always)]
    unsafe fn shared(y: *const u8, _: bool) -> Q8K {
        Q8K::load(y)
    }

    #[inline(always)]
    unsafe fn step<const VNNI: bool>(x: *const u8, y: &Q8K, _: bool, acc: __m512) -> __m512 {
        let qh = broadcast_32(x.add(16));
        let sixteen = _mm512_set1_epi8(16);
        block_k4::<VNNI>(x, y, acc, |p| {
            // The fifth bit of value l + 32k is bit k of qh[l].
            let c = nibbles(x.add(48 + 32 * p));
            let k = 2 * p as u32;
            _mm512_mask_add_epi8(c, bit_set(qh, k, k + 1), c, sixteen)
        })
    }
}

struct Q2K;

impl RowStep for Q2K {
    const BLOCK_BYTES: usize = 84;
    const ACT_BYTES: usize = Q8_K_BYTES;
    const BLOCKS_PER_STEP: usize = 1;
    type Shared = Q8K;

    #[inline(always)]
    unsafe fn shared(y: *const u8, _: bool) -> Q8K {
        Q8K::load(y)
    }

    #[inline(always)]
    unsafe fn step<const VNNI: bool>(x: *const u8, y: &Q8K, _: bool, acc: __m512) -> __m512 {
        let packed = _mm_loadu_si128(x.cast());
        let m4 = _mm_set1_epi8(0x0f);
        let b = _mm512_broadcast_i32x4(_mm_and_si128(packed, m4));
        let mins = _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16::<4>(packed), m4));
        let three = _mm512_set1_epi8(3);
        let mut sumi = _mm512_setzero_si512();
        for h in 0..2 {
            // Value 128h + 32k + l sits at bits 2k of byte l of the half's 32 bytes: shifting
            // the low copy by 2k and the high copy by 2k + 2 gives 64 values in order.
            let q = broadcast_32(x.add(16 + 32 * h));
            for i in 0..2 {
                let s = 4 * i as i64;
                let shifts = _mm512_setr_epi64(s, s, s, s, s + 2, s + 2, s + 2, s + 2);
                let c = _mm512_and_si512(_mm512_srlv_epi64(q, shifts), three);
                let chunk = 2 * h + i;
                let p = _mm512_maddubs_epi16(c, y.q[chunk]);
                sumi = madd_acc::<VNNI>(
                    sumi,
                    p,
                    splat_u8_lanes(b, [0, 1, 2, 3].map(|l| 4 * chunk + l)),
                );
            }
        }
        let min_sums = _mm256_madd_epi16(y.bsums, mins);
        finish(x.add(80), y.d, sumi, min_sums, acc)
    }
}

/// # Safety
/// AVX-512 F/BW/VL/DQ and AVX2/FMA/F16C present; buffers checked against the `GemvFn` contract.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq")]
pub(super) unsafe fn gemv_q4_k(w: &[u8], row_bytes: usize, a: &[u8], out: &mut [f32]) {
    run::<Q4K, false>(w, row_bytes, a, out)
}

/// # Safety
/// As [`gemv_q4_k`], plus AVX-512 VNNI.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq,avx512vnni")]
pub(super) unsafe fn gemv_q4_k_vnni(w: &[u8], row_bytes: usize, a: &[u8], out: &mut [f32]) {
    run::<Q4K, true>(w, row_bytes, a, out)
}

/// # Safety
/// AVX-512 F/BW/VL/DQ and AVX2/FMA/F16C present; buffers checked against the `GemvFn` contract.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq")]
pub(super) unsafe fn gemv_q5_k(w: &[u8], row_bytes: usize, a: &[u8], out: &mut [f32]) {
    run::<Q5K, false>(w, row_bytes, a, out)
}

/// # Safety
/// As [`gemv_q5_k`], plus AVX-512 VNNI.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq,avx512vnni")]
pub(super) unsafe fn gemv_q5_k_vnni(w: &[u8], row_bytes: usize, a: &[u8], out: &mut [f32]) {
    run::<Q5K, true>(w, row_bytes, a, out)
}

/// # Safety
/// AVX-512 F/BW/VL/DQ and AVX2/FMA/F16C present; buffers checked against the `GemvFn` contract.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq")]
pub(super) unsafe fn gemv_q2_k(w: &[u8], row_bytes: usize, a: &[u8], out: &mut [f32]) {
    run::<Q2K, false>(w, row_bytes, a, out)
}

/// # Safety
/// As [`gemv_q2_k`], plus AVX-512 VNNI.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq,avx512vnni")]
pub(super) unsafe fn gemv_q2_k_vnni(w: &[u8], row_bytes: usize, a: &[u8], out: &mut [f32]) {
    run::<Q2K, true>(w, row_bytes, a, out)
}
