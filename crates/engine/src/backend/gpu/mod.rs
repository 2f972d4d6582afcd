//! The GPU backend (wgpu: Vulkan, Metal, DX12; lavapipe in CI), built on `oxibonsai-gpu`'s ops.
//!
//! Weights are uploaded once at load for the formats the GPU crate has products for (F32, F16,
//! BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL, the K-quants Q2_K … Q6_K, TQ2_0, TQ1_0 as TQ2_0,
//! the Q2_0 codec's three layouts, PTQ1_0 as PQ2_0, Q1_0: every registry format but the
//! activation types Q8_1 / Q8_K); every matrix keeps its CPU form too (the mmap view), so a
//! format without a GPU product runs on the CPU backend inside this one. So do the operations
//! that have no GPU path in this step — the KV cache and attention (the cache is the engine's
//! host `LayerCache`), the embedding lookup, Gated DeltaNet's — and any op whose GPU run fails
//! (warned once). Each is counted: [`Offload`] says
//! what ran on the CPU, never silently. Op by op, matrix products, RMS norm, RoPE, SwiGLU and the
//! residual add run on the GPU, each as a round trip from host slices (`ops`). A model the GPU
//! can run whole (every layer attention without an output gate, every matrix on the device, no
//! per-tensor scales, an f16 / f32 cache) runs each forward pass as one device-resident step
//! instead (`step`: one submission, the KV cache mirrored on the device, only the logits and the
//! new keys / values read back), counted as resident or not resident and why.

mod batch;
mod mirror;
mod ops;
mod profile;
mod step;
mod weight;

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use oxibonsai_gguf::{GgufFile, TensorInfo};
use oxibonsai_gpu::{AdapterReport, GemmTile, Gpu, GpuError};

use super::cpu::{CpuBackend, CpuScratch, CpuWeight};
use super::{AttentionShape, Backend, DeltaShape, Segment, StepView};
use crate::config::{ModelConfig, RopeStyle};
use crate::error::EngineError;
use crate::kv_cache::LayerCache;

pub use profile::ProfileLine;
pub(crate) use step::model_refusal;
pub use weight::GpuWeight;

use ops::Slots;
use weight::DeviceMatrix;

pub struct GpuBackend {
    gpu: Gpu,
    /// Runs what the GPU does not (its weights never repacked: they stay the mmap view).
    cpu: CpuBackend,
    slots: Mutex<Slots>,
    /// Calls of each operation that ran on the CPU, by name (a product: with its format).
    ops_on_cpu: Mutex<BTreeMap<String, u64>>,
    /// Matrices kept on the CPU, by format.
    weights_on_cpu: Mutex<BTreeMap<String, u64>>,
    /// A GPU op failed (said once on stderr; the failed ops are counted and rerun on the CPU).
    failed: AtomicBool,
    /// `-ngl`: the matrices of the first N repeating layers go to the GPU, the output's and the
    /// token embedding's only when N exceeds the layer count (llama.cpp's rule); `None`: all.
    gpu_layers: Option<usize>,
    /// The model's layer count, from `check_config` (before any weight is prepared).
    n_layer: AtomicUsize,
    uploads: Mutex<Uploads>,
    /// The device-resident step's tensors and KV cache mirrors.
    resident: Mutex<step::Resident>,
    /// Forward passes run as one resident step, and those run op by op (by why).
    resident_steps: AtomicU64,
    not_resident: Mutex<BTreeMap<String, u64>>,
    /// A resident step failed on the device (said once on stderr).
    step_failed: AtomicBool,
    /// Whether passes may run as one resident step ([`Self::with_resident_steps`]).
    resident_on: bool,
    /// Whether a layer's Q / K / V and gate / up go up stacked and the resident step runs the
    /// fused ops on them ([`Self::with_fused`]).
    fused: bool,
    /// Whether the fused step runs a norm and the Q1_0 product after it as one dispatch, the
    /// norm as the product's prologue ([`Self::with_prologue`]).
    prologue: bool,
    /// Whether the fused step runs SwiGLU and its quantization as the Q1_0 gate|up product's
    /// epilogue ([`Self::with_epilogue`]).
    epilogue: bool,
    /// The model's head dimensions (key, value), from `check_config`.
    heads: Mutex<Option<(usize, usize)>>,
    /// Dispatches the last resident submission recorded.
    step_dispatches: AtomicUsize,
    /// The parts of a stack uploaded with an earlier tensor of their layer, by tensor name.
    pending: Mutex<std::collections::HashMap<String, DeviceMatrix>>,
    /// Whether the fused step norms Qwen3's query and key heads inside the attention dispatch
    /// (`OXIBONSAI_GPU_QK_FOLD=0`: a dispatch of their own before it, an A/B switch).
    qk_fold: bool,
    /// Whether a resident chunk of several tokens runs as matrix-matrix products
    /// (`batch.rs`; `OXIBONSAI_GPU_GEMM=0`: one matrix-vector product a token, an A/B switch).
    gemm_on: bool,
    /// Chunks the batched pass ran.
    batched_chunks: AtomicU64,
    /// Layers recorded between two submissions of one pass (0: the whole pass in one), so the
    /// device starts on the first layers while the host records the rest
    /// (`OXIBONSAI_GPU_SUBMIT_LAYERS`).
    submit_layers: usize,
    /// The most tokens of a pass recorded into one chunk (`step::TOKENS_PER_SUBMIT` unless
    /// `OXIBONSAI_GPU_CHUNK` or [`GpuBackend::with_chunk_tokens`] says).
    chunk_tokens: usize,
    /// The resident passes' device time by op, where profiled (`OXIBONSAI_GPU_PROFILE=1`,
    /// [`GpuBackend::with_profile`]).
    profile: Option<profile::Profile>,
}

/// What went to the device at load.
#[derive(Default)]
struct Uploads {
    bytes: u64,
    layers: BTreeSet<usize>,
    /// Matrices outside the repeating layers (output, token embedding) on the device.
    others: u64,
    /// Matrices that have a GPU product but stay on the CPU (`-ngl`, or past the device's memory).
    kept: u64,
    /// Where uploading stopped because the device ran out of memory, and why.
    stopped: Option<String>,
}

/// Where a model's weights went under the GPU backend, and what runs on the CPU.
#[derive(Clone, Debug)]
pub struct GpuStatus {
    pub adapter: AdapterReport,
    pub n_layer: usize,
    /// Repeating layers with matrices on the device.
    pub layers_on_gpu: usize,
    /// The output / token-embedding matrices on the device.
    pub others_on_gpu: u64,
    /// Matrices with a GPU product kept on the CPU (`-ngl`, or the device's memory was full).
    pub kept_on_cpu: u64,
    /// Bytes of the matrices as uploaded.
    pub device_bytes: u64,
    /// The tensor at which the device's memory ran out, and the error (`None`: it did not).
    pub out_of_memory_at: Option<String>,
    pub offload: Offload,
}

impl fmt::Display for GpuStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}; {} of {} layers on the GPU ({:.1} MiB uploaded)",
            self.adapter,
            self.layers_on_gpu,
            self.n_layer,
            self.device_bytes as f64 / (1u64 << 20) as f64
        )?;
        if let Some(at) = &self.out_of_memory_at {
            write!(f, ", out of device memory at {at}")?;
        }
        write!(f, "; {}", self.offload)
    }
}

/// The repeating layer a tensor belongs to (`blk.N.…`).
fn layer_of(name: &str) -> Option<usize> {
    name.strip_prefix("blk.")?.split('.').next()?.parse().ok()
}

/// An upload error that means the device is full (the rest of the model stays on the CPU), as
/// opposed to one matrix past a buffer limit (that one stays) or a bad tensor (an error).
fn out_of_memory(e: &GpuError) -> bool {
    matches!(e, GpuError::Run { .. } | GpuError::Device { .. })
}

/// What of a model runs on the CPU under the GPU backend.
#[derive(Clone, Debug, Default)]
pub struct Offload {
    /// Matrices without a GPU product, by format, and how many.
    pub weights_on_cpu: Vec<(String, u64)>,
    /// Operation calls run on the CPU, by operation, and how many.
    pub ops_on_cpu: Vec<(String, u64)>,
    /// Forward passes run as one device-resident step.
    pub resident_steps: u64,
    /// Forward passes run op by op instead, by why, and how many.
    pub steps_not_resident: Vec<(String, u64)>,
    /// Where profiled ([`GpuBackend::with_profile`]): the resident passes by kind (`decode`,
    /// `batch`) and how many, and their dispatches' device time by op, the most first.
    pub profiled_passes: Vec<(&'static str, u64)>,
    pub device_profile: Vec<ProfileLine>,
}

impl Offload {
    /// Operation calls run on the CPU in all.
    pub fn cpu_ops(&self) -> u64 {
        self.ops_on_cpu.iter().map(|(_, n)| n).sum()
    }
}

impl fmt::Display for Offload {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let list = |items: &[(String, u64)]| {
            items
                .iter()
                .map(|(k, n)| format!("{k} ×{n}"))
                .collect::<Vec<_>>()
                .join(", ")
        };
        let weights: u64 = self.weights_on_cpu.iter().map(|(_, n)| n).sum();
        write!(f, "{weights} matrices on CPU")?;
        if weights > 0 {
            write!(f, " ({})", list(&self.weights_on_cpu))?;
        }
        write!(f, "; {} ops on CPU", self.cpu_ops())?;
        if !self.ops_on_cpu.is_empty() {
            write!(f, " ({})", list(&self.ops_on_cpu))?;
        }
        if self.resident_steps > 0 {
            write!(f, "; {} steps resident", self.resident_steps)?;
        }
        if !self.steps_not_resident.is_empty() {
            write!(
                f,
                "; steps not resident: {}",
                list(&self.steps_not_resident)
            )?;
        }
        // A profile: per kind of pass, the device time a pass and its five largest ops' shares.
        for &(pass, n) in &self.profiled_passes {
            let lines: Vec<&ProfileLine> = self
                .device_profile
                .iter()
                .filter(|l| l.pass == pass)
                .collect();
            let total: f64 = lines.iter().map(|l| l.seconds).sum();
            let top: Vec<String> = lines
                .iter()
                .take(5)
                .map(|l| {
                    format!(
                        "{} {:.0} %",
                        l.op,
                        100.0 * l.seconds / total.max(f64::MIN_POSITIVE)
                    )
                })
                .collect();
            write!(
                f,
                "; {pass} passes ×{n}: {:.1} µs of device time each ({})",
                total * 1e6 / n.max(1) as f64,
                top.join(", ")
            )?;
        }
        Ok(())
    }
}

/// A count an environment variable `name` sets (`value`, when set), `default` when it is not; a
/// value that is not a count within `range` is refused naming the variable (a mistyped A/B
/// switch must not measure the default in silence).
fn env_count(
    name: &str,
    value: Option<String>,
    default: usize,
    range: std::ops::RangeInclusive<usize>,
) -> Result<usize, GpuError> {
    let Some(value) = value else {
        return Ok(default);
    };
    match value.trim().parse::<usize>() {
        Ok(n) if range.contains(&n) => Ok(n),
        _ => Err(GpuError::Shape {
            what: name.to_owned(),
            reason: format!(
                "{value:?} is not a count from {} to {}",
                range.start(),
                range.end()
            ),
        }),
    }
}

impl GpuBackend {
    /// Opens the adapter named by `OXIBONSAI_GPU_ADAPTER` (else the most capable one); `threads`
    /// for the CPU backend that runs what the GPU does not (0: the number of CPUs).
    pub fn new(threads: usize) -> Result<GpuBackend, EngineError> {
        GpuBackend::with_gpu(Gpu::new()?, threads)
    }

    pub fn with_gpu(gpu: Gpu, threads: usize) -> Result<GpuBackend, EngineError> {
        let cpu = CpuBackend::new(threads)?.with_packing(false);
        tracing::info!(adapter = %gpu.report(), "GPU backend");
        // The prompt's Q1_0 and Q8_0-partnered gemms: the gemv-exact kernels by default (or
        // `OXIBONSAI_GPU_GEMM_TILE=0`), `=ROWSxTOKENS[d][@N]` a register tile (`GemmTile::parse`), run from N tokens.
        if let Ok(tile) = std::env::var("OXIBONSAI_GPU_GEMM_TILE") {
            if tile.trim() == "0" {
                gpu.set_gemm_tile(None);
            } else {
                let tile = GemmTile::parse(&tile).map_err(|e| GpuError::Shape {
                    what: "OXIBONSAI_GPU_GEMM_TILE".to_owned(),
                    reason: format!("{e} (or 0: the gemv-exact kernel)"),
                })?;
                gpu.set_gemm_tile(Some(tile));
            }
        }
        Ok(GpuBackend {
            gpu,
            cpu,
            slots: Mutex::default(),
            ops_on_cpu: Mutex::default(),
            weights_on_cpu: Mutex::default(),
            failed: AtomicBool::new(false),
            gpu_layers: None,
            n_layer: AtomicUsize::new(0),
            uploads: Mutex::default(),
            resident: Mutex::default(),
            resident_steps: AtomicU64::new(0),
            not_resident: Mutex::default(),
            step_failed: AtomicBool::new(false),
            // `OXIBONSAI_GPU_RESIDENT=0` runs every pass op by op (an A/B measurement).
            resident_on: std::env::var("OXIBONSAI_GPU_RESIDENT").map_or(true, |v| v.trim() != "0"),
            // `OXIBONSAI_GPU_FUSED=0`: every matrix apart, the step's unfused chain (an A/B).
            fused: std::env::var("OXIBONSAI_GPU_FUSED").map_or(true, |v| v.trim() != "0"),
            // `OXIBONSAI_GPU_PROLOGUE=1`: the fused step's norms as their products' prologue (off
            // by default: slower end to end on an H200, BENCHMARKS.md session 19).
            prologue: std::env::var("OXIBONSAI_GPU_PROLOGUE").is_ok_and(|v| v.trim() == "1"),
            // `OXIBONSAI_GPU_EPILOGUE=0`: SwiGLU apart from the gate|up product (an A/B).
            epilogue: std::env::var("OXIBONSAI_GPU_EPILOGUE").map_or(true, |v| v.trim() != "0"),
            heads: Mutex::default(),
            pending: Mutex::default(),
            step_dispatches: AtomicUsize::new(0),
            gemm_on: std::env::var("OXIBONSAI_GPU_GEMM").map_or(true, |v| v.trim() != "0"),
            qk_fold: std::env::var("OXIBONSAI_GPU_QK_FOLD").map_or(true, |v| v.trim() != "0"),
            batched_chunks: AtomicU64::new(0),
            submit_layers: env_count(
                "OXIBONSAI_GPU_SUBMIT_LAYERS",
                std::env::var("OXIBONSAI_GPU_SUBMIT_LAYERS").ok(),
                step::SUBMIT_LAYERS,
                0..=usize::MAX,
            )?,
            chunk_tokens: env_count(
                "OXIBONSAI_GPU_CHUNK",
                std::env::var("OXIBONSAI_GPU_CHUNK").ok(),
                step::TOKENS_PER_SUBMIT,
                1..=step::MOST_TOKENS_PER_SUBMIT,
            )?,
            profile: std::env::var("OXIBONSAI_GPU_PROFILE")
                .is_ok_and(|v| v.trim() == "1")
                .then(profile::Profile::default),
        })
    }

    /// Puts only the first `n` repeating layers' matrices on the GPU (`-ngl`; `None`: all).
    pub fn with_gpu_layers(mut self, n: Option<usize>) -> GpuBackend {
        self.gpu_layers = n;
        self
    }

    /// Whether a forward pass may run as one device-resident step (the default; also off with
    /// `OXIBONSAI_GPU_RESIDENT=0`) or always op by op.
    pub fn with_resident_steps(mut self, on: bool) -> GpuBackend {
        self.resident_on = on;
        self
    }

    /// Whether Q / K / V and gate / up are uploaded stacked and the resident step runs its fused
    /// ops on them (the default; also off with `OXIBONSAI_GPU_FUSED=0`), or every matrix apart
    /// and the step's op-for-op chain. Set before the model is loaded.
    pub fn with_fused(mut self, on: bool) -> GpuBackend {
        self.fused = on;
        self
    }

    /// Submits a resident pass every `n` layers without waiting (0: the whole pass in one
    /// submission; the default [`step::SUBMIT_LAYERS`], also `OXIBONSAI_GPU_SUBMIT_LAYERS`).
    pub fn with_submit_layers(mut self, n: usize) -> GpuBackend {
        self.submit_layers = n;
        self
    }

    /// Records each resident pass with a device timestamp after every dispatch and sums them by
    /// op ([`Offload::device_profile`]; also `OXIBONSAI_GPU_PROFILE=1`). Needs an adapter with
    /// timestamps inside compute passes: without them a pass fails and runs op by op, said once.
    /// A profiled pass is one submission and two waits, so its wall time is not an unprofiled one's.
    pub fn with_profile(mut self, on: bool) -> GpuBackend {
        self.profile = on.then(profile::Profile::default);
        self
    }

    /// Records at most `n` tokens of a pass into one chunk (1 ..= 256; the default 32, also
    /// `OXIBONSAI_GPU_CHUNK`): a longer chunk reads each weight once for more tokens and gives a
    /// gemm register tile (`OXIBONSAI_GPU_GEMM_TILE`) more tokens to share it, for more device
    /// memory (a chunk's per-token tensors and, where every row's logits are wanted, a row of
    /// logits a token).
    pub fn with_chunk_tokens(mut self, n: usize) -> GpuBackend {
        self.chunk_tokens = n.clamp(1, step::MOST_TOKENS_PER_SUBMIT);
        self
    }

    /// Whether the fused step (see [`Self::with_fused`]) runs the RMS norm before a Q1_0 product
    /// — the stacked Q|K|V, the stacked gate|up, the output head — as the product's prologue,
    /// one dispatch instead of two, the same bits (off by default: every workgroup repeats the
    /// norm, which cost more than the dispatch it saves on an H200 — `OXIBONSAI_GPU_PROLOGUE=1`
    /// turns it on).
    pub fn with_prologue(mut self, on: bool) -> GpuBackend {
        self.prologue = on;
        self
    }

    /// Whether the fused step runs SwiGLU and the down product's Q8_0 / Q8_1 quantization as the
    /// stacked Q1_0 gate|up product's epilogue, one dispatch instead of two, the same bits (the
    /// default; also off with `OXIBONSAI_GPU_EPILOGUE=0`, for an A/B).
    pub fn with_epilogue(mut self, on: bool) -> GpuBackend {
        self.epilogue = on;
        self
    }

    /// Dispatches the last resident submission recorded (every layer of its tokens, the output
    /// norm and head of its wanted rows): what the fused ops cut.
    pub fn step_dispatches(&self) -> usize {
        self.step_dispatches.load(Ordering::Relaxed)
    }

    /// The head dimensions stacks are made for, when stacking is on.
    fn stack_heads(&self) -> Option<(usize, usize)> {
        if !self.fused {
            return None;
        }
        *self.heads.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Whether a resident chunk of two or more tokens runs batched, its matrices read once for
    /// the chunk (the default; also off with `OXIBONSAI_GPU_GEMM=0`), or one matrix-vector
    /// product a token.
    pub fn with_gemm(mut self, on: bool) -> GpuBackend {
        self.gemm_on = on;
        self
    }

    /// Whether the fused step's one-token pass runs the RMS norm after a residual Q1_0 product
    /// (O, down) in that product's tail — the workgroup that finishes last norms the row into
    /// the next product's activation, the same bits, two dispatches fewer a layer — instead of a
    /// dispatch of its own (off by default pending a measurement on a GPU; also
    /// `OXIBONSAI_GPU_NORM_TAIL=1`, read when the device opens: `Gpu::set_norm_tail`). Not with
    /// the prologue ([`Self::with_prologue`]), which takes the norms into the next product.
    pub fn with_norm_tail(self, on: bool) -> GpuBackend {
        self.gpu.set_norm_tail(on);
        self
    }

    /// Whether the fused step norms Qwen3's query and key heads in the attention dispatch (the
    /// default; also off with `OXIBONSAI_GPU_QK_FOLD=0`) or in a dispatch of their own before
    /// it: the same bits.
    pub fn with_qk_fold(mut self, on: bool) -> GpuBackend {
        self.qk_fold = on;
        self
    }

    /// Resident chunks run by the batched pass so far.
    pub fn batched_chunks(&self) -> u64 {
        self.batched_chunks
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Where the weights went and what ran on the CPU so far.
    pub fn status(&self) -> GpuStatus {
        let up = self.uploads.lock().unwrap_or_else(|e| e.into_inner());
        GpuStatus {
            adapter: self.gpu.report().clone(),
            n_layer: self.n_layer.load(Ordering::Relaxed),
            layers_on_gpu: up.layers.len(),
            others_on_gpu: up.others,
            kept_on_cpu: up.kept,
            device_bytes: up.bytes,
            out_of_memory_at: up.stopped.clone(),
            offload: self.offload(),
        }
    }

    /// The CPU backend that runs what the GPU does not.
    pub fn cpu(&self) -> &CpuBackend {
        &self.cpu
    }

    pub fn adapter(&self) -> &AdapterReport {
        self.gpu.report()
    }

    /// What ran on the CPU so far (weights: since load; ops and steps: since the last
    /// [`Self::reset_counts`]).
    pub fn offload(&self) -> Offload {
        let read = |m: &Mutex<BTreeMap<String, u64>>| {
            let m = m.lock().unwrap_or_else(|e| e.into_inner());
            m.iter().map(|(k, &n)| (k.clone(), n)).collect()
        };
        let (profiled_passes, device_profile) = self
            .profile
            .as_ref()
            .map(|p| p.report())
            .unwrap_or_default();
        Offload {
            weights_on_cpu: read(&self.weights_on_cpu),
            ops_on_cpu: read(&self.ops_on_cpu),
            resident_steps: self.resident_steps.load(Ordering::Relaxed),
            steps_not_resident: read(&self.not_resident),
            profiled_passes,
            device_profile,
        }
    }

    /// Zeroes the op and step counts (e.g. after a warm-up, to count one step's).
    pub fn reset_counts(&self) {
        for m in [&self.ops_on_cpu, &self.not_resident] {
            m.lock().unwrap_or_else(|e| e.into_inner()).clear();
        }
        self.resident_steps.store(0, Ordering::Relaxed);
        if let Some(p) = &self.profile {
            p.clear();
        }
    }

    fn count(&self, map: &Mutex<BTreeMap<String, u64>>, what: &str) {
        let mut m = map.lock().unwrap_or_else(|e| e.into_inner());
        // The key is allocated only the first time an op is counted.
        match m.get_mut(what) {
            Some(n) => *n += 1,
            None => {
                m.insert(what.to_owned(), 1);
            }
        }
    }

    fn on_cpu(&self, op: &str) {
        self.count(&self.ops_on_cpu, op);
    }

    /// Runs `op` on the GPU; false (said once, counted) if it failed, for the caller to run it
    /// on the CPU. A failed op may have written part of its outputs (products, chunk by chunk;
    /// an in-place op's input is overwritten only by a whole read-back): the rerun rewrites them.
    fn on_gpu(
        &self,
        what: &str,
        op: impl FnOnce(&mut Slots, &Gpu) -> Result<(), GpuError>,
    ) -> bool {
        let mut slots = self.slots.lock().unwrap_or_else(|e| e.into_inner());
        match op(&mut slots, &self.gpu) {
            Ok(()) => true,
            Err(e) => {
                if !self.failed.swap(true, Ordering::Relaxed) {
                    tracing::warn!(op = what, error = %e, "a GPU op failed; running it on the CPU");
                    eprintln!("warning: GPU {what} failed ({e}); such ops run on the CPU");
                }
                self.on_cpu(&format!("{what} (after a GPU error)"));
                false
            }
        }
    }
}

/// Bytes of a matrix as uploaded (TQ1_0 goes up as TQ2_0: 66 bytes a block of 256, not 54).
fn uploaded_bytes(file: &GgufFile, tensor: &TensorInfo) -> u64 {
    let bytes = file.tensor_data(tensor).len() as u64;
    match tensor.format.kind {
        oxibonsai_formats::FormatKind::TQ1_0 => bytes / 54 * 66,
        _ => bytes,
    }
}

impl Backend for GpuBackend {
    type Weight = GpuWeight;
    type Scratch = CpuScratch;

    fn name(&self) -> String {
        format!("gpu ({}), with {}", self.gpu.report(), self.cpu.name())
    }

    fn check_config(&self, c: &ModelConfig) -> Result<(), EngineError> {
        self.n_layer.store(c.n_layer, Ordering::Relaxed);
        *self.heads.lock().unwrap_or_else(|e| e.into_inner()) = Some((c.head_dim, c.head_dim_v));
        // Attention runs on the CPU backend: its limits apply.
        self.cpu.check_config(c)
    }

    fn run<R: Send>(&self, work: impl FnOnce() -> R + Send) -> R {
        self.cpu.run(work)
    }

    fn forward_step(
        &self,
        step: &StepView<'_, GpuWeight>,
        segments: &mut [Segment<'_>],
        tokens: &[u32],
        logits: &mut Vec<f32>,
    ) -> Option<usize> {
        self.step_with(step, std::convert::identity, segments, tokens, logits)
    }

    fn prepare(&self, file: &Arc<GgufFile>, tensor: &TensorInfo) -> Result<GpuWeight, EngineError> {
        let layer = layer_of(&tensor.name);
        let wanted = match (self.gpu_layers, layer) {
            (None, _) => true,
            (Some(n), Some(l)) => l < n,
            (Some(n), None) => n > self.n_layer.load(Ordering::Relaxed),
        };
        let mut up = self.uploads.lock().unwrap_or_else(|e| e.into_inner());
        // A part of a stack an earlier tensor of its layer uploaded: on the device already.
        let part = self
            .pending
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&tensor.name);
        if let Some(m) = part {
            up.bytes += uploaded_bytes(file, tensor);
            match layer {
                Some(l) => {
                    up.layers.insert(l);
                }
                None => up.others += 1,
            }
            return Ok(GpuWeight {
                cpu: self.cpu.prepare(file, tensor)?,
                device: Some(m),
                cpu_op: format!("matmul {}", tensor.format.name).into(),
            });
        }
        if wanted && up.stopped.is_none() {
            match self.prepare_weight(file, tensor) {
                Ok(w) => {
                    if w.device.is_some() {
                        up.bytes += uploaded_bytes(file, tensor);
                        match layer {
                            Some(l) => {
                                up.layers.insert(l);
                            }
                            None => up.others += 1,
                        }
                    }
                    return Ok(w);
                }
                Err(EngineError::GpuTensor { name, source }) if out_of_memory(&source) => {
                    let at = format!("{name} ({source})");
                    eprintln!(
                        "warning: GPU: out of device memory at {at}; it and the tensors after it \
                         stay on the CPU"
                    );
                    up.stopped = Some(at);
                }
                Err(EngineError::GpuTensor {
                    name,
                    source: source @ GpuError::TooLarge { .. },
                }) => {
                    eprintln!("warning: GPU: {name} stays on the CPU: {source}");
                }
                Err(e) => return Err(e),
            }
        }
        up.kept += 1;
        Ok(GpuWeight {
            cpu: self.cpu.prepare(file, tensor)?,
            device: None,
            cpu_op: format!("matmul {}", tensor.format.name).into(),
        })
    }

    fn embed(&self, table: &GpuWeight, ids: &[u32], out: &mut [f32]) {
        self.on_cpu("embed");
        self.cpu.embed(&table.cpu, ids, out)
    }

    fn matmul(
        &self,
        w: &GpuWeight,
        x: &[f32],
        n_tokens: usize,
        out: &mut [f32],
        scratch: &mut CpuScratch,
    ) {
        self.matmuls(&mut [(w, out)], x, n_tokens, scratch)
    }

    fn matmuls(
        &self,
        products: &mut [(&GpuWeight, &mut [f32])],
        x: &[f32],
        n_tokens: usize,
        scratch: &mut CpuScratch,
    ) {
        let mut device: Vec<(&DeviceMatrix, &CpuWeight, &mut [f32])> = Vec::new();
        let mut host: Vec<(&CpuWeight, &mut [f32])> = Vec::new();
        for (w, out) in products.iter_mut() {
            match &w.device {
                Some(m) => device.push((m, &w.cpu, &mut **out)),
                None => {
                    self.on_cpu(&w.cpu_op);
                    host.push((&w.cpu, &mut **out));
                }
            }
        }
        if !device.is_empty() {
            let done = self.on_gpu("matmul", |slots, gpu| {
                let mut on_gpu: Vec<(&DeviceMatrix, &mut [f32])> = device
                    .iter_mut()
                    .map(|(m, _, out)| (*m, &mut **out))
                    .collect();
                slots.products(gpu, &mut on_gpu, x, n_tokens)
            });
            if !done {
                host.extend(device.into_iter().map(|(_, w, out)| (w, out)));
            }
        }
        if !host.is_empty() {
            self.cpu.matmuls(&mut host, x, n_tokens, scratch);
        }
    }

    fn rms_norm(&self, x: &[f32], weight: &[f32], eps: f32, out: &mut [f32]) {
        if !self.on_gpu("rms_norm", |s, g| s.rms_norm(g, x, weight, eps, out)) {
            self.cpu.rms_norm(x, weight, eps, out)
        }
    }

    fn rope(
        &self,
        x: &mut [f32],
        n_heads: usize,
        head_dim: usize,
        cos_sin: &[(f32, f32)],
        style: RopeStyle,
    ) {
        let done = self.on_gpu("rope", |s, g| {
            s.rope(g, x, n_heads, head_dim, cos_sin, style)
        });
        if !done {
            self.cpu.rope(x, n_heads, head_dim, cos_sin, style)
        }
    }

    fn store_kv(&self, cache: &mut LayerCache, k: &[f32], v: &[f32], positions: &[usize]) {
        self.on_cpu("store_kv");
        self.cpu.store_kv(cache, k, v, positions)
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
        self.on_cpu("attention");
        self.cpu
            .attention(q, segments, layer, positions, shape, out, scratch)
    }

    fn conv1d_silu(&self, x: &mut [f32], history: &mut [f32], kernel: &[f32], d_conv: usize) {
        self.on_cpu("conv1d_silu");
        self.cpu.conv1d_silu(x, history, kernel, d_conv)
    }

    fn gdn_gates(&self, alpha: &mut [f32], beta: &mut [f32], dt_bias: &[f32], ssm_a: &[f32]) {
        self.on_cpu("gdn_gates");
        self.cpu.gdn_gates(alpha, beta, dt_bias, ssm_a)
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
        self.on_cpu("delta_rule");
        self.cpu.delta_rule(ssm, qkv, log_decay, beta, shape, out)
    }

    fn sigmoid_mul(&self, x: &mut [f32], gate: &[f32]) {
        self.on_cpu("sigmoid_mul");
        self.cpu.sigmoid_mul(x, gate)
    }

    fn scale(&self, x: &mut [f32], by: f32) {
        self.on_cpu("scale");
        self.cpu.scale(x, by)
    }

    fn swiglu(&self, gate: &mut [f32], up: &[f32]) {
        if !self.on_gpu("swiglu", |s, g| s.binary(g, true, gate, up)) {
            self.cpu.swiglu(gate, up)
        }
    }

    fn add(&self, x: &mut [f32], y: &[f32]) {
        if !self.on_gpu("add", |s, g| s.binary(g, false, x, y)) {
            self.cpu.add(x, y)
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_count_switch_is_read_or_refused_by_name() {
        use super::env_count;
        assert_eq!(env_count("X", None, 32, 1..=256).ok(), Some(32));
        assert_eq!(
            env_count("X", Some(" 128 ".into()), 32, 1..=256).ok(),
            Some(128)
        );
        for bad in ["0", "257", "-1", "many", ""] {
            let e = env_count("OXIBONSAI_GPU_CHUNK", Some(bad.into()), 32, 1..=256)
                .err()
                .map(|e| e.to_string())
                .unwrap_or_default();
            assert!(
                e.contains("OXIBONSAI_GPU_CHUNK") && e.contains("1 to 256"),
                "{bad:?}: {e}"
            );
        }
    }

    use super::layer_of;

    #[test]
    fn tensors_belong_to_the_layer_their_name_says() {
        assert_eq!(layer_of("blk.0.attn_q.weight"), Some(0));
        assert_eq!(layer_of("blk.27.ffn_down.weight"), Some(27));
        assert_eq!(layer_of("output.weight"), None);
        assert_eq!(layer_of("token_embd.weight"), None);
        assert_eq!(layer_of("blk.x.attn_q.weight"), None);
    }
}
