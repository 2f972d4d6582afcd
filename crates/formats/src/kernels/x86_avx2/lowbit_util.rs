//! Shared machinery of the AVX2 kernels for the 1- and 2-bit formats dotted with Q8_0 (Q1_0 and
//! the Q2_0 family), and this tier's [`Lanes`] for the ternary driver shared by every tier
//! (`lowbit_rows`).
//!
//! As on AVX-512 (`x86_avx512/lowbit_util.rs`), each chunk of the activation is unpacked once
//! per call into a stack buffer — 32 codes a group (one ymm), the Q8_0 scale per dword lane and a
//! per-block bias — so that every row of the band reuses it. Weights decode to unsigned codes
//! `u` with value `FACTOR·u − 1`, and Σ value·q = FACTOR·Σ u·q − Σ q stays exact.

use core::arch::x86_64::*;
use core::cell::UnsafeCell;

use crate::kernels::lowbit_rows::Lanes;

const Q8_0_BYTES: usize = core::mem::size_of::<crate::q8_0::BlockQ8_0>();
/// Groups (32 values each) unpacked per chunk: 4096 values, ~12 KiB of stack.
const CHUNK_GROUPS: usize = 128;

/// A weight format dotted with Q8_0, decoded 32 values at a time.
pub(super) trait Q8_0Weights {
    const BLOCK_BYTES: usize;
    /// Groups of 32 values a block.
    const GROUPS_PER_BLOCK: usize;
    const FACTOR: f32;
    /// Whether codes come out as the AVX-512 kernels lay them (per 64 values: byte i of 128-bit
    /// lane l ↔ value 4i + l; ymm 0 holds lanes 0–1, ymm 1 lanes 2–3).
    const PERMUTED: bool;
    /// Where the block keeps its f16 scale (first for all but PTQ1_0, which keeps it last).
    const SCALE_OFFSET: usize = 0;
    /// Per dword lane, Σ code·activation over four values of one Q8_0 block, for group `g`.
    ///
    /// # Safety
    /// `block` points at a whole block; the tier's features are enabled.
    unsafe fn group_dot<const VNNI: bool>(block: *const u8, g: usize, act: __m256i) -> __m256i;
}

/// Σ of four u8·i8 products per dword lane, added to `acc` (exact for codes ≤ 3).
#[inline(always)]
pub(super) unsafe fn dot4<const VNNI: bool>(acc: __m256i, u: __m256i, s: __m256i) -> __m256i {
    if VNNI {
        _mm256_dpbusd_avx_epi32(acc, u, s)
    } else {
        let pairs = _mm256_maddubs_epi16(u, s);
        _mm256_add_epi32(acc, _mm256_madd_epi16(pairs, _mm256_set1_epi16(1)))
    }
}

/// An f16 read from 2 unaligned bytes, widened and broadcast.
#[inline(always)]
pub(super) unsafe fn f16_splat(p: *const u8) -> __m256 {
    let bits = p.cast::<i16>().read_unaligned();
    _mm256_cvtph_ps(_mm_set1_epi16(bits))
}

#[inline(always)]
pub(super) unsafe fn hsum(v: __m256) -> f32 {
    let x = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps::<1>(v));
    let x = _mm_add_ps(x, _mm_movehl_ps(x, x));
    let x = _mm_add_ss(x, _mm_movehdup_ps(x));
    _mm_cvtss_f32(x)
}

/// The 64 codes of two Q8_0 blocks permuted to byte i of lane l ↔ value 4i + l.
#[inline(always)]
unsafe fn permute_for_2bit(lo: __m256i, hi: __m256i) -> (__m256i, __m256i) {
    let in_lane = _mm256_setr_epi8(
        0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15, 0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10,
        14, 3, 7, 11, 15,
    );
    // Lane L (= 16 values) now holds, in dword l, values 16L + l + {0, 4, 8, 12}.
    let idx = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
    let a = _mm256_permutevar8x32_epi32(_mm256_shuffle_epi8(lo, in_lane), idx);
    let b = _mm256_permutevar8x32_epi32(_mm256_shuffle_epi8(hi, in_lane), idx);
    let even = _mm256_unpacklo_epi64(a, b); // lanes l = 0, 2
    let odd = _mm256_unpackhi_epi64(a, b); // lanes l = 1, 3
    (
        _mm256_permute2x128_si256::<0x20>(even, odd),
        _mm256_permute2x128_si256::<0x31>(even, odd),
    )
}

thread_local! {
    // The unpacked activation chunk, reused by every call on the thread: building (and zeroing)
    // it per call showed up as memset in decode profiles. Every entry a call reads, it wrote.
    // SAFETY: all-zero bits are valid vectors.
    static PREPARED: UnsafeCell<Prepared> = const { UnsafeCell::new(unsafe { core::mem::zeroed() }) };
}

struct Prepared {
    codes: [__m256i; CHUNK_GROUPS],
    scales: [__m256; CHUNK_GROUPS],
    /// Per weight block.
    bias: [__m256; CHUNK_GROUPS],
}

#[inline(always)]
unsafe fn prepare<W: Q8_0Weights>(act: *const u8, n_blocks: usize, p: &mut Prepared) {
    let ones = _mm256_set1_epi8(1);
    let factor = _mm256_set1_ps(W::FACTOR);
    let zero = _mm256_setzero_si256();
    for i in 0..n_blocks {
        let mut bias = _mm256_setzero_ps();
        let first = i * W::GROUPS_PER_BLOCK;
        if W::PERMUTED {
            for pair in 0..W::GROUPS_PER_BLOCK / 2 {
                let gi = first + 2 * pair;
                let k = act.add(gi * Q8_0_BYTES);
                let lo = _mm256_loadu_si256(k.add(2).cast());
                let hi = _mm256_loadu_si256(k.add(Q8_0_BYTES + 2).cast());
                let (q0, q1) = permute_for_2bit(lo, hi);
                let d0 = f16_splat(k);
                let d1 = f16_splat(k.add(Q8_0_BYTES));
                // Dword 4l' + L of either half sums values of Q8_0 block L / 2.
                let scale = _mm256_blend_ps::<0xCC>(d0, d1);
                for (j, q) in [q0, q1].into_iter().enumerate() {
                    let sums = dot4::<false>(zero, ones, q);
                    p.codes[gi + j] = q;
                    p.scales[gi + j] = _mm256_mul_ps(scale, factor);
                    bias = _mm256_fnmadd_ps(_mm256_cvtepi32_ps(sums), scale, bias);
                }
            }
        } else {
            for gi in first..first + W::GROUPS_PER_BLOCK {
                let k = act.add(gi * Q8_0_BYTES);
                let q = _mm256_loadu_si256(k.add(2).cast());
                let scale = f16_splat(k);
                let sums = dot4::<false>(zero, ones, q);
                p.codes[gi] = q;
                p.scales[gi] = _mm256_mul_ps(scale, factor);
                bias = _mm256_fnmadd_ps(_mm256_cvtepi32_ps(sums), scale, bias);
            }
        }
        p.bias[i] = bias;
    }
}

#[inline(always)]
unsafe fn rows<W: Q8_0Weights, const VNNI: bool, const R: usize>(
    base: *const u8,
    row_bytes: usize,
    n_blocks: usize,
    p: &Prepared,
    out: &mut [f32],
) {
    let mut acc = [_mm256_setzero_ps(); R];
    for i in 0..n_blocks {
        let mut t = [p.bias[i]; R];
        for g in 0..W::GROUPS_PER_BLOCK {
            let gi = i * W::GROUPS_PER_BLOCK + g;
            let a = p.codes[gi];
            let scale = p.scales[gi];
            for (r, t) in t.iter_mut().enumerate() {
                let block = base.add(r * row_bytes + i * W::BLOCK_BYTES);
                let s = W::group_dot::<VNNI>(block, g, a);
                *t = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), scale, *t);
            }
        }
        for (r, (acc, t)) in acc.iter_mut().zip(t).enumerate() {
            let dx = f16_splat(base.add(r * row_bytes + i * W::BLOCK_BYTES + W::SCALE_OFFSET));
            *acc = _mm256_fmadd_ps(t, dx, *acc);
        }
    }
    for (o, acc) in out.iter_mut().zip(acc) {
        *o += hsum(acc);
    }
}

/// The whole `GemvFn` contract for a Q8_0-partner format; the caller checked the lengths.
#[inline(always)]
pub(super) unsafe fn gemv_q8_0<W: Q8_0Weights, const VNNI: bool>(
    weights: &[u8],
    row_bytes: usize,
    activation: &[u8],
    out: &mut [f32],
) {
    let n_blocks = row_bytes / W::BLOCK_BYTES;
    let per_chunk = CHUNK_GROUPS / W::GROUPS_PER_BLOCK;
    // SAFETY: the buffer is this thread's own and this function does not re-enter itself, so the
    // reference is unique for its lifetime.
    let p = &mut *PREPARED.with(UnsafeCell::get);
    out.fill(0.0);
    let mut b0 = 0;
    while b0 < n_blocks {
        let nb = per_chunk.min(n_blocks - b0);
        let act = activation
            .as_ptr()
            .add(b0 * W::GROUPS_PER_BLOCK * Q8_0_BYTES);
        prepare::<W>(act, nb, p);
        let base = weights.as_ptr().add(b0 * W::BLOCK_BYTES);
        let mut r = 0;
        while r + 4 <= out.len() {
            rows::<W, VNNI, 4>(
                base.add(r * row_bytes),
                row_bytes,
                nb,
                p,
                &mut out[r..r + 4],
            );
            r += 4;
        }
        while r < out.len() {
            rows::<W, VNNI, 1>(
                base.add(r * row_bytes),
                row_bytes,
                nb,
                p,
                &mut out[r..r + 1],
            );
            r += 1;
        }
        b0 += nb;
    }
}

/// The AVX2 tier's lanes for the shared drivers (`lowbit_rows`): 8 × 32 bits.
pub(super) struct Avx2;

impl Lanes for Avx2 {
    type I = __m256i;
    type F = __m256;
    type Q8KCodes = [__m256i; 8];

    #[inline(always)]
    unsafe fn zero() -> __m256 {
        _mm256_setzero_ps()
    }
    #[inline(always)]
    unsafe fn splat(x: f32) -> __m256 {
        _mm256_set1_ps(x)
    }
    #[inline(always)]
    unsafe fn f16_splat(p: *const u8) -> __m256 {
        f16_splat(p)
    }
    #[inline(always)]
    unsafe fn fmadd(a: __m256, b: __m256, c: __m256) -> __m256 {
        _mm256_fmadd_ps(a, b, c)
    }
    #[inline(always)]
    unsafe fn mul(a: __m256, b: __m256) -> __m256 {
        _mm256_mul_ps(a, b)
    }
    #[inline(always)]
    unsafe fn sub_to_f32(a: __m256i, b: __m256i) -> __m256 {
        _mm256_cvtepi32_ps(_mm256_sub_epi32(a, b))
    }
    #[inline(always)]
    unsafe fn sum(v: __m256) -> f32 {
        hsum(v)
    }
    #[inline(always)]
    unsafe fn load_q8k(y: *const u8) -> [__m256i; 8] {
        core::array::from_fn(|k| _mm256_loadu_si256(y.add(4 + 32 * k).cast()))
    }
    #[inline(always)]
    unsafe fn sum_q8k(codes: &[__m256i; 8]) -> __m256i {
        let ones = _mm256_set1_epi8(1);
        let mut sum_q = _mm256_setzero_si256();
        for &a in codes {
            sum_q = dot4::<false>(sum_q, ones, a);
        }
        sum_q
    }
}
