//! TQ2_0 × Q8_K on AVX-512: each 32-byte half of the codes, broadcast to both halves of a zmm
//! and shifted by two bit pairs, yields 64 codes in value order.

use core::arch::x86_64::*;
use core::mem::{offset_of, size_of};

use super::lowbit_util::{dot4, Avx512};
use crate::kernels::lowbit_rows::{gemv_q8_k, Q8KWeights};
use crate::tq2_0::BlockTQ2_0;

struct TQ2_0;

impl Q8KWeights<Avx512> for TQ2_0 {
    const BLOCK_BYTES: usize = size_of::<BlockTQ2_0>();
    const SCALE_OFFSET: usize = offset_of!(BlockTQ2_0, d);

    #[inline(always)]
    unsafe fn block_dot<const VNNI: bool>(block: *const u8, act: &[__m512i; 4]) -> __m512i {
        let mut s = _mm512_setzero_si512();
        for (q, a) in act.iter().enumerate() {
            s = dot4::<VNNI>(s, codes(block, q), *a);
        }
        s
    }
}

/// Codes of values 64q..64q+64 of the block, in value order: the q/2-th 32-byte half of the
/// codes, broadcast to both halves of a zmm and shifted by bit pairs 2(q%2) and 2(q%2)+1.
///
/// # Safety
/// `block` points at a whole block, q < 4; AVX-512 F/BW enabled.
#[inline(always)]
pub(super) unsafe fn codes(block: *const u8, q: usize) -> __m512i {
    let low = _mm512_setr_epi64(
        0,
        0,
        0,
        0,
        0x0002_0002_0002_0002,
        0x0002_0002_0002_0002,
        0x0002_0002_0002_0002,
        0x0002_0002_0002_0002,
    );
    let shifts = _mm512_add_epi16(low, _mm512_set1_epi16(4 * (q % 2) as i16));
    let x = _mm512_broadcast_i64x4(_mm256_loadu_si256(block.add(32 * (q / 2)).cast()));
    _mm512_and_si512(_mm512_srlv_epi16(x, shifts), _mm512_set1_epi8(3))
}

/// # Safety
/// AVX-512 F/BW/VL/DQ present; buffers checked against the `GemvFn` contract.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq")]
pub(super) unsafe fn gemv(weights: &[u8], row_bytes: usize, activation: &[u8], out: &mut [f32]) {
    gemv_q8_k::<Avx512, TQ2_0, false>(weights, row_bytes, activation, out)
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
    gemv_q8_k::<Avx512, TQ2_0, true>(weights, row_bytes, activation, out)
}
