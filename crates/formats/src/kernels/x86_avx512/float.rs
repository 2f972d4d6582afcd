//! F32 × F32 and F16 × F16, 16 lanes, four rows per pass; the tail of a row is a masked load,
//! so no byte past the row is read. Products are fused into f32 lane accumulators (the scalar
//! twins sum in f64; the tests bound the difference).

use crate::kernels::entries::row_band_kernel;
use std::arch::x86_64::*;

use super::lanes_left;
use crate::kernels::exp_poly;

const ROWS: usize = 4;

/// The first `n` (≤ 16) values at `p` as f32, zeros after: f16 when `HALF`, else f32.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")]
unsafe fn load16<const HALF: bool>(p: *const u8, mask: u16) -> __m512 {
    // SAFETY: the caller guarantees the masked elements are readable; others are not read.
    unsafe {
        if HALF {
            _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(mask, p.cast()))
        } else {
            _mm512_maskz_loadu_ps(mask, p.cast())
        }
    }
}

#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")]
unsafe fn rows<const HALF: bool, const R: usize>(
    w: *const u8,
    row_bytes: usize,
    a: &[u8],
) -> [f32; R] {
    let bytes = if HALF { 2 } else { 4 };
    let n = row_bytes / bytes;
    let mut acc = [_mm512_setzero_ps(); R];
    let mut i = 0;
    while i < n {
        let left = n - i;
        let mask: u16 = lanes_left(left);
        // SAFETY: elements i..i+min(16, left) lie inside `a` and inside each row.
        let av = unsafe { load16::<HALF>(a.as_ptr().add(i * bytes), mask) };
        for (r, acc) in acc.iter_mut().enumerate() {
            // SAFETY: as above.
            let wv = unsafe { load16::<HALF>(w.add(r * row_bytes + i * bytes), mask) };
            *acc = _mm512_fmadd_ps(wv, av, *acc);
        }
        i += 16;
    }
    let mut out = [0.0; R];
    for r in 0..R {
        out[r] = _mm512_reduce_add_ps(acc[r]);
    }
    out
}

row_band_kernel!(
    /// # Safety
    /// AVX-512 F/BW/VL/DQ (and AVX2/FMA/F16C) must be available; `weights` holds
    /// `out.len()` rows of `row_bytes` and `activation` one row of the same element count.
    gemv_f32,
    "avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c",
    ROWS,
    rows,
    false
);
row_band_kernel!(
    /// # Safety
    /// AVX-512 F/BW/VL/DQ (and AVX2/FMA/F16C) must be available; `weights` holds
    /// `out.len()` rows of `row_bytes` and `activation` one row of the same element count.
    gemv_f16,
    "avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c",
    ROWS,
    rows,
    true
);

/// `out[c] = Σ_j weights[j] · rows[j·out.len() + c]`: the value side of attention, one query —
/// the several-query kernel with one query.
///
/// # Safety
/// AVX-512 F present; `rows.len() >= weights.len() * out.len()` (checked by the caller).
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")]
pub(crate) unsafe fn weighted_sum(weights: &[f32], rows: &[half::f16], out: &mut [f32]) {
    // SAFETY: one query of `weights.len()` weights over as many rows of `out.len()` values.
    unsafe {
        super::attention::attention_values(weights, weights.len(), &[weights.len()], rows, out)
    }
}

/// `exp(x)` for each lane, for `x ≤ 0` (softmax arguments): `x = n·ln 2 + r` with `|r| ≤ ln 2 / 2`
/// (ln 2 split in two parts so `r` is exact to f32), `exp(r)` by its Taylor polynomial to degree 7
/// (truncation below 1e-8 relative), then `· 2^n` by `vscalefps`, which flushes far-negative
/// arguments to 0. Within 2 ulp of `f32::exp` over the range softmax meets.
#[inline(always)]
unsafe fn exp_nonpositive(x: __m512) -> __m512 {
    let x = _mm512_max_ps(x, _mm512_set1_ps(-104.0));
    let n = _mm512_roundscale_ps::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(
        _mm512_mul_ps(x, _mm512_set1_ps(core::f32::consts::LOG2_E)),
    );
    let r = _mm512_fnmadd_ps(n, _mm512_set1_ps(exp_poly::LN2_HI), x);
    let r = _mm512_fnmadd_ps(n, _mm512_set1_ps(exp_poly::LN2_LO), r);
    let mut p = _mm512_set1_ps(exp_poly::HIGHEST);
    for c in exp_poly::REST {
        p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(c));
    }
    _mm512_scalef_ps(p, n)
}

/// Attention's softmax numerator in place: scale and maximum in one pass, exponentials and their
/// sum in a second, 16 lanes at a time with masked ends.
///
/// # Safety
/// AVX-512 F present.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx2,fma")]
pub(crate) unsafe fn softmax(scores: &mut [f32], scale: f32) -> f32 {
    let n = scores.len();
    let p = scores.as_mut_ptr();
    let vscale = _mm512_set1_ps(scale);
    let mut vmax = _mm512_set1_ps(f32::NEG_INFINITY);
    let mut i = 0;
    while i < n {
        let m = lanes_left(n - i);
        // SAFETY: lanes i..i+16 masked to those inside `scores`.
        unsafe {
            let v = _mm512_mul_ps(_mm512_maskz_loadu_ps(m, p.add(i)), vscale);
            _mm512_mask_storeu_ps(p.add(i), m, v);
            vmax = _mm512_mask_max_ps(vmax, m, vmax, v);
        }
        i += 16;
    }
    let vmax = _mm512_set1_ps(_mm512_reduce_max_ps(vmax));
    let mut vsum = _mm512_setzero_ps();
    let mut i = 0;
    while i < n {
        let m = lanes_left(n - i);
        // SAFETY: as above.
        unsafe {
            let e = exp_nonpositive(_mm512_sub_ps(_mm512_maskz_loadu_ps(m, p.add(i)), vmax));
            _mm512_mask_storeu_ps(p.add(i), m, e);
            vsum = _mm512_mask_add_ps(vsum, m, vsum, e);
        }
        i += 16;
    }
    _mm512_reduce_add_ps(vsum)
}

/// `silu(g) · u` for 16 lanes: `silu(g) = g · σ(g)` with `σ` from `e = exp(−|g|)` (an argument
/// the polynomial covers): `1 / (1 + e)` for `g ≥ 0`, `e / (1 + e)` below.
#[inline(always)]
unsafe fn silu_mul16(g: __m512, u: __m512) -> __m512 {
    let e = exp_nonpositive(_mm512_or_ps(g, _mm512_set1_ps(-0.0)));
    let one = _mm512_set1_ps(1.0);
    let negative = _mm512_cmp_ps_mask::<_CMP_LT_OQ>(g, _mm512_setzero_ps());
    let num = _mm512_mask_blend_ps(negative, one, e);
    _mm512_mul_ps(
        _mm512_mul_ps(g, _mm512_div_ps(num, _mm512_add_ps(one, e))),
        u,
    )
}

/// SwiGLU's gate in place, 16 lanes at a time with a masked end.
///
/// # Safety
/// AVX-512 F present; `up.len() == gate.len()` (checked by the caller).
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx2,fma")]
pub(crate) unsafe fn silu_mul(gate: &mut [f32], up: &[f32]) {
    let n = gate.len();
    let (g, u) = (gate.as_mut_ptr(), up.as_ptr());
    let mut i = 0;
    while i < n {
        let m = lanes_left(n - i);
        // SAFETY: lanes i..i+16 masked to those inside both slices (equal lengths).
        unsafe {
            let v = silu_mul16(
                _mm512_maskz_loadu_ps(m, g.add(i)),
                _mm512_maskz_loadu_ps(m, u.add(i)),
            );
            _mm512_mask_storeu_ps(g.add(i), m, v);
        }
        i += 16;
    }
}
