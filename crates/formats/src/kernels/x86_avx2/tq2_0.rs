//! TQ2_0 × Q8_K on AVX2: each 32-byte half of the codes, shifted by 0, 2, 4, 6 bits, yields four
//! runs of 32 codes in value order.

use core::arch::x86_64::*;
use core::mem::{offset_of, size_of};

use super::lowbit_util::{dot4, Avx2};
use crate::kernels::lowbit_rows::{gemv_q8_k, Q8KWeights};
use crate::tq2_0::BlockTQ2_0;

struct TQ2_0;

impl Q8KWeights<Avx2> for TQ2_0 {
    const BLOCK_BYTES: usize = size_of::<BlockTQ2_0>();
    const SCALE_OFFSET: usize = offset_of!(BlockTQ2_0, d);

    #[inline(always)]
    unsafe fn block_dot<const VNNI: bool>(block: *const u8, act: &[__m256i; 8]) -> __m256i {
        let three = _mm256_set1_epi8(3);
        let mut s = _mm256_setzero_si256();
        for half in 0..2 {
            let x = _mm256_loadu_si256(block.add(32 * half).cast());
            let codes = [
                x,
                _mm256_srli_epi16::<2>(x),
                _mm256_srli_epi16::<4>(x),
                _mm256_srli_epi16::<6>(x),
            ];
            for (l, c) in codes.into_iter().enumerate() {
                s = dot4::<VNNI>(s, _mm256_and_si256(c, three), act[4 * half + l]);
            }
        }
        s
    }
}

/// # Safety
/// AVX2/FMA/F16C present; buffers checked against the `GemvFn` contract.
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn gemv(weights: &[u8], row_bytes: usize, activation: &[u8], out: &mut [f32]) {
    gemv_q8_k::<Avx2, TQ2_0, false>(weights, row_bytes, activation, out)
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
    gemv_q8_k::<Avx2, TQ2_0, true>(weights, row_bytes, activation, out)
}
