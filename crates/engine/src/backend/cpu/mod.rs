//! The CPU backend: weights stay in the mmap, or — where the tier has a packed kernel for their
//! format — are repacked once at load into that kernel's layout, which then replaces the mapped
//! rows (their pages are released; `OXIBONSAI_PACK=0` keeps every weight in the mmap). Each
//! matrix product converts the activations to the weight format's partner type once and runs the
//! kernels of the instruction-set tier chosen at construction (`OXIBONSAI_ISA` or the best this
//! CPU has), bands of weight rows split across a persistent rayon pool. Every tier computes
//! every format: where a tier has no fast kernel for a format, the scalar reference runs.
//!
//! Its parts: `pool` (the pass on the thread pool, rows split across it), `weight` (preparing and
//! repacking a matrix at load, embedding rows), `matmul` (the matrix products), `attention` (the
//! KV store, attention, and the limits a model is checked against) and `elementwise` (norms,
//! RoPE, SwiGLU, adds).

mod attention;
mod elementwise;
mod gdn;
mod matmul;
mod pool;
mod weight;

use std::sync::Arc;

use half::f16;
use oxibonsai_formats::kernels::{Isa, Kernels};
use oxibonsai_gguf::{GgufFile, TensorInfo};

use super::{AttentionShape, Backend, DeltaShape, Segment};
use crate::config::{ModelConfig, RopeStyle};
use crate::error::EngineError;
use crate::kv_cache::LayerCache;

pub use attention::{MAX_GROUP, MAX_HEAD_DIM};
pub use weight::CpuWeight;

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

// Each operation lives in the module that owns it; this impl only routes the trait's calls there.
impl Backend for CpuBackend {
    type Weight = CpuWeight;
    type Scratch = CpuScratch;

    fn run<R: Send>(&self, work: impl FnOnce() -> R + Send) -> R {
        self.run_pass(work)
    }

    fn name(&self) -> String {
        format!("cpu ({}, {} threads)", self.isa().name(), self.threads())
    }

    fn check_config(&self, c: &ModelConfig) -> Result<(), EngineError> {
        attention::check_limits(c)
    }

    fn prepare(&self, file: &Arc<GgufFile>, tensor: &TensorInfo) -> Result<CpuWeight, EngineError> {
        self.prepare_weight(file, tensor)
    }

    fn embed(&self, table: &CpuWeight, ids: &[u32], out: &mut [f32]) {
        self.embed_rows(table, ids, out)
    }

    fn matmul(
        &self,
        w: &CpuWeight,
        x: &[f32],
        n_tokens: usize,
        out: &mut [f32],
        scratch: &mut CpuScratch,
    ) {
        self.matmul_one(w, x, n_tokens, out, scratch)
    }

    fn matmuls(
        &self,
        products: &mut [(&CpuWeight, &mut [f32])],
        x: &[f32],
        n_tokens: usize,
        scratch: &mut CpuScratch,
    ) {
        self.matmul_many(products, x, n_tokens, scratch)
    }

    fn rms_norm(&self, x: &[f32], weight: &[f32], eps: f32, out: &mut [f32]) {
        self.rms_norm_rows(x, weight, eps, out)
    }

    fn rope(
        &self,
        x: &mut [f32],
        n_heads: usize,
        head_dim: usize,
        cos_sin: &[(f32, f32)],
        style: RopeStyle,
    ) {
        self.rope_rows(x, n_heads, head_dim, cos_sin, style)
    }

    fn store_kv(&self, cache: &mut LayerCache, k: &[f32], v: &[f32], positions: &[usize]) {
        self.store_kv_rows(cache, k, v, positions)
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
        self.attention_rows(q, segments, layer, positions, shape, out, scratch)
    }

    fn conv1d_silu(&self, x: &mut [f32], history: &mut [f32], kernel: &[f32], d_conv: usize) {
        self.conv1d_silu_rows(x, history, kernel, d_conv)
    }

    fn gdn_gates(&self, alpha: &mut [f32], beta: &mut [f32], dt_bias: &[f32], ssm_a: &[f32]) {
        self.gdn_gate_rows(alpha, beta, dt_bias, ssm_a)
    }

    fn delta_rule(
        &self,
        ssm: &mut [f32],
        qkv: &[f32],
        log_decay: &[f32],
        beta: &[f32],
        shape: DeltaShape,
        out: &mut [f32],
    ) {
        self.delta_rule_rows(ssm, qkv, log_decay, beta, shape, out)
    }

    fn sigmoid_mul(&self, x: &mut [f32], gate: &[f32]) {
        self.sigmoid_mul_rows(x, gate)
    }

    fn scale(&self, x: &mut [f32], by: f32) {
        x.iter_mut().for_each(|v| *v *= by);
    }

    fn swiglu(&self, gate: &mut [f32], up: &[f32]) {
        self.swiglu_rows(gate, up)
    }

    fn add(&self, x: &mut [f32], y: &[f32]) {
        self.add_rows(x, y)
    }
}

#[cfg(test)]
mod tests;
