//! The gated delta rule's step (`kernels/delta_rule.rs`), 16 lanes a pass over each state row.

use core::arch::x86_64::*;

#[inline(always)]
unsafe fn hsum(v: __m512) -> f32 {
    // SAFETY: the caller has AVX-512F.
    unsafe { _mm512_reduce_add_ps(v) }
}

/// # Safety
/// AVX-512F present; the lengths checked by `check_delta_rule`.
#[target_feature(enable = "avx512f")]
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
    let body = s / 16 * 16;
    for (j, row) in state.chunks_exact_mut(s).enumerate() {
        let p = row.as_mut_ptr();
        // SAFETY: every offset below `body` is inside the row and `k` / `q` (all S long).
        let mut kv = unsafe {
            let d = _mm512_set1_ps(decay);
            let mut acc = _mm512_setzero_ps();
            for i in (0..body).step_by(16) {
                let m = _mm512_mul_ps(_mm512_loadu_ps(p.add(i)), d);
                _mm512_storeu_ps(p.add(i), m);
                acc = _mm512_fmadd_ps(m, _mm512_loadu_ps(k.as_ptr().add(i)), acc);
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
            let dl = _mm512_set1_ps(delta);
            let mut acc = _mm512_setzero_ps();
            for i in (0..body).step_by(16) {
                let m = _mm512_fmadd_ps(
                    _mm512_loadu_ps(k.as_ptr().add(i)),
                    dl,
                    _mm512_loadu_ps(p.add(i)),
                );
                _mm512_storeu_ps(p.add(i), m);
                acc = _mm512_fmadd_ps(m, _mm512_loadu_ps(q.as_ptr().add(i)), acc);
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
