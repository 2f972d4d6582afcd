//! Shared machinery of the AVX-512 kernels for the 1- and 2-bit formats dotted with Q8_0 (Q1_0 and
//! the Q2_0 family), and this tier's [`Lanes`] for the ternary driver shared by every tier
//! (`lowbit_rows`).
//!
//! Per call, each chunk of the activation row is unpacked once into a stack buffer: codes in
//! 64-byte groups (one zmm), the Q8_0 scales spread over the dword lanes they apply to, and a
//! per-block bias. Every weight row of the band then reuses it, so a weight group costs one
//! decode, one 4-byte dot (`vpdpbusd` or `vpmaddubsw`+`vpmaddwd`), one conversion and one FMA.
//! Weights are decoded as unsigned codes `u` with value `FACTOR·u − 1` (Q1_0: bit ∈ {0,1}, ±1 =
//! 2·bit − 1; Q2_0: code − 1), so Σ value·q = FACTOR·Σ u·q − Σ q exactly; the Σ q term is
//! folded into the bias, leaving the integer parts exact.

use core::arch::x86_64::*;
use core::cell::UnsafeCell;

use crate::kernels::lowbit_rows::Lanes;

/// Bytes of one Q8_0 activation block (f16 scale, 32 codes).
const Q8_0_BYTES: usize = core::mem::size_of::<crate::q8_0::BlockQ8_0>();
/// Groups unpacked per chunk (4096 values): ~12 KiB of stack.
const CHUNK_GROUPS: usize = 64;

/// A weight format dotted with Q8_0, decoded 64 values at a time.
pub(super) trait Q8_0Weights {
    const BLOCK_BYTES: usize;
    const GROUPS_PER_BLOCK: usize;
    /// Value = FACTOR·code − 1 (in units of the block scale).
    const FACTOR: f32;
    /// Whether the group's codes come out in the order byte i of 128-bit lane l ↔ value 4i + l
    /// (the natural order of 2-bit codes split by bit pair), so the activation is permuted to match.
    const PERMUTED: bool;
    /// Where the block keeps its f16 scale (first for all but PTQ1_0, which keeps it last).
    const SCALE_OFFSET: usize = 0;
    /// Σ over dword lanes of code·activation for group `g` of the block at `block`, each lane
    /// summing four values of one Q8_0 block.
    ///
    /// # Safety
    /// `block` points at a whole block; the tier's features are enabled.
    unsafe fn group_dot<const VNNI: bool>(block: *const u8, g: usize, act: __m512i) -> __m512i;
}

/// Σ of four u8·i8 products per dword lane, added to `acc`. Exact: |u| ≤ 3 keeps the 16-bit
/// pair sums far from saturation.
#[inline(always)]
pub(super) unsafe fn dot4<const VNNI: bool>(acc: __m512i, u: __m512i, s: __m512i) -> __m512i {
    if VNNI {
        _mm512_dpbusd_epi32(acc, u, s)
    } else {
        let pairs = _mm512_maddubs_epi16(u, s);
        _mm512_add_epi32(acc, _mm512_madd_epi16(pairs, _mm512_set1_epi16(1)))
    }
}

/// An f16 read from 2 unaligned bytes, widened and broadcast.
#[inline(always)]
pub(super) unsafe fn f16_splat(p: *const u8) -> __m512 {
    let bits = p.cast::<i16>().read_unaligned();
    _mm512_cvtph_ps(_mm256_set1_epi16(bits))
}

/// A 64-byte constant as a vector.
#[inline(always)]
pub(super) unsafe fn constant(bytes: &[u8; 64]) -> __m512i {
    _mm512_loadu_si512(bytes.as_ptr().cast())
}

/// Byte i of lane l ← byte 4i + l of the group: an in-lane 4×4 byte transpose followed by a 4×4
/// dword transpose across lanes (plain AVX-512BW, no VBMI).
#[inline(always)]
pub(super) unsafe fn permute_for_2bit(q: __m512i) -> __m512i {
    const IN_LANE: [u8; 64] = {
        let mut t = [0u8; 64];
        let mut i = 0;
        while i < 64 {
            let j = i % 16;
            t[i] = ((j % 4) * 4 + j / 4) as u8;
            i += 1;
        }
        t
    };
    let idx = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
    _mm512_permutexvar_epi32(idx, _mm512_shuffle_epi8(q, constant(&IN_LANE)))
}

thread_local! {
    // The unpacked activation chunk, reused by every call on the thread: building (and zeroing)
    // 12 KiB per call showed up as memset in decode profiles. Every entry a call reads, it wrote.
    // SAFETY: all-zero bits are valid vectors.
    static PREPARED: UnsafeCell<Prepared> = const { UnsafeCell::new(unsafe { core::mem::zeroed() }) };
}

/// One chunk of the activation, unpacked.
struct Prepared {
    codes: [__m512i; CHUNK_GROUPS],
    /// FACTOR · the Q8_0 scale of each dword lane.
    scales: [__m512; CHUNK_GROUPS],
    /// −Σ over the block's groups of scale·(Σ of the lane's four codes), per weight block.
    bias: [__m512; CHUNK_GROUPS],
}

#[inline(always)]
unsafe fn prepare<W: Q8_0Weights>(act: *const u8, n_blocks: usize, p: &mut Prepared) {
    let ones = _mm512_set1_epi8(1);
    let factor = _mm512_set1_ps(W::FACTOR);
    for i in 0..n_blocks {
        let mut bias = _mm512_setzero_ps();
        for g in 0..W::GROUPS_PER_BLOCK {
            let gi = i * W::GROUPS_PER_BLOCK + g;
            let k = act.add(gi * 2 * Q8_0_BYTES);
            let lo = _mm256_loadu_si256(k.add(2).cast());
            let hi = _mm256_loadu_si256(k.add(Q8_0_BYTES + 2).cast());
            let mut q = _mm512_inserti64x4::<1>(_mm512_castsi256_si512(lo), hi);
            let d0 = k.cast::<i16>().read_unaligned();
            let d1 = k.add(Q8_0_BYTES).cast::<i16>().read_unaligned();
            let scale = if W::PERMUTED {
                q = permute_for_2bit(q);
                // Dword 4l + L sums values 16L + l + {0,4,8,12}: Q8_0 block L / 2.
                let a = _mm512_cvtph_ps(_mm256_set1_epi16(d0));
                let b = _mm512_cvtph_ps(_mm256_set1_epi16(d1));
                _mm512_mask_blend_ps(0xCCCC, a, b)
            } else {
                _mm512_cvtph_ps(_mm256_set_m128i(_mm_set1_epi16(d1), _mm_set1_epi16(d0)))
            };
            let sums = dot4::<false>(_mm512_setzero_si512(), ones, q);
            p.codes[gi] = q;
            p.scales[gi] = _mm512_mul_ps(scale, factor);
            bias = _mm512_fnmadd_ps(_mm512_cvtepi32_ps(sums), scale, bias);
        }
        p.bias[i] = bias;
    }
}

/// `R` rows of one chunk: per row a vector accumulator, reduced once at the end.
#[inline(always)]
unsafe fn rows<W: Q8_0Weights, const VNNI: bool, const R: usize>(
    base: *const u8,
    row_bytes: usize,
    n_blocks: usize,
    p: &Prepared,
    out: &mut [f32],
) {
    let mut acc = [_mm512_setzero_ps(); R];
    for i in 0..n_blocks {
        let mut t = [p.bias[i]; R];
        for g in 0..W::GROUPS_PER_BLOCK {
            let gi = i * W::GROUPS_PER_BLOCK + g;
            let a = p.codes[gi];
            let scale = p.scales[gi];
            for (r, t) in t.iter_mut().enumerate() {
                let block = base.add(r * row_bytes + i * W::BLOCK_BYTES);
                let s = W::group_dot::<VNNI>(block, g, a);
                *t = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), scale, *t);
            }
        }
        for (r, (acc, t)) in acc.iter_mut().zip(t).enumerate() {
            let dx = f16_splat(base.add(r * row_bytes + i * W::BLOCK_BYTES + W::SCALE_OFFSET));
            *acc = _mm512_fmadd_ps(t, dx, *acc);
        }
    }
    for (o, acc) in out.iter_mut().zip(acc) {
        *o += _mm512_reduce_add_ps(acc);
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
            .add(b0 * W::GROUPS_PER_BLOCK * 2 * Q8_0_BYTES);
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

/// The AVX-512 tier's lanes for the shared drivers (`lowbit_rows`): 16 × 32 bits.
pub(super) struct Avx512;

impl Lanes for Avx512 {
    type I = __m512i;
    type F = __m512;
    type Q8KCodes = [__m512i; 4];

    #[inline(always)]
    unsafe fn zero() -> __m512 {
        _mm512_setzero_ps()
    }
    #[inline(always)]
    unsafe fn splat(x: f32) -> __m512 {
        _mm512_set1_ps(x)
    }
    #[inline(always)]
    unsafe fn f16_splat(p: *const u8) -> __m512 {
        f16_splat(p)
    }
    #[inline(always)]
    unsafe fn fmadd(a: __m512, b: __m512, c: __m512) -> __m512 {
        _mm512_fmadd_ps(a, b, c)
    }
    #[inline(always)]
    unsafe fn mul(a: __m512, b: __m512) -> __m512 {
        _mm512_mul_ps(a, b)
    }
    #[inline(always)]
    unsafe fn sub_to_f32(a: __m512i, b: __m512i) -> __m512 {
        _mm512_cvtepi32_ps(_mm512_sub_epi32(a, b))
    }
    #[inline(always)]
    unsafe fn sum(v: __m512) -> f32 {
        _mm512_reduce_add_ps(v)
    }
    #[inline(always)]
    unsafe fn load_q8k(y: *const u8) -> [__m512i; 4] {
        core::array::from_fn(|k| _mm512_loadu_si512(y.add(4 + 64 * k).cast()))
    }
    #[inline(always)]
    unsafe fn sum_q8k(codes: &[__m512i; 4]) -> __m512i {
        let ones = _mm512_set1_epi8(1);
        let mut sum_q = _mm512_setzero_si512();
        for &a in codes {
            sum_q = dot4::<false>(sum_q, ones, a);
        }
        sum_q
    }
}
