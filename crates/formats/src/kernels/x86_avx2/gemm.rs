//! Matrix-matrix products on AVX2 (AVX-VNNI where present): the scheme of the AVX-512 kernel
//! (`x86_avx512/gemm.rs`) on 8-row groups — each group's codes decoded once per call and
//! transposed so one 32-byte vector holds 4 consecutive codes of each of the 8 rows, every token's
//! activation prepared once per product (`gemm_layout`), one 4-byte dot per 4 values × 8 rows ×
//! token, one conversion + FMA per activation scale.
//!
//! Without VNNI the 4-byte dot is `vpmaddubsw` + `vpmaddwd`, whose 16-bit pair sums saturate past
//! 32767: fine for codes up to 63 (the 2- and 4-bit formats, Q5_0 / Q5_1 and the K-quants:
//! at most 2·63·128), not for Q8_0's sign-flipped codes, which are registered only with VNNI.

use core::arch::x86_64::*;
use core::cell::UnsafeCell;

use super::lowbit_util::dot4;
use crate::kernels::gemm_layout::formats::{Q1_0, Q2, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, TQ2_0};
use crate::kernels::gemm_layout::{self, order, GemmFormat, Layout, UNIT};
use crate::kernels::GemmKernel;
use crate::FormatKind;

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

impl Decode for Q1_0 {
    #[inline(always)]
    unsafe fn decode_pair(row: *const u8, p: usize) -> (__m256i, __m256i) {
        let bits = row.add(p / 2 * Self::BLOCK_BYTES + 2 + 8 * (p % 2));
        (
            bits_to_bytes(bits.cast::<i32>().read_unaligned()),
            bits_to_bytes(bits.add(4).cast::<i32>().read_unaligned()),
        )
    }
}

impl<const PAIRS: usize> Decode for Q2<PAIRS> {
    #[inline(always)]
    unsafe fn decode_pair(row: *const u8, p: usize) -> (__m256i, __m256i) {
        let bytes = _mm_loadu_si128(
            row.add(p / PAIRS * Self::BLOCK_BYTES + 2 + 16 * (p % PAIRS))
                .cast(),
        );
        let x = _mm256_set_m128i(bytes, bytes);
        let three = _mm256_set1_epi8(3);
        // 128-bit lane l holds the codes shifted by 2l bits.
        let lo = _mm256_srlv_epi64(x, _mm256_setr_epi64x(0, 0, 2, 2));
        let hi = _mm256_srlv_epi64(x, _mm256_setr_epi64x(4, 4, 6, 6));
        (_mm256_and_si256(lo, three), _mm256_and_si256(hi, three))
    }
}

impl Decode for TQ2_0 {
    #[inline(always)]
    unsafe fn decode_pair(row: *const u8, p: usize) -> (__m256i, __m256i) {
        let q = p % 4;
        let x = _mm256_loadu_si256(row.add(p / 4 * Self::BLOCK_BYTES + 32 * (q / 2)).cast());
        let shift = _mm_cvtsi32_si128(4 * (q % 2) as i32);
        let three = _mm256_set1_epi8(3);
        let lo = _mm256_srl_epi16(x, shift);
        let hi = _mm256_srli_epi16::<2>(lo);
        (_mm256_and_si256(lo, three), _mm256_and_si256(hi, three))
    }
}

impl Decode for Q8_0 {
    #[inline(always)]
    unsafe fn decode_pair(row: *const u8, p: usize) -> (__m256i, __m256i) {
        let a = row.add(2 * p * Self::BLOCK_BYTES + 2);
        let flip = _mm256_set1_epi8(-128);
        (
            _mm256_xor_si256(_mm256_loadu_si256(a.cast()), flip),
            _mm256_xor_si256(_mm256_loadu_si256(a.add(Self::BLOCK_BYTES).cast()), flip),
        )
    }
}

/// The 32 nibble codes of one block's 16 bytes: low nibbles are values 0..16, high 16..32.
#[inline(always)]
unsafe fn nibbles(qs: *const u8) -> __m256i {
    let q = _mm_loadu_si128(qs.cast());
    let x = _mm256_set_m128i(_mm_srli_epi16::<4>(q), q);
    _mm256_and_si256(x, _mm256_set1_epi8(0x0F))
}

impl Decode for Q4_0 {
    #[inline(always)]
    unsafe fn decode_pair(row: *const u8, p: usize) -> (__m256i, __m256i) {
        let a = row.add(2 * p * Self::BLOCK_BYTES + 2);
        (nibbles(a), nibbles(a.add(Self::BLOCK_BYTES)))
    }
}

impl Decode for Q4_1 {
    #[inline(always)]
    unsafe fn decode_pair(row: *const u8, p: usize) -> (__m256i, __m256i) {
        let a = row.add(2 * p * Self::BLOCK_BYTES + 4);
        (nibbles(a), nibbles(a.add(Self::BLOCK_BYTES)))
    }
}

/// The 32 five-bit codes of one block: [`nibbles`] with the fifth bits of the little-endian
/// `qh` just before them set as 16.
#[inline(always)]
unsafe fn five_bits(qs: *const u8) -> __m256i {
    let qh = qs.sub(4).cast::<i32>().read_unaligned();
    let high = _mm256_slli_epi16::<4>(bits_to_bytes(qh));
    _mm256_or_si256(nibbles(qs), high)
}

impl Decode for Q5_0 {
    #[inline(always)]
    unsafe fn decode_pair(row: *const u8, p: usize) -> (__m256i, __m256i) {
        let a = row.add(2 * p * Self::BLOCK_BYTES + 6);
        (five_bits(a), five_bits(a.add(Self::BLOCK_BYTES)))
    }
}

impl Decode for Q5_1 {
    #[inline(always)]
    unsafe fn decode_pair(row: *const u8, p: usize) -> (__m256i, __m256i) {
        let a = row.add(2 * p * Self::BLOCK_BYTES + 8);
        (five_bits(a), five_bits(a.add(Self::BLOCK_BYTES)))
    }
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

macro_rules! entry {
    ($name:ident, $w:ty) => {
        mod $name {
            use super::*;

            #[target_feature(enable = "avx2,fma,f16c")]
            #[allow(clippy::too_many_arguments)]
            unsafe fn plain(
                l: &Layout,
                w: &[u8],
                rb: usize,
                n: usize,
                p: &[u8],
                t: usize,
                o: &mut [f32],
                s: usize,
            ) {
                gemm::<$w, false>(l, w.as_ptr(), rb, n, p.as_ptr(), t, o.as_mut_ptr(), s)
            }

            #[target_feature(enable = "avx2,fma,f16c,avxvnni")]
            #[allow(clippy::too_many_arguments)]
            unsafe fn vnni(
                l: &Layout,
                w: &[u8],
                rb: usize,
                n: usize,
                p: &[u8],
                t: usize,
                o: &mut [f32],
                s: usize,
            ) {
                gemm::<$w, true>(l, w.as_ptr(), rb, n, p.as_ptr(), t, o.as_mut_ptr(), s)
            }

            fn run_with<const VNNI: bool>(
                n_values: usize,
                weights: &[u8],
                n_rows: usize,
                prepared: &[u8],
                n_tokens: usize,
                out: &mut [f32],
                out_stride: usize,
            ) {
                let Some((l, row_bytes)) = gemm_layout::check_run::<$w>(
                    n_values, weights, n_rows, prepared, n_tokens, out, out_stride,
                ) else {
                    return;
                };
                // SAFETY: registered only through `Kernels::new(Isa::Avx2 | Isa::Avx512)`, which
                // checked AVX2/FMA/F16C (and `gemm` below checked AVX-VNNI for the VNNI entry);
                // the kernel reads and writes within the bounds `check_run` just checked.
                unsafe {
                    if VNNI {
                        vnni(
                            &l, weights, row_bytes, n_rows, prepared, n_tokens, out, out_stride,
                        )
                    } else {
                        plain(
                            &l, weights, row_bytes, n_rows, prepared, n_tokens, out, out_stride,
                        )
                    }
                }
            }

            // Q8_0 never uses its plain variant (it saturates without VNNI).
            #[allow(dead_code)]
            pub(super) const PLAIN: GemmKernel = GemmKernel {
                prepared_bytes: gemm_layout::prepared_bytes::<$w>,
                prepare: gemm_layout::prepare_row::<$w>,
                run: run_with::<false>,
            };
            pub(super) const VNNI: GemmKernel = GemmKernel {
                prepared_bytes: gemm_layout::prepared_bytes::<$w>,
                prepare: gemm_layout::prepare_row::<$w>,
                run: run_with::<true>,
            };
        }
    };
}
pub(super) use entry;

entry!(k_q1_0, Q1_0);
entry!(k_q2_0, Q2<1>);
entry!(k_pq2_0, Q2<2>);
entry!(k_tq2_0, TQ2_0);
entry!(k_q8_0, Q8_0);
entry!(k_q4_0, Q4_0);
entry!(k_q4_1, Q4_1);
entry!(k_q5_0, Q5_0);
entry!(k_q5_1, Q5_1);

/// The AVX2 matrix-matrix kernel of a format (the AVX-VNNI variant where the CPU has it).
pub(crate) fn gemm_kernel(kind: FormatKind) -> Option<GemmKernel> {
    let vnni = std::arch::is_x86_feature_detected!("avxvnni");
    let pick =
        |plain: GemmKernel, with_vnni: GemmKernel| Some(if vnni { with_vnni } else { plain });
    match kind {
        FormatKind::Q1_0 => pick(k_q1_0::PLAIN, k_q1_0::VNNI),
        FormatKind::Q2_0 => pick(k_q2_0::PLAIN, k_q2_0::VNNI),
        FormatKind::PQ2_0 | FormatKind::Q2_0G128Legacy => pick(k_pq2_0::PLAIN, k_pq2_0::VNNI),
        FormatKind::TQ2_0 => pick(k_tq2_0::PLAIN, k_tq2_0::VNNI),
        FormatKind::Q4_0 => pick(k_q4_0::PLAIN, k_q4_0::VNNI),
        FormatKind::Q4_1 => pick(k_q4_1::PLAIN, k_q4_1::VNNI),
        // Q8_0's sign-flipped codes saturate the 16-bit pair sums without VNNI.
        FormatKind::Q8_0 if vnni => Some(k_q8_0::VNNI),
        FormatKind::Q5_0 => pick(k_q5_0::PLAIN, k_q5_0::VNNI),
        FormatKind::Q5_1 => pick(k_q5_1::PLAIN, k_q5_1::VNNI),
        _ => super::gemm_kquants::gemm_kernel(kind, vnni),
    }
}

/// Both variants of every format, for the tests (the table holds only the CPU's choice).
#[cfg(test)]
pub(crate) fn all_variants() -> Vec<(FormatKind, &'static str, GemmKernel)> {
    vec![
        (FormatKind::Q1_0, "plain", k_q1_0::PLAIN),
        (FormatKind::Q1_0, "vnni", k_q1_0::VNNI),
        (FormatKind::Q2_0, "plain", k_q2_0::PLAIN),
        (FormatKind::Q2_0, "vnni", k_q2_0::VNNI),
        (FormatKind::PQ2_0, "plain", k_pq2_0::PLAIN),
        (FormatKind::PQ2_0, "vnni", k_pq2_0::VNNI),
        (FormatKind::TQ2_0, "plain", k_tq2_0::PLAIN),
        (FormatKind::TQ2_0, "vnni", k_tq2_0::VNNI),
        (FormatKind::Q4_0, "plain", k_q4_0::PLAIN),
        (FormatKind::Q4_0, "vnni", k_q4_0::VNNI),
        (FormatKind::Q4_1, "plain", k_q4_1::PLAIN),
        (FormatKind::Q4_1, "vnni", k_q4_1::VNNI),
        (FormatKind::Q8_0, "vnni", k_q8_0::VNNI),
        (FormatKind::Q5_0, "plain", k_q5_0::PLAIN),
        (FormatKind::Q5_0, "vnni", k_q5_0::VNNI),
        (FormatKind::Q5_1, "plain", k_q5_1::PLAIN),
        (FormatKind::Q5_1, "vnni", k_q5_1::VNNI),
    ]
    .into_iter()
    .chain(super::gemm_kquants::all_variants())
    .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format;
    use crate::kernels::test_data::{
        assert_matches_scalar_dot, random_activations, random_rows, xorshift,
    };

    /// Both variants (the table holds only the CPU's choice) against the scalar dot, on partial
    /// row groups and every token-tile remainder. Random codes; sane f16 scales.
    #[test]
    fn plain_and_vnni_variants_match_the_scalar_dot() {
        let avx2 = std::arch::is_x86_feature_detected!("avx2")
            && std::arch::is_x86_feature_detected!("fma")
            && std::arch::is_x86_feature_detected!("f16c");
        let vnni = std::arch::is_x86_feature_detected!("avxvnni");
        if !avx2 {
            eprintln!("no AVX2: not tested");
            return;
        }
        let mut next = xorshift(0x1234_5678_9abc_def0);
        for (kind, variant, kernel) in all_variants() {
            if variant == "vnni" && !vnni {
                eprintln!("no AVX-VNNI: {kind:?} VNNI variant not tested");
                continue;
            }
            let f = format(kind);
            let partner = format(f.partner);
            let n = 3 * f.block_elems.max(64).max(partner.block_elems);
            let (rows, tokens) = (11, 7);
            let weights = random_rows(f, n, rows, &mut next);
            let acts = random_activations(partner, n, tokens, &mut next);
            let stride = (kernel.prepared_bytes)(n).unwrap();
            let mut prepared = vec![0u8; tokens * stride];
            for (a, dst) in acts.iter().zip(prepared.chunks_exact_mut(stride)) {
                (kernel.prepare)(n, a, dst);
            }
            let mut out = vec![f32::NAN; tokens * rows];
            (kernel.run)(n, &weights, rows, &prepared, tokens, &mut out, rows);
            assert_matches_scalar_dot(f, partner, &weights, &acts, &out, rows, variant);
        }
    }
}
