//! Q5_0 × Q8_0 and Q5_1 × Q8_1 on AVX-512: two 32-value blocks a register. Each block's 16
//! nibble bytes go to two 128-bit lanes, the second shifted down a nibble ([low | high], the
//! activation's order); the two 32-bit words of fifth bits are one byte mask that adds 16 where
//! set. A row ending on an odd block reads only that block: the missing half is zero codes
//! against zero activations. Q5_0's −16 is −16·Σq8 once per activation pair for every row;
//! Q5_1's minimum rides on Q8_1's stored block sums.

use core::arch::x86_64::*;

use super::{run, RowStep};

/// Σ of four u8·i8 products per dword lane, added to `acc` (exact for codes ≤ 31).
#[inline(always)]
unsafe fn dot4<const VNNI: bool>(acc: __m512i, u: __m512i, s: __m512i) -> __m512i {
    if VNNI {
        _mm512_dpbusd_epi32(acc, u, s)
    } else {
        let pairs = _mm512_maddubs_epi16(u, s);
        _mm512_add_epi32(acc, _mm512_madd_epi16(pairs, _mm512_set1_epi16(1)))
    }
}

/// The 32-bit word at `p`, or 0 for the missing second block of a row's last step.
#[inline(always)]
unsafe fn word(p: *const u8, present: bool) -> u32 {
    if present {
        p.cast::<u32>().read_unaligned()
    } else {
        0
    }
}

/// The 64 codes of the blocks at `x` and `x + stride` (nibbles at `qs`, fifth-bit words at
/// `qh`, offsets within a block); the second block's codes are zero unless `whole`.
#[inline(always)]
unsafe fn codes(x: *const u8, stride: usize, qs: usize, qh: usize, whole: bool) -> __m512i {
    let first = _mm256_broadcastsi128_si256(_mm_loadu_si128(x.add(qs).cast()));
    let second = if whole {
        _mm256_broadcastsi128_si256(_mm_loadu_si128(x.add(stride + qs).cast()))
    } else {
        _mm256_setzero_si256()
    };
    let v = _mm512_inserti64x4::<1>(_mm512_castsi256_si512(first), second);
    // Words of lanes 1 and 3 take the high nibbles.
    let nibbles = _mm512_and_si512(
        _mm512_mask_srli_epi16(v, 0xff00_ff00, v, 4),
        _mm512_set1_epi8(0x0f),
    );
    let high = u64::from(word(x.add(qh), true)) | u64::from(word(x.add(stride + qh), whole)) << 32;
    _mm512_mask_add_epi8(nibbles, high, nibbles, _mm512_set1_epi8(16))
}

/// The activation codes of a pair of partner blocks (`bytes` each, codes at `at`).
#[inline(always)]
unsafe fn activation_pair(y: *const u8, bytes: usize, at: usize, whole: bool) -> __m512i {
    let lo = _mm256_loadu_si256(y.add(at).cast());
    let hi = if whole {
        _mm256_loadu_si256(y.add(bytes + at).cast())
    } else {
        _mm256_setzero_si256()
    };
    _mm512_inserti64x4::<1>(_mm512_castsi256_si512(lo), hi)
}

/// The four f16 of two 32-bit words widened: [first word's two, second word's two].
#[inline(always)]
unsafe fn halves(first: u32, second: u32) -> __m128 {
    _mm_cvtph_ps(_mm_setr_epi32(first as i32, second as i32, 0, 0))
}

/// Lanes 0..8 = lane `a` of `v`, lanes 8..16 = lane `b`.
#[inline(always)]
unsafe fn spread(v: __m128, a: i32, b: i32) -> __m512 {
    let idx = _mm512_setr_epi32(a, a, a, a, a, a, a, a, b, b, b, b, b, b, b, b);
    _mm512_permutexvar_ps(idx, _mm512_zextps128_ps512(v))
}

/// Two Q8_0 blocks with −16·Σq per dword lane.
struct Q8_0Pair {
    /// [d, 0, d', 0] (f32).
    d: __m128,
    q: __m512i,
    start: __m512i,
}

struct Q5_0;

impl RowStep for Q5_0 {
    const BLOCK_BYTES: usize = 22;
    const ACT_BYTES: usize = 34;
    const BLOCKS_PER_STEP: usize = 2;
    const BAND: usize = 8;
    type Shared = Q8_0Pair;

    #[inline(always)]
    unsafe fn shared(y: *const u8, whole: bool) -> Q8_0Pair {
        let q = activation_pair(y, 34, 2, whole);
        let sixteen_q = dot4::<false>(_mm512_setzero_si512(), _mm512_set1_epi8(16), q);
        let d = u32::from(y.cast::<u16>().read_unaligned());
        let d2 = if whole {
            u32::from(y.add(34).cast::<u16>().read_unaligned())
        } else {
            0
        };
        Q8_0Pair {
            d: halves(d, d2),
            q,
            start: _mm512_sub_epi32(_mm512_setzero_si512(), sixteen_q),
        }
    }

    #[inline(always)]
    unsafe fn step<const VNNI: bool>(
        x: *const u8,
        y: &Q8_0Pair,
        whole: bool,
        acc: __m512,
    ) -> __m512 {
        let s = dot4::<VNNI>(y.start, codes(x, 22, 6, 2, whole), y.q);
        let d = u32::from(x.cast::<u16>().read_unaligned());
        let d2 = if whole {
            u32::from(x.add(22).cast::<u16>().read_unaligned())
        } else {
            0
        };
        let scale = _mm_mul_ps(halves(d, d2), y.d);
        _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), spread(scale, 0, 2), acc)
    }
}

/// Two Q8_1 blocks: `ds` = [d, s, d', s'] (scales and stored sums, f32).
struct Q8_1Pair {
    ds: __m128,
    q: __m512i,
}

struct Q5_1;

impl RowStep for Q5_1 {
    const BLOCK_BYTES: usize = 24;
    const ACT_BYTES: usize = 36;
    const BLOCKS_PER_STEP: usize = 2;
    const BAND: usize = 8;
    type Shared = Q8_1Pair;

    #[inline(always)]
    unsafe fn shared(y: *const u8, whole: bool) -> Q8_1Pair {
        Q8_1Pair {
            ds: halves(word(y, true), word(y.add(36), whole)),
            q: activation_pair(y, 36, 4, whole),
        }
    }

    #[inline(always)]
    unsafe fn step<const VNNI: bool>(
        x: *const u8,
        y: &Q8_1Pair,
        whole: bool,
        acc: __m512,
    ) -> __m512 {
        let s = dot4::<VNNI>(_mm512_setzero_si512(), codes(x, 24, 8, 4, whole), y.q);
        // [d·dy, m·s, d'·dy', m'·s']: the codes' scales and the minimums' whole contributions.
        let prod = _mm_mul_ps(halves(word(x, true), word(x.add(24), whole)), y.ds);
        let acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), spread(prod, 0, 2), acc);
        let idx = _mm512_setr_epi32(1, 3, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4);
        _mm512_add_ps(
            acc,
            _mm512_permutexvar_ps(idx, _mm512_zextps128_ps512(prod)),
        )
    }
}

/// # Safety
/// AVX-512 F/BW/VL/DQ and AVX2/FMA/F16C present; buffers checked against the `GemvFn` contract.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq")]
pub(super) unsafe fn gemv_q5_0(w: &[u8], row_bytes: usize, a: &[u8], out: &mut [f32]) {
    run::<Q5_0, false>(w, row_bytes, a, out)
}

/// # Safety
/// As [`gemv_q5_0`], plus AVX-512 VNNI.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq,avx512vnni")]
pub(super) unsafe fn gemv_q5_0_vnni(w: &[u8], row_bytes: usize, a: &[u8], out: &mut [f32]) {
    run::<Q5_0, true>(w, row_bytes, a, out)
}

/// # Safety
/// AVX-512 F/BW/VL/DQ and AVX2/FMA/F16C present; buffers checked against the `GemvFn` contract.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq")]
pub(super) unsafe fn gemv_q5_1(w: &[u8], row_bytes: usize, a: &[u8], out: &mut [f32]) {
    run::<Q5_1, false>(w, row_bytes, a, out)
}

/// # Safety
/// As [`gemv_q5_1`], plus AVX-512 VNNI.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq,avx512vnni")]
pub(super) unsafe fn gemv_q5_1_vnni(w: &[u8], row_bytes: usize, a: &[u8], out: &mut [f32]) {
    run::<Q5_1, true>(w, row_bytes, a, out)
}
