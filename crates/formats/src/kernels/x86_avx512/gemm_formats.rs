//! The formats of the matrix-matrix kernel: how each decodes 64 values of a row into unsigned
//! codes, and the safe entry points registered in the tier's table.

use core::arch::x86_64::*;

use super::gemm::{self, entry, GemmWeights};
use super::{ptq1_0, q2_0, tq2_0};
use crate::kernels::gemm_layout::formats::{PTQ1_0, Q1_0, Q2, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, TQ2_0};
use crate::kernels::gemm_layout::GemmFormat as _;
use crate::kernels::GemmKernel;
use crate::FormatKind;

impl GemmWeights for Q1_0 {
    #[inline(always)]
    unsafe fn decode_pair(row: *const u8, p: usize) -> __m512i {
        let bits = row
            .add(p / 2 * Self::BLOCK_BYTES + 2 + 8 * (p % 2))
            .cast::<u64>()
            .read_unaligned();
        _mm512_maskz_mov_epi8(u64::from_le(bits), _mm512_set1_epi8(1))
    }
}

impl<const PAIRS: usize> GemmWeights for Q2<PAIRS> {
    #[inline(always)]
    unsafe fn decode_pair(row: *const u8, p: usize) -> __m512i {
        q2_0::codes(row.add(p / PAIRS * Self::BLOCK_BYTES + 2 + 16 * (p % PAIRS)))
    }
}

impl GemmWeights for TQ2_0 {
    #[inline(always)]
    unsafe fn decode_pair(row: *const u8, p: usize) -> __m512i {
        tq2_0::codes(row.add(p / 4 * Self::BLOCK_BYTES), p % 4)
    }
}

impl GemmWeights for PTQ1_0 {
    #[inline(always)]
    unsafe fn decode_pair(row: *const u8, p: usize) -> __m512i {
        ptq1_0::codes(row.add(p / 2 * Self::BLOCK_BYTES), p % 2)
    }
}

/// Two 32-value blocks of `bytes` bytes whose codes start at `codes_at`.
#[inline(always)]
unsafe fn two_blocks(
    row: *const u8,
    p: usize,
    bytes: usize,
    codes_at: usize,
) -> (__m256i, __m256i) {
    let a = row.add(2 * p * bytes + codes_at);
    (
        _mm256_loadu_si256(a.cast()),
        _mm256_loadu_si256(a.add(bytes).cast()),
    )
}

/// The 32 nibble codes of two blocks' 16 bytes each: low nibbles are values 0..16, high 16..32.
#[inline(always)]
unsafe fn nibbles(row: *const u8, p: usize, bytes: usize, codes_at: usize) -> __m512i {
    let a = _mm_loadu_si128(row.add(2 * p * bytes + codes_at).cast());
    let b = _mm_loadu_si128(row.add((2 * p + 1) * bytes + codes_at).cast());
    let x = _mm512_inserti64x4::<1>(
        _mm512_castsi256_si512(_mm256_set_m128i(a, a)),
        _mm256_set_m128i(b, b),
    );
    let shifts = _mm512_setr_epi64(0, 0, 4, 4, 0, 0, 4, 4);
    _mm512_and_si512(_mm512_srlv_epi64(x, shifts), _mm512_set1_epi8(0x0F))
}

impl GemmWeights for Q8_0 {
    #[inline(always)]
    unsafe fn decode_pair(row: *const u8, p: usize) -> __m512i {
        let (a, b) = two_blocks(row, p, Self::BLOCK_BYTES, 2);
        let x = _mm512_inserti64x4::<1>(_mm512_castsi256_si512(a), b);
        _mm512_xor_si512(x, _mm512_set1_epi8(-128))
    }
}

impl GemmWeights for Q4_0 {
    #[inline(always)]
    unsafe fn decode_pair(row: *const u8, p: usize) -> __m512i {
        nibbles(row, p, Self::BLOCK_BYTES, 2)
    }
}

impl GemmWeights for Q4_1 {
    #[inline(always)]
    unsafe fn decode_pair(row: *const u8, p: usize) -> __m512i {
        nibbles(row, p, Self::BLOCK_BYTES, 4)
    }
}

/// The 32 five-bit codes of two blocks: [`nibbles`] with the fifth bits of each block's
/// little-endian `qh` (4 bytes before the nibbles) set as 16.
#[inline(always)]
unsafe fn five_bits(row: *const u8, p: usize, bytes: usize, codes_at: usize) -> __m512i {
    let qh = |block: usize| -> u64 {
        let at = row.add(block * bytes + codes_at - 4);
        u64::from(u32::from_le(at.cast::<u32>().read_unaligned()))
    };
    let high = _mm512_maskz_mov_epi8(qh(2 * p) | (qh(2 * p + 1) << 32), _mm512_set1_epi8(16));
    _mm512_or_si512(nibbles(row, p, bytes, codes_at), high)
}

impl GemmWeights for Q5_0 {
    #[inline(always)]
    unsafe fn decode_pair(row: *const u8, p: usize) -> __m512i {
        five_bits(row, p, Self::BLOCK_BYTES, 6)
    }
}

impl GemmWeights for Q5_1 {
    #[inline(always)]
    unsafe fn decode_pair(row: *const u8, p: usize) -> __m512i {
        five_bits(row, p, Self::BLOCK_BYTES, 8)
    }
}

entry!(k_q1_0, Q1_0);
entry!(k_q2_0, Q2<1>);
entry!(k_pq2_0, Q2<2>);
entry!(k_tq2_0, TQ2_0);
entry!(k_ptq1_0, PTQ1_0);
entry!(k_q8_0, Q8_0);
entry!(k_q4_0, Q4_0);
entry!(k_q4_1, Q4_1);
entry!(k_q5_0, Q5_0);
entry!(k_q5_1, Q5_1);

/// The matrix-matrix kernel of a format (only with VNNI: `vpdpbusd` takes the full unsigned
/// code range of Q8_0 without the 16-bit saturation of the older pair instructions).
pub(crate) fn gemm(kind: FormatKind) -> Option<GemmKernel> {
    if !std::arch::is_x86_feature_detected!("avx512vnni") {
        return None;
    }
    Some(match kind {
        FormatKind::Q1_0 => k_q1_0::KERNEL,
        FormatKind::Q2_0 => k_q2_0::KERNEL,
        FormatKind::PQ2_0 | FormatKind::Q2_0G128Legacy => k_pq2_0::KERNEL,
        FormatKind::TQ2_0 => k_tq2_0::KERNEL,
        FormatKind::PTQ1_0 => k_ptq1_0::KERNEL,
        FormatKind::Q8_0 => k_q8_0::KERNEL,
        FormatKind::Q4_0 => k_q4_0::KERNEL,
        FormatKind::Q4_1 => k_q4_1::KERNEL,
        FormatKind::Q5_0 => k_q5_0::KERNEL,
        FormatKind::Q5_1 => k_q5_1::KERNEL,
        _ => return super::gemm_kquants::gemm(kind),
    })
}
