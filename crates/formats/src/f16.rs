//! F16 (ggml type 1): IEEE half precision, dotted with F16 activations.

use crate::common::{blocks, blocks_mut, F16Le};

pub fn dequantize(src: &[u8], dst: &mut [f32]) {
    let src = blocks::<F16Le>(src);
    assert_eq!(
        src.len(),
        dst.len(),
        "f16 dequantize: element counts differ"
    );
    for (x, y) in src.iter().zip(dst) {
        *y = x.to_f32();
    }
}

pub fn quantize(src: &[f32], dst: &mut [u8]) {
    let dst = blocks_mut::<F16Le>(dst);
    assert_eq!(src.len(), dst.len(), "f16 quantize: element counts differ");
    for (x, y) in src.iter().zip(dst) {
        *y = F16Le::from_f32(*x);
    }
}

/// `ggml_vec_dot_f16`: both sides widened exactly, each product rounded to f32, the sum carried
/// in f64 (`ggml_float`).
pub fn dot(weights: &[u8], activation: &[u8]) -> f32 {
    let w = blocks::<F16Le>(weights);
    let a = blocks::<F16Le>(activation);
    assert_eq!(w.len(), a.len(), "f16 dot: element counts differ");
    let sum: f64 = w
        .iter()
        .zip(a)
        .map(|(x, y)| f64::from(x.to_f32() * y.to_f32()))
        .sum();
    sum as f32
}
