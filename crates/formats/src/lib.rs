//! Every weight format OxiBonsai reads or writes, and THE registry: one [`Format`] row per type,
//! holding the GGUF type id, the block geometry, the activation partner it is dotted with, and
//! the scalar reference `dequantize` / `quantize` / `dot` (model: ggml's type-traits table).
//!
//! This crate depends on nothing of ours. It knows nothing about files: the GGUF container asks it
//! for block sizes and leaves decoding to it. Fast kernels (per ISA) will live under `kernels/`
//! and are always tested against the scalar functions here.
//!
//! Each format module holds its `#[repr(C)]` block struct (alignment 1, so tensor bytes at any
//! address can be viewed as blocks through [`common::blocks`]) and the scalar codec, written to
//! reproduce the reference engine (llama.cpp's ggml) bit for bit: quantized bytes and
//! dequantized floats exactly, dot products with exact integer parts. The registry's raw
//! functions expect whole blocks and panic otherwise; [`Format::quantize_row`],
//! [`Format::dequantize_row`], [`Format::dot_row`] and friends check lengths and return a
//! [`FormatError`]. Activations go into a weight's partner format with
//! [`Format::quantize_activation_row`] (ggml's CPU `from_float`, which for Q8_0 / Q8_1 rounds
//! differently from the reference quantizer).

pub mod bf16;
pub mod common;
pub mod f16;
pub mod f32;
pub mod iq4_nl;
pub mod kernels;
mod kquant_common;
pub mod pq2_0;
pub mod ptq1_0;
pub mod q1_0;
pub mod q2_0;
pub mod q2_0_g128_legacy;
pub mod q2_k;
pub mod q3_k;
pub mod q4_0;
pub mod q4_1;
pub mod q4_k;
pub mod q5_0;
pub mod q5_1;
pub mod q5_k;
pub mod q6_k;
pub mod q8_0;
pub mod q8_1;
pub mod q8_k;
mod registry;
mod row;
pub mod tq1_0;
pub mod tq2_0;
pub use registry::*;
pub use row::FormatError;
