//! The gated delta rule's step (`kernels/delta_rule.rs`), 8 lanes a pass over each state row.

use core::arch::x86_64::*;

#[inline(always)]
unsafe fn hsum(v: __m256) -> f32 {
    // SAFETY: the caller has AVX2.
    unsafe {
        let s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps::<1>(v));
        let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
        let s = _mm_add_ss(s, _mm_movehdup_ps(s));
        _mm_cvtss_f32(s)
    }
}

/// # Safety
/// AVX2 + FMA present; the lengths checked by `check_delta_rule`.
#[target_feature(enable = "avx2,fma")]
pub(crate) unsafe fn delta_rule(
    state: &mut [f32],
    k: &[f32],
    v: &[f32],
    q: &[f32],
    decay: f32,
    beta: f32,
    out: &mut [f32],
) {
    let s = k.len();
    if s == 0 {
        return;
    }
    let body = s / 8 * 8;
    for (j, row) in state.chunks_exact_mut(s).enumerate() {
        let p = row.as_mut_ptr();
        // SAFETY: every offset below `body` is inside the row and `k` / `q` (all S long).
        let mut kv = unsafe {
            let d = _mm256_set1_ps(decay);
            let mut acc = _mm256_setzero_ps();
            for i in (0..body).step_by(8) {
                let m = _mm256_mul_ps(_mm256_loadu_ps(p.add(i)), d);
                _mm256_storeu_ps(p.add(i), m);
                acc = _mm256_fmadd_ps(m, _mm256_loadu_ps(k.as_ptr().add(i)), acc);
            }
            hsum(acc)
        };
        for i in body..s {
            row[i] *= decay;
            kv += row[i] * k[i];
        }
        let delta = beta * (v[j] - kv);
        // SAFETY: as above.
        let mut o = unsafe {
            let dl = _mm256_set1_ps(delta);
            let mut acc = _mm256_setzero_ps();
            for i in (0..body).step_by(8) {
                let m = _mm256_fmadd_ps(
                    _mm256_loadu_ps(k.as_ptr().add(i)),
                    dl,
                    _mm256_loadu_ps(p.add(i)),
                );
                _mm256_storeu_ps(p.add(i), m);
                acc = _mm256_fmadd_ps(m, _mm256_loadu_ps(q.as_ptr().add(i)), acc);
            }
            hsum(acc)
        };
        for i in body..s {
            row[i] += k[i] * delta;
            o += row[i] * q[i];
        }
        out[j] = o;
    }
}
