//! Q1_0 × Q8_0 on AVX-512: the 64 sign bits of a group are a mask register as they lie in the
//! block, so decoding is one zero-masked move of the activation codes.

use core::arch::x86_64::*;

use super::lowbit_util::{dot4, gemv_q8_0, Q8_0Weights};

struct Q1_0;

impl Q8_0Weights for Q1_0 {
    const BLOCK_BYTES: usize = 18;
    const GROUPS_PER_BLOCK: usize = 2;
    const FACTOR: f32 = 2.0;
    const PERMUTED: bool = false;

    #[inline(always)]
    unsafe fn group_dot<const VNNI: bool>(block: *const u8, g: usize, act: __m512i) -> __m512i {
        let bits = block.add(2 + 8 * g).cast::<u64>().read_unaligned();
        let set = _mm512_maskz_mov_epi8(u64::from_le(bits), act);
        dot4::<VNNI>(_mm512_setzero_si512(), _mm512_set1_epi8(1), set)
    }
}

/// # Safety
/// AVX-512 F/BW/VL/DQ present; buffers checked against the `GemvFn` contract.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq")]
pub(super) unsafe fn gemv(weights: &[u8], row_bytes: usize, activation: &[u8], out: &mut [f32]) {
    gemv_q8_0::<Q1_0, false>(weights, row_bytes, activation, out)
}

/// # Safety
/// As [`gemv`], plus AVX-512 VNNI.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq,avx512vnni")]
pub(super) unsafe fn gemv_vnni(
    weights: &[u8],
    row_bytes: usize,
    activation: &[u8],
    out: &mut [f32],
) {
    gemv_q8_0::<Q1_0, true>(weights, row_bytes, activation, out)
}
