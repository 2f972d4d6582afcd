//! The K-quants (Q2_K … Q6_K × Q8_K) and Q5_0 × Q8_0, Q5_1 × Q8_1 on AVX2: registration, the
//! row-band driver they share and the integer helpers of their block bodies.
//!
//! Every kernel keeps the reference's decomposition, so its integer parts are exact: per
//! sub-block Σ code·q8 (`maddubs` of unsigned codes by the int8 activation, whose 16-bit pair
//! sums stay below 2·63·128), times the sub-block's integer scale (`madd` on 16-bit words, or
//! one `vpdpwssd` with AVX-VNNI), summed in 32-bit lanes; only the super-scales are float. The
//! offsets that make codes signed or carry a minimum come from the activation once per block
//! and serve every row of the band: the stored `bsums` for the formats with minimums (as the
//! reference reads them), `maddubs(k, q8)` for Q6_K's −32 and Q3_K's −4, k·Σq for Q5_0's −16.

pub(in crate::kernels) mod k_min;
pub(in crate::kernels) mod k_signed;
mod q5;

use core::arch::x86_64::*;

use crate::kernels::entries::{kquant_variants, pick, Variants};
use crate::kernels::packed_layout::{band_ahead, prefetch};
use crate::kernels::GemvFn;
use crate::FormatKind;

/// Bytes of one Q8_K activation block: f32 scale, 256 codes, 16 sums of 16 codes.
pub(super) const Q8_K_BYTES: usize = 292;

/// A weight format whose rows are dotted one block at a time with one activation block.
pub(super) trait RowBlock {
    const BLOCK_BYTES: usize;
    const ACT_BYTES: usize;
    /// What one activation block gives every row of the band, loaded or derived once.
    type Shared;
    /// # Safety
    /// `y` points at a whole activation block; the tier's features are enabled.
    unsafe fn shared(y: *const u8) -> Self::Shared;
    /// `acc` plus the dot of the weight block at `x` with the activation block (lanes summed
    /// by the caller at the end of the row).
    ///
    /// # Safety
    /// `x` points at a whole weight block; the tier's features (and VNNI if asked) are enabled.
    unsafe fn block<const VNNI: bool>(x: *const u8, y: &Self::Shared, acc: __m256) -> __m256;
}

#[inline(always)]
unsafe fn hsum(v: __m256) -> f32 {
    let x = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps::<1>(v));
    let x = _mm_add_ps(x, _mm_movehl_ps(x, x));
    let x = _mm_add_ss(x, _mm_movehdup_ps(x));
    _mm_cvtss_f32(x)
}

#[inline(always)]
unsafe fn rows<B: RowBlock, const VNNI: bool, const R: usize>(
    base: *const u8,
    row_bytes: usize,
    activation: *const u8,
    n_blocks: usize,
    out: &mut [f32],
) {
    let mut acc = [_mm256_setzero_ps(); R];
    for i in 0..n_blocks {
        let y = B::shared(activation.add(i * B::ACT_BYTES));
        let ahead = band_ahead(base, R, row_bytes, i * B::BLOCK_BYTES);
        for (r, acc) in acc.iter_mut().enumerate() {
            let x = base.add(r * row_bytes + i * B::BLOCK_BYTES);
            prefetch(ahead.wrapping_add(r * row_bytes), B::BLOCK_BYTES);
            *acc = B::block::<VNNI>(x, &y, *acc);
        }
    }
    for (o, acc) in out.iter_mut().zip(acc) {
        *o = hsum(acc);
    }
}

/// The whole `GemvFn` contract, four rows per pass; the caller checked the lengths.
#[inline(always)]
pub(super) unsafe fn run<B: RowBlock, const VNNI: bool>(
    weights: &[u8],
    row_bytes: usize,
    activation: &[u8],
    out: &mut [f32],
) {
    let n_blocks = row_bytes / B::BLOCK_BYTES;
    let (base, act) = (weights.as_ptr(), activation.as_ptr());
    let mut r = 0;
    while r + 4 <= out.len() {
        let band = &mut out[r..r + 4];
        rows::<B, VNNI, 4>(base.add(r * row_bytes), row_bytes, act, n_blocks, band);
        r += 4;
    }
    while r < out.len() {
        let one = &mut out[r..r + 1];
        rows::<B, VNNI, 1>(base.add(r * row_bytes), row_bytes, act, n_blocks, one);
        r += 1;
    }
}

/// `acc` + Σ of each pair of 16-bit products `p·s`, per dword lane. Exact: every caller keeps
/// |p| ≤ 2·63·128 and |s| ≤ 128.
#[inline(always)]
pub(super) unsafe fn madd_acc<const VNNI: bool>(acc: __m256i, p: __m256i, s: __m256i) -> __m256i {
    if VNNI {
        _mm256_dpwssd_avx_epi32(acc, p, s)
    } else {
        _mm256_add_epi32(acc, _mm256_madd_epi16(p, s))
    }
}

/// Two little-endian f16 at `p` widened into lanes 0 and 1.
#[inline(always)]
pub(super) unsafe fn two_halves(p: *const u8) -> __m128 {
    _mm_cvtph_ps(_mm_cvtsi32_si128(p.cast::<i32>().read_unaligned()))
}

/// One f16 at `p`, widened.
#[inline(always)]
pub(super) unsafe fn half(p: *const u8) -> f32 {
    let bits = i32::from(p.cast::<u16>().read_unaligned());
    _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(bits)))
}

/// Words of the low 128-bit lane = unsigned byte `lo` of `b`'s lanes, of the high lane = byte `hi`.
#[inline(always)]
pub(super) unsafe fn splat_u8_pair(b: __m256i, lo: usize, hi: usize) -> __m256i {
    let idx = _mm256_set_m128i(
        _mm_set1_epi16((0x8000 | hi) as i16),
        _mm_set1_epi16((0x8000 | lo) as i16),
    );
    _mm256_shuffle_epi8(b, idx)
}

/// Words of the low 128-bit lane = signed byte `lo` of `scales`, of the high lane = byte `hi`.
#[inline(always)]
pub(super) unsafe fn splat_i8_pair(scales: __m128i, lo: usize, hi: usize) -> __m256i {
    let bytes = |j: usize| (j as u64 * 0x0101_0101_0101_0101) as i64;
    _mm256_cvtepi8_epi16(_mm_shuffle_epi8(
        scales,
        _mm_set_epi64x(bytes(hi), bytes(lo)),
    ))
}

/// One Q8_K block, loaded once for every row of the band.
pub(super) struct Q8K {
    pub d: f32,
    /// Codes 32k..32k+32.
    pub q: [__m256i; 8],
    /// The stored sums of each 16 codes.
    pub bsums: __m256i,
}

impl Q8K {
    #[inline(always)]
    pub(super) unsafe fn load(y: *const u8) -> Q8K {
        Q8K {
            d: y.cast::<f32>().read_unaligned(),
            q: core::array::from_fn(|k| _mm256_loadu_si256(y.add(4 + 32 * k).cast())),
            bsums: _mm256_loadu_si256(y.add(260).cast()),
        }
    }
}

/// Every byte's bits starting at `from` moved to start at `to`, then only `mask` kept. Word-wide
/// shifts do: what crosses into the neighbouring byte lands outside `mask` for every caller.
#[inline(always)]
pub(super) unsafe fn bits_to(v: __m256i, from: u32, to: u32, mask: u8) -> __m256i {
    let moved = if from >= to {
        _mm256_srl_epi16(v, _mm_cvtsi32_si128((from - to) as i32))
    } else {
        _mm256_sll_epi16(v, _mm_cvtsi32_si128((to - from) as i32))
    };
    _mm256_and_si256(moved, _mm256_set1_epi8(mask as i8))
}

/// Every kernel of this file with its plain and VNNI variants.
const VARIANTS: [Variants<GemvFn>; 7] = kquant_variants!();

pub(super) fn gemv(kind: FormatKind) -> Option<GemvFn> {
    pick(
        &VARIANTS,
        kind,
        std::arch::is_x86_feature_detected!("avxvnni"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::test_data::{assert_kquant_matches_scalar, assert_variants};
    use crate::kernels::Isa;

    #[test]
    fn plain_and_vnni_variants_match_the_scalar_dot() {
        let vnni = std::arch::is_x86_feature_detected!("avxvnni");
        assert_variants(
            Isa::Avx2,
            ("avxvnni", vnni),
            &VARIANTS,
            assert_kquant_matches_scalar,
        );
    }
}
