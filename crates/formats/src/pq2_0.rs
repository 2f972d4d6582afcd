//! PQ2_0 (GGUF id 142, PrismML): the Q2_0 codec at 128 values a block (see [`crate::q2_0`]).

use crate::q2_0::{dequantize_layout, dot_layout, quantize_layout, BlockQ2_0G128};

pub type BlockPQ2_0 = BlockQ2_0G128;

pub fn dequantize(src: &[u8], dst: &mut [f32]) {
    dequantize_layout::<BlockPQ2_0>(src, dst);
}

pub fn quantize(src: &[f32], dst: &mut [u8]) {
    quantize_layout::<BlockPQ2_0>(src, dst);
}

pub fn dot(weights: &[u8], activation: &[u8]) -> f32 {
    dot_layout::<BlockPQ2_0>(weights, activation)
}
