//! The CPU backend: weights stay in the mmap, or — where the tier has a packed kernel for their
//! format — are repacked once at load into that kernel's layout, which then replaces the mapped
//! rows (their pages are released; `OXIBONSAI_PACK=0` keeps every weight in the mmap). Each
//! matrix product converts the activations to the weight format's partner type once and runs the
//! kernels of the instruction-set tier chosen at construction (`OXIBONSAI_ISA` or the best this
//! CPU has), bands of weight rows split across a persistent rayon pool. Every tier computes
//! every format: where a tier has no fast kernel for a format, the scalar reference runs.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use half::f16;
use half::slice::HalfFloatSliceExt;
use oxibonsai_formats::kernels::{Isa, Kernels, Packed};
use oxibonsai_formats::{format, Format};
use oxibonsai_gguf::{GgufFile, TensorInfo};
use rayon::prelude::*;

use super::{grown, AttentionShape, Backend, Segment};
use crate::config::{ModelConfig, RopeStyle};
use crate::error::EngineError;
use crate::kv_cache::LayerCache;

/// A weight matrix: read in place from the mapped file, or repacked for the tier's kernel.
pub struct CpuWeight {
    file: Arc<GgufFile>,
    tensor: TensorInfo,
    format: &'static Format,
    partner: &'static Format,
    n_in: usize,
    n_out: usize,
    row_bytes: usize,
    partner_row_bytes: usize,
    /// The repacked rows, which replace the mapped ones (never read once this is set).
    packed: Option<Packed>,
}

impl CpuWeight {
    /// Whether the rows were repacked at load.
    pub fn is_packed(&self) -> bool {
        self.packed.is_some()
    }

    fn data(&self) -> &[u8] {
        self.file.tensor_data(&self.tensor)
    }
    fn row(&self, r: usize) -> &[u8] {
        &self.data()[r * self.row_bytes..(r + 1) * self.row_bytes]
    }
}

#[derive(Default)]
pub struct CpuScratch {
    /// Activations in the partner format, `[n_tokens][partner_row_bytes]`.
    quantized: Vec<u8>,
    /// Activations prepared for the matrix-matrix kernel, `[n_tokens][prepared bytes]`.
    prepared: Vec<u8>,
    /// Products of several tokens by bands of rows, `[band][n_tokens][ROWS_PER_TASK]`.
    banded: Vec<f32>,
    /// Attention scores, `[key head][row][query head of the group][position]`.
    scores: Vec<f32>,
    /// The segment of each row of an attention call.
    row_segment: Vec<usize>,
    /// Attention's f16 queries and its results before normalization, per key head,
    /// `[key head][row][query head of the group][dim]`.
    queries: Vec<f16>,
    attended: Vec<f32>,
}

pub struct CpuBackend {
    pool: rayon::ThreadPool,
    kernels: Kernels,
    /// Repack weights at load where the tier has a packed kernel (`OXIBONSAI_PACK=0`: never).
    pack: bool,
}

/// The largest head dimension (`check_config` refuses more; RoPE rotates at most the head): a
/// bound on the attention scratch a file can ask for.
pub const MAX_HEAD_DIM: usize = 1024;

/// Rows of a prompt per attention task (each key and value row is widened once for all of their
/// query heads of one key head).
const ATTENTION_ROWS: usize = 4;

/// One attention task as the parallel pass hands it out: its index, then its results, scores and
/// queries.
type AttentionTask<'a> = (usize, ((&'a mut [f32], &'a mut [f32]), &'a mut [f16]));

/// The most query heads per key head (`check_config` refuses more).
pub const MAX_GROUP: usize = 64;

/// The most queries of one attention kernel call: `ATTENTION_ROWS` rows × a key head's group.
const MAX_ATTENTION_QUERIES: usize = ATTENTION_ROWS * MAX_GROUP;

/// Element-wise operations (norms, RoPE, SwiGLU, residual adds) on fewer values than this run on
/// the calling thread: a parallel pass costs more than it saves on one decode token's rows.
/// Every element is computed alike either way, so the results do not depend on it.
const PARALLEL_ELEMENTS: usize = 8192;

/// Rows of one RMS norm step (their sums interleaved).
const NORM_ROWS: usize = 8;

/// Tokens per parallel task of a long prompt's product (at least two tasks of this many tokens:
/// every row of the matrix for a chunk of tokens, instead of bands of rows for every token).
const TOKENS_PER_TASK: usize = 64;

/// Weight rows per parallel task: enough to amortize the task, few enough to balance 2+ threads
/// on the smallest matrices, and small enough that a band stays in cache across a batch's tokens.
const ROWS_PER_TASK: usize = 32;

impl CpuBackend {
    /// `threads = 0` uses the number of CPUs; the tier comes from `OXIBONSAI_ISA` or the CPU.
    pub fn new(threads: usize) -> Result<CpuBackend, EngineError> {
        let isa = Isa::from_env().map_err(|e| EngineError::BadHyperParameter {
            key: "OXIBONSAI_ISA".to_owned(),
            reason: e.to_string(),
        })?;
        CpuBackend::with_isa(threads, isa)
    }

    /// A backend on an explicit tier (an error if this CPU cannot run it).
    pub fn with_isa(threads: usize, isa: Isa) -> Result<CpuBackend, EngineError> {
        let kernels = Kernels::new(isa).ok_or_else(|| EngineError::BadHyperParameter {
            key: "isa".to_owned(),
            reason: format!("this CPU cannot run the {} tier", isa.name()),
        })?;
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .thread_name(|i| format!("oxibonsai-cpu-{i}"))
            .build()
            .map_err(|e| EngineError::BadHyperParameter {
                key: "threads".to_owned(),
                reason: e.to_string(),
            })?;
        let pack = std::env::var("OXIBONSAI_PACK").map_or(true, |v| v.trim() != "0");
        tracing::info!(
            isa = isa.name(),
            threads = pool.current_num_threads(),
            pack,
            "CPU backend"
        );
        Ok(CpuBackend {
            pool,
            kernels,
            pack,
        })
    }

    /// The same backend with weight repacking switched on or off (for weights prepared later).
    pub fn with_packing(mut self, pack: bool) -> CpuBackend {
        self.pack = pack;
        self
    }

    pub fn threads(&self) -> usize {
        self.pool.current_num_threads()
    }

    pub fn isa(&self) -> Isa {
        self.kernels.isa()
    }
}

/// The repacked rows of a product `matmul_packed` runs (all of them are repacked alike).
fn packed_of(w: &CpuWeight) -> &Packed {
    w.packed
        .as_ref()
        .expect("matmul_packed: every product shares the first one's packed layout")
}

/// Keeps `n` more workers (this one first) taking the pool's tasks until `done`. The pass's own
/// thread only ever runs this after the pass, when it returns at once.
fn stay_awake(done: &AtomicBool, n: usize) {
    if n == 0 {
        return;
    }
    rayon::join(
        || {
            while !done.load(Ordering::Acquire) {
                if rayon::yield_now() != Some(rayon::Yield::Executed) {
                    std::hint::spin_loop();
                }
            }
        },
        || stay_awake(done, n - 1),
    );
}

/// `f(i, row i)` over the rows of `dst` (`row` values each, the last maybe shorter): on the
/// calling thread below `PARALLEL_ELEMENTS` values, else across the current pool, several rows a
/// task. Each row is computed alike either way.
fn rows_each<T: Send>(dst: &mut [T], row: usize, f: impl Fn(usize, &mut [T]) + Sync) {
    if dst.len() < PARALLEL_ELEMENTS {
        dst.chunks_mut(row).enumerate().for_each(|(i, d)| f(i, d));
    } else {
        dst.par_chunks_mut(row)
            .with_min_len(PARALLEL_ELEMENTS.div_ceil(row))
            .enumerate()
            .for_each(|(i, d)| f(i, d));
    }
}

/// Tokens per task of an activation pass (conversion to the partner format, preparation): one
/// task per thread — a token is quick, and a task costs about as much.
fn tokens_per_task(n_tokens: usize) -> usize {
    n_tokens.div_ceil(rayon::current_num_threads())
}

/// Sets its flag when dropped.
struct SetOnDrop<'a>(&'a AtomicBool);

impl Drop for SetOnDrop<'_> {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Release);
    }
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
    /// `f(dst row, src row)` over the rows of `dst` (`dst_row` values each) beside those of
    /// `src` (`src_row` each), through [`rows_each`] on the backend's pool.
    fn element_wise<T: Sync>(
        &self,
        dst: &mut [f32],
        dst_row: usize,
        src: &[T],
        src_row: usize,
        f: impl Fn(&mut [f32], &[T]) + Sync,
    ) {
        self.pool.install(|| {
            rows_each(dst, dst_row, |i, d| {
                f(d, &src[i * src_row..((i + 1) * src_row).min(src.len())])
            })
        });
    }

    /// Products of `x` by repacked weights that share one prepared activation layout (same
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
}

impl Backend for CpuBackend {
    type Weight = CpuWeight;
    type Scratch = CpuScratch;

    fn run<R: Send>(&self, work: impl FnOnce() -> R + Send) -> R {
        // The other workers stay awake for the whole pass, taking each parallel operation's tasks
        // as they come (rayon's idle workers otherwise fall asleep between operations, and each
        // wake-up is a futex call and an inter-processor interrupt). `join` keeps the spinners'
        // jobs on the stack: nothing is allocated per pass.
        let done = AtomicBool::new(false);
        let (result, ()) = self.pool.install(|| {
            rayon::join(
                || {
                    // Set when the pass ends, also by unwinding: a panic must not leave the
                    // join waiting for spinners forever.
                    let _done = SetOnDrop(&done);
                    work()
                },
                || stay_awake(&done, rayon::current_num_threads() - 1),
            )
        });
        result
    }

    fn name(&self) -> String {
        format!("cpu ({}, {} threads)", self.isa().name(), self.threads())
    }

    fn check_config(&self, c: &ModelConfig) -> Result<(), EngineError> {
        let key = |suffix: &str| format!("{}.{suffix}", c.arch.name());
        if c.n_group() > MAX_GROUP {
            return Err(EngineError::BadHyperParameter {
                key: key("attention.head_count_kv"),
                reason: format!(
                    "{} query heads per key head exceed {MAX_GROUP}",
                    c.n_group()
                ),
            });
        }
        for (k, d) in [
            ("attention.key_length", c.head_dim),
            ("attention.value_length", c.head_dim_v),
        ] {
            if d > MAX_HEAD_DIM {
                return Err(EngineError::BadHyperParameter {
                    key: key(k),
                    reason: format!("head dimension {d} exceeds {MAX_HEAD_DIM}"),
                });
            }
        }
        Ok(())
    }

    fn prepare(&self, file: &Arc<GgufFile>, tensor: &TensorInfo) -> Result<CpuWeight, EngineError> {
        if tensor.dims.len() != 2 {
            return Err(EngineError::TensorShape {
                name: tensor.name.clone(),
                expected: vec![0, 0],
                found: tensor.dims.clone(),
            });
        }
        let (n_in, n_out) = (tensor.dims[0] as usize, tensor.dims[1] as usize);
        let fmt = tensor.format;
        let partner = format(fmt.partner);
        let row_bytes = fmt
            .bytes_for(n_in as u64)
            .ok_or(EngineError::TensorFormat {
                name: tensor.name.clone(),
                format: fmt.name,
                role: "a matrix (its rows are not whole blocks)",
            })? as usize;
        let partner_row_bytes = partner
            .bytes_for(n_in as u64)
            .ok_or(EngineError::TensorFormat {
                name: tensor.name.clone(),
                format: fmt.name,
                role: "a matrix (its rows do not fit the partner format's blocks)",
            })? as usize;
        if partner.quantize_activation.is_none() {
            return Err(EngineError::TensorFormat {
                name: tensor.name.clone(),
                format: fmt.name,
                role: "a matrix (its partner format has no activation conversion)",
            });
        }
        let plan = self
            .pack
            .then(|| self.kernels.pack_plan(fmt, n_in, n_out))
            .flatten()
            // `matmul`'s bands must be whole groups.
            .filter(|plan| ROWS_PER_TASK.is_multiple_of(plan.group_rows()));
        let packed = plan.map(|plan| {
            let rows = file.tensor_data(tensor);
            let mut packed = Packed::zeroed(plan);
            let gb = plan.group_bytes();
            self.pool.install(|| {
                packed
                    .storage_mut()
                    .par_chunks_mut(gb)
                    .enumerate()
                    .for_each(|(g, dst)| plan.pack_group(g, rows, dst));
            });
            // The packed copy replaces the rows: let their pages go (only a hint; a failure
            // costs memory, not correctness).
            if let Err(e) = file.release_tensor_data(tensor) {
                tracing::debug!(tensor = %tensor.name, error = %e, "madvise failed");
            }
            packed
        });
        Ok(CpuWeight {
            file: Arc::clone(file),
            tensor: tensor.clone(),
            format: fmt,
            partner,
            n_in,
            n_out,
            row_bytes,
            partner_row_bytes,
            packed,
        })
    }

    fn embed(&self, table: &CpuWeight, ids: &[u32], out: &mut [f32]) {
        match &table.packed {
            None => {
                for (row_out, &id) in out.chunks_exact_mut(table.n_in).zip(ids) {
                    (table.format.dequantize)(table.row(id as usize), row_out);
                }
            }
            Some(packed) => {
                // Block by block through a stack buffer: the packed formats' blocks are small.
                let (bb, be) = (table.format.block_bytes, table.format.block_elems);
                let mut block = [0u8; 64];
                assert!(
                    bb <= block.len(),
                    "a packed format with blocks over 64 bytes"
                );
                for (row_out, &id) in out.chunks_exact_mut(table.n_in).zip(ids) {
                    for (b, values) in row_out.chunks_exact_mut(be).enumerate() {
                        packed.unpack_block(id as usize, b, &mut block[..bb]);
                        (table.format.dequantize)(&block[..bb], values);
                    }
                }
            }
        }
    }

    fn matmul(
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

    fn matmuls(
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

    fn rms_norm(&self, x: &[f32], weight: &[f32], eps: f32, out: &mut [f32]) {
        // The reference sums each row's f32 squares in double precision, in order, then scales
        // in f32. Rows go up to `NORM_ROWS` at a time with their sums interleaved: each sum keeps
        // its order (so a row's result does not depend on its neighbours), and the rows' additions
        // overlap instead of waiting on each other.
        let n = weight.len();
        self.element_wise(out, NORM_ROWS * n, x, NORM_ROWS * n, |dst, rows| {
            let mut sums = [0.0f64; NORM_ROWS];
            let sums = &mut sums[..rows.len() / n];
            for i in 0..n {
                for (r, sum) in sums.iter_mut().enumerate() {
                    let v = rows[r * n + i];
                    *sum += f64::from(v * v);
                }
            }
            for ((dst, row), &sum) in dst
                .chunks_exact_mut(n)
                .zip(rows.chunks_exact(n))
                .zip(&*sums)
            {
                let mean = (sum / n as f64) as f32;
                let scale = 1.0 / (mean + eps).sqrt();
                for ((d, &v), &g) in dst.iter_mut().zip(row).zip(weight) {
                    *d = (v * scale) * g;
                }
            }
        });
    }

    fn rope(
        &self,
        x: &mut [f32],
        n_heads: usize,
        head_dim: usize,
        cos_sin: &[(f32, f32)],
        style: RopeStyle,
    ) {
        let n_tokens = x.len() / (n_heads * head_dim);
        let pairs = cos_sin.len() / n_tokens.max(1);
        self.element_wise(x, n_heads * head_dim, cos_sin, pairs, |token, cos_sin| {
            for head in token.chunks_exact_mut(head_dim) {
                for (i, &(c, s)) in cos_sin.iter().enumerate() {
                    let (a, b) = match style {
                        RopeStyle::Adjacent => (2 * i, 2 * i + 1),
                        RopeStyle::NeoX => (i, i + pairs),
                    };
                    let (x0, x1) = (head[a], head[b]);
                    head[a] = x0 * c - x1 * s;
                    head[b] = x0 * s + x1 * c;
                }
            }
        });
    }

    fn store_kv(&self, cache: &mut LayerCache, k: &[f32], v: &[f32], positions: &[usize]) {
        let (hd, hdv, n_ctx) = (cache.head_dim, cache.head_dim_v, cache.n_ctx);
        let (kr, vr) = (cache.n_head_kv * hd, cache.n_head_kv * hdv);
        for (t, &pos) in positions.iter().enumerate() {
            for g in 0..cache.n_head_kv {
                // The slice conversion takes F16C where the CPU has it (a value at a time is
                // a software conversion).
                cache.k[(g * n_ctx + pos) * hd..][..hd]
                    .convert_from_f32_slice(&k[t * kr + g * hd..][..hd]);
                cache.v[(g * n_ctx + pos) * hdv..][..hdv]
                    .convert_from_f32_slice(&v[t * vr + g * hdv..][..hdv]);
            }
        }
    }

    fn attention(
        &self,
        q: &[f32],
        segments: &[Segment<'_>],
        layer: usize,
        positions: &[usize],
        shape: AttentionShape,
        out: &mut [f32],
        scratch: &mut CpuScratch,
    ) {
        let AttentionShape {
            n_head,
            n_head_kv,
            head_dim,
            head_dim_v,
            scale,
        } = shape;
        let n = positions.len();
        let n_group = n_head / n_head_kv;
        let len_max = positions.iter().max().map_or(0, |&p| p + 1);
        let kernels = &self.kernels;
        let CpuScratch {
            scores,
            row_segment,
            queries,
            attended,
            ..
        } = scratch;
        // Which segment each row belongs to.
        row_segment.clear();
        for (i, s) in segments.iter().enumerate() {
            row_segment.extend(std::iter::repeat_n(i, s.len));
        }
        debug_assert_eq!(row_segment.len(), n);
        let row_segment = &*row_segment;
        // One task: `rows` rows × the query heads of one key head. A prompt's rows go a few at a
        // time (each key and value row is then widened once for all their queries); a decode
        // step's one by one (tasks over the key heads and sequences keep the threads busy).
        let rows = if n >= 8 * ATTENTION_ROWS {
            ATTENTION_ROWS
        } else {
            1
        };
        let per_g = n.div_ceil(rows);
        let n_pad = per_g * rows;
        // Queries, scores and results per key head, `[key head][row (padded to whole tasks)]
        // [query head of the group][…]`, so that each task's are one contiguous run. Queries
        // meet the f16 keys in f16, as the reference's attention does.
        let (q_task, s_task, o_task) = (
            rows * n_group * head_dim,
            rows * n_group * len_max,
            rows * n_group * head_dim_v,
        );
        let queries = grown(queries, n_head_kv * per_g * q_task);
        let scores = grown(scores, n_head_kv * per_g * s_task);
        let attended = grown(attended, n_head_kv * per_g * o_task);
        let block = n_group * head_dim;
        let attend = |(task, ((o, sc), qs)): AttentionTask<'_>| {
            let (g, t0) = (task / per_g, task % per_g * rows);
            let n_rows = rows.min(n - t0);
            // This task's queries, in f16 (each token's query heads of key head g are adjacent).
            for (r, dst) in qs.chunks_mut(block).take(n_rows).enumerate() {
                dst.convert_from_f32_slice(
                    &q[((t0 + r) * n_head + g * n_group) * head_dim..][..block],
                );
            }
            let qs = &*qs;
            // Runs of rows of one sequence: one kernel call each.
            let mut r = 0;
            while r < n_rows {
                let seg = row_segment[t0 + r];
                let mut e = r + 1;
                while e < n_rows && row_segment[t0 + e] == seg {
                    e += 1;
                }
                let cache = &segments[seg].cache.layers[layer];
                let n_ctx = cache.n_ctx;
                let n_q = (e - r) * n_group;
                let mut lens = [0usize; MAX_ATTENTION_QUERIES];
                for (i, len) in lens[..n_q].iter_mut().enumerate() {
                    *len = positions[t0 + r + i / n_group] + 1;
                }
                let lens = &lens[..n_q];
                let keys = &cache.k[g * n_ctx * head_dim..(g + 1) * n_ctx * head_dim];
                let values = &cache.v[g * n_ctx * head_dim_v..(g + 1) * n_ctx * head_dim_v];
                let sc = &mut sc[r * n_group * len_max..e * n_group * len_max];
                kernels.attention_scores(
                    keys,
                    &qs[r * block..e * block],
                    head_dim,
                    lens,
                    sc,
                    len_max,
                );
                let mut sums = [0.0f32; MAX_ATTENTION_QUERIES];
                for ((s, sum), &len) in sc.chunks_mut(len_max).zip(&mut sums).zip(lens) {
                    *sum = kernels.softmax(&mut s[..len], scale);
                }
                let o = &mut o[r * n_group * head_dim_v..e * n_group * head_dim_v];
                kernels.attention_values(sc, len_max, lens, values, o);
                for (row, &sum) in o.chunks_mut(head_dim_v).zip(&sums) {
                    let inv = 1.0 / sum;
                    for acc in row.iter_mut() {
                        *acc *= inv;
                    }
                }
                r = e;
            }
        };
        self.pool.install(|| {
            attended
                .par_chunks_mut(o_task)
                .zip(scores.par_chunks_mut(s_task))
                .zip(queries.par_chunks_mut(q_task))
                .enumerate()
                .for_each(attend);
            let attended = &*attended;
            rows_each(out, n_head * head_dim_v, |t, row| {
                for (g, dst) in row.chunks_mut(n_group * head_dim_v).enumerate() {
                    dst.copy_from_slice(
                        &attended[(g * n_pad + t) * n_group * head_dim_v..][..dst.len()],
                    );
                }
            });
        });
    }

    fn swiglu(&self, gate: &mut [f32], up: &[f32]) {
        let chunk = PARALLEL_ELEMENTS / 2;
        self.element_wise(gate, chunk, up, chunk, |gate, up| {
            self.kernels.silu_mul(gate, up)
        });
    }

    fn add(&self, x: &mut [f32], y: &[f32]) {
        let chunk = PARALLEL_ELEMENTS / 2;
        self.element_wise(x, chunk, y, chunk, |x, y| {
            for (a, &b) in x.iter_mut().zip(y) {
                *a += b;
            }
        });
    }
}

#[cfg(test)]
#[path = "cpu_tests.rs"]
mod tests;
