//! The gated delta rule's step (`kernels/delta_rule.rs`), 4 lanes a pass over each state row.

use core::arch::aarch64::*;

/// # Safety
/// NEON present; the lengths checked by `check_delta_rule`.
#[target_feature(enable = "neon")]
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
    let body = s / 4 * 4;
    for (j, row) in state.chunks_exact_mut(s).enumerate() {
        let p = row.as_mut_ptr();
        // SAFETY: every offset below `body` is inside the row and `k` / `q` (all S long).
        let mut kv = unsafe {
            let d = vdupq_n_f32(decay);
            let mut acc = vdupq_n_f32(0.0);
            for i in (0..body).step_by(4) {
                let m = vmulq_f32(vld1q_f32(p.add(i)), d);
                vst1q_f32(p.add(i), m);
                acc = vfmaq_f32(acc, m, vld1q_f32(k.as_ptr().add(i)));
            }
            vaddvq_f32(acc)
        };
        for i in body..s {
            row[i] *= decay;
            kv += row[i] * k[i];
        }
        let delta = beta * (v[j] - kv);
        // SAFETY: as above.
        let mut o = unsafe {
            let dl = vdupq_n_f32(delta);
            let mut acc = vdupq_n_f32(0.0);
            for i in (0..body).step_by(4) {
                let m = vfmaq_f32(vld1q_f32(p.add(i)), vld1q_f32(k.as_ptr().add(i)), dl);
                vst1q_f32(p.add(i), m);
                acc = vfmaq_f32(acc, m, vld1q_f32(q.as_ptr().add(i)));
            }
            vaddvq_f32(acc)
        };
        for i in body..s {
            row[i] += k[i] * delta;
            o += row[i] * q[i];
        }
        out[j] = o;
    }
}
