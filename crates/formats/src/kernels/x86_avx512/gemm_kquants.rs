//! Matrix-matrix products of the K-quants (Q2_K … Q6_K) on AVX-512 VNNI: the row groups,
//! transposed codes and token tiles of `gemm.rs`, with the integer sub-block scales the
//! reference applies.
//!
//! Per 256-value block, row and token the reference computes `d·d_a·Σ_j sc_j·(Σ code·q)_j −
//! dmin·d_a·Σ_j min_j·(Σ q)_j` with exact integer sums. Here each sub-block's code sum is one run
//! of `vpdpbusd` for 16 rows, multiplied by the 16 rows' `sc_j` in integers; the minimum term is
//! one `vpdpwssd` per two sub-blocks against the token's prepared sub-block sums (from Q8_K's
//! `bsums`); the block ends in one conversion and FMA per token. Q6_K's codes stay unsigned
//! (0..63): its offset −32 is the minimum 32·sc scaled by `d`, subtracted in integers; Q3_K's
//! likewise (0..7, offset −4).

use core::arch::x86_64::*;

use super::lanes_left;

use super::gemm::{self, entry, Decoded, GemmWeights};
use crate::kernels::gemm_layout::formats::{Q2_K, Q3_K, Q4_K, Q5_K, Q6_K};
use crate::kernels::gemm_layout::{self, GemmFormat as _, Layout, RowLanes, SubScales, UNIT};
use crate::kernels::GemmKernel;
use crate::FormatKind;

/// Low nibbles of 32 bytes (values 0..32), then their high nibbles (values 32..64).
#[inline(always)]
unsafe fn nibbles32(qs: *const u8) -> __m512i {
    let x = _mm256_loadu_si256(qs.cast());
    let both = _mm512_inserti64x4::<1>(_mm512_castsi256_si512(x), _mm256_srli_epi16::<4>(x));
    _mm512_and_si512(both, _mm512_set1_epi8(0x0F))
}

/// The pair's low four bits in Q4_K / Q5_K: pair `p % 4` of its block owns 32 bytes of `qs`.
#[inline(always)]
unsafe fn k4_low(row: *const u8, p: usize, block_bytes: usize, qs_at: usize) -> __m512i {
    nibbles32(row.add(p / 4 * block_bytes + qs_at + 32 * (p % 4)))
}

/// This tier's row lanes: 16 rows a vector.
struct Zmm;

impl RowLanes<16> for Zmm {
    type V = __m512i;
    #[inline(always)]
    unsafe fn zero() -> __m512i {
        _mm512_setzero_si512()
    }
    #[inline(always)]
    unsafe fn load(lanes: &[i32; 16]) -> __m512i {
        _mm512_loadu_si512(lanes.as_ptr().cast())
    }
}

#[inline(always)]
unsafe fn dword_at(p: *const u8) -> i32 {
    p.cast::<i32>().read_unaligned()
}

/// `T` tokens × the decoded 16 rows of a K-quant.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn k_tile<W: SubScales, const T: usize>(
    dec: &Decoded,
    l: &Layout,
    prepared: *const u8,
    stride: usize,
    n_rows: usize,
    out: *mut f32,
    out_stride: usize,
) {
    let n_blocks = l.n_values / (W::UNITS_PER_BLOCK * UNIT);
    let dwords_per_sub = W::SUB_VALUES / 4;
    let tok: [*const u8; T] = core::array::from_fn(|t| prepared.add(t * stride));
    let mut acc = [_mm512_setzero_ps(); T];
    let mut w = dec.codes.as_ptr();
    let mut sub_sums = l.sub_sums_at;
    let mut codes_at = l.codes_at;
    for b in 0..n_blocks {
        let mut scaled = [_mm512_setzero_si512(); T];
        for j in 0..W::N_SUB {
            let mut isum = [_mm512_setzero_si512(); T];
            for _ in 0..dwords_per_sub {
                let codes = *w;
                w = w.add(1);
                for t in 0..T {
                    let a = _mm512_set1_epi32(dword_at(tok[t].add(codes_at)));
                    isum[t] = _mm512_dpbusd_epi32(isum[t], codes, a);
                }
                codes_at += 4;
            }
            let sc = dec.sub_scales[b * W::N_SUB + j];
            for t in 0..T {
                scaled[t] = _mm512_add_epi32(scaled[t], _mm512_mullo_epi32(isum[t], sc));
            }
        }
        let mut mins = [_mm512_setzero_si512(); T];
        for i in 0..W::N_SUB / 2 {
            let m = dec.sub_mins[b * W::N_SUB / 2 + i];
            for t in 0..T {
                let s = _mm512_set1_epi32(dword_at(tok[t].add(sub_sums)));
                mins[t] = _mm512_dpwssd_epi32(mins[t], m, s);
            }
            sub_sums += 4;
        }
        let d = dec.scales[b];
        for t in 0..T {
            let rows = if W::MIN_AT.is_some() {
                let m = _mm512_mul_ps(dec.mins[b], _mm512_cvtepi32_ps(mins[t]));
                _mm512_fmsub_ps(d, _mm512_cvtepi32_ps(scaled[t]), m)
            } else {
                _mm512_mul_ps(d, _mm512_cvtepi32_ps(_mm512_sub_epi32(scaled[t], mins[t])))
            };
            let da = tok[t]
                .add(l.scales_at + 4 * b)
                .cast::<f32>()
                .read_unaligned();
            acc[t] = _mm512_fmadd_ps(rows, _mm512_set1_ps(da), acc[t]);
        }
    }
    let mask = lanes_left(n_rows);
    for (t, acc) in acc.iter().enumerate() {
        _mm512_mask_storeu_ps(out.add(t * out_stride), mask, *acc);
    }
}

/// The K-quant parts of [`GemmWeights`] beyond `decode_pair`.
macro_rules! sub_scaled {
    () => {
        #[inline(always)]
        unsafe fn decode_extra(
            base: *const u8,
            row_bytes: usize,
            n_rows: usize,
            n_values: usize,
            dec: &mut Decoded,
        ) {
            let (scales, mins) = (&mut dec.sub_scales, &mut dec.sub_mins);
            gemm_layout::decode_sub_scales::<Self, Zmm, 16>(
                base, row_bytes, n_rows, n_values, scales, mins,
            )
        }

        #[inline(always)]
        unsafe fn tile<const T: usize>(
            dec: &Decoded,
            l: &Layout,
            prepared: *const u8,
            stride: usize,
            n_rows: usize,
            out: *mut f32,
            out_stride: usize,
        ) {
            k_tile::<Self, T>(dec, l, prepared, stride, n_rows, out, out_stride)
        }
    };
}

impl GemmWeights for Q4_K {
    #[inline(always)]
    unsafe fn decode_pair(row: *const u8, p: usize) -> __m512i {
        k4_low(row, p, Self::BLOCK_BYTES, 16)
    }
    sub_scaled!();
}

/// The top code bit of pair `p` in Q5_K / Q3_K, where value l + 32k (within the block) has it
/// at bit k of byte l of `bits` (32 bytes): `value` where set. Here k = 2·(p % 4), then k + 1.
#[inline(always)]
unsafe fn top_bit(bits: *const u8, p: usize, value: i8) -> __m512i {
    let k = 2 * (p % 4) as u32;
    let x = _mm256_loadu_si256(bits.cast());
    let both = _mm512_inserti64x4::<1>(_mm512_castsi256_si512(x), x);
    let select = _mm512_inserti64x4::<1>(
        _mm512_set1_epi8((1u8 << k) as i8),
        _mm256_set1_epi8((1u8 << (k + 1)) as i8),
    );
    _mm512_maskz_mov_epi8(_mm512_test_epi8_mask(both, select), _mm512_set1_epi8(value))
}

/// The two-bit codes of pair `p` in Q2_K / Q3_K, whose `qs` (64 bytes) starts at `qs`: pair
/// p % 4 is half h = (p % 4) / 2 of the block, values 32k + l of the half at bits 2k of
/// qs[32h + l], for k = 2·(p % 2) and k + 1.
#[inline(always)]
unsafe fn crumbs(qs: *const u8, p: usize) -> __m512i {
    let x = _mm256_loadu_si256(qs.add(32 * ((p % 4) / 2)).cast());
    let both = _mm512_inserti64x4::<1>(_mm512_castsi256_si512(x), x);
    let (k0, k1) = (4 * (p % 2) as i64, 4 * (p % 2) as i64 + 2);
    let shifted = _mm512_srlv_epi64(both, _mm512_setr_epi64(k0, k0, k0, k0, k1, k1, k1, k1));
    _mm512_and_si512(shifted, _mm512_set1_epi8(3))
}

impl GemmWeights for Q2_K {
    #[inline(always)]
    unsafe fn decode_pair(row: *const u8, p: usize) -> __m512i {
        crumbs(row.add(p / 4 * Self::BLOCK_BYTES + 16), p)
    }
    sub_scaled!();
}

impl GemmWeights for Q3_K {
    #[inline(always)]
    unsafe fn decode_pair(row: *const u8, p: usize) -> __m512i {
        let block = row.add(p / 4 * Self::BLOCK_BYTES);
        _mm512_or_si512(crumbs(block.add(32), p), top_bit(block, p, 4))
    }
    sub_scaled!();
}

impl GemmWeights for Q5_K {
    #[inline(always)]
    unsafe fn decode_pair(row: *const u8, p: usize) -> __m512i {
        let block = row.add(p / 4 * Self::BLOCK_BYTES);
        _mm512_or_si512(
            k4_low(row, p, Self::BLOCK_BYTES, 48),
            top_bit(block.add(16), p, 16),
        )
    }
    sub_scaled!();
}

impl GemmWeights for Q6_K {
    #[inline(always)]
    unsafe fn decode_pair(row: *const u8, p: usize) -> __m512i {
        // Pair p % 4 is half h = (p % 4) / 2 of the block, values 32k + l for k = 2·(p % 2)
        // and k + 1: nibble (p % 2) of ql[64h + l] / ql[64h + 32 + l], top bits 2k of qh[32h + l].
        let block = row.add(p / 4 * Self::BLOCK_BYTES);
        let (h, odd) = ((p % 4) / 2, (p % 2) as i32);
        let ql = _mm512_loadu_si512(block.add(64 * h).cast());
        let low = _mm512_and_si512(
            _mm512_srl_epi16(ql, _mm_cvtsi32_si128(4 * odd)),
            _mm512_set1_epi8(0x0F),
        );
        let qh = _mm256_loadu_si256(block.add(128 + 32 * h).cast());
        let both = _mm512_inserti64x4::<1>(_mm512_castsi256_si512(qh), qh);
        let (k0, k1) = (i64::from(4 * odd), i64::from(4 * odd + 2));
        let top = _mm512_srlv_epi64(both, _mm512_setr_epi64(k0, k0, k0, k0, k1, k1, k1, k1));
        let top = _mm512_slli_epi16::<4>(_mm512_and_si512(top, _mm512_set1_epi8(3)));
        _mm512_or_si512(low, top)
    }
    sub_scaled!();
}

entry!(k_q2_k, Q2_K);
entry!(k_q3_k, Q3_K);
entry!(k_q4_k, Q4_K);
entry!(k_q5_k, Q5_K);
entry!(k_q6_k, Q6_K);

/// The K-quants' matrix-matrix kernels (the caller checked VNNI).
pub(super) fn gemm(kind: FormatKind) -> Option<GemmKernel> {
    match kind {
        FormatKind::Q2_K => Some(k_q2_k::KERNEL),
        FormatKind::Q3_K => Some(k_q3_k::KERNEL),
        FormatKind::Q4_K => Some(k_q4_k::KERNEL),
        FormatKind::Q5_K => Some(k_q5_k::KERNEL),
        FormatKind::Q6_K => Some(k_q6_k::KERNEL),
        _ => None,
    }
}
