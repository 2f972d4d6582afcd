//! Attention's several-query kernels: their function-pointer types, the length checks every
//! tier runs before its kernel, and the scalar twins (the reference for the fast ones, and the
//! path of the tiers without a several-query kernel), and the weighted sums over value rows of a
//! block format (a quantized KV cache's values, read in place).

use half::f16;

use super::float::weighted_sum_scalar;
use crate::Format;

/// The widest head the several-query scores kernels take (their widened queries live on the
/// stack); wider heads go one query at a time through `gemv`.
pub(crate) const ATTENTION_WIDE_DIM: usize = 2048;

/// `out[i·out_stride + j] = Σ_d queries[i·dim + d] · keys[j·dim + d]` for every query `i`
/// (`lens.len()` of them) and key `j < lens[i]`: attention's scores on the f16 cache.
pub type ScoresFn = fn(
    keys: &[f16],
    queries: &[f16],
    dim: usize,
    lens: &[usize],
    out: &mut [f32],
    out_stride: usize,
);

/// `out[i·dim + c] = Σ_{j < lens[i]} weights[i·w_stride + j] · rows[j·dim + c]` with `dim =
/// out.len() / lens.len()`: attention's weighted sums of f16 value rows for several queries.
pub type ValuesFn =
    fn(weights: &[f32], w_stride: usize, lens: &[usize], rows: &[f16], out: &mut [f32]);

/// The lengths every `attention_scores` reads and writes, checked before any kernel runs
/// (a caller's bug otherwise).
pub(crate) fn check_attention_scores(
    keys: &[f16],
    queries: &[f16],
    dim: usize,
    lens: &[usize],
    out: &[f32],
    out_stride: usize,
) {
    let n_keys = lens.iter().copied().max().unwrap_or(0);
    assert!(
        queries.len() >= lens.len() * dim && keys.len() >= n_keys * dim,
        "attention_scores: {} queries and {n_keys} keys of {dim} values asked from {} and {}",
        lens.len(),
        queries.len(),
        keys.len()
    );
    check_query_rows("attention_scores", "scores", lens, out_stride, out.len());
}

/// Row `i` of a buffer of `len` values, `stride` apart, holds `lens[i]` values for each query
/// (a caller's bug otherwise: `what` names the kernel, `holds` the buffer's values).
fn check_query_rows(what: &str, holds: &str, lens: &[usize], stride: usize, len: usize) {
    for (i, &n) in lens.iter().enumerate() {
        assert!(
            i * stride + n <= len,
            "{what}: query {i}'s {n} {holds} do not fit"
        );
    }
}

/// The lengths every `attention_values` reads and writes (see [`check_attention_scores`]).
pub(crate) fn check_attention_values(
    weights: &[f32],
    w_stride: usize,
    lens: &[usize],
    rows: &[f16],
    out: &[f32],
) {
    let n_keys = lens.iter().copied().max().unwrap_or(0);
    let dim = if lens.is_empty() {
        0
    } else {
        out.len() / lens.len()
    };
    assert!(
        out.len() == lens.len() * dim && rows.len() >= n_keys * dim,
        "attention_values: {} queries of {dim} values over {n_keys} rows asked from {} values",
        lens.len(),
        rows.len()
    );
    check_query_rows("attention_values", "weights", lens, w_stride, weights.len());
}

/// The scalar scores (each dot summed in f64): the reference for the fast ones.
pub fn attention_scores_scalar(
    keys: &[f16],
    queries: &[f16],
    dim: usize,
    lens: &[usize],
    out: &mut [f32],
    out_stride: usize,
) {
    check_attention_scores(keys, queries, dim, lens, out, out_stride);
    for (i, &len) in lens.iter().enumerate() {
        let q = &queries[i * dim..(i + 1) * dim];
        for (j, o) in out[i * out_stride..i * out_stride + len]
            .iter_mut()
            .enumerate()
        {
            let k = &keys[j * dim..(j + 1) * dim];
            let dot: f64 = q
                .iter()
                .zip(k)
                .map(|(a, b)| f64::from(a.to_f32()) * f64::from(b.to_f32()))
                .sum();
            *o = dot as f32;
        }
    }
}

/// The scalar weighted sums of several queries: the reference for the fast ones.
pub fn attention_values_scalar(
    weights: &[f32],
    w_stride: usize,
    lens: &[usize],
    rows: &[f16],
    out: &mut [f32],
) {
    values_per_query(weights, w_stride, lens, rows, out, weighted_sum_scalar)
}

/// Several queries' weighted sums, each through `one` (a one-query weighted sum): the scalar
/// twin, and the tiers without a several-query kernel.
pub(crate) fn values_per_query(
    weights: &[f32],
    w_stride: usize,
    lens: &[usize],
    rows: &[f16],
    out: &mut [f32],
    one: impl Fn(&[f32], &[f16], &mut [f32]),
) {
    check_attention_values(weights, w_stride, lens, rows, out);
    let Some(dim) = out.len().checked_div(lens.len()) else {
        return;
    };
    for (i, (&len, o)) in lens
        .iter()
        .zip(out.chunks_exact_mut(dim.max(1)))
        .enumerate()
    {
        one(
            &weights[i * w_stride..i * w_stride + len],
            rows,
            &mut o[..dim],
        );
    }
}

/// The safe entries `attention_scores` / `attention_values` of a tier whose module `$attention`
/// has `unsafe` kernels of those names (taking any `dim` up to [`ATTENTION_WIDE_DIM`]): the
/// shared checks, then the kernel.
macro_rules! attention_entries {
    ($attention:ident) => {
        /// Several queries' attention scores (`Kernels::attention_scores`).
        fn attention_scores(
            keys: &[half::f16],
            queries: &[half::f16],
            dim: usize,
            lens: &[usize],
            out: &mut [f32],
            out_stride: usize,
        ) {
            $crate::kernels::check_attention_scores(keys, queries, dim, lens, out, out_stride);
            if dim == 0 {
                for (i, &len) in lens.iter().enumerate() {
                    out[i * out_stride..i * out_stride + len].fill(0.0);
                }
                return;
            }
            assert!(
                dim <= $crate::kernels::ATTENTION_WIDE_DIM,
                "attention_scores: heads of {dim} values are wider than the kernel takes"
            );
            // SAFETY: registered only through `Kernels::new` for this tier, which checked the
            // CPU; the lengths were just checked.
            unsafe { $attention::attention_scores(keys, queries, dim, lens, out, out_stride) }
        }

        /// Several queries' weighted sums of value rows (`Kernels::attention_values`).
        fn attention_values(
            weights: &[f32],
            w_stride: usize,
            lens: &[usize],
            rows: &[half::f16],
            out: &mut [f32],
        ) {
            $crate::kernels::check_attention_values(weights, w_stride, lens, rows, out);
            // SAFETY: as above.
            unsafe { $attention::attention_values(weights, w_stride, lens, rows, out) }
        }
    };
}
#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
pub(crate) use attention_entries;

/// `out[i·dim + c] = Σ_{j < lens[i]} weights[i·w_stride + j] · value(row j)[c]` over rows of a
/// block format stored `row_bytes` apart (`dim = out.len() / lens.len()` values each, whole
/// blocks): attention's weighted sums read straight from a quantized value cache.
pub type BlockValuesFn = fn(
    weights: &[f32],
    w_stride: usize,
    lens: &[usize],
    rows: &[u8],
    row_bytes: usize,
    out: &mut [f32],
);

/// The lengths every `attention_values_blocks` reads and writes (a caller's bug otherwise);
/// returns `dim`.
pub(crate) fn check_block_values(
    f: &Format,
    weights: &[f32],
    w_stride: usize,
    lens: &[usize],
    rows: &[u8],
    row_bytes: usize,
    out: &[f32],
) -> usize {
    let n_keys = lens.iter().copied().max().unwrap_or(0);
    let dim = row_bytes / f.block_bytes * f.block_elems;
    assert!(
        row_bytes.is_multiple_of(f.block_bytes)
            && dim <= ATTENTION_WIDE_DIM
            && out.len() == lens.len() * dim
            && rows.len() >= n_keys * row_bytes,
        "attention_values_blocks {}: {} queries of rows of {row_bytes} bytes over {n_keys} rows \
         asked from {} bytes into {} values",
        f.name,
        lens.len(),
        rows.len(),
        out.len()
    );
    check_query_rows(
        "attention_values_blocks",
        "weights",
        lens,
        w_stride,
        weights.len(),
    );
    dim
}

/// The scalar weighted sums over block-format value rows: each row dequantized once by the
/// registry (as the reference's flash attention widens a value row) and added into every
/// query's sum in key order. The reference for the fast ones, and the path of formats without one.
pub fn attention_values_blocks_scalar(
    f: &Format,
    weights: &[f32],
    w_stride: usize,
    lens: &[usize],
    rows: &[u8],
    row_bytes: usize,
    out: &mut [f32],
) {
    let dim = check_block_values(f, weights, w_stride, lens, rows, row_bytes, out);
    out.fill(0.0);
    let mut widened = [0f32; ATTENTION_WIDE_DIM];
    let widened = &mut widened[..dim];
    let n_keys = lens.iter().copied().max().unwrap_or(0);
    for j in 0..n_keys {
        (f.dequantize)(&rows[j * row_bytes..(j + 1) * row_bytes], widened);
        for (i, o) in out.chunks_exact_mut(dim.max(1)).enumerate() {
            if j < lens[i] {
                let p = weights[i * w_stride + j];
                for (acc, &v) in o.iter_mut().zip(widened.iter()) {
                    *acc += p * v;
                }
            }
        }
    }
}

/// The safe `BlockValuesFn` of format `$kind` around a tier's `unsafe` kernel `$kernel` (same
/// arguments): the shared checks, then the kernel.
macro_rules! block_values_entry {
    ($kind:ident, $kernel:path) => {{
        fn wrapper(
            weights: &[f32],
            w_stride: usize,
            lens: &[usize],
            rows: &[u8],
            row_bytes: usize,
            out: &mut [f32],
        ) {
            $crate::kernels::check_block_values(
                $crate::format($crate::FormatKind::$kind),
                weights,
                w_stride,
                lens,
                rows,
                row_bytes,
                out,
            );
            // SAFETY: registered only in its tier's table, which `Kernels::new` folds in only on
            // a CPU that has the tier; the lengths were just checked against the contract the
            // kernel reads and writes within.
            unsafe { $kernel(weights, w_stride, lens, rows, row_bytes, out) }
        }
        wrapper as $crate::kernels::BlockValuesFn
    }};
}
#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
pub(crate) use block_values_entry;
