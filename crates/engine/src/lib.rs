//! The model: configuration per architecture read from GGUF metadata, the forward pass written once
//! against the [`backend::Backend`] trait, the KV cache, sampling (optionally constrained by a
//! grammar) and the generation loop.
//!
//! Weights are an immutable shared value; everything that changes while a sequence runs (KV caches,
//! recurrent states, scratch activations) lives in a per-sequence state passed `&mut` into the forward pass.

pub mod backend;
pub mod config;
pub mod constraint;
pub mod embed;
pub mod error;
pub mod generate;
pub mod kv_cache;
pub mod model;
pub mod perplexity;
pub mod rotation;
pub mod sampling;
pub mod speculative;
pub mod state;

pub use backend::cpu::CpuBackend;
#[cfg(feature = "gpu")]
pub use backend::device::DeviceBackend;
pub use backend::device::{
    cpu_backend, device_report, gpu_adapters, open_backend, Device, DeviceChoice, DeviceReport,
    RuntimeBackend,
};
#[cfg(feature = "gpu")]
pub use backend::gpu::{GpuBackend, GpuStatus, Offload};
pub use backend::Backend;
pub use config::{Architecture, LayerKind, ModelConfig, SsmConfig};
pub use constraint::{Constraint, ConstraintError, ConstraintVocab, Grammar};
pub use embed::Pooling;
pub use error::EngineError;
pub use model::{BatchEntry, Logits, Model, Restore, Sequence, Workspace};
pub use state::{CheckpointPolicy, LayerState, RecurrentState};
