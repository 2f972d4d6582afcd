//! Attention for several queries at once (the query heads that share a key/value head, and the
//! tokens of a prompt): each key and value row of the f16 cache is widened once for all of them.
//!
//! Scores: a query's dot with a key is a chain of fused multiply-adds over the 16-lane chunks of
//! the head (in order), then one fixed reduction tree of the 16 lanes (lanes `l + 8`, then
//! `l + 4`, `l + 2`, `l + 1` added in); the trees of 16 keys run together as a transposed
//! reduction (shuffles between the keys' vectors), which computes every key's tree exactly as
//! alone. So a score depends only on its query and key — not on which queries or keys shared the
//! call — and a token's attention is the same alone or in a batch.
//!
//! Values: each output column is `Σ_j p_j · v_j` accumulated in key order by fused
//! multiply-adds from zero; one query is the tier's `weighted_sum`.

use std::arch::x86_64::*;

use super::lanes_left;
use half::f16;

/// Queries per pass over the keys (their accumulators stay in registers).
const QUERIES: usize = 8;

/// Lane `j` of the result = the reduction tree of `p[j]` (see the module notes).
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")]
fn reduce16(p: &[__m512; 16]) -> __m512 {
    // Lanes l and l + 8 of two keys: [y(a) | y(b)], y = x[0..8] + x[8..16].
    let b: [__m512; 8] = core::array::from_fn(|m| {
        let (a, c) = (p[2 * m], p[2 * m + 1]);
        _mm512_add_ps(
            _mm512_shuffle_f32x4::<0b01_00_01_00>(a, c),
            _mm512_shuffle_f32x4::<0b11_10_11_10>(a, c),
        )
    });
    // 128-bit lane k of c[m] = z(key 4m + k), z = y[0..4] + y[4..8].
    let c: [__m512; 4] = core::array::from_fn(|m| {
        let (a, d) = (b[2 * m], b[2 * m + 1]);
        _mm512_add_ps(
            _mm512_shuffle_f32x4::<0b10_00_10_00>(a, d),
            _mm512_shuffle_f32x4::<0b11_01_11_01>(a, d),
        )
    });
    // Lane k of d[m] = [w(8m + k), w(8m + 4 + k)], w = z[0..2] + z[2..4].
    let d: [__m512; 2] = core::array::from_fn(|m| {
        let (a, e) = (c[2 * m], c[2 * m + 1]);
        _mm512_add_ps(
            _mm512_shuffle_ps::<0b01_00_01_00>(a, e),
            _mm512_shuffle_ps::<0b11_10_11_10>(a, e),
        )
    });
    // Lane 4k + r = key k + 4r, s = w[0] + w[1]; then into key order.
    let e = _mm512_add_ps(
        _mm512_shuffle_ps::<0b10_00_10_00>(d[0], d[1]),
        _mm512_shuffle_ps::<0b11_01_11_01>(d[0], d[1]),
    );
    let order = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
    _mm512_permutexvar_ps(order, e)
}

/// The scores of `Q` queries (widened, `pitch` floats apart) against the keys below the largest
/// of `lens`, into `out[i·out_stride + j]` for `j < lens[i]`.
///
/// # Safety
/// AVX-512 F/BW/VL/DQ + F16C; `keys` holds `max(lens)` rows of `dim` values, `queries` `Q` rows
/// of `pitch ≥ 16·⌈dim / 16⌉` floats (zero past `dim`), `out` row `i` takes `lens[i]` values.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")]
unsafe fn scores_pass<const Q: usize>(
    keys: *const f16,
    dim: usize,
    queries: *const f32,
    pitch: usize,
    lens: &[usize],
    out: *mut f32,
    out_stride: usize,
) {
    let chunks = dim.div_ceil(16);
    let last = lanes_left(dim - 16 * (chunks - 1));
    let n_keys = lens.iter().copied().max().unwrap_or(0);
    let mut partial = [[_mm512_setzero_ps(); 16]; Q];
    let mut block = 0;
    while block < n_keys {
        let n = 16.min(n_keys - block);
        // Entries past `n` keep an earlier block's sums: each lane of the reduction reads only its
        // own key's vector, and those lanes are not stored.
        for jj in 0..n {
            // SAFETY: key block + jj < max(lens) lies inside `keys`.
            let k = unsafe { keys.add((block + jj) * dim) };
            let mut acc = [_mm512_setzero_ps(); Q];
            for c in 0..chunks {
                let mask = if c + 1 == chunks { last } else { u16::MAX };
                // SAFETY: the masked lanes are the key's values 16c.. below `dim`.
                let kc = _mm512_cvtph_ps(unsafe {
                    _mm256_maskz_loadu_epi16(mask, k.add(16 * c).cast())
                });
                for (i, acc) in acc.iter_mut().enumerate() {
                    // SAFETY: query i's widened row holds `pitch ≥ 16·chunks` floats.
                    let q = unsafe { _mm512_loadu_ps(queries.add(i * pitch + 16 * c)) };
                    *acc = _mm512_fmadd_ps(q, kc, *acc);
                }
            }
            for (p, acc) in partial.iter_mut().zip(acc) {
                p[jj] = acc;
            }
        }
        for (i, p) in partial.iter().enumerate() {
            if lens[i] > block {
                let sums = reduce16(p);
                // SAFETY: out row i takes lens[i] values; the mask stops there.
                unsafe {
                    _mm512_mask_storeu_ps(
                        out.add(i * out_stride + block),
                        lanes_left(lens[i] - block),
                        sums,
                    )
                };
            }
        }
        block += 16;
    }
}

/// Floats of widened queries on the stack: `QUERIES` heads of 256, or fewer wider ones, up to one
/// head of `ATTENTION_WIDE_DIM` (wider ones take the one-query kernels: `Kernels::attention_scores`).
const WIDE: usize = crate::kernels::ATTENTION_WIDE_DIM;

/// `out[i·out_stride + j] = Σ_d queries[i·dim + d] · keys[j·dim + d]` for `j < lens[i]`.
///
/// # Safety
/// AVX-512 F/BW/VL/DQ + F16C; `1 ≤ dim ≤ ATTENTION_WIDE_DIM`; `queries` holds `lens.len()` rows
/// of `dim`, `keys` `max(lens)` rows of `dim`, `out` row `i` (at `i·out_stride`) `lens[i]` values
/// (checked by the caller).
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")]
pub(crate) unsafe fn attention_scores(
    keys: &[f16],
    queries: &[f16],
    dim: usize,
    lens: &[usize],
    out: &mut [f32],
    out_stride: usize,
) {
    let chunks = dim.div_ceil(16);
    let pitch = 16 * chunks;
    let last = lanes_left(dim - 16 * (chunks - 1));
    let per_pass = (WIDE / pitch).min(QUERIES);
    // Not zeroed (8 KiB a call): each pass writes the whole `pitch` of every query it reads.
    let mut wide = [core::mem::MaybeUninit::<f32>::uninit(); WIDE];
    let mut first = 0;
    while first < lens.len() {
        let n = per_pass.min(lens.len() - first);
        for i in 0..n {
            let q = queries[(first + i) * dim..(first + i + 1) * dim].as_ptr();
            for c in 0..chunks {
                let mask = if c + 1 == chunks { last } else { u16::MAX };
                // SAFETY: the masked lanes are the query's values 16c.. below `dim`; the store
                // (zeros past `dim`) stays inside query i's `pitch` floats of the buffer, as
                // `n · pitch ≤ WIDE`.
                unsafe {
                    let v = _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(mask, q.add(16 * c).cast()));
                    _mm512_storeu_ps(wide.as_mut_ptr().add(i * pitch + 16 * c).cast(), v);
                }
            }
        }
        let lens = &lens[first..first + n];
        // SAFETY: `n` widened queries of `pitch` floats, all written just above (zero past
        // `dim`); lengths as the contract.
        unsafe {
            let (k, w, o) = (
                keys.as_ptr(),
                wide.as_ptr().cast::<f32>(),
                out.as_mut_ptr().add(first * out_stride),
            );
            match n {
                1 => scores_pass::<1>(k, dim, w, pitch, lens, o, out_stride),
                2 => scores_pass::<2>(k, dim, w, pitch, lens, o, out_stride),
                3 => scores_pass::<3>(k, dim, w, pitch, lens, o, out_stride),
                4 => scores_pass::<4>(k, dim, w, pitch, lens, o, out_stride),
                5 => scores_pass::<5>(k, dim, w, pitch, lens, o, out_stride),
                6 => scores_pass::<6>(k, dim, w, pitch, lens, o, out_stride),
                7 => scores_pass::<7>(k, dim, w, pitch, lens, o, out_stride),
                _ => scores_pass::<8>(k, dim, w, pitch, lens, o, out_stride),
            }
        }
        first += n;
    }
}

/// `out[i·dim + c] += Σ_{j < lens[i]} weights[i·w_stride + j] · rows[j·dim + c]` for the `n`
/// columns from `c0` (`U` vectors of 16), for the first `present` of `G` queries (the others'
/// `lens` are 0 and nothing of theirs is written).
///
/// # Safety
/// AVX-512 F/BW/VL/DQ + F16C; `rows` holds `max(lens)` rows of `dim`, `weights` row `i` `lens[i]`
/// values, `out` `G` rows of `dim`; columns `c0..c0 + n` lie inside `dim`.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")]
#[allow(clippy::too_many_arguments)]
unsafe fn values_pass<const U: usize, const G: usize>(
    weights: *const f32,
    w_stride: usize,
    lens: &[usize; G],
    present: usize,
    rows: *const f16,
    dim: usize,
    c0: usize,
    n: usize,
    out: *mut f32,
) {
    let masks: [u16; U] = core::array::from_fn(|u| lanes_left(n.saturating_sub(16 * u)));
    let n_keys = lens.iter().copied().max().unwrap_or(0);
    let mut acc = [[_mm512_setzero_ps(); U]; G];
    for j in 0..n_keys {
        // SAFETY: row j < max(lens), columns below c0 + n.
        let v: [__m512; U] = core::array::from_fn(|u| {
            _mm512_cvtph_ps(unsafe {
                _mm256_maskz_loadu_epi16(masks[u], rows.add(j * dim + c0 + 16 * u).cast())
            })
        });
        for (g, acc) in acc.iter_mut().enumerate() {
            if j < lens[g] {
                // SAFETY: weights row g holds lens[g] > j values.
                let p = _mm512_set1_ps(unsafe { *weights.add(g * w_stride + j) });
                for (a, v) in acc.iter_mut().zip(&v) {
                    *a = _mm512_fmadd_ps(p, *v, *a);
                }
            }
        }
    }
    for (g, acc) in acc.iter().enumerate().take(present) {
        for (u, a) in acc.iter().enumerate() {
            // SAFETY: out row g, columns below c0 + n.
            unsafe { _mm512_mask_storeu_ps(out.add(g * dim + c0 + 16 * u), masks[u], *a) };
        }
    }
}

/// Runs [`values_pass`] over `lens.len()` queries, `G` at a time.
///
/// # Safety
/// As [`values_pass`] for every query.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")]
#[allow(clippy::too_many_arguments)]
unsafe fn values_queries<const U: usize, const G: usize>(
    weights: *const f32,
    w_stride: usize,
    lens: &[usize],
    rows: *const f16,
    dim: usize,
    c0: usize,
    n: usize,
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
                n,
                out.add(first * dim),
            )
        };
        first += here;
    }
}

/// `out[i·dim + c] = Σ_{j < lens[i]} weights[i·w_stride + j] · rows[j·dim + c]`, `dim =
/// out.len() / lens.len()`: the value side of attention for several queries.
///
/// # Safety
/// AVX-512 F/BW/VL/DQ + F16C; `rows` holds `max(lens)` rows of `dim`, `weights` row `i` (at
/// `i·w_stride`) `lens[i]` values (checked by the caller).
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")]
pub(crate) unsafe fn attention_values(
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
    let (w, r, o) = (weights.as_ptr(), rows.as_ptr(), out.as_mut_ptr());
    let mut c = 0;
    while c < dim {
        let n = (dim - c).min(128);
        // SAFETY: as the function's contract, for columns c..c+n; at most 16 accumulators.
        unsafe {
            match n.div_ceil(16) {
                1 => values_queries::<1, 16>(w, w_stride, lens, r, dim, c, n, o),
                2 => values_queries::<2, 8>(w, w_stride, lens, r, dim, c, n, o),
                3 | 4 => values_queries::<4, 4>(w, w_stride, lens, r, dim, c, n, o),
                5 | 6 => values_queries::<6, 2>(w, w_stride, lens, r, dim, c, n, o),
                _ => values_queries::<8, 2>(w, w_stride, lens, r, dim, c, n, o),
            }
        }
        c += n;
    }
}
