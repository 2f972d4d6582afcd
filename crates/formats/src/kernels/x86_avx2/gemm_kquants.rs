//! Matrix-matrix products of the K-quants (Q2_K … Q6_K) on AVX2 (AVX-VNNI where present):
//! the scheme of `x86_avx512/gemm_kquants.rs` on the 8-row groups of `gemm.rs` — per sub-block
//! an integer code sum per row and token times the rows' integer scales, the minimum term as
//! 16-bit pair products with the token's prepared sub-block sums, one conversion and FMA per
//! 256-value block and token. Codes stay ≤ 63, so the plain `vpmaddubsw` path does not saturate.

use core::arch::x86_64::*;

use super::gemm::{entry, gemm, Decode, Decoded};
use super::kquants::{bits_to, madd_acc};
use super::lowbit_util::dot4;
use crate::kernels::gemm_layout::formats::{Q2_K, Q3_K, Q4_K, Q5_K, Q6_K};
use crate::kernels::gemm_layout::{self, GemmFormat as _, Layout, RowLanes, SubScales, UNIT};
use crate::kernels::GemmKernel;
use crate::FormatKind;

/// This tier's row lanes: 8 rows a vector.
struct Ymm;

impl RowLanes<8> for Ymm {
    type V = __m256i;
    #[inline(always)]
    unsafe fn zero() -> __m256i {
        _mm256_setzero_si256()
    }
    #[inline(always)]
    unsafe fn load(lanes: &[i32; 8]) -> __m256i {
        _mm256_loadu_si256(lanes.as_ptr().cast())
    }
}

#[inline(always)]
unsafe fn dword_at(p: *const u8) -> i32 {
    p.cast::<i32>().read_unaligned()
}

/// `T` tokens × the decoded 8 rows of a K-quant.
#[inline(always)]
unsafe fn k_tile<W: SubScales, const VNNI: bool, const T: usize>(
    dec: &Decoded,
    l: &Layout,
    prepared: *const u8,
    n_rows: usize,
    out: *mut f32,
    out_stride: usize,
) {
    let n_blocks = l.n_values / (W::UNITS_PER_BLOCK * UNIT);
    let dwords_per_sub = W::SUB_VALUES / 4;
    let tok: [*const u8; T] = core::array::from_fn(|t| prepared.add(t * l.bytes));
    let mut acc = [_mm256_setzero_ps(); T];
    let mut w = dec.codes.as_ptr();
    let mut sub_sums = l.sub_sums_at;
    let mut codes_at = l.codes_at;
    for b in 0..n_blocks {
        let mut scaled = [_mm256_setzero_si256(); T];
        for j in 0..W::N_SUB {
            let mut isum = [_mm256_setzero_si256(); T];
            for _ in 0..dwords_per_sub {
                let codes = *w;
                w = w.add(1);
                for t in 0..T {
                    let a = _mm256_set1_epi32(dword_at(tok[t].add(codes_at)));
                    isum[t] = dot4::<VNNI>(isum[t], codes, a);
                }
                codes_at += 4;
            }
            let sc = dec.sub_scales[b * W::N_SUB + j];
            for t in 0..T {
                scaled[t] = _mm256_add_epi32(scaled[t], _mm256_mullo_epi32(isum[t], sc));
            }
        }
        let mut mins = [_mm256_setzero_si256(); T];
        for i in 0..W::N_SUB / 2 {
            let m = dec.sub_mins[b * W::N_SUB / 2 + i];
            for t in 0..T {
                let s = _mm256_set1_epi32(dword_at(tok[t].add(sub_sums)));
                mins[t] = madd_acc::<VNNI>(mins[t], m, s);
            }
            sub_sums += 4;
        }
        let d = dec.scales[b];
        for t in 0..T {
            let rows = if W::MIN_AT.is_some() {
                let m = _mm256_mul_ps(dec.mins[b], _mm256_cvtepi32_ps(mins[t]));
                _mm256_fmsub_ps(d, _mm256_cvtepi32_ps(scaled[t]), m)
            } else {
                _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_sub_epi32(scaled[t], mins[t])))
            };
            let da = tok[t]
                .add(l.scales_at + 4 * b)
                .cast::<f32>()
                .read_unaligned();
            acc[t] = _mm256_fmadd_ps(rows, _mm256_set1_ps(da), acc[t]);
        }
    }
    for (t, acc) in acc.iter().enumerate() {
        let mut v = [0.0f32; 8];
        _mm256_storeu_ps(v.as_mut_ptr(), *acc);
        core::ptr::copy_nonoverlapping(v.as_ptr(), out.add(t * out_stride), n_rows);
    }
}

/// The K-quant parts of [`Decode`] beyond `decode_pair`.
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
            gemm_layout::decode_sub_scales::<Self, Ymm, 8>(
                base, row_bytes, n_rows, n_values, scales, mins,
            )
        }

        #[inline(always)]
        unsafe fn tile<const VNNI: bool, const T: usize>(
            dec: &Decoded,
            l: &Layout,
            prepared: *const u8,
            n_rows: usize,
            out: *mut f32,
            out_stride: usize,
        ) {
            k_tile::<Self, VNNI, T>(dec, l, prepared, n_rows, out, out_stride)
        }
    };
}

/// Q4_K / Q5_K's low four bits of pair `p`: 32 bytes of `qs` whose low nibbles are the first
/// 32 values and high nibbles the next 32.
#[inline(always)]
unsafe fn k4_low(row: *const u8, p: usize, block_bytes: usize, qs_at: usize) -> (__m256i, __m256i) {
    let qs = _mm256_loadu_si256(row.add(p / 4 * block_bytes + qs_at + 32 * (p % 4)).cast());
    (bits_to(qs, 0, 0, 0x0F), bits_to(qs, 4, 0, 0x0F))
}

impl Decode for Q4_K {
    #[inline(always)]
    unsafe fn decode_pair(row: *const u8, p: usize) -> (__m256i, __m256i) {
        k4_low(row, p, Self::BLOCK_BYTES, 16)
    }
    sub_scaled!();
}

/// The top code bit of pair `p` in Q5_K / Q3_K, where value l + 32k (within the block) has it
/// at bit k of byte l of `bits` (32 bytes): moved to bit `to`. Here k = 2·(p % 4), then k + 1.
#[inline(always)]
unsafe fn top_bit(bits: *const u8, p: usize, to: u32) -> (__m256i, __m256i) {
    let k = 2 * (p % 4) as u32;
    let x = _mm256_loadu_si256(bits.cast());
    (bits_to(x, k, to, 1 << to), bits_to(x, k + 1, to, 1 << to))
}

/// The two-bit codes of pair `p` in Q2_K / Q3_K, whose `qs` (64 bytes) starts at `qs`: pair
/// p % 4 is half h = (p % 4) / 2 of the block, values 32k + l of the half at bits 2k of
/// qs[32h + l], for k = 2·(p % 2) and k + 1.
#[inline(always)]
unsafe fn crumbs(qs: *const u8, p: usize) -> (__m256i, __m256i) {
    let x = _mm256_loadu_si256(qs.add(32 * ((p % 4) / 2)).cast());
    let k = 4 * (p % 2) as u32;
    (bits_to(x, k, 0, 3), bits_to(x, k + 2, 0, 3))
}

impl Decode for Q2_K {
    #[inline(always)]
    unsafe fn decode_pair(row: *const u8, p: usize) -> (__m256i, __m256i) {
        crumbs(row.add(p / 4 * Self::BLOCK_BYTES + 16), p)
    }
    sub_scaled!();
}

impl Decode for Q3_K {
    #[inline(always)]
    unsafe fn decode_pair(row: *const u8, p: usize) -> (__m256i, __m256i) {
        let block = row.add(p / 4 * Self::BLOCK_BYTES);
        let (lo, hi) = crumbs(block.add(32), p);
        let (top_lo, top_hi) = top_bit(block, p, 2);
        (_mm256_or_si256(lo, top_lo), _mm256_or_si256(hi, top_hi))
    }
    sub_scaled!();
}

impl Decode for Q5_K {
    #[inline(always)]
    unsafe fn decode_pair(row: *const u8, p: usize) -> (__m256i, __m256i) {
        let (lo, hi) = k4_low(row, p, Self::BLOCK_BYTES, 48);
        let (top_lo, top_hi) = top_bit(row.add(p / 4 * Self::BLOCK_BYTES + 16), p, 4);
        (_mm256_or_si256(lo, top_lo), _mm256_or_si256(hi, top_hi))
    }
    sub_scaled!();
}

impl Decode for Q6_K {
    #[inline(always)]
    unsafe fn decode_pair(row: *const u8, p: usize) -> (__m256i, __m256i) {
        // Pair p % 4 is half h = (p % 4) / 2 of the block, values 32k + l for k = 2·(p % 2)
        // and k + 1: nibble (p % 2) of ql[64h + l] / ql[64h + 32 + l], top bits 2k of qh[32h + l].
        let block = row.add(p / 4 * Self::BLOCK_BYTES);
        let h = (p % 4) / 2;
        let nibble = 4 * (p % 2) as u32;
        let ql0 = _mm256_loadu_si256(block.add(64 * h).cast());
        let ql1 = _mm256_loadu_si256(block.add(64 * h + 32).cast());
        let qh = _mm256_loadu_si256(block.add(128 + 32 * h).cast());
        (
            _mm256_or_si256(bits_to(ql0, nibble, 0, 0x0F), bits_to(qh, nibble, 4, 0x30)),
            _mm256_or_si256(
                bits_to(ql1, nibble, 0, 0x0F),
                bits_to(qh, nibble + 2, 4, 0x30),
            ),
        )
    }
    sub_scaled!();
}

entry!(k_q2_k, Q2_K);
entry!(k_q3_k, Q3_K);
entry!(k_q4_k, Q4_K);
entry!(k_q5_k, Q5_K);
entry!(k_q6_k, Q6_K);

/// The K-quants' AVX2 matrix-matrix kernels (the AVX-VNNI variant when `vnni`).
pub(super) fn gemm_kernel(kind: FormatKind, vnni: bool) -> Option<GemmKernel> {
    let (plain, with_vnni) = match kind {
        FormatKind::Q2_K => (k_q2_k::PLAIN, k_q2_k::VNNI),
        FormatKind::Q3_K => (k_q3_k::PLAIN, k_q3_k::VNNI),
        FormatKind::Q4_K => (k_q4_k::PLAIN, k_q4_k::VNNI),
        FormatKind::Q5_K => (k_q5_k::PLAIN, k_q5_k::VNNI),
        FormatKind::Q6_K => (k_q6_k::PLAIN, k_q6_k::VNNI),
        _ => return None,
    };
    Some(if vnni { with_vnni } else { plain })
}

/// Both variants of every K-quant, for the tests of `gemm.rs`.
#[cfg(test)]
pub(super) fn all_variants() -> Vec<(FormatKind, &'static str, GemmKernel)> {
    vec![
        (FormatKind::Q2_K, "plain", k_q2_k::PLAIN),
        (FormatKind::Q2_K, "vnni", k_q2_k::VNNI),
        (FormatKind::Q3_K, "plain", k_q3_k::PLAIN),
        (FormatKind::Q3_K, "vnni", k_q3_k::VNNI),
        (FormatKind::Q4_K, "plain", k_q4_k::PLAIN),
        (FormatKind::Q4_K, "vnni", k_q4_k::VNNI),
        (FormatKind::Q5_K, "plain", k_q5_k::PLAIN),
        (FormatKind::Q5_K, "vnni", k_q5_k::VNNI),
        (FormatKind::Q6_K, "plain", k_q6_k::PLAIN),
        (FormatKind::Q6_K, "vnni", k_q6_k::VNNI),
    ]
}
