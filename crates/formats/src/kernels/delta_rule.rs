//! The gated delta rule's step for one value head and one token (Gated DeltaNet, qwen35): the
//! function-pointer type, the length checks every tier runs first, the scalar twin (the
//! reference for the vector tiers), the driver every vector tier shares over its few lane
//! operations ([`DeltaLanes`], an extension of the FWHT's [`FwhtLanes`]) and the safe entry over a
//! tier's `unsafe` kernel.
//!
//! The state is llama.cpp's layout, `state[j·S + i] = M[i][j]` (i a key index, j a value index),
//! so every value index `j` owns one contiguous row and the whole step is two passes per row:
//! decay and the dot with `k` (giving `kv[j] = Σ_i M[i][j]·k[i]`), then the rank-one update and
//! the dot with `q`. Rows are independent, so the step costs one read and one write of the state.

#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
use crate::kernels::fwht::FwhtLanes;

/// One step of the gated delta rule on one head's `S×S` state (`S = k.len()`):
/// `M ← decay·M; δ = β·(v − Mᵀk); M ← M + k⊗δ; out = Mᵀq` (the caller scales `out`).
pub type DeltaRuleFn =
    fn(state: &mut [f32], k: &[f32], v: &[f32], q: &[f32], decay: f32, beta: f32, out: &mut [f32]);

/// The lengths every delta-rule kernel relies on (a caller's bug otherwise).
pub(crate) fn check_delta_rule(state: &[f32], k: &[f32], v: &[f32], q: &[f32], out: &[f32]) {
    let s = k.len();
    assert!(
        state.len() == s * s && v.len() == s && q.len() == s && out.len() == s,
        "delta_rule: a state of {} values, k {s}, v {}, q {}, out {} (want S×S and S each)",
        state.len(),
        v.len(),
        q.len(),
        out.len()
    );
}

/// The scalar step (f32, sums in index order): the reference for the fast ones.
pub fn delta_rule_scalar(
    state: &mut [f32],
    k: &[f32],
    v: &[f32],
    q: &[f32],
    decay: f32,
    beta: f32,
    out: &mut [f32],
) {
    check_delta_rule(state, k, v, q, out);
    let s = k.len();
    if s == 0 {
        return;
    }
    for (j, row) in state.chunks_exact_mut(s).enumerate() {
        let mut kv = 0.0f32;
        for (m, &ki) in row.iter_mut().zip(k) {
            *m *= decay;
            kv += *m * ki;
        }
        let delta = beta * (v[j] - kv);
        let mut o = 0.0f32;
        for ((m, &ki), &qi) in row.iter_mut().zip(k).zip(q) {
            *m += ki * delta;
            o += *m * qi;
        }
        out[j] = o;
    }
}

/// The operations of a tier the shared delta-rule driver needs beyond [`FwhtLanes`]'s.
#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
pub(crate) trait DeltaLanes: FwhtLanes {
    /// `a·b + c`, fused.
    ///
    /// # Safety
    /// The tier's features are enabled.
    unsafe fn fmadd(a: Self::F, b: Self::F, c: Self::F) -> Self::F;
    /// The sum of the lanes.
    ///
    /// # Safety
    /// The tier's features are enabled.
    unsafe fn hsum(v: Self::F) -> f32;
}

/// The step of [`DeltaRuleFn`] on tier `L`, `LANES` values of a state row a pass, the rest of
/// each row by the scalar twin's operations.
///
/// # Safety
/// `check_delta_rule` holds for the arguments; the tier's features are enabled.
#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
#[inline(always)]
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn delta_rule_rows<L: DeltaLanes>(
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
    let body = s / L::LANES * L::LANES;
    let (kp, qp) = (k.as_ptr(), q.as_ptr());
    for (j, row) in state.chunks_exact_mut(s).enumerate() {
        let p = row.as_mut_ptr();
        // SAFETY: every offset below `body` is inside the row and `k` / `q` (all S long); the
        // caller enabled the tier's features.
        let mut kv = unsafe {
            let d = L::splat(decay);
            let mut acc = L::splat(0.0);
            for i in (0..body).step_by(L::LANES) {
                let m = L::mul(L::load(p.add(i)), d);
                L::store(p.add(i), m);
                acc = L::fmadd(m, L::load(kp.add(i)), acc);
            }
            L::hsum(acc)
        };
        for i in body..s {
            row[i] *= decay;
            kv += row[i] * k[i];
        }
        let delta = beta * (v[j] - kv);
        // SAFETY: as above.
        let mut o = unsafe {
            let dl = L::splat(delta);
            let mut acc = L::splat(0.0);
            for i in (0..body).step_by(L::LANES) {
                let m = L::fmadd(L::load(kp.add(i)), dl, L::load(p.add(i)));
                L::store(p.add(i), m);
                acc = L::fmadd(m, L::load(qp.add(i)), acc);
            }
            L::hsum(acc)
        };
        for i in body..s {
            row[i] += k[i] * delta;
            o += row[i] * q[i];
        }
        out[j] = o;
    }
}

/// The safe entry `delta_rule` of a tier whose module `$module` has an `unsafe` kernel of that
/// name: the shared checks, then the kernel.
#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
macro_rules! delta_rule_entry {
    ($module:ident) => {
        /// One delta-rule step of one head (`Kernels::delta_rule`).
        fn delta_rule(
            state: &mut [f32],
            k: &[f32],
            v: &[f32],
            q: &[f32],
            decay: f32,
            beta: f32,
            out: &mut [f32],
        ) {
            $crate::kernels::check_delta_rule(state, k, v, q, out);
            // SAFETY: registered only through `Kernels::new` for this tier, which checked the
            // CPU; the lengths were just checked.
            unsafe { $module::delta_rule(state, k, v, q, decay, beta, out) }
        }
    };
}
#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
pub(crate) use delta_rule_entry;
