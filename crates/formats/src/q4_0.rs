//! Q4_0 (ggml type 2): 32 values as 4-bit codes 0..15 meaning (code − 8)·d. Low nibbles hold the
//! first 16 values, high nibbles the last 16. Dotted with Q8_0.

use bytemuck::{Pod, Zeroable};

use crate::common::{
    dequantize_blocks, dot_pairs, inverse_or_zero, quantize_blocks, truncate_to_i8, F16Le,
};
use crate::q8_0::BlockQ8_0;

pub const QK4_0: usize = 32;

#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Pod, Zeroable)]
pub struct BlockQ4_0 {
    pub d: F16Le,
    pub qs: [u8; QK4_0 / 2],
}
const _: () = assert!(size_of::<BlockQ4_0>() == 18);

/// `quantize_row_q4_0_ref`. The scale comes from the value of largest magnitude with its sign,
/// `d = max / −8`, so that value lands exactly on code 0 and the other end keeps code 15 for
/// values up to 7/8 of it. `(int8_t)(x·id + 8.5)` truncates, so that is rounding half up.
fn quantize_block(x: &[f32]) -> BlockQ4_0 {
    let mut amax = 0.0f32;
    let mut max = 0.0f32;
    for &v in x {
        if amax < v.abs() {
            amax = v.abs();
            max = v;
        }
    }
    let d = max / -8.0;
    let id = inverse_or_zero(d);
    let code = |v: f32| -> u8 { i32::from(truncate_to_i8(v * id + 8.5)).min(15) as u8 };
    let (lo, hi) = x.split_at(QK4_0 / 2);
    let mut qs = [0u8; QK4_0 / 2];
    for ((q, &a), &b) in qs.iter_mut().zip(lo).zip(hi) {
        *q = code(a) | (code(b) << 4);
    }
    BlockQ4_0 {
        d: F16Le::from_f32(d),
        qs,
    }
}

fn dequantize_block(b: &BlockQ4_0, y: &mut [f32]) {
    let d = b.d.to_f32();
    let (lo, hi) = y.split_at_mut(QK4_0 / 2);
    for ((q, a), c) in b.qs.iter().zip(lo).zip(hi) {
        *a = (i32::from(q & 0x0f) - 8) as f32 * d;
        *c = (i32::from(q >> 4) - 8) as f32 * d;
    }
}

pub fn dequantize(src: &[u8], dst: &mut [f32]) {
    dequantize_blocks(src, dst, QK4_0, dequantize_block);
}

pub fn quantize(src: &[f32], dst: &mut [u8]) {
    quantize_blocks(src, dst, QK4_0, quantize_block);
}

/// `ggml_vec_dot_q4_0_q8_0`: per block, Σ (code − 8)·q8 times dx·dy.
pub fn dot(weights: &[u8], activation: &[u8]) -> f32 {
    let mut sumf = 0.0f32;
    for (x, y) in dot_pairs::<BlockQ4_0, BlockQ8_0>(weights, activation, 1) {
        let y = &y[0];
        let (ylo, yhi) = y.qs.split_at(QK4_0 / 2);
        let mut sumi = 0i32;
        for ((q, &a), &b) in x.qs.iter().zip(ylo).zip(yhi) {
            sumi += (i32::from(q & 0x0f) - 8) * i32::from(a);
            sumi += (i32::from(q >> 4) - 8) * i32::from(b);
        }
        sumf += sumi as f32 * x.d.to_f32() * y.d.to_f32();
    }
    sumf
}
