//! F32 (ggml type 0): plain little-endian floats, dotted with F32 activations.

use crate::common::{blocks, blocks_mut, F32Le};

pub fn dequantize(src: &[u8], dst: &mut [f32]) {
    let src = blocks::<F32Le>(src);
    assert_eq!(
        src.len(),
        dst.len(),
        "f32 dequantize: element counts differ"
    );
    for (x, y) in src.iter().zip(dst) {
        *y = x.to_f32();
    }
}

pub fn quantize(src: &[f32], dst: &mut [u8]) {
    let dst = blocks_mut::<F32Le>(dst);
    assert_eq!(src.len(), dst.len(), "f32 quantize: element counts differ");
    for (x, y) in src.iter().zip(dst) {
        *y = F32Le::from_f32(*x);
    }
}

/// `ggml_vec_dot_f32`: each product rounded to f32, the sum carried in f64 (`ggml_float`).
pub fn dot(weights: &[u8], activation: &[u8]) -> f32 {
    let w = blocks::<F32Le>(weights);
    let a = blocks::<F32Le>(activation);
    assert_eq!(w.len(), a.len(), "f32 dot: element counts differ");
    let sum: f64 = w
        .iter()
        .zip(a)
        .map(|(x, y)| f64::from(x.to_f32() * y.to_f32()))
        .sum();
    sum as f32
}
