//! The formats of the AVX2 matrix-matrix kernel (`gemm.rs`): how each decodes 64 values of a
//! row into unsigned codes, and the entries registered in the tier's table (the K-quants' in
//! `gemm_kquants.rs`).

use core::arch::x86_64::*;

use super::gemm::{bits_to_bytes, entry, gemm, Decode};
use crate::kernels::gemm_layout::formats::{PTQ1_0, Q1_0, Q2, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, TQ2_0};
use crate::kernels::gemm_layout::GemmFormat as _;
use crate::kernels::GemmKernel;
use crate::FormatKind;

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

impl Decode for PTQ1_0 {
    #[inline(always)]
    unsafe fn decode_pair(row: *const u8, p: usize) -> (__m256i, __m256i) {
        let block = row.add(p / 2 * Self::BLOCK_BYTES);
        let g = 2 * (p % 2);
        (
            super::ptq1_0::codes(block, g),
            super::ptq1_0::codes(block, g + 1),
        )
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
        FormatKind::PTQ1_0 => pick(k_ptq1_0::PLAIN, k_ptq1_0::VNNI),
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
        (FormatKind::PTQ1_0, "plain", k_ptq1_0::PLAIN),
        (FormatKind::PTQ1_0, "vnni", k_ptq1_0::VNNI),
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
