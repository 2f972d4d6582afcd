//! Matrix-matrix products on AVX-512 VNNI: a block of 16 weight rows times many tokens.
//!
//! The matrix-vector kernels decode each weight group once per token and convert every 64-value
//! partial sum to float. With several tokens both costs can be shared:
//! - the 16 rows' codes are decoded once per call and transposed so that one 64-byte vector holds
//!   4 consecutive codes of each of the 16 rows (row = dword lane), kept in a thread-local buffer;
//! - each token's activation codes are prepared once per matrix product (`gemm_layout::prepare`): reordered
//!   to match, with FACTOR·scale per activation block and the weight-offset bias per weight block;
//! - the inner loop is one `vpdpbusd` per 4 values × 16 rows × token (the activation dword comes
//!   broadcast from memory), and one conversion + FMA per activation block (32 or 256 values).
//!
//! A weight value is `d·(FACTOR·code − OFFSET)` (+ `m` for formats with a minimum), codes
//! unsigned, so Σ value·a = d·(FACTOR·Σ code·q·d_a − OFFSET·Σ q·d_a) (+ m·s_a) with exact integer
//! parts: the same decomposition the matrix-vector kernels use.
//!
//! This file holds what every format shares (the decoder trait, the decoded rows, the tile, the
//! row-group driver and the `entry!` of a registered kernel); the formats' decoders and table
//! entries are in `gemm_formats.rs` and `gemm_kquants.rs`, which both import from here.

use core::arch::x86_64::*;

use super::lanes_left;
use core::cell::UnsafeCell;

use crate::kernels::gemm_layout::{order, GemmFormat, Layout, UNIT};

/// A weight format's AVX-512 decoder (and, for formats with sub-block scales, its own tile).
pub(super) trait GemmWeights: GemmFormat + Sized {
    /// The 64 unsigned codes of values 64p..64p+64 of the row at `row`.
    ///
    /// # Safety
    /// `row` points at a whole row holding value 64p + 63; AVX-512 F/BW/VL/DQ enabled.
    unsafe fn decode_pair(row: *const u8, p: usize) -> __m512i;

    /// Decodes what the format needs beyond codes and block scales (the K-quants' sub-block
    /// scales) for rows `base..base + n_rows`, after [`decode_rows`].
    ///
    /// # Safety
    /// As [`decode_rows`].
    #[inline(always)]
    unsafe fn decode_extra(
        _base: *const u8,
        _row_bytes: usize,
        _n_rows: usize,
        _n_values: usize,
        _dec: &mut Decoded,
    ) {
    }

    /// `T` tokens × the decoded 16 rows (see [`tile`], the block-scale product).
    ///
    /// # Safety
    /// As [`tile`].
    #[inline(always)]
    #[allow(clippy::too_many_arguments)]
    unsafe fn tile<const T: usize>(
        dec: &Decoded,
        l: &Layout,
        prepared: *const u8,
        stride: usize,
        n_rows: usize,
        out: *mut f32,
        out_stride: usize,
    ) {
        tile::<Self, T>(dec, l, prepared, stride, n_rows, out, out_stride)
    }
}

#[inline(always)]
pub(super) unsafe fn f16_at(p: *const u8) -> f32 {
    half::f16::from_bits(p.cast::<u16>().read_unaligned()).to_f32()
}

/// Transposes 16 rows of 16 dwords: `r[i]` dword j → `out[j]` dword i.
#[inline(always)]
unsafe fn transpose16(r: &[__m512i; 16]) -> [__m512i; 16] {
    let mut a = [_mm512_setzero_si512(); 16];
    for i in 0..8 {
        a[2 * i] = _mm512_unpacklo_epi32(r[2 * i], r[2 * i + 1]);
        a[2 * i + 1] = _mm512_unpackhi_epi32(r[2 * i], r[2 * i + 1]);
    }
    // b[4g + j] holds rows 4g..4g+3 of dwords j, j + 4, j + 8, j + 12 (one per 128-bit lane).
    let mut b = [_mm512_setzero_si512(); 16];
    for g in 0..4 {
        let (x0, x1, x2, x3) = (a[4 * g], a[4 * g + 1], a[4 * g + 2], a[4 * g + 3]);
        b[4 * g] = _mm512_unpacklo_epi64(x0, x2);
        b[4 * g + 1] = _mm512_unpackhi_epi64(x0, x2);
        b[4 * g + 2] = _mm512_unpacklo_epi64(x1, x3);
        b[4 * g + 3] = _mm512_unpackhi_epi64(x1, x3);
    }
    let mut out = [_mm512_setzero_si512(); 16];
    for j in 0..4 {
        let c0 = _mm512_shuffle_i32x4::<0x44>(b[j], b[4 + j]);
        let c1 = _mm512_shuffle_i32x4::<0xEE>(b[j], b[4 + j]);
        let c2 = _mm512_shuffle_i32x4::<0x44>(b[8 + j], b[12 + j]);
        let c3 = _mm512_shuffle_i32x4::<0xEE>(b[8 + j], b[12 + j]);
        out[j] = _mm512_shuffle_i32x4::<0x88>(c0, c2);
        out[j + 4] = _mm512_shuffle_i32x4::<0xDD>(c0, c2);
        out[j + 8] = _mm512_shuffle_i32x4::<0x88>(c1, c3);
        out[j + 12] = _mm512_shuffle_i32x4::<0xDD>(c1, c3);
    }
    out
}

/// The decoded codes and scales of 16 rows, reused by every call on the thread.
#[derive(Default)]
pub(super) struct Decoded {
    /// `[pair][16]`: 4 codes of each row per vector, each pair's dwords in stored order.
    pub codes: Vec<__m512i>,
    /// `[block]`: the 16 rows' scales `d` (zero for absent rows).
    pub scales: Vec<__m512>,
    /// `[block]`: the 16 rows' minimums `m` (the K-quants' `dmin`).
    pub mins: Vec<__m512>,
    /// `[block][sub-block]`: the 16 rows' integer sub-block scales (K-quants).
    pub sub_scales: Vec<__m512i>,
    /// `[block][sub-block pair]`: the 16 rows' integer sub-block minimums, two i16 a dword.
    pub sub_mins: Vec<__m512i>,
}

thread_local! {
    static DECODED: UnsafeCell<Decoded> = UnsafeCell::new(Decoded::default());
}

/// Decodes rows `base..base + n_rows` (n_rows ≤ 16; absent rows decode as zeros).
#[inline(always)]
pub(super) unsafe fn decode_rows<W: GemmWeights>(
    base: *const u8,
    row_bytes: usize,
    n_rows: usize,
    n_values: usize,
    dec: &mut Decoded,
) {
    let n_pairs = n_values / 64;
    let n_blocks = n_values / (W::UNITS_PER_BLOCK * UNIT);
    dec.codes.resize(16 * n_pairs, _mm512_setzero_si512());
    dec.scales.resize(n_blocks, _mm512_setzero_ps());
    if W::MIN_AT.is_some() {
        dec.mins.resize(n_blocks, _mm512_setzero_ps());
    }
    let ord = order::<W>();
    for p in 0..n_pairs {
        let mut rows = [_mm512_setzero_si512(); 16];
        for (r, v) in rows.iter_mut().enumerate().take(n_rows) {
            *v = W::decode_pair(base.add(r * row_bytes), p);
        }
        let t = transpose16(&rows);
        for (i, &d) in ord.iter().enumerate() {
            dec.codes[16 * p + i] = t[d as usize];
        }
    }
    for b in 0..n_blocks {
        let mut d = [0.0f32; 16];
        let mut m = [0.0f32; 16];
        for r in 0..n_rows {
            let block = base.add(r * row_bytes + b * W::BLOCK_BYTES);
            d[r] = f16_at(block.add(W::SCALE_AT));
            if let Some(at) = W::MIN_AT {
                m[r] = f16_at(block.add(at));
            }
        }
        dec.scales[b] = _mm512_loadu_ps(d.as_ptr());
        if W::MIN_AT.is_some() {
            dec.mins[b] = _mm512_loadu_ps(m.as_ptr());
        }
    }
}

/// `T` tokens × the decoded 16 rows; results for the first `n_rows` rows go to
/// `out[t·out_stride + r]`.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
pub(super) unsafe fn tile<W: GemmWeights, const T: usize>(
    dec: &Decoded,
    l: &Layout,
    prepared: *const u8,
    stride: usize,
    n_rows: usize,
    out: *mut f32,
    out_stride: usize,
) {
    let block_values = W::UNITS_PER_BLOCK * UNIT;
    let n_blocks = l.n_values / block_values;
    let scales_per_block = W::UNITS_PER_BLOCK / W::PARTNER.units;
    let dwords_per_scale = W::PARTNER.units * UNIT / 4;
    let tok: [*const u8; T] = core::array::from_fn(|t| prepared.add(t * stride));
    let mut acc = [_mm512_setzero_ps(); T];
    let mut w = dec.codes.as_ptr();
    for b in 0..n_blocks {
        let mut blk: [__m512; T] = core::array::from_fn(|t| {
            _mm512_set1_ps(tok[t].add(l.bias_at + 4 * b).cast::<f32>().read_unaligned())
        });
        for s in 0..scales_per_block {
            let scale_index = b * scales_per_block + s;
            let first_dword = scale_index * dwords_per_scale;
            let mut isum = [_mm512_setzero_si512(); T];
            for k in 0..dwords_per_scale {
                let codes = *w;
                w = w.add(1);
                for t in 0..T {
                    let a = tok[t]
                        .add(l.codes_at + 4 * (first_dword + k))
                        .cast::<i32>()
                        .read_unaligned();
                    isum[t] = _mm512_dpbusd_epi32(isum[t], codes, _mm512_set1_epi32(a));
                }
            }
            for t in 0..T {
                let fd = tok[t]
                    .add(l.scales_at + 4 * scale_index)
                    .cast::<f32>()
                    .read_unaligned();
                blk[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum[t]), _mm512_set1_ps(fd), blk[t]);
            }
        }
        let d = dec.scales[b];
        for t in 0..T {
            acc[t] = _mm512_fmadd_ps(blk[t], d, acc[t]);
        }
        if W::MIN_AT.is_some() {
            let m = dec.mins[b];
            for t in 0..T {
                // One unit per block for the formats with a minimum (Q4_1).
                let s = tok[t].add(l.sums_at + 4 * b).cast::<f32>().read_unaligned();
                acc[t] = _mm512_fmadd_ps(m, _mm512_set1_ps(s), acc[t]);
            }
        }
    }
    let mask = lanes_left(n_rows);
    for (t, acc) in acc.iter().enumerate() {
        _mm512_mask_storeu_ps(out.add(t * out_stride), mask, *acc);
    }
}

/// Token tile width: 8 tokens keep 8 integer + 8 block + 8 row accumulators in registers.
const TILE: usize = 8;

/// The whole product: `out[t·out_stride + r] = dot(row r, token t)` for `r < n_rows`,
/// `t < n_tokens`, with `prepared` holding `n_tokens` prepared rows of `l.bytes` bytes.
///
/// # Safety
/// Lengths checked by the caller against that contract; AVX-512 F/BW/VL/DQ + VNNI enabled.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
pub(super) unsafe fn gemm<W: GemmWeights>(
    l: &Layout,
    weights: *const u8,
    row_bytes: usize,
    n_rows: usize,
    prepared: *const u8,
    n_tokens: usize,
    out: *mut f32,
    out_stride: usize,
) {
    // SAFETY: this thread's own buffer; the function does not re-enter itself.
    let dec = &mut *DECODED.with(UnsafeCell::get);
    let mut r0 = 0;
    while r0 < n_rows {
        let rows = 16.min(n_rows - r0);
        let base = weights.add(r0 * row_bytes);
        decode_rows::<W>(base, row_bytes, rows, l.n_values, dec);
        W::decode_extra(base, row_bytes, rows, l.n_values, dec);
        let mut t0 = 0;
        while t0 < n_tokens {
            let left = n_tokens - t0;
            let p = prepared.add(t0 * l.bytes);
            let o = out.add(t0 * out_stride + r0);
            let step = if left >= TILE {
                W::tile::<TILE>(dec, l, p, l.bytes, rows, o, out_stride);
                TILE
            } else if left >= 4 {
                W::tile::<4>(dec, l, p, l.bytes, rows, o, out_stride);
                4
            } else if left >= 2 {
                W::tile::<2>(dec, l, p, l.bytes, rows, o, out_stride);
                2
            } else {
                W::tile::<1>(dec, l, p, l.bytes, rows, o, out_stride);
                1
            };
            t0 += step;
        }
        r0 += rows;
    }
}

/// The registered kernel of format `$w` (`KERNEL`): the shared registration of
/// `entries::gemm_entry!` around [`gemm`].
macro_rules! entry {
    ($name:ident, $w:ty) => {
        $crate::kernels::entries::gemm_entry!(
            $name,
            $w,
            KERNEL: "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq,avx512vnni" => gemm::gemm[],
        );
    };
}
pub(super) use entry;
