//! TQ1_0 × Q8_K on AVX2. Multiplying a packed byte by 3ⁿ (mod 256) brings trit n to the top,
//! where it reads as (q ≥ 86) + (q ≥ 171) = ⌊3q / 256⌋. The 32 bytes of x give five runs of 32
//! values by repeated tripling (byte adds); y (16 bytes) and the 4 high bytes fill the last three
//! runs through a byte multiply with per-lane multipliers.

use core::arch::x86_64::*;
use core::mem::{offset_of, size_of};

use super::lowbit_util::{dot4, Avx2};
use crate::kernels::lowbit_rows::{gemv_q8_k, Q8KWeights};
use crate::tq1_0::BlockTQ1_0;

/// Byte-wise `b · m mod 256`; `m` is the same for both bytes of every 16-bit lane.
#[inline(always)]
pub(super) unsafe fn mul_bytes(b: __m256i, m: __m256i) -> __m256i {
    let low = _mm256_set1_epi16(0x00ff);
    let even = _mm256_and_si256(_mm256_mullo_epi16(b, m), low);
    let odd = _mm256_mullo_epi16(_mm256_andnot_si256(low, b), m);
    _mm256_or_si256(even, odd)
}

#[inline(always)]
unsafe fn triple(q: __m256i) -> __m256i {
    _mm256_add_epi8(_mm256_add_epi8(q, q), q)
}

/// Trit at the top of each byte, as a code 0..=2.
#[inline(always)]
pub(super) unsafe fn top_trit(q: __m256i) -> __m256i {
    let ge = |c: i8| {
        let c = _mm256_set1_epi8(c);
        _mm256_cmpeq_epi8(_mm256_max_epu8(q, c), q)
    };
    // Each comparison is −1 where it holds.
    _mm256_sub_epi8(
        _mm256_sub_epi8(_mm256_setzero_si256(), ge(86)),
        ge(171u8 as i8),
    )
}

struct TQ1_0;

impl Q8KWeights<Avx2> for TQ1_0 {
    const BLOCK_BYTES: usize = size_of::<BlockTQ1_0>();
    const SCALE_OFFSET: usize = offset_of!(BlockTQ1_0, d);

    #[inline(always)]
    unsafe fn block_dot<const VNNI: bool>(block: *const u8, act: &[__m256i; 8]) -> __m256i {
        let mut s = _mm256_setzero_si256();
        let mut q = _mm256_loadu_si256(block.cast());
        for a in &act[..5] {
            s = dot4::<VNNI>(s, top_trit(q), *a);
            q = triple(q);
        }
        let y = _mm256_broadcastsi128_si256(_mm_loadu_si128(block.add(32).cast()));
        let h = block.add(48).cast::<i32>().read_unaligned();
        let yh = _mm256_inserti128_si256::<1>(y, _mm_set1_epi32(h));
        let runs = [
            (
                y,
                _mm256_setr_epi16(1, 1, 1, 1, 1, 1, 1, 1, 3, 3, 3, 3, 3, 3, 3, 3),
            ),
            (
                y,
                _mm256_setr_epi16(9, 9, 9, 9, 9, 9, 9, 9, 27, 27, 27, 27, 27, 27, 27, 27),
            ),
            (
                yh,
                _mm256_setr_epi16(81, 81, 81, 81, 81, 81, 81, 81, 1, 1, 3, 3, 9, 9, 27, 27),
            ),
        ];
        for (k, (b, m)) in runs.into_iter().enumerate() {
            s = dot4::<VNNI>(s, top_trit(mul_bytes(b, m)), act[5 + k]);
        }
        s
    }
}

/// # Safety
/// AVX2/FMA/F16C present; buffers checked against the `GemvFn` contract.
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn gemv(weights: &[u8], row_bytes: usize, activation: &[u8], out: &mut [f32]) {
    gemv_q8_k::<Avx2, TQ1_0, false>(weights, row_bytes, activation, out)
}

/// # Safety
/// As [`gemv`], plus AVX-VNNI.
#[target_feature(enable = "avx2,fma,f16c,avxvnni")]
pub(super) unsafe fn gemv_vnni(
    weights: &[u8],
    row_bytes: usize,
    activation: &[u8],
    out: &mut [f32],
) {
    gemv_q8_k::<Avx2, TQ1_0, true>(weights, row_bytes, activation, out)
}
