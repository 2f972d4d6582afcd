//! F32 × F32 and F16 × F16, four rows per pass. The scalar twins round each product to f32 and
//! sum in f64; here products are fused into f32 lane accumulators, which stays well inside the
//! tolerance the tests hold them to (the order of a float sum is free, its integer parts are not
//! involved).

use std::arch::x86_64::*;

use super::std_util::hsum_ps;

const ROWS: usize = 4;

/// 8 values at `p` widened to f32: f16 when `HALF`, else f32.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn load8<const HALF: bool>(p: *const u8) -> __m256 {
    // SAFETY: the caller guarantees 8 readable elements at `p`.
    unsafe {
        if HALF {
            _mm256_cvtph_ps(_mm_loadu_si128(p.cast()))
        } else {
            _mm256_loadu_ps(p.cast())
        }
    }
}

fn scalar<const HALF: bool>(p: &[u8]) -> f32 {
    if HALF {
        half::f16::from_bits(u16::from_le_bytes([p[0], p[1]])).to_f32()
    } else {
        f32::from_le_bytes([p[0], p[1], p[2], p[3]])
    }
}

#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn rows<const HALF: bool, const R: usize>(
    w: *const u8,
    row_bytes: usize,
    a: &[u8],
) -> [f32; R] {
    let bytes = if HALF { 2 } else { 4 };
    let n = row_bytes / bytes;
    let body = n / 8 * 8;
    let mut acc = [_mm256_setzero_ps(); R];
    let mut i = 0;
    while i < body {
        // SAFETY: i + 8 ≤ n elements, inside `a` and inside each row.
        let av = unsafe { load8::<HALF>(a.as_ptr().add(i * bytes)) };
        for (r, acc) in acc.iter_mut().enumerate() {
            // SAFETY: as above.
            let wv = unsafe { load8::<HALF>(w.add(r * row_bytes + i * bytes)) };
            *acc = _mm256_fmadd_ps(wv, av, *acc);
        }
        i += 8;
    }
    let mut out = [0.0f32; R];
    for r in 0..R {
        let mut tail = 0.0f32;
        for k in body..n {
            // SAFETY: element k < n of row r.
            let wk = unsafe { std::slice::from_raw_parts(w.add(r * row_bytes + k * bytes), bytes) };
            tail += scalar::<HALF>(wk) * scalar::<HALF>(&a[k * bytes..]);
        }
        out[r] = hsum_ps(acc[r]) + tail;
    }
    out
}

macro_rules! gemv_float {
    ($name:ident, $half:literal) => {
        /// # Safety
        /// AVX2, FMA and F16C must be available; `weights` holds `out.len()` rows of
        /// `row_bytes` and `activation` one row of the same element count.
        #[target_feature(enable = "avx2,fma,f16c")]
        pub(crate) unsafe fn $name(
            weights: &[u8],
            row_bytes: usize,
            activation: &[u8],
            out: &mut [f32],
        ) {
            let mut r = 0;
            while r + ROWS <= out.len() {
                // SAFETY: rows r..r+ROWS lie inside `weights`.
                let v = unsafe {
                    rows::<$half, ROWS>(weights.as_ptr().add(r * row_bytes), row_bytes, activation)
                };
                out[r..r + ROWS].copy_from_slice(&v);
                r += ROWS;
            }
            while r < out.len() {
                // SAFETY: row r lies inside `weights`.
                out[r] = unsafe {
                    rows::<$half, 1>(weights.as_ptr().add(r * row_bytes), row_bytes, activation)
                }[0];
                r += 1;
            }
        }
    };
}

gemv_float!(gemv_f32, false);
gemv_float!(gemv_f16, true);

/// `out[c] = Σ_j weights[j] · rows[j·out.len() + c]`: the value side of attention, 64 columns a
/// pass in eight accumulators, the last columns (fewer than 8) in scalar code.
///
/// # Safety
/// AVX2 + FMA present; `rows.len() >= weights.len() * out.len()` (checked by the caller).
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn weighted_sum(weights: &[f32], rows: &[half::f16], out: &mut [f32]) {
    let dim = out.len();
    let vector_end = dim / 8 * 8;
    let mut c = 0;
    while c < vector_end {
        let u_count = ((vector_end - c) / 8).min(8);
        let mut acc = [_mm256_setzero_ps(); 8];
        for (j, &w) in weights.iter().enumerate() {
            let p = _mm256_set1_ps(w);
            for (u, acc) in acc.iter_mut().enumerate().take(u_count) {
                // SAFETY: column c + 8u + 7 < dim, inside row j.
                let x = unsafe {
                    _mm256_cvtph_ps(_mm_loadu_si128(
                        rows.as_ptr().add(j * dim + c + 8 * u).cast(),
                    ))
                };
                *acc = _mm256_fmadd_ps(p, x, *acc);
            }
        }
        for (u, acc) in acc.iter().enumerate().take(u_count) {
            // SAFETY: columns c + 8u .. c + 8u + 8 lie inside `out`.
            unsafe { _mm256_storeu_ps(out.as_mut_ptr().add(c + 8 * u), *acc) };
        }
        c += 8 * u_count;
    }
    for (col, o) in out.iter_mut().enumerate().skip(vector_end) {
        *o = weights
            .iter()
            .enumerate()
            .map(|(j, &w)| w * rows[j * dim + col].to_f32())
            .sum();
    }
}
