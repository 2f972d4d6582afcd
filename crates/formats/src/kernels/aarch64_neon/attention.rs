//! Attention for several queries at once on NEON (the query heads that share a key/value head,
//! and the tokens of a prompt): each key and value row of the f16 cache is widened once for all
//! of them.
//!
//! Scores: a query's dot with a key is, for each of 16 lanes (four vectors), a chain of fused
//! multiply-adds over the 16-value chunks of the head in order, then one fixed reduction tree
//! (lanes `l + 8`, then `l + 4`, `l + 2`, `l + 1` added in) — the AVX-512 tier's arithmetic, step
//! for step. A score depends only on its query and key, not on which queries or keys shared the
//! call, so a token's attention is the same alone or in a batch.
//!
//! Values: each output column is `Σ_j p_j · v_j` accumulated in key order by fused
//! multiply-adds from zero (the last columns, fewer than 4, by the scalar fused multiply-add);
//! one query is the tier's `weighted_sum`, so a batch gives each query exactly that.

use core::arch::aarch64::*;

use half::f16;

use super::float::{load16_f16, load4_f16};

/// Queries per pass over the keys (their 4 × 4 accumulators stay in registers).
const QUERIES: usize = 4;

/// Floats of widened queries on the stack: up to `QUERIES` heads, or one head of
/// `ATTENTION_WIDE_DIM` (wider ones take the one-query kernels: `Kernels::attention_scores`).
const WIDE: usize = crate::kernels::ATTENTION_WIDE_DIM;

/// The tree of one score's 16 lane sums (lane `l` of `acc[k]` is lane `4k + l`): `l + 8`, then
/// `l + 4`, `l + 2`, `l + 1`.
#[inline]
#[target_feature(enable = "neon")]
fn reduce16(acc: &[float32x4_t; 4]) -> f32 {
    let z = vaddq_f32(vaddq_f32(acc[0], acc[2]), vaddq_f32(acc[1], acc[3]));
    let w = vadd_f32(vget_low_f32(z), vget_high_f32(z));
    vpadds_f32(w)
}

/// The scores of `Q` queries (widened, `pitch` floats apart, zero past `dim`) against the keys
/// below the largest of `lens`, into `out[i·out_stride + j]` for `j < lens[i]`.
///
/// # Safety
/// NEON; `keys` holds `max(lens)` rows of `dim` values, `queries` `Q` rows of
/// `pitch = 16·⌈dim / 16⌉` floats, `out` row `i` takes `lens[i]` values.
#[inline]
#[target_feature(enable = "neon")]
unsafe fn scores_pass<const Q: usize>(
    keys: *const f16,
    dim: usize,
    queries: *const f32,
    pitch: usize,
    lens: &[usize],
    out: *mut f32,
    out_stride: usize,
) {
    let full = dim / 16;
    let rest = dim - 16 * full;
    let n_keys = lens.iter().copied().max().unwrap_or(0);
    let mut pad = [f16::ZERO; 16];
    for j in 0..n_keys {
        // SAFETY: key j < max(lens) lies inside `keys`.
        let k = unsafe { keys.add(j * dim) };
        let mut acc = [[vdupq_n_f32(0.0); 4]; Q];
        let mut step = |c: usize, kc: [float32x4_t; 4]| {
            for (i, acc) in acc.iter_mut().enumerate() {
                for (v, (a, kv)) in acc.iter_mut().zip(kc).enumerate() {
                    // SAFETY: query i's widened row holds `pitch ≥ 16·(c + 1)` floats.
                    let q = unsafe { vld1q_f32(queries.add(i * pitch + 16 * c + 4 * v)) };
                    *a = vfmaq_f32(*a, q, kv);
                }
            }
        };
        for c in 0..full {
            // SAFETY: values 16c..16c + 16 ≤ dim of key j.
            step(c, unsafe { load16_f16(k.add(16 * c)) });
        }
        if rest > 0 {
            // SAFETY: the key's last `rest` values; the padding stays zero (and so does the
            // query past `dim`).
            pad[..rest]
                .copy_from_slice(unsafe { core::slice::from_raw_parts(k.add(16 * full), rest) });
            // SAFETY: `pad` holds 16 values.
            step(full, unsafe { load16_f16(pad.as_ptr()) });
        }
        for (i, acc) in acc.iter().enumerate() {
            if j < lens[i] {
                // SAFETY: out row i takes lens[i] > j values.
                unsafe { *out.add(i * out_stride + j) = reduce16(acc) };
            }
        }
    }
}

/// `out[i·out_stride + j] = Σ_d queries[i·dim + d] · keys[j·dim + d]` for `j < lens[i]`.
///
/// # Safety
/// NEON; `1 ≤ dim ≤ ATTENTION_WIDE_DIM`; `queries` holds `lens.len()` rows of `dim`, `keys`
/// `max(lens)` rows of `dim`, `out` row `i` (at `i·out_stride`) `lens[i]` values (checked by the
/// caller).
#[target_feature(enable = "neon")]
pub(super) unsafe fn attention_scores(
    keys: &[f16],
    queries: &[f16],
    dim: usize,
    lens: &[usize],
    out: &mut [f32],
    out_stride: usize,
) {
    let pitch = 16 * dim.div_ceil(16);
    let per_pass = (WIDE / pitch).min(QUERIES);
    let mut wide = [0.0f32; WIDE];
    let mut first = 0;
    while first < lens.len() {
        let n = per_pass.min(lens.len() - first);
        for i in 0..n {
            let q = &queries[(first + i) * dim..(first + i + 1) * dim];
            let row = &mut wide[i * pitch..(i + 1) * pitch];
            let mut chunks = q.chunks_exact(4);
            for (c, v) in (&mut chunks).enumerate() {
                // SAFETY: 4 values of `v`; 4 floats at 4c + 4 ≤ dim of `row`.
                unsafe { vst1q_f32(row.as_mut_ptr().add(4 * c), load4_f16(v.as_ptr())) };
            }
            let body = dim - chunks.remainder().len();
            for (o, v) in row[body..dim].iter_mut().zip(chunks.remainder()) {
                *o = super::f16::widen1(v.to_bits());
            }
            // An earlier pass may have left another query's values here.
            row[dim..].fill(0.0);
        }
        let lens = &lens[first..first + n];
        // SAFETY: `n` widened queries of `pitch` floats (zero past `dim`); lengths as the
        // contract.
        unsafe {
            let (k, w, o) = (
                keys.as_ptr(),
                wide.as_ptr(),
                out.as_mut_ptr().add(first * out_stride),
            );
            match n {
                1 => scores_pass::<1>(k, dim, w, pitch, lens, o, out_stride),
                2 => scores_pass::<2>(k, dim, w, pitch, lens, o, out_stride),
                3 => scores_pass::<3>(k, dim, w, pitch, lens, o, out_stride),
                _ => scores_pass::<4>(k, dim, w, pitch, lens, o, out_stride),
            }
        }
        first += n;
    }
}

/// `out[g·dim + c] = Σ_{j < lens[g]} weights[g·w_stride + j] · rows[j·dim + c]` for the `4·U`
/// columns from `c0`, for the first `present` of `G` queries (the others' `lens` are 0 and
/// nothing of theirs is written).
///
/// # Safety
/// NEON; `rows` holds `max(lens)` rows of `dim`, `weights` row `g` `lens[g]` values, `out` the
/// present queries' rows of `dim`; columns `c0..c0 + 4·U` lie inside `dim`.
#[inline]
#[target_feature(enable = "neon")]
#[allow(clippy::too_many_arguments)]
unsafe fn values_pass<const U: usize, const G: usize>(
    weights: *const f32,
    w_stride: usize,
    lens: &[usize; G],
    present: usize,
    rows: *const f16,
    dim: usize,
    c0: usize,
    out: *mut f32,
) {
    let n_keys = lens.iter().copied().max().unwrap_or(0);
    let mut acc = [[vdupq_n_f32(0.0); U]; G];
    for j in 0..n_keys {
        // SAFETY: row j < max(lens), columns below c0 + 4U ≤ dim.
        let v: [float32x4_t; U] =
            core::array::from_fn(|u| unsafe { load4_f16(rows.add(j * dim + c0 + 4 * u)) });
        for (g, acc) in acc.iter_mut().enumerate() {
            if j < lens[g] {
                // SAFETY: weights row g holds lens[g] > j values.
                let p = vdupq_n_f32(unsafe { *weights.add(g * w_stride + j) });
                for (a, v) in acc.iter_mut().zip(&v) {
                    *a = vfmaq_f32(*a, p, *v);
                }
            }
        }
    }
    for (g, acc) in acc.iter().enumerate().take(present) {
        for (u, a) in acc.iter().enumerate() {
            // SAFETY: out row g, columns below c0 + 4U.
            unsafe { vst1q_f32(out.add(g * dim + c0 + 4 * u), *a) };
        }
    }
}

/// Runs [`values_pass`] over `lens.len()` queries, `G` at a time.
///
/// # Safety
/// As [`values_pass`] for every query.
#[inline]
#[target_feature(enable = "neon")]
unsafe fn values_queries<const U: usize, const G: usize>(
    weights: *const f32,
    w_stride: usize,
    lens: &[usize],
    rows: *const f16,
    dim: usize,
    c0: usize,
    out: *mut f32,
) {
    let mut first = 0;
    while first < lens.len() {
        let here = G.min(lens.len() - first);
        let group: [usize; G] =
            core::array::from_fn(|g| if g < here { lens[first + g] } else { 0 });
        // SAFETY: the group's rows as the contract; missing queries read and write nothing.
        unsafe {
            values_pass::<U, G>(
                weights.add(first * w_stride),
                w_stride,
                &group,
                here,
                rows,
                dim,
                c0,
                out.add(first * dim),
            )
        };
        first += here;
    }
}

/// `out[i·dim + c] = Σ_{j < lens[i]} weights[i·w_stride + j] · rows[j·dim + c]`, `dim =
/// out.len() / lens.len()`: the value side of attention for several queries. Columns go 32, 16,
/// 8 or 4 a pass; the last (fewer than 4) one at a time in scalar fused multiply-adds.
///
/// # Safety
/// NEON; `rows` holds `max(lens)` rows of `dim`, `weights` row `i` (at `i·w_stride`) `lens[i]`
/// values (checked by the caller).
#[target_feature(enable = "neon")]
pub(super) unsafe fn attention_values(
    weights: &[f32],
    w_stride: usize,
    lens: &[usize],
    rows: &[f16],
    out: &mut [f32],
) {
    if lens.is_empty() {
        return;
    }
    let dim = out.len() / lens.len();
    let body = dim / 4 * 4;
    let (w, r, o) = (weights.as_ptr(), rows.as_ptr(), out.as_mut_ptr());
    let mut c = 0;
    while c < body {
        let left = body - c;
        // SAFETY: as the function's contract, for columns c..c + n ≤ body; at most 16
        // accumulators.
        let n = unsafe {
            if left >= 32 {
                values_queries::<8, 2>(w, w_stride, lens, r, dim, c, o);
                32
            } else if left >= 16 {
                values_queries::<4, 4>(w, w_stride, lens, r, dim, c, o);
                16
            } else if left >= 8 {
                values_queries::<2, 8>(w, w_stride, lens, r, dim, c, o);
                8
            } else {
                values_queries::<1, 16>(w, w_stride, lens, r, dim, c, o);
                4
            }
        };
        c += n;
    }
    for (i, &len) in lens.iter().enumerate() {
        let weights = &weights[i * w_stride..i * w_stride + len];
        for col in body..dim {
            let mut acc = 0.0f32;
            for (j, &p) in weights.iter().enumerate() {
                acc = p.mul_add(super::f16::widen1(rows[j * dim + col].to_bits()), acc);
            }
            out[i * dim + col] = acc;
        }
    }
}
