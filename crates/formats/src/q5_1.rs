//! Q5_1 (ggml type 7): 32 values as 5-bit codes meaning code·d + m, laid out as Q5_0's (nibbles
//! plus a fifth-bit word). Dotted with Q8_1, whose block sum carries the `m` term.

use bytemuck::{Pod, Zeroable};

use crate::common::{
    dequantize_blocks, dot_pairs, inverse_or_zero, quantize_blocks, truncate_to_i8, F16Le,
};
use crate::q5_0::{pack5, unpack5};
use crate::q8_1::BlockQ8_1;

pub const QK5_1: usize = 32;

#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Pod, Zeroable)]
pub struct BlockQ5_1 {
    pub d: F16Le,
    /// The block minimum.
    pub m: F16Le,
    /// Fifth bit of each code, value `i` at bit `i` (little-endian u32).
    pub qh: [u8; 4],
    /// Low four bits of each code.
    pub qs: [u8; QK5_1 / 2],
}
const _: () = assert!(size_of::<BlockQ5_1>() == 24);

/// `quantize_row_q5_1_ref`: d = (max − min)/31, m = min, codes `(uint8_t)((x − min)·id + 0.5)`.
/// Unlike Q4_1's the reference does not cap the code; the cast is x86's (truncate to int32, keep
/// the low byte), and only its low five bits are stored.
fn quantize_block(x: &[f32]) -> BlockQ5_1 {
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
    let d = (max - min) / 31.0;
    let id = inverse_or_zero(d);
    let mut codes = [0u8; 32];
    for (c, &v) in codes.iter_mut().zip(x) {
        *c = truncate_to_i8((v - min) * id + 0.5) as u8;
    }
    let (qs, qh) = pack5(&codes);
    BlockQ5_1 {
        d: F16Le::from_f32(d),
        m: F16Le::from_f32(min),
        qh,
        qs,
    }
}

fn dequantize_block(b: &BlockQ5_1, y: &mut [f32]) {
    let d = b.d.to_f32();
    let m = b.m.to_f32();
    for (out, &c) in y.iter_mut().zip(&unpack5(&b.qs, b.qh)) {
        *out = f32::from(c) * d + m;
    }
}

pub fn dequantize(src: &[u8], dst: &mut [f32]) {
    dequantize_blocks(src, dst, QK5_1, dequantize_block);
}

pub fn quantize(src: &[f32], dst: &mut [u8]) {
    quantize_blocks(src, dst, QK5_1, quantize_block);
}

/// `ggml_vec_dot_q5_1_q8_1`: per block, (dx·dy)·Σ code·q8 + m·s.
pub fn dot(weights: &[u8], activation: &[u8]) -> f32 {
    let mut sumf = 0.0f32;
    for (x, y) in dot_pairs::<BlockQ5_1, BlockQ8_1>(weights, activation, 1) {
        let y = &y[0];
        let sumi: i32 = unpack5(&x.qs, x.qh)
            .iter()
            .zip(&y.qs)
            .map(|(&c, &q)| i32::from(c) * i32::from(q))
            .sum();
        sumf += (x.d.to_f32() * y.d.to_f32()) * sumi as f32 + x.m.to_f32() * y.s.to_f32();
    }
    sumf
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn range_ends_are_exact_and_ties_round_up() {
        // min −1, max 30: d = 1, so every code is exact and 1.5 − (−1) = 2.5 rounds up to 3.
        let mut x = [0.0f32; 32];
        x[0] = -1.0;
        x[1] = 30.0;
        x[2] = 1.5;
        let mut out = [0u8; 24];
        quantize(&x, &mut out);
        let mut back = [0.0f32; 32];
        dequantize(&out, &mut back);
        assert_eq!(&back[..4], &[-1.0, 30.0, 2.0, 0.0]);
    }
}
