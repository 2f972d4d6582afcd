//! Q4_1 (ggml type 3): 32 values as 4-bit codes meaning code·d + m. Low nibbles hold the first 16
//! values, high nibbles the last 16. Dotted with Q8_1, whose block sum carries the `m` term.

use bytemuck::{Pod, Zeroable};

use crate::common::{
    dequantize_blocks, dot_pairs, inverse_or_zero, quantize_blocks, truncate_to_i8, F16Le,
};
use crate::q8_1::BlockQ8_1;

pub const QK4_1: usize = 32;

#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Pod, Zeroable)]
pub struct BlockQ4_1 {
    pub d: F16Le,
    /// The block minimum.
    pub m: F16Le,
    pub qs: [u8; QK4_1 / 2],
}
const _: () = assert!(size_of::<BlockQ4_1>() == 20);

/// `quantize_row_q4_1_ref`: d = (max − min)/15, m = min, codes `(int8_t)((x − min)·id + 0.5)`
/// capped at 15.
fn quantize_block(x: &[f32]) -> BlockQ4_1 {
    let mut min = f32::MAX;
    let mut max = -f32::MAX;
    for &v in x {
        if v < min {
            min = v;
        }
        if v > max {
            max = v;
        }
    }
    let d = (max - min) / 15.0;
    let id = inverse_or_zero(d);
    let code = |v: f32| -> u8 { i32::from(truncate_to_i8((v - min) * id + 0.5)).min(15) as u8 };
    let (lo, hi) = x.split_at(QK4_1 / 2);
    let mut qs = [0u8; QK4_1 / 2];
    for ((q, &a), &b) in qs.iter_mut().zip(lo).zip(hi) {
        *q = code(a) | (code(b) << 4);
    }
    BlockQ4_1 {
        d: F16Le::from_f32(d),
        m: F16Le::from_f32(min),
        qs,
    }
}

fn dequantize_block(b: &BlockQ4_1, y: &mut [f32]) {
    let d = b.d.to_f32();
    let m = b.m.to_f32();
    let (lo, hi) = y.split_at_mut(QK4_1 / 2);
    for ((q, a), c) in b.qs.iter().zip(lo).zip(hi) {
        *a = f32::from(q & 0x0f) * d + m;
        *c = f32::from(q >> 4) * d + m;
    }
}

pub fn dequantize(src: &[u8], dst: &mut [f32]) {
    dequantize_blocks(src, dst, QK4_1, dequantize_block);
}

pub fn quantize(src: &[f32], dst: &mut [u8]) {
    quantize_blocks(src, dst, QK4_1, quantize_block);
}

/// `ggml_vec_dot_q4_1_q8_1`: per block, (dx·dy)·Σ code·q8 + m·s.
pub fn dot(weights: &[u8], activation: &[u8]) -> f32 {
    let mut sumf = 0.0f32;
    for (x, y) in dot_pairs::<BlockQ4_1, BlockQ8_1>(weights, activation, 1) {
        let y = &y[0];
        let (ylo, yhi) = y.qs.split_at(QK4_1 / 2);
        let mut sumi = 0i32;
        for ((q, &a), &b) in x.qs.iter().zip(ylo).zip(yhi) {
            sumi += i32::from(q & 0x0f) * i32::from(a);
            sumi += i32::from(q >> 4) * i32::from(b);
        }
        sumf += (x.d.to_f32() * y.d.to_f32()) * sumi as f32 + x.m.to_f32() * y.s.to_f32();
    }
    sumf
}
