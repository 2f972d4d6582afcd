//! The CPU backend's matrix products: activations converted to the weight format's partner type
//! (and prepared for the matrix-matrix kernel) once per product, then bands of weight rows — or,
//! for a long prompt, chunks of tokens — across the pool.

use oxibonsai_formats::kernels::Packed;
use rayon::prelude::*;

use super::pool::{rows_each, tokens_per_task};
use super::{CpuBackend, CpuScratch, CpuWeight};
use crate::backend::{grown, Backend};

/// Tokens per parallel task of a long prompt's product (at least two tasks of this many tokens:
/// every row of the matrix for a chunk of tokens, instead of bands of rows for every token).
const TOKENS_PER_TASK: usize = 64;

/// Weight rows per parallel task: enough to amortize the task, few enough to balance 2+ threads
/// on the smallest matrices, and small enough that a band stays in cache across a batch's tokens.
pub(super) const ROWS_PER_TASK: usize = 32;

/// The repacked rows of a product `matmul_packed` runs (all of them are repacked alike).
fn packed_of(w: &CpuWeight) -> &Packed {
    w.packed
        .as_ref()
        .expect("matmul_packed: every product shares the first one's packed layout")
}

/// Products of several tokens by bands of `ROWS_PER_TASK` rows, for one or several matrices
/// (each with its `[token][n_out]` results): `product(w, first_row, n_rows, results)` fills one
/// band's `[token][ROWS_PER_TASK]` results (each band's rows are read once for every token); the
/// bands of all the matrices run in one parallel pass into `banded`, and their rows are then
/// gathered into the results. Runs on the caller's pool.
fn banded_products(
    banded: &mut Vec<f32>,
    n_tokens: usize,
    products: &mut [(&CpuWeight, &mut [f32])],
    product: impl Fn(&CpuWeight, usize, usize, &mut [f32]) + Sync,
) {
    let band_len = n_tokens * ROWS_PER_TASK;
    let n_bands: usize = products
        .iter()
        .map(|(w, _)| w.n_out.div_ceil(ROWS_PER_TASK))
        .sum();
    let banded = grown(banded, n_bands * band_len);
    {
        let products = &*products;
        banded
            .par_chunks_mut(band_len)
            .enumerate()
            .for_each(|(mut band, results)| {
                for (w, _) in products {
                    let here = w.n_out.div_ceil(ROWS_PER_TASK);
                    if band < here {
                        let first = band * ROWS_PER_TASK;
                        product(w, first, ROWS_PER_TASK.min(w.n_out - first), results);
                        return;
                    }
                    band -= here;
                }
            });
    }
    let mut bands = &banded[..];
    for (w, out) in products.iter_mut() {
        let rows = w.n_out;
        let (mine, rest) = bands.split_at(rows.div_ceil(ROWS_PER_TASK) * band_len);
        bands = rest;
        rows_each(out, rows, |t, row| {
            for (band, dst) in row.chunks_mut(ROWS_PER_TASK).enumerate() {
                let src = &mine[band * band_len + t * ROWS_PER_TASK..];
                dst.copy_from_slice(&src[..dst.len()]);
            }
        });
    }
}

impl CpuBackend {
    /// format and row length): the activations are converted and prepared once, then one kernel
    /// serves every token count, so a row's result does not depend on how many tokens share the
    /// product (nor on which matrices are computed together).
    fn matmul_packed(
        &self,
        products: &mut [(&CpuWeight, &mut [f32])],
        x: &[f32],
        n_tokens: usize,
        scratch: &mut CpuScratch,
    ) {
        let Some((first, _)) = products.first() else {
            return;
        };
        let (w, kernels) = (*first, &self.kernels);
        let packed = packed_of(w);
        let prb = w.partner_row_bytes;
        let stride = kernels.packed_prepared_bytes(packed);
        let quantized = grown(&mut scratch.quantized, n_tokens * prb);
        let prepared = grown(&mut scratch.prepared, n_tokens * stride);
        let banded = &mut scratch.banded;
        self.pool.install(|| {
            quantized
                .par_chunks_mut(prb)
                .zip(prepared.par_chunks_mut(stride))
                .zip(x.par_chunks(w.n_in))
                .with_min_len(tokens_per_task(n_tokens))
                .for_each(|((q, p), row)| {
                    kernels.quantize_activation(w.partner, row, q);
                    kernels.packed_prepare(packed, q, p);
                });
            let prepared = &*prepared;
            if let [(_, out)] = products {
                if n_tokens == 1 {
                    // One matrix, one token: the bands write their rows in place.
                    out.par_chunks_mut(ROWS_PER_TASK)
                        .enumerate()
                        .for_each(|(band, chunk)| {
                            let n = chunk.len();
                            kernels.packed_gemm(
                                packed,
                                band * ROWS_PER_TASK,
                                n,
                                prepared,
                                1,
                                chunk,
                                n,
                            );
                        });
                    return;
                }
            }
            if n_tokens >= 2 * TOKENS_PER_TASK {
                // A long prompt: chunks of tokens across the threads, each chunk through every
                // row, written in place (its activations stay in cache while the weights stream
                // by once per chunk; no band buffer to gather from).
                let n_chunks = n_tokens
                    .div_ceil(TOKENS_PER_TASK)
                    .next_multiple_of(rayon::current_num_threads());
                let chunk = n_tokens.div_ceil(n_chunks);
                for (w, out) in products.iter_mut() {
                    let packed = packed_of(w);
                    out.par_chunks_mut(chunk * w.n_out)
                        .zip(prepared.par_chunks(chunk * stride))
                        .for_each(|(out, prepared)| {
                            let n = out.len() / w.n_out;
                            kernels.packed_gemm(packed, 0, w.n_out, prepared, n, out, w.n_out);
                        });
                }
                return;
            }
            banded_products(banded, n_tokens, products, |w, first, n_rows, results| {
                kernels.packed_gemm(
                    packed_of(w),
                    first,
                    n_rows,
                    prepared,
                    n_tokens,
                    results,
                    ROWS_PER_TASK,
                )
            });
        });
    }

    /// [`crate::Backend::matmul`].
    pub(super) fn matmul_one(
        &self,
        w: &CpuWeight,
        x: &[f32],
        n_tokens: usize,
        out: &mut [f32],
        scratch: &mut CpuScratch,
    ) {
        debug_assert_eq!(x.len(), n_tokens * w.n_in);
        debug_assert_eq!(out.len(), n_tokens * w.n_out);
        if w.packed.is_some() {
            return self.matmul_packed(&mut [(w, out)], x, n_tokens, scratch);
        }
        let prb = w.partner_row_bytes;
        let quantized = grown(&mut scratch.quantized, n_tokens * prb);
        let kernels = &self.kernels;
        let rb = w.row_bytes;
        let data = w.data();
        self.pool.install(|| {
            quantized
                .par_chunks_mut(prb)
                .zip(x.par_chunks(w.n_in))
                .with_min_len(tokens_per_task(n_tokens))
                .for_each(|(q, row)| kernels.quantize_activation(w.partner, row, q));
            let quantized = &*quantized;
            if n_tokens == 1 {
                out.par_chunks_mut(ROWS_PER_TASK)
                    .enumerate()
                    .for_each(|(band, chunk)| {
                        let rows = &data[band * ROWS_PER_TASK * rb..];
                        kernels.gemv(w.format, rows, rb, quantized, chunk);
                    });
            } else if let Some(stride) = kernels.gemm_prepared_bytes(w.format, w.n_in) {
                // The matrix-matrix kernel: activations prepared once per product, each band's
                // rows decoded once for every token.
                let prepared = grown(&mut scratch.prepared, n_tokens * stride);
                prepared
                    .par_chunks_mut(stride)
                    .zip(quantized.par_chunks(prb))
                    .with_min_len(tokens_per_task(n_tokens))
                    .for_each(|(dst, q)| kernels.gemm_prepare(w.format, w.n_in, q, dst));
                let prepared = &*prepared;
                banded_products(
                    &mut scratch.banded,
                    n_tokens,
                    &mut [(w, out)],
                    |w, first, n_rows, results| {
                        kernels.gemm(
                            w.format,
                            w.n_in,
                            &data[first * rb..(first + n_rows) * rb],
                            n_rows,
                            prepared,
                            n_tokens,
                            results,
                            ROWS_PER_TASK,
                        )
                    },
                );
            } else {
                banded_products(
                    &mut scratch.banded,
                    n_tokens,
                    &mut [(w, out)],
                    |w, first, n_rows, results| {
                        for t in 0..n_tokens {
                            kernels.gemv(
                                w.format,
                                &data[first * rb..],
                                rb,
                                &quantized[t * prb..(t + 1) * prb],
                                &mut results[t * ROWS_PER_TASK..t * ROWS_PER_TASK + n_rows],
                            );
                        }
                    },
                );
            }
        });
    }

    /// [`crate::Backend::matmuls`].
    pub(super) fn matmul_many(
        &self,
        products: &mut [(&CpuWeight, &mut [f32])],
        x: &[f32],
        n_tokens: usize,
        scratch: &mut CpuScratch,
    ) {
        // Repacked matrices of one format and row length share the prepared activations and
        // run as one parallel pass; anything else goes one product at a time.
        let plan = |w: &CpuWeight| {
            w.packed
                .as_ref()
                .map(|p| (p.plan().kind(), p.plan().n_in()))
        };
        let shared = products
            .first()
            .and_then(|(w, _)| plan(w))
            .is_some_and(|first| products.iter().all(|(w, _)| plan(w) == Some(first)));
        if shared {
            return self.matmul_packed(products, x, n_tokens, scratch);
        }
        for (w, out) in products.iter_mut() {
            self.matmul(w, x, n_tokens, out, scratch);
        }
    }
}
