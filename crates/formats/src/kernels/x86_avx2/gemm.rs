//! Matrix-matrix products on AVX2 (AVX-VNNI where present): the scheme of the AVX-512 kernel
//! (`x86_avx512/gemm.rs`) on 8-row groups — each group's codes decoded once per call and
//! transposed so one 32-byte vector holds 4 consecutive codes of each of the 8 rows, every token's
//! activation prepared once per product (`gemm_layout`), one 4-byte dot per 4 values × 8 rows ×
//! token, one conversion + FMA per activation scale.
//!
//! Without VNNI the 4-byte dot is `vpmaddubsw` + `vpmaddwd`, whose 16-bit pair sums saturate past
//! 32767: fine for codes up to 63 (the 2- and 4-bit formats, Q5_0 / Q5_1 and the K-quants:
//! at most 2·63·128), not for Q8_0's sign-flipped codes, which are registered only with VNNI.
//!
//! This file holds what every format shares (the decoder trait, the decoded rows, the tile, the
//! row-group driver and the `entry!` of a registered kernel); the formats' decoders and table
//! entries are in `gemm_formats.rs` and `gemm_kquants.rs`, which both import from here.

use core::arch::x86_64::*;
use core::cell::UnsafeCell;

use super::lowbit_util::dot4;
use crate::kernels::gemm_layout::{order, GemmFormat, Layout, UNIT};

/// A weight format's AVX2 decoder (and, for formats with sub-block scales, its own tile).
pub(super) trait Decode: GemmFormat + Sized {
    /// The 64 unsigned codes of values 64p..64p+64 of the row at `row`, in the byte order of
    /// the format's `PERMUTED` flag: (bytes 0..32, bytes 32..64).
    ///
    /// # Safety
    /// `row` points at a whole row holding value 64p + 63; AVX2 enabled.
    unsafe fn decode_pair(row: *const u8, p: usize) -> (__m256i, __m256i);

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

    /// `T` tokens × the decoded 8 rows (see [`tile`], the block-scale product).
    ///
    /// # Safety
    /// As [`tile`].
    #[inline(always)]
    unsafe fn tile<const VNNI: bool, const T: usize>(
        dec: &Decoded,
        l: &Layout,
        prepared: *const u8,
        n_rows: usize,
        out: *mut f32,
        out_stride: usize,
    ) {
        tile::<Self, VNNI, T>(dec, l, prepared, n_rows, out, out_stride)
    }
}

/// 32 bits → 32 bytes of 0 / 1, bit j to byte j.
#[inline(always)]
pub(super) unsafe fn bits_to_bytes(bits: i32) -> __m256i {
    let spread = _mm256_shuffle_epi8(
        _mm256_set1_epi32(bits),
        _mm256_setr_epi8(
            0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3,
            3, 3, 3,
        ),
    );
    let select = _mm256_set1_epi64x(0x8040_2010_0804_0201_u64 as i64);
    let set = _mm256_cmpeq_epi8(_mm256_and_si256(spread, select), select);
    _mm256_and_si256(set, _mm256_set1_epi8(1))
}

/// Transposes 8 rows of 8 dwords: `r[i]` dword j → `out[j]` dword i.
#[inline(always)]
unsafe fn transpose8(r: &[__m256i; 8]) -> [__m256i; 8] {
    let t: [__m256i; 8] = core::array::from_fn(|i| {
        let (a, b) = (r[i / 2 * 2], r[i / 2 * 2 + 1]);
        if i % 2 == 0 {
            _mm256_unpacklo_epi32(a, b)
        } else {
            _mm256_unpackhi_epi32(a, b)
        }
    });
    // u[4g + j] holds rows 4g..4g+3 of dwords j (low half) and j + 4 (high half).
    let u: [__m256i; 8] = core::array::from_fn(|i| {
        let (g, j) = (i / 4, i % 4);
        let (a, b) = (t[4 * g + j / 2], t[4 * g + 2 + j / 2]);
        if j % 2 == 0 {
            _mm256_unpacklo_epi64(a, b)
        } else {
            _mm256_unpackhi_epi64(a, b)
        }
    });
    core::array::from_fn(|d| {
        let (a, b) = (u[d % 4], u[4 + d % 4]);
        if d < 4 {
            _mm256_permute2x128_si256::<0x20>(a, b)
        } else {
            _mm256_permute2x128_si256::<0x31>(a, b)
        }
    })
}

#[derive(Default)]
pub(super) struct Decoded {
    /// `[pair][16]`: 4 codes of each of the 8 rows per vector, in stored dword order.
    pub codes: Vec<__m256i>,
    /// `[block]`: the 8 rows' scales `d` (zero for absent rows).
    pub scales: Vec<__m256>,
    /// `[block]`: the 8 rows' minimums `m` (the K-quants' `dmin`).
    pub mins: Vec<__m256>,
    /// `[block][sub-block]`: the 8 rows' integer sub-block scales (K-quants).
    pub sub_scales: Vec<__m256i>,
    /// `[block][sub-block pair]`: the 8 rows' integer sub-block minimums, two i16 a dword.
    pub sub_mins: Vec<__m256i>,
}

thread_local! {
    static DECODED: UnsafeCell<Decoded> = UnsafeCell::new(Decoded::default());
}

#[inline(always)]
unsafe fn f16_at(p: *const u8) -> f32 {
    half::f16::from_bits(p.cast::<u16>().read_unaligned()).to_f32()
}

/// Decodes rows `base..base + n_rows` (n_rows ≤ 8; absent rows decode as zeros).
#[inline(always)]
pub(super) unsafe fn decode_rows<W: Decode>(
    base: *const u8,
    row_bytes: usize,
    n_rows: usize,
    n_values: usize,
    dec: &mut Decoded,
) {
    let n_pairs = n_values / 64;
    let n_blocks = n_values / (W::UNITS_PER_BLOCK * UNIT);
    dec.codes.resize(16 * n_pairs, _mm256_setzero_si256());
    dec.scales.resize(n_blocks, _mm256_setzero_ps());
    dec.mins.resize(n_blocks, _mm256_setzero_ps());
    let ord = order::<W>();
    for p in 0..n_pairs {
        let mut lo = [_mm256_setzero_si256(); 8];
        let mut hi = [_mm256_setzero_si256(); 8];
        for r in 0..n_rows {
            (lo[r], hi[r]) = W::decode_pair(base.add(r * row_bytes), p);
        }
        let (tl, th) = (transpose8(&lo), transpose8(&hi));
        for (i, &d) in ord.iter().enumerate() {
            let d = d as usize;
            dec.codes[16 * p + i] = if d < 8 { tl[d] } else { th[d - 8] };
        }
    }
    for b in 0..n_blocks {
        let mut d = [0.0f32; 8];
        let mut m = [0.0f32; 8];
        for r in 0..n_rows {
            let block = base.add(r * row_bytes + b * W::BLOCK_BYTES);
            d[r] = f16_at(block.add(W::SCALE_AT));
            if let Some(at) = W::MIN_AT {
                m[r] = f16_at(block.add(at));
            }
        }
        dec.scales[b] = _mm256_loadu_ps(d.as_ptr());
        dec.mins[b] = _mm256_loadu_ps(m.as_ptr());
    }
}

#[inline(always)]
unsafe fn read_f32(p: *const u8) -> f32 {
    p.cast::<f32>().read_unaligned()
}

/// `T` tokens × the decoded 8 rows of a block-scale format; results for the first `n_rows` rows
/// go to `out[t·out_stride + r]`.
#[inline(always)]
pub(super) unsafe fn tile<W: Decode, const VNNI: bool, const T: usize>(
    dec: &Decoded,
    l: &Layout,
    prepared: *const u8,
    n_rows: usize,
    out: *mut f32,
    out_stride: usize,
) {
    let n_blocks = l.n_values / (W::UNITS_PER_BLOCK * UNIT);
    let scales_per_block = W::UNITS_PER_BLOCK / W::PARTNER.units;
    let dwords_per_scale = W::PARTNER.units * UNIT / 4;
    let tok: [*const u8; T] = core::array::from_fn(|t| prepared.add(t * l.bytes));
    let mut acc = [_mm256_setzero_ps(); T];
    let mut w = dec.codes.as_ptr();
    for b in 0..n_blocks {
        let mut blk: [__m256; T] =
            core::array::from_fn(|t| _mm256_set1_ps(read_f32(tok[t].add(l.bias_at + 4 * b))));
        for s in 0..scales_per_block {
            let scale_index = b * scales_per_block + s;
            let first = l.codes_at + 4 * scale_index * dwords_per_scale;
            let mut isum = [_mm256_setzero_si256(); T];
            for k in 0..dwords_per_scale {
                let codes = *w;
                w = w.add(1);
                for t in 0..T {
                    let a = tok[t].add(first + 4 * k).cast::<i32>().read_unaligned();
                    isum[t] = dot4::<VNNI>(isum[t], codes, _mm256_set1_epi32(a));
                }
            }
            for t in 0..T {
                let fd = read_f32(tok[t].add(l.scales_at + 4 * scale_index));
                blk[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[t]), _mm256_set1_ps(fd), blk[t]);
            }
        }
        for t in 0..T {
            acc[t] = _mm256_fmadd_ps(blk[t], dec.scales[b], acc[t]);
            if W::MIN_AT.is_some() {
                let s = read_f32(tok[t].add(l.sums_at + 4 * b));
                acc[t] = _mm256_fmadd_ps(dec.mins[b], _mm256_set1_ps(s), acc[t]);
            }
        }
    }
    for (t, acc) in acc.iter().enumerate() {
        let mut v = [0.0f32; 8];
        _mm256_storeu_ps(v.as_mut_ptr(), *acc);
        core::ptr::copy_nonoverlapping(v.as_ptr(), out.add(t * out_stride), n_rows);
    }
}

#[inline(always)]
#[allow(clippy::too_many_arguments)]
pub(super) unsafe fn gemm<W: Decode, const VNNI: bool>(
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
        let rows = 8.min(n_rows - r0);
        let base = weights.add(r0 * row_bytes);
        decode_rows::<W>(base, row_bytes, rows, l.n_values, dec);
        W::decode_extra(base, row_bytes, rows, l.n_values, dec);
        let mut t0 = 0;
        while t0 < n_tokens {
            let p = prepared.add(t0 * l.bytes);
            let o = out.add(t0 * out_stride + r0);
            t0 += if n_tokens - t0 >= 4 {
                W::tile::<VNNI, 4>(dec, l, p, rows, o, out_stride);
                4
            } else if n_tokens - t0 >= 2 {
                W::tile::<VNNI, 2>(dec, l, p, rows, o, out_stride);
                2
            } else {
                W::tile::<VNNI, 1>(dec, l, p, rows, o, out_stride);
                1
            };
        }
        r0 += rows;
    }
}

/// The registered kernel of format `$w` (plain and AVX-VNNI variants, `PLAIN` / `VNNI`): the
/// shared registration of `entries::gemm_entry!` around [`gemm`].
macro_rules! entry {
    ($name:ident, $w:ty) => {
        $crate::kernels::entries::gemm_entry!(
            $name,
            $w,
            PLAIN: "avx2,fma,f16c" => gemm[false],
            VNNI: "avx2,fma,f16c,avxvnni" => gemm[true],
        );
    };
}
pub(super) use entry;
