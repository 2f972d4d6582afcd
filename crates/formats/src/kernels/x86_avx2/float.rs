//! F32 × F32 and F16 × F16, four rows per pass. The scalar twins round each product to f32 and
//! sum in f64; here products are fused into f32 lane accumulators, which stays well inside the
//! tolerance the tests hold them to (the order of a float sum is free, its integer parts are not
//! involved).

use crate::kernels::entries::row_band_kernel;
use std::arch::x86_64::*;

use crate::kernels::exp_poly;

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

row_band_kernel!(
    /// # Safety
    /// AVX2, FMA and F16C must be available; `weights` holds `out.len()` rows of
    /// `row_bytes` and `activation` one row of the same element count.
    gemv_f32,
    "avx2,fma,f16c",
    ROWS,
    rows,
    false
);
row_band_kernel!(
    /// # Safety
    /// AVX2, FMA and F16C must be available; `weights` holds `out.len()` rows of
    /// `row_bytes` and `activation` one row of the same element count.
    gemv_f16,
    "avx2,fma,f16c",
    ROWS,
    rows,
    true
);

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

/// `exp(x)` for each lane, for `x ≤ 0` (softmax arguments): as the AVX-512 tier's (degree-7
/// polynomial on `|r| ≤ ln 2 / 2`), with `2^n` built in the exponent bits; arguments below −87
/// are clamped there (`exp(−87) ≈ 1.6e-38`, nothing beside the maximum's 1).
#[inline(always)]
unsafe fn exp_nonpositive(x: __m256) -> __m256 {
    let x = _mm256_max_ps(x, _mm256_set1_ps(-87.0));
    let n = _mm256_round_ps::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(_mm256_mul_ps(
        x,
        _mm256_set1_ps(core::f32::consts::LOG2_E),
    ));
    let r = _mm256_fnmadd_ps(n, _mm256_set1_ps(exp_poly::LN2_HI), x);
    let r = _mm256_fnmadd_ps(n, _mm256_set1_ps(exp_poly::LN2_LO), r);
    let mut p = _mm256_set1_ps(exp_poly::HIGHEST);
    for c in exp_poly::REST {
        p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(c));
    }
    let two_n = _mm256_castsi256_ps(_mm256_slli_epi32::<23>(_mm256_add_epi32(
        _mm256_cvtps_epi32(n),
        _mm256_set1_epi32(127),
    )));
    _mm256_mul_ps(p, two_n)
}

/// Attention's softmax numerator in place: 8 lanes at a time, the last (fewer than 8) scores
/// through the same vector code on a padded copy.
///
/// # Safety
/// AVX2 + FMA present.
#[target_feature(enable = "avx2,fma")]
pub(crate) unsafe fn softmax(scores: &mut [f32], scale: f32) -> f32 {
    let vscale = _mm256_set1_ps(scale);
    let (body, tail) = scores.split_at_mut(scores.len() / 8 * 8);
    let mut vmax = _mm256_set1_ps(f32::NEG_INFINITY);
    for chunk in body.chunks_exact_mut(8) {
        // SAFETY: 8 values of `chunk`.
        unsafe {
            let v = _mm256_mul_ps(_mm256_loadu_ps(chunk.as_ptr()), vscale);
            _mm256_storeu_ps(chunk.as_mut_ptr(), v);
            vmax = _mm256_max_ps(vmax, v);
        }
    }
    let mut max = f32::NEG_INFINITY;
    let mut lanes = [0.0f32; 8];
    // SAFETY: 8 values of `lanes`.
    unsafe { _mm256_storeu_ps(lanes.as_mut_ptr(), vmax) };
    for &v in &lanes {
        max = max.max(v);
    }
    for s in tail.iter_mut() {
        *s *= scale;
        max = max.max(*s);
    }
    let vmax = _mm256_set1_ps(max);
    let mut vsum = _mm256_setzero_ps();
    for chunk in body.chunks_exact_mut(8) {
        // SAFETY: 8 values of `chunk`.
        unsafe {
            let e = exp_nonpositive(_mm256_sub_ps(_mm256_loadu_ps(chunk.as_ptr()), vmax));
            _mm256_storeu_ps(chunk.as_mut_ptr(), e);
            vsum = _mm256_add_ps(vsum, e);
        }
    }
    let mut tail_sum = 0.0f32;
    if !tail.is_empty() {
        // The tail through the same polynomial on a padded copy; the padding lanes are dropped.
        let mut pad = [max; 8];
        pad[..tail.len()].copy_from_slice(tail);
        // SAFETY: 8 values of `pad`.
        unsafe {
            let e = exp_nonpositive(_mm256_sub_ps(_mm256_loadu_ps(pad.as_ptr()), vmax));
            _mm256_storeu_ps(pad.as_mut_ptr(), e);
        }
        tail.copy_from_slice(&pad[..tail.len()]);
        tail_sum = tail.iter().sum();
    }
    // SAFETY: 8 values of `lanes`.
    unsafe { _mm256_storeu_ps(lanes.as_mut_ptr(), vsum) };
    lanes.iter().sum::<f32>() + tail_sum
}

/// `silu(g) · u` for 8 lanes, as the AVX-512 tier's.
#[inline(always)]
unsafe fn silu_mul8(g: __m256, u: __m256) -> __m256 {
    let e = exp_nonpositive(_mm256_or_ps(g, _mm256_set1_ps(-0.0)));
    let one = _mm256_set1_ps(1.0);
    let negative = _mm256_cmp_ps::<_CMP_LT_OQ>(g, _mm256_setzero_ps());
    let num = _mm256_blendv_ps(one, e, negative);
    _mm256_mul_ps(
        _mm256_mul_ps(g, _mm256_div_ps(num, _mm256_add_ps(one, e))),
        u,
    )
}

/// SwiGLU's gate in place, 8 lanes at a time; the last (fewer than 8) through a padded copy.
///
/// # Safety
/// AVX2 + FMA present; `up.len() == gate.len()` (checked by the caller).
#[target_feature(enable = "avx2,fma")]
pub(crate) unsafe fn silu_mul(gate: &mut [f32], up: &[f32]) {
    let body = gate.len() / 8 * 8;
    let (gate_body, gate_tail) = gate.split_at_mut(body);
    for (g, u) in gate_body.chunks_exact_mut(8).zip(up.chunks_exact(8)) {
        // SAFETY: 8 values of each chunk.
        unsafe {
            let v = silu_mul8(_mm256_loadu_ps(g.as_ptr()), _mm256_loadu_ps(u.as_ptr()));
            _mm256_storeu_ps(g.as_mut_ptr(), v);
        }
    }
    if !gate_tail.is_empty() {
        let (mut g, mut u) = ([0.0f32; 8], [0.0f32; 8]);
        g[..gate_tail.len()].copy_from_slice(gate_tail);
        u[..gate_tail.len()].copy_from_slice(&up[body..]);
        // SAFETY: 8 values of each padded copy.
        unsafe {
            let v = silu_mul8(_mm256_loadu_ps(g.as_ptr()), _mm256_loadu_ps(u.as_ptr()));
            _mm256_storeu_ps(g.as_mut_ptr(), v);
        }
        gate_tail.copy_from_slice(&g[..gate_tail.len()]);
    }
}
