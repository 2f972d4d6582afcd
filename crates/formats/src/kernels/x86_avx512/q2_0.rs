//! The Q2_0 codec × Q8_0 on AVX-512, for every layout (64-value Q2_0, the 128-value PQ2_0 and
//! legacy Q2_0): 16 code bytes broadcast to the four lanes and shifted by 0, 2, 4, 6 bits give
//! value 4i + l in byte i of lane l, the order the activation was permuted into.

use core::arch::x86_64::*;

use super::lowbit_util::{dot4, gemv_q8_0, Q8_0Weights};

/// `GROUPS` groups of 64 values a block.
struct Q2<const GROUPS: usize>;

impl<const GROUPS: usize> Q8_0Weights for Q2<GROUPS> {
    const BLOCK_BYTES: usize = 2 + 16 * GROUPS;
    const GROUPS_PER_BLOCK: usize = GROUPS;
    const FACTOR: f32 = 1.0;
    const PERMUTED: bool = true;

    #[inline(always)]
    unsafe fn group_dot<const VNNI: bool>(block: *const u8, g: usize, act: __m512i) -> __m512i {
        dot4::<VNNI>(_mm512_setzero_si512(), codes(block.add(2 + 16 * g)), act)
    }
}

/// The 64 codes of the 16 bytes at `bytes`, value 4i + l in byte i of lane l.
///
/// # Safety
/// 16 readable bytes; AVX-512 F/BW enabled.
#[inline(always)]
pub(super) unsafe fn codes(bytes: *const u8) -> __m512i {
    let bytes = _mm_loadu_si128(bytes.cast());
    let shifts = _mm512_setr_epi64(
        0,
        0,
        0x0002_0002_0002_0002,
        0x0002_0002_0002_0002,
        0x0004_0004_0004_0004,
        0x0004_0004_0004_0004,
        0x0006_0006_0006_0006,
        0x0006_0006_0006_0006,
    );
    _mm512_and_si512(
        _mm512_srlv_epi16(_mm512_broadcast_i32x4(bytes), shifts),
        _mm512_set1_epi8(3),
    )
}

macro_rules! kernels {
    ($plain:ident, $vnni:ident, $groups:literal) => {
        /// # Safety
        /// AVX-512 F/BW/VL/DQ present; buffers checked against the `GemvFn` contract.
        #[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq")]
        pub(super) unsafe fn $plain(
            weights: &[u8],
            row_bytes: usize,
            activation: &[u8],
            out: &mut [f32],
        ) {
            gemv_q8_0::<Q2<$groups>, false>(weights, row_bytes, activation, out)
        }

        /// # Safety
        /// As the plain kernel, plus AVX-512 VNNI.
        #[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq,avx512vnni")]
        pub(super) unsafe fn $vnni(
            weights: &[u8],
            row_bytes: usize,
            activation: &[u8],
            out: &mut [f32],
        ) {
            gemv_q8_0::<Q2<$groups>, true>(weights, row_bytes, activation, out)
        }
    };
}

kernels!(gemv_g64, gemv_g64_vnni, 1);
kernels!(gemv_g128, gemv_g128_vnni, 2);
