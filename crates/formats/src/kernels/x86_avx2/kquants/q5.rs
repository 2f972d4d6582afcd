//! Q5_0 × Q8_0 and Q5_1 × Q8_1 on AVX2: one 32-value block per ymm. The nibbles widen to
//! [low | high] (the activation's order) and the fifth bits, one per value in a 32-bit word,
//! are spread to bit 4 of each byte; the unsigned codes 0..=31 meet the int8 activations in
//! `maddubs` (or `vpdpbusd` with AVX-VNNI). Q5_0's −16 is taken back as 16·Σq8, once per
//! activation block for every row; Q5_1's minimum rides on Q8_1's stored block sum.

use core::arch::x86_64::*;

use super::{half, run, two_halves, RowBlock};

/// Σ of four u8·i8 products per dword lane, added to `acc` (exact for codes ≤ 31).
#[inline(always)]
unsafe fn dot4<const VNNI: bool>(acc: __m256i, u: __m256i, s: __m256i) -> __m256i {
    if VNNI {
        _mm256_dpbusd_avx_epi32(acc, u, s)
    } else {
        let pairs = _mm256_maddubs_epi16(u, s);
        _mm256_add_epi32(acc, _mm256_madd_epi16(pairs, _mm256_set1_epi16(1)))
    }
}

/// The 32 codes of a block: nibbles at `qs` (16 bytes), fifth bits in the little-endian word
/// at `qh` (bit i ↔ value i).
#[inline(always)]
unsafe fn codes(qs: *const u8, qh: *const u8) -> __m256i {
    let q = _mm_loadu_si128(qs.cast());
    let m4 = _mm_set1_epi8(0x0f);
    let nibbles = _mm256_set_m128i(
        _mm_and_si128(_mm_srli_epi16::<4>(q), m4),
        _mm_and_si128(q, m4),
    );
    // Byte i takes word byte i / 8, keeps bit i % 8, and becomes 0x10 where it is set.
    let word = _mm256_set1_epi32(qh.cast::<i32>().read_unaligned());
    let spread = _mm256_shuffle_epi8(
        word,
        _mm256_setr_epi64x(
            0,
            0x0101_0101_0101_0101,
            0x0202_0202_0202_0202,
            0x0303_0303_0303_0303,
        ),
    );
    let bit = _mm256_set1_epi64x(0x8040_2010_0804_0201_u64 as i64);
    let set = _mm256_cmpeq_epi8(_mm256_and_si256(spread, bit), bit);
    _mm256_or_si256(nibbles, _mm256_and_si256(set, _mm256_set1_epi8(0x10)))
}

/// A Q8_0 block with −16·Σq per dword lane (four codes each).
struct Q8_0Centered {
    d: f32,
    q: __m256i,
    start: __m256i,
}

struct Q5_0;

impl RowBlock for Q5_0 {
    const BLOCK_BYTES: usize = 22;
    const ACT_BYTES: usize = 34;
    type Shared = Q8_0Centered;

    #[inline(always)]
    unsafe fn shared(y: *const u8) -> Q8_0Centered {
        let q = _mm256_loadu_si256(y.add(2).cast());
        let sixteen_q = dot4::<false>(_mm256_setzero_si256(), _mm256_set1_epi8(16), q);
        Q8_0Centered {
            d: half(y),
            q,
            start: _mm256_sub_epi32(_mm256_setzero_si256(), sixteen_q),
        }
    }

    #[inline(always)]
    unsafe fn block<const VNNI: bool>(x: *const u8, y: &Q8_0Centered, acc: __m256) -> __m256 {
        let s = dot4::<VNNI>(y.start, codes(x.add(6), x.add(2)), y.q);
        let d = _mm256_set1_ps(half(x) * y.d);
        _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), d, acc)
    }
}

/// A Q8_1 block: lanes 0 and 1 of `ds` hold its scale and its stored sum.
struct Q8_1Block {
    ds: __m128,
    q: __m256i,
}

struct Q5_1;

impl RowBlock for Q5_1 {
    const BLOCK_BYTES: usize = 24;
    const ACT_BYTES: usize = 36;
    type Shared = Q8_1Block;

    #[inline(always)]
    unsafe fn shared(y: *const u8) -> Q8_1Block {
        Q8_1Block {
            ds: two_halves(y),
            q: _mm256_loadu_si256(y.add(4).cast()),
        }
    }

    #[inline(always)]
    unsafe fn block<const VNNI: bool>(x: *const u8, y: &Q8_1Block, acc: __m256) -> __m256 {
        let s = dot4::<VNNI>(_mm256_setzero_si256(), codes(x.add(8), x.add(4)), y.q);
        // [d·dy, m·s, ..]: the scale of the codes and the minimum's whole contribution.
        let prod = _mm_mul_ps(two_halves(x), y.ds);
        let acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), _mm256_broadcastss_ps(prod), acc);
        let ms = _mm_and_ps(
            _mm_movehdup_ps(prod),
            _mm_castsi128_ps(_mm_cvtsi32_si128(-1)),
        );
        _mm256_add_ps(acc, _mm256_zextps128_ps256(ms))
    }
}

/// # Safety
/// AVX2/FMA/F16C present; buffers checked against the `GemvFn` contract.
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn gemv_q5_0(w: &[u8], row_bytes: usize, a: &[u8], out: &mut [f32]) {
    run::<Q5_0, false>(w, row_bytes, a, out)
}

/// # Safety
/// As [`gemv_q5_0`], plus AVX-VNNI.
#[target_feature(enable = "avx2,fma,f16c,avxvnni")]
pub(super) unsafe fn gemv_q5_0_vnni(w: &[u8], row_bytes: usize, a: &[u8], out: &mut [f32]) {
    run::<Q5_0, true>(w, row_bytes, a, out)
}

/// # Safety
/// AVX2/FMA/F16C present; buffers checked against the `GemvFn` contract.
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn gemv_q5_1(w: &[u8], row_bytes: usize, a: &[u8], out: &mut [f32]) {
    run::<Q5_1, false>(w, row_bytes, a, out)
}

/// # Safety
/// As [`gemv_q5_1`], plus AVX-VNNI.
#[target_feature(enable = "avx2,fma,f16c,avxvnni")]
pub(super) unsafe fn gemv_q5_1_vnni(w: &[u8], row_bytes: usize, a: &[u8], out: &mut [f32]) {
    run::<Q5_1, true>(w, row_bytes, a, out)
}
