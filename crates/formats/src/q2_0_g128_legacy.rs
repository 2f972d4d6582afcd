//! PrismML's legacy Q2_0: GGUF id 42 like mainline Q2_0, but 128 values in 34-byte blocks — the
//! same codec (see [`crate::q2_0`]). Which layout an id-42 tensor uses is decided by the GGUF
//! reader from the tensors' data extents.

use crate::q2_0::{dequantize_layout, dot_layout, quantize_layout, BlockQ2_0G128};

pub fn dequantize(src: &[u8], dst: &mut [f32]) {
    dequantize_layout::<BlockQ2_0G128>(src, dst);
}

pub fn quantize(src: &[f32], dst: &mut [u8]) {
    quantize_layout::<BlockQ2_0G128>(src, dst);
}

pub fn dot(weights: &[u8], activation: &[u8]) -> f32 {
    dot_layout::<BlockQ2_0G128>(weights, activation)
}
