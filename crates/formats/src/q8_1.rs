//! Q8_1 (ggml type 9): Q8_0 plus `s = d · Σq`, the block sum that Q4_1's offset needs. The
//! activation partner of Q4_1.

use bytemuck::{Pod, Zeroable};

use crate::common::{dequantize_blocks, dot_pairs, inverse_or_zero, quantize_blocks, F16Le};
use crate::q8_0::block_sum;

pub const QK8_1: usize = 32;

#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Pod, Zeroable)]
pub struct BlockQ8_1 {
    pub d: F16Le,
    /// d · Σ qs, rounded to f16.
    pub s: F16Le,
    pub qs: [i8; QK8_1],
}
const _: () = assert!(size_of::<BlockQ8_1>() == 36);

fn amax(x: &[f32]) -> f32 {
    x.iter().fold(0.0f32, |m, v| m.max(v.abs()))
}

fn finish(d: f32, qs: [i8; QK8_1]) -> BlockQ8_1 {
    let sum: i32 = qs.iter().map(|&q| i32::from(q)).sum();
    BlockQ8_1 {
        d: F16Le::from_f32(d),
        s: F16Le::from_f32(sum as f32 * d),
        qs,
    }
}

/// `quantize_row_q8_1_ref`: as Q8_0's reference (`roundf(x · (1/d))`).
fn quantize_block(x: &[f32]) -> BlockQ8_1 {
    let d = amax(x) / 127.0;
    let id = inverse_or_zero(d);
    let mut qs = [0i8; QK8_1];
    for (q, v) in qs.iter_mut().zip(x) {
        *q = (v * id).round() as i8;
    }
    finish(d, qs)
}

/// The x86 CPU backend's `from_float`: multiplier `127/amax`, round to nearest even (see
/// [`crate::q8_0::quantize_activation`]).
fn quantize_activation_block(x: &[f32]) -> BlockQ8_1 {
    let max = amax(x);
    let d = max / 127.0;
    let id = if max != 0.0 { 127.0 / max } else { 0.0 };
    let mut qs = [0i8; QK8_1];
    for (q, v) in qs.iter_mut().zip(x) {
        *q = (v * id).round_ties_even() as i8;
    }
    finish(d, qs)
}

fn dequantize_block(b: &BlockQ8_1, y: &mut [f32]) {
    let d = b.d.to_f32();
    for (out, q) in y.iter_mut().zip(b.qs) {
        *out = f32::from(q) * d;
    }
}

pub fn dequantize(src: &[u8], dst: &mut [f32]) {
    dequantize_blocks(src, dst, QK8_1, dequantize_block);
}

pub fn quantize(src: &[f32], dst: &mut [u8]) {
    quantize_blocks(src, dst, QK8_1, quantize_block);
}

/// Quantizes activations the way the CPU backend does.
pub fn quantize_activation(src: &[f32], dst: &mut [u8]) {
    quantize_blocks(src, dst, QK8_1, quantize_activation_block);
}

/// Q8_1 · Q8_1 (ggml has no such kernel; written as its Q8_0 twin, the sums `s` unused).
pub fn dot(weights: &[u8], activation: &[u8]) -> f32 {
    let mut sumf = 0.0f32;
    for (x, y) in dot_pairs::<BlockQ8_1, BlockQ8_1>(weights, activation, 1) {
        let sumi = block_sum(&x.qs, &y[0].qs);
        sumf += sumi as f32 * (x.d.to_f32() * y[0].d.to_f32());
    }
    sumf
}
