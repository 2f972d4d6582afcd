//! Activation conversions f32 → Q8_0 / Q8_1 / Q8_K / F16, byte-identical to the scalar
//! `quantize_activation` of each format (the AVX-512 tier uses these too: a row of activations
//! is small next to the weights it meets, so wider code would not pay for itself).

use std::arch::x86_64::*;

use super::std_util::{f16_bits, fold_abs_max, hmax_ps, hsum_epi32, pack_i32x32};

/// Codes `round_half_even(x · id)` of 32 values with the scalar cast's semantics: a NaN product
/// becomes 0 and the rest saturate to −128..=127 (`f32 as i8`). Returns the four int32 vectors.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn codes_q8(src: *const f32, id: f32) -> [__m256i; 4] {
    let id = _mm256_set1_ps(id);
    let lo = _mm256_set1_ps(-128.0);
    let hi = _mm256_set1_ps(127.0);
    let mut out = [_mm256_setzero_si256(); 4];
    for (k, o) in out.iter_mut().enumerate() {
        // SAFETY: the caller guarantees 32 readable floats at `src`.
        let v = unsafe { _mm256_loadu_ps(src.add(8 * k)) };
        let p = _mm256_mul_ps(v, id);
        let p = _mm256_and_ps(p, _mm256_cmp_ps::<_CMP_ORD_Q>(p, p));
        let p = _mm256_min_ps(_mm256_max_ps(p, lo), hi);
        let p = _mm256_round_ps::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(p);
        *o = _mm256_cvttps_epi32(p);
    }
    out
}

/// Largest |x| of 32 values, NaN skipped.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn amax32(src: *const f32) -> f32 {
    let mut acc = _mm256_setzero_ps();
    for k in 0..4 {
        // SAFETY: the caller guarantees 32 readable floats at `src`.
        acc = fold_abs_max(acc, unsafe { _mm256_loadu_ps(src.add(8 * k)) });
    }
    hmax_ps(acc)
}

fn check(src: &[f32], dst: &[u8], block_elems: usize, block_bytes: usize, what: &str) -> usize {
    let n = src.len() / block_elems;
    assert!(
        src.len() == n * block_elems && dst.len() == n * block_bytes,
        "{what} activation: {} values and {} bytes are not whole {block_elems}-value blocks of {block_bytes} bytes",
        src.len(),
        dst.len()
    );
    n
}

/// # Safety
/// AVX2, FMA and F16C must be available.
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn quantize_q8_0(src: &[f32], dst: &mut [u8]) {
    let n = check(src, dst, 32, 34, "q8_0");
    for b in 0..n {
        let x = src[32 * b..].as_ptr();
        let out = &mut dst[34 * b..34 * b + 34];
        // SAFETY: `check` made `src` hold 32 values per block.
        let max = unsafe { amax32(x) };
        let id = if max != 0.0 { 127.0 / max } else { 0.0 };
        // SAFETY: as above.
        let q = pack_i32x32(unsafe { codes_q8(x, id) }, false);
        out[..2].copy_from_slice(&f16_bits(max / 127.0).to_le_bytes());
        // SAFETY: `out` has 32 bytes after the scale.
        unsafe { _mm256_storeu_si256(out[2..].as_mut_ptr().cast(), q) };
    }
}

/// # Safety
/// AVX2, FMA and F16C must be available.
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn quantize_q8_1(src: &[f32], dst: &mut [u8]) {
    let n = check(src, dst, 32, 36, "q8_1");
    for b in 0..n {
        let x = src[32 * b..].as_ptr();
        let out = &mut dst[36 * b..36 * b + 36];
        // SAFETY: `check` made `src` hold 32 values per block.
        let max = unsafe { amax32(x) };
        let d = max / 127.0;
        let id = if max != 0.0 { 127.0 / max } else { 0.0 };
        // SAFETY: as above.
        let i = unsafe { codes_q8(x, id) };
        let sum = hsum_epi32(_mm256_add_epi32(
            _mm256_add_epi32(i[0], i[1]),
            _mm256_add_epi32(i[2], i[3]),
        ));
        let q = pack_i32x32(i, false);
        out[..2].copy_from_slice(&f16_bits(d).to_le_bytes());
        out[2..4].copy_from_slice(&f16_bits(sum as f32 * d).to_le_bytes());
        // SAFETY: `out` has 32 bytes after the two scales.
        unsafe { _mm256_storeu_si256(out[4..].as_mut_ptr().cast(), q) };
    }
}

/// # Safety
/// AVX2, FMA and F16C must be available.
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn quantize_q8_k(src: &[f32], dst: &mut [u8]) {
    let n = check(src, dst, 256, 292, "q8_K");
    for b in 0..n {
        let x = &src[256 * b..256 * b + 256];
        let out = &mut dst[292 * b..292 * b + 292];
        let mut acc = _mm256_setzero_ps();
        for v in x.chunks_exact(8) {
            // SAFETY: `v` holds 8 floats.
            acc = fold_abs_max(acc, unsafe { _mm256_loadu_ps(v.as_ptr()) });
        }
        let amax = hmax_ps(acc);
        if amax == 0.0 {
            out.fill(0);
            continue;
        }
        // The scalar code keeps the FIRST value of largest magnitude, with its sign.
        let target = _mm256_set1_ps(amax);
        let mut max = amax;
        for (k, v) in x.chunks_exact(8).enumerate() {
            // SAFETY: `v` holds 8 floats.
            let a = _mm256_andnot_ps(_mm256_set1_ps(-0.0), unsafe { _mm256_loadu_ps(v.as_ptr()) });
            let hits = _mm256_movemask_ps(_mm256_cmp_ps::<_CMP_EQ_OQ>(a, target));
            if hits != 0 {
                max = x[8 * k + hits.trailing_zeros() as usize];
                break;
            }
        }
        let iscale = -127.0 / max;
        let scale = _mm256_set1_ps(iscale);
        // `nearest_int`: the magic constant makes the FPU round half to even into the mantissa.
        let magic = _mm256_set1_ps(12_582_912.0);
        let mantissa = _mm256_set1_epi32(0x007f_ffff);
        let bias = _mm256_set1_epi32(0x0040_0000);
        let cap = _mm256_set1_epi32(127);
        let low_byte = _mm256_set1_epi32(0xff);
        let ones8 = _mm256_set1_epi8(1);
        let ones16 = _mm256_set1_epi16(1);
        let mut group_sums = [_mm256_setzero_si256(); 8];
        for (c, chunk) in x.chunks_exact(32).enumerate() {
            let mut i = [_mm256_setzero_si256(); 4];
            for (k, o) in i.iter_mut().enumerate() {
                // SAFETY: `chunk` holds 32 floats.
                let v = unsafe { _mm256_loadu_ps(chunk.as_ptr().add(8 * k)) };
                let biased = _mm256_add_ps(_mm256_mul_ps(scale, v), magic);
                let q = _mm256_sub_epi32(
                    _mm256_and_si256(_mm256_castps_si256(biased), mantissa),
                    bias,
                );
                // `as i8` keeps the low byte; packing it unsigned keeps it unchanged.
                *o = _mm256_and_si256(_mm256_min_epi32(q, cap), low_byte);
            }
            let q = pack_i32x32(i, true);
            // SAFETY: 32 code bytes of this chunk start at 4 + 32c < 260.
            unsafe { _mm256_storeu_si256(out[4 + 32 * c..].as_mut_ptr().cast(), q) };
            group_sums[c] = _mm256_madd_epi16(_mm256_maddubs_epi16(ones8, q), ones16);
        }
        // Each `group_sums[c]` holds four partial sums of group 2c in its low half and of
        // 2c+1 in its high half; two rounds of pairwise adds finish them.
        for half in 0..2 {
            let g = &group_sums[4 * half..4 * half + 4];
            let h = _mm256_hadd_epi32(_mm256_hadd_epi32(g[0], g[1]), _mm256_hadd_epi32(g[2], g[3]));
            let h = _mm256_permutevar8x32_epi32(h, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
            let s = _mm256_packs_epi32(h, h);
            let s = _mm256_permute4x64_epi64::<0b1000>(s);
            // SAFETY: 8 bsums (16 bytes) of this half start at 260 + 16·half.
            unsafe {
                _mm_storeu_si128(
                    out[260 + 16 * half..].as_mut_ptr().cast(),
                    _mm256_castsi256_si128(s),
                )
            };
        }
        out[..4].copy_from_slice(&(1.0 / iscale).to_le_bytes());
    }
}

/// f32 → f16, round to nearest even (the scalar F16 conversion; F16C rounds NaNs the same way).
///
/// # Safety
/// AVX2, FMA and F16C must be available.
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn quantize_f16(src: &[f32], dst: &mut [u8]) {
    assert!(
        dst.len() == 2 * src.len(),
        "f16 activation: {} values need {} bytes, found {}",
        src.len(),
        2 * src.len(),
        dst.len()
    );
    let mut chunks = src.chunks_exact(8);
    let mut i = 0;
    for v in &mut chunks {
        // SAFETY: `v` holds 8 floats and `dst` 16 bytes at 2i.
        unsafe {
            let h = _mm256_cvtps_ph::<_MM_FROUND_TO_NEAREST_INT>(_mm256_loadu_ps(v.as_ptr()));
            _mm_storeu_si128(dst[2 * i..].as_mut_ptr().cast(), h);
        }
        i += 8;
    }
    for &v in chunks.remainder() {
        dst[2 * i..2 * i + 2].copy_from_slice(&f16_bits(v).to_le_bytes());
        i += 1;
    }
}
