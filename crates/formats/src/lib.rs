//! Every weight format OxiBonsai reads or writes, and THE registry: one [`Format`] row per type,
//! holding the GGUF type id, the block geometry, the activation partner it is dotted with, and
//! the scalar reference `dequantize` / `quantize` / `dot` (model: ggml's type-traits table).
//!
//! This crate depends on nothing of ours. It knows nothing about files: the GGUF container asks it
//! for block sizes and leaves decoding to it. Fast kernels (per ISA) will live under `kernels/`
//! and are always tested against the scalar functions here.

pub mod common;
pub mod f32;
pub mod f16;
pub mod bf16;
pub mod q4_0;
pub mod q4_1;
pub mod q8_0;
pub mod q8_1;
pub mod q8_k;
pub mod tq1_0;
pub mod tq2_0;
pub mod q1_0;
pub mod q2_0;
pub mod q2_0_g128_legacy;
pub mod pq2_0;
mod registry;
mod row;
pub use registry::*;
pub use row::FormatError;
