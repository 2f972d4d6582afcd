//! OxiBonsai's GPU compute through wgpu: WGSL compute shaders that run on Metal (macOS / iOS),
//! Vulkan (Linux / Windows / Android) and DX12 (Windows), and on Mesa's software Vulkan device
//! (lavapipe), where CI proves every shader against the CPU's scalar kernels.
//!
//! What exists: the device (adapter choice, its report, errors); the op layer a device-resident
//! forward pass is recorded with (`ops`: activations as device [`Tensor`]s, a [`Recorder`] that puts
//! a step's dispatches into one submission, pipelines and bind groups built once); and the ops of
//! a decode step — embedding lookup, RMS norm, RoPE, SwiGLU, add, activation quantization to
//! Q8_0 / Q8_1 / Q8_K, the KV cache and decode attention over it, and matrix-vector products for
//! Q1_0, F32, F16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, TQ2_0 and the Q2_0 codec —
//! each tested against the CPU's scalar code on lavapipe —, their matrix-matrix products (a
//! register tile, `tile`, for Q1_0 and the 32-value Q8_0-partnered formats), and fused ops that
//! give a chain's bits in one dispatch (`fused`: a decode layer in 8; 5 with the RMS norm as the
//! Q1_0 products' prologue and SwiGLU as the gate/up product's epilogue, or with SwiGLU's epilogue
//! and the norms in the residual products' tails, `q1_0_gemv_add_norm`). The
//! engine's GPU backend (issue 28) is built on these pieces; see ARCHITECTURE.md.

mod attention;
mod device;
mod elementwise;
mod fused;
mod gemv;
mod ops;
mod q1_0;
mod q1_0_fused;
mod repack;
mod tile;
mod tq2_0;

pub use attention::{
    AttentionKernel, ChunkRun, KvCache, MAX_ATTENTION_HEADS, MAX_ATTENTION_SPLITS,
    MAX_CHUNK_HEAD_DIM_V, MAX_GQA_PACK, MAX_HEAD_DIM_V,
};
pub use device::{adapters, AdapterReport, FoundAdapter, Gpu, GpuError};
pub use elementwise::{EmbeddingTable, Rope};
pub use fused::{fused_attention_fits, QkNorms};
pub use gemv::{Input, Matrix, Q8Tensor, GEMM_TILE};
pub use ops::{Recorder, Tensor};
pub use q1_0::{Product, Q1Kernel, Q1Matrix, Q1Reduce, Q8Activation};
pub use tile::GemmTile;
pub use tq2_0::Tq2Kernel;
