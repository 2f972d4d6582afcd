//! Attention's weighted sums over value rows of the 32-value block formats on AVX2 (AVX-512
//! inherits them): the shared driver (`kernels/block_values.rs`) over 8-lane vectors, each
//! block's codes widened by one shuffle / mask and four `cvtepi8` conversions.

use std::arch::x86_64::*;

use crate::kernels::block_values::{block_values_rows, ValueBlock, ValueLanes};
use crate::kernels::block_values_entry;
use crate::kernels::BlockValuesFn;
use crate::FormatKind;

pub(super) struct Avx2;

impl ValueLanes for Avx2 {
    const LANES: usize = 8;
    type V = __m256;
    type Block = [__m256; 4];

    #[inline(always)]
    unsafe fn zero() -> [__m256; 4] {
        [_mm256_setzero_ps(); 4]
    }
    #[inline(always)]
    unsafe fn splat(x: f32) -> __m256 {
        _mm256_set1_ps(x)
    }
    #[inline(always)]
    unsafe fn mul_add(acc: __m256, c: __m256, v: __m256) -> __m256 {
        _mm256_fmadd_ps(c, v, acc)
    }
    #[inline(always)]
    unsafe fn add(a: __m256, b: __m256) -> __m256 {
        _mm256_add_ps(a, b)
    }
    #[inline(always)]
    unsafe fn load(p: *const f32) -> __m256 {
        // SAFETY: the caller's (8 readable floats).
        unsafe { _mm256_loadu_ps(p) }
    }
    #[inline(always)]
    unsafe fn store(p: *mut f32, v: __m256) {
        // SAFETY: the caller's (8 writable floats).
        unsafe { _mm256_storeu_ps(p, v) }
    }
    #[inline(always)]
    unsafe fn half(p: *const u8) -> f32 {
        // SAFETY: the caller's (2 readable bytes).
        let bits = unsafe { p.cast::<u16>().read_unaligned() };
        _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(i32::from(bits))))
    }
}

/// 32 signed bytes as four vectors of eight floats, in order.
#[inline(always)]
unsafe fn widen(codes: __m256i) -> [__m256; 4] {
    let (lo, hi) = (
        _mm256_castsi256_si128(codes),
        _mm256_extracti128_si256::<1>(codes),
    );
    [lo, _mm_srli_si128::<8>(lo), hi, _mm_srli_si128::<8>(hi)]
        .map(|q| _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q)))
}

/// A format's block: its size, whether it holds a minimum, its 32 codes as signed bytes in value
/// order (`$codes`, an expression of the block pointer `$blk`).
macro_rules! value_block {
    ($name:ident, $block:ty, $min:literal, |$blk:ident| $codes:expr) => {
        struct $name;
        impl ValueBlock<Avx2> for $name {
            const BYTES: usize = size_of::<$block>();
            const MIN: bool = $min;
            #[inline(always)]
            unsafe fn widen($blk: *const u8) -> [__m256; 4] {
                // SAFETY: one block readable at the pointer; AVX2 as the caller's.
                unsafe { widen($codes) }
            }
        }
    };
}

/// The 32 nibbles of the 16 bytes at `qs`, low nibbles first (value order).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn nibbles(qs: *const u8) -> __m256i {
    // SAFETY: the caller guarantees 16 readable bytes.
    let q = unsafe { _mm_loadu_si128(qs.cast()) };
    let m = _mm_set1_epi8(0x0f);
    let lo = _mm_and_si128(q, m);
    let hi = _mm_and_si128(_mm_srli_epi16::<4>(q), m);
    _mm256_inserti128_si256::<1>(_mm256_castsi128_si256(lo), hi)
}

/// The Q5_* codes: nibbles at `qs` with value `i`'s fifth bit (bit `i` of the little-endian u32
/// at `qh`) as 0x10.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn five_bits(qs: *const u8, qh: *const u8) -> __m256i {
    // SAFETY: the caller guarantees 4 readable bytes at `qh`, 16 at `qs`.
    let bits = unsafe { qh.cast::<i32>().read_unaligned() };
    // Byte k takes byte k/8 of the bits; OR-ing every bit but k%8 makes it all ones iff set.
    let spread = _mm256_shuffle_epi8(
        _mm256_set1_epi32(bits),
        _mm256_set_epi64x(
            0x0303_0303_0303_0303,
            0x0202_0202_0202_0202,
            0x0101_0101_0101_0101,
            0,
        ),
    );
    let set = _mm256_cmpeq_epi8(
        _mm256_or_si256(spread, _mm256_set1_epi64x(0x7fbf_dfef_f7fb_fdfe)),
        _mm256_set1_epi8(-1),
    );
    // SAFETY: as above.
    let n = unsafe { nibbles(qs) };
    _mm256_or_si256(n, _mm256_and_si256(set, _mm256_set1_epi8(0x10)))
}

// Q8_0: 32 code bytes follow the scale.
value_block!(Q8_0, crate::q8_0::BlockQ8_0, false, |blk| {
    _mm256_loadu_si256(blk.add(2).cast())
});
// Q4_0: 16 code bytes follow the scale, offset by 8.
value_block!(Q4_0, crate::q4_0::BlockQ4_0, false, |blk| _mm256_sub_epi8(
    nibbles(blk.add(2)),
    _mm256_set1_epi8(8)
));
// Q4_1: 16 code bytes follow the scale and minimum.
value_block!(Q4_1, crate::q4_1::BlockQ4_1, true, |blk| nibbles(
    blk.add(4)
));
// Q5_0: d, qh[4], qs[16], offset by 16.
value_block!(Q5_0, crate::q5_0::BlockQ5_0, false, |blk| _mm256_sub_epi8(
    five_bits(blk.add(6), blk.add(2)),
    _mm256_set1_epi8(16)
));
// Q5_1: d, m, qh[4], qs[16].
value_block!(Q5_1, crate::q5_1::BlockQ5_1, true, |blk| five_bits(
    blk.add(8),
    blk.add(4)
));
// IQ4_NL: 16 index bytes follow the scale, into the 16-byte table of levels.
value_block!(Iq4Nl, crate::iq4_nl::BlockIq4Nl, false, |blk| {
    _mm256_shuffle_epi8(
        _mm256_broadcastsi128_si256(_mm_loadu_si128(crate::iq4_nl::LEVELS.as_ptr().cast())),
        nibbles(blk.add(2)),
    )
});

/// The `BlockValuesFn` contract for format `B` (lengths checked by the caller).
///
/// # Safety
/// AVX2/FMA/F16C; the lengths as [`crate::kernels::check_block_values`] checks them.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn values<B: ValueBlock<Avx2>>(
    weights: &[f32],
    w_stride: usize,
    lens: &[usize],
    rows: &[u8],
    row_bytes: usize,
    out: &mut [f32],
) {
    // SAFETY: the caller's contract, AVX2 enabled here.
    unsafe { block_values_rows::<Avx2, B>(weights, w_stride, lens, rows, row_bytes, out) }
}

/// This tier's kernel for value rows of `kind`, if it has one.
pub(super) fn block_values(kind: FormatKind) -> Option<BlockValuesFn> {
    Some(match kind {
        FormatKind::Q8_0 => block_values_entry!(Q8_0, values::<Q8_0>),
        FormatKind::Q4_0 => block_values_entry!(Q4_0, values::<Q4_0>),
        FormatKind::Q4_1 => block_values_entry!(Q4_1, values::<Q4_1>),
        FormatKind::Q5_0 => block_values_entry!(Q5_0, values::<Q5_0>),
        FormatKind::Q5_1 => block_values_entry!(Q5_1, values::<Q5_1>),
        FormatKind::IQ4_NL => block_values_entry!(IQ4_NL, values::<Iq4Nl>),
        _ => return None,
    })
}
