//! BF16 (ggml type 30): bfloat16, dotted with BF16 activations.
//! The codec is the one shared by the float formats (`common::float_*`).

use crate::common::{float_dequantize, float_dot, float_quantize, Bf16Le};

pub fn dequantize(src: &[u8], dst: &mut [f32]) {
    float_dequantize::<Bf16Le>(src, dst)
}

pub fn quantize(src: &[f32], dst: &mut [u8]) {
    float_quantize::<Bf16Le>(src, dst)
}

pub fn dot(weights: &[u8], activation: &[u8]) -> f32 {
    float_dot::<Bf16Le>(weights, activation)
}
