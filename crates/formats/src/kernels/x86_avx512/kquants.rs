//! The K-quants (Q2_K … Q6_K × Q8_K) and Q5_0 × Q8_0, Q5_1 × Q8_1 on AVX-512: registration,
//! the row-band driver they share and the integer helpers of their block bodies.
//!
//! The decomposition is the AVX2 tier's (`x86_avx2/kquants.rs`), on 64 values a register:
//! unsigned codes × int8 activations in `vpmaddubsw`, 16-bit pair sums × the integer sub-block
//! scales in `vpmaddwd` (or one `vpdpwssd` with AVX-512 VNNI), 32-bit sums per block, float only
//! for the super-scales. Codes come out in value order, so every activation register is loaded
//! as stored, once per block for every row of the band; the sub-block scales are spread over
//! the 128-bit lanes they apply to with one byte shuffle.

mod k_min;
mod k_signed;
mod q5;

use core::arch::x86_64::*;

use crate::kernels::entries::{kquant_variants, pick, Variants};
use crate::kernels::packed_layout::{band_ahead, prefetch};
use crate::kernels::GemvFn;
use crate::FormatKind;

/// Bytes of one Q8_K activation block: f32 scale, 256 codes, 16 sums of 16 codes.
const Q8_K_BYTES: usize = 292;

/// A weight format whose rows are dotted `BLOCKS_PER_STEP` blocks at a time with as many
/// activation blocks.
trait RowStep {
    const BLOCK_BYTES: usize;
    const ACT_BYTES: usize;
    const BLOCKS_PER_STEP: usize;
    /// Rows per band, 4 or 8: eight where what a step derives from the activation is a large
    /// share of its work (Q5_0 / Q5_1: 5–8 % faster on one thread at SmolLM2's and Bonsai's
    /// shapes); four for the K-quants, whose block bodies need the registers (eight measured
    /// 9 % slower on Q6_K at 2048 × 2048, no faster on Q4_K / Q3_K).
    const BAND: usize = 4;
    /// What one step of the activation gives every row of the band, loaded or derived once.
    type Shared;
    /// # Safety
    /// `y` points at the step's activation blocks, all of them when `whole`, else the first
    /// (the row ends inside this step); the tier's features are enabled.
    unsafe fn shared(y: *const u8, whole: bool) -> Self::Shared;
    /// `acc` plus the dot of the weight blocks at `x` with the step's activation (lanes summed
    /// by the caller at the end of the row).
    ///
    /// # Safety
    /// As [`RowStep::shared`], for the weight blocks at `x`; VNNI enabled if asked.
    unsafe fn step<const VNNI: bool>(
        x: *const u8,
        y: &Self::Shared,
        whole: bool,
        acc: __m512,
    ) -> __m512;
}

#[inline(always)]
unsafe fn rows<S: RowStep, const VNNI: bool, const R: usize>(
    base: *const u8,
    row_bytes: usize,
    activation: *const u8,
    n_blocks: usize,
    out: &mut [f32],
) {
    let mut acc = [_mm512_setzero_ps(); R];
    let mut i = 0;
    while i < n_blocks {
        let whole = i + S::BLOCKS_PER_STEP <= n_blocks;
        let y = S::shared(activation.add(i * S::ACT_BYTES), whole);
        let ahead = band_ahead(base, R, row_bytes, i * S::BLOCK_BYTES);
        for (r, acc) in acc.iter_mut().enumerate() {
            let x = base.add(r * row_bytes + i * S::BLOCK_BYTES);
            prefetch(
                ahead.wrapping_add(r * row_bytes),
                S::BLOCK_BYTES * S::BLOCKS_PER_STEP,
            );
            *acc = S::step::<VNNI>(x, &y, whole, *acc);
        }
        i += S::BLOCKS_PER_STEP;
    }
    for (o, acc) in out.iter_mut().zip(acc) {
        *o = _mm512_reduce_add_ps(acc);
    }
}

/// The whole `GemvFn` contract, `S::BAND` rows per pass, then four, then one; the caller checked
/// the lengths. Each row's sum is computed alike in every band, so the band a row falls in does
/// not change its result.
#[inline(always)]
unsafe fn run<S: RowStep, const VNNI: bool>(
    weights: &[u8],
    row_bytes: usize,
    activation: &[u8],
    out: &mut [f32],
) {
    let n_blocks = row_bytes / S::BLOCK_BYTES;
    let (base, act) = (weights.as_ptr(), activation.as_ptr());
    let mut r = 0;
    while S::BAND == 8 && r + 8 <= out.len() {
        let band = &mut out[r..r + 8];
        rows::<S, VNNI, 8>(base.add(r * row_bytes), row_bytes, act, n_blocks, band);
        r += 8;
    }
    while r + 4 <= out.len() {
        let band = &mut out[r..r + 4];
        rows::<S, VNNI, 4>(base.add(r * row_bytes), row_bytes, act, n_blocks, band);
        r += 4;
    }
    while r < out.len() {
        let one = &mut out[r..r + 1];
        rows::<S, VNNI, 1>(base.add(r * row_bytes), row_bytes, act, n_blocks, one);
        r += 1;
    }
}

/// `acc` + Σ of each pair of 16-bit products `p·s`, per dword lane. Exact: every caller keeps
/// |p| ≤ 2·63·128 and |s| ≤ 128.
#[inline(always)]
unsafe fn madd_acc<const VNNI: bool>(acc: __m512i, p: __m512i, s: __m512i) -> __m512i {
    if VNNI {
        _mm512_dpwssd_epi32(acc, p, s)
    } else {
        _mm512_add_epi32(acc, _mm512_madd_epi16(p, s))
    }
}

/// A vector whose 128-bit lane L repeats the dword `d[L]`.
#[inline(always)]
unsafe fn per_lane(d: [u32; 4]) -> __m512i {
    let [a, b, c, e] = d.map(|v| v as i32);
    _mm512_setr_epi32(a, a, a, a, b, b, b, b, c, c, c, c, e, e, e, e)
}

/// Words of 128-bit lane L = unsigned byte `idx[L]` of `b`'s lanes (16 scale bytes each).
#[inline(always)]
unsafe fn splat_u8_lanes(b: __m512i, idx: [usize; 4]) -> __m512i {
    _mm512_shuffle_epi8(b, per_lane(idx.map(|j| (0x8000 | j as u32) * 0x0001_0001)))
}

/// Words of 128-bit lane L = signed byte `idx[L]` of `b`'s lanes (copied to both halves of
/// the word, then shifted down with its sign).
#[inline(always)]
unsafe fn splat_i8_lanes(b: __m512i, idx: [usize; 4]) -> __m512i {
    let idx = per_lane(idx.map(|j| j as u32 * 0x0101_0101));
    _mm512_srai_epi16::<8>(_mm512_shuffle_epi8(b, idx))
}

/// Per byte: whether bit `lo` (low 32 bytes) or bit `hi` (high 32 bytes) is set in `v`.
#[inline(always)]
unsafe fn bit_set(v: __m512i, lo: u32, hi: u32) -> __mmask64 {
    let (lo, hi) = ((1u32 << lo) * 0x0101_0101, (1u32 << hi) * 0x0101_0101);
    _mm512_test_epi8_mask(v, per_lane([lo, lo, hi, hi]))
}

/// 32 bytes at `p` in both halves of a zmm.
#[inline(always)]
unsafe fn broadcast_32(p: *const u8) -> __m512i {
    _mm512_broadcast_i64x4(_mm256_loadu_si256(p.cast()))
}

/// One Q8_K block, loaded once for every row of the band.
struct Q8K {
    d: f32,
    /// Codes 64k..64k+64.
    q: [__m512i; 4],
    /// The stored sums of each 16 codes.
    bsums: __m256i,
}

impl Q8K {
    #[inline(always)]
    unsafe fn load(y: *const u8) -> Q8K {
        Q8K {
            d: y.cast::<f32>().read_unaligned(),
            q: core::array::from_fn(|k| _mm512_loadu_si512(y.add(4 + 64 * k).cast())),
            bsums: _mm256_loadu_si256(y.add(260).cast()),
        }
    }
}

/// Every kernel of this file with its plain and VNNI variants.
const VARIANTS: [Variants<GemvFn>; 7] = kquant_variants!();

pub(super) fn gemv(kind: FormatKind) -> Option<GemvFn> {
    pick(
        &VARIANTS,
        kind,
        std::arch::is_x86_feature_detected!("avx512vnni"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::test_data::{assert_kquant_matches_scalar, assert_variants};
    use crate::kernels::Isa;

    #[test]
    fn plain_and_vnni_variants_match_the_scalar_dot() {
        let vnni = std::arch::is_x86_feature_detected!("avx512vnni");
        assert_variants(
            Isa::Avx512,
            ("avx512vnni", vnni),
            &VARIANTS,
            assert_kquant_matches_scalar,
        );
    }
}
