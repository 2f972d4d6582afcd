//! TQ2_0 (ggml type 35): 256 ternary values as 2-bit codes (code − 1 ∈ {−1, 0, 1}) times one f16
//! scale. Byte `j + m` of each 32-byte half holds values `m`, `m+32`, `m+64`, `m+96` of that
//! half's 128, lowest bits first; the scale comes last. Dotted with Q8_K.

use bytemuck::{Pod, Zeroable};

use crate::common::{
    dequantize_blocks, dot_pairs, inverse_or_zero, quantize_blocks, round_half_away, F16Le,
};
use crate::q8_k::{BlockQ8_K, QK_K};

#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Pod, Zeroable)]
pub struct BlockTQ2_0 {
    pub qs: [u8; QK_K / 4],
    pub d: F16Le,
}
const _: () = assert!(size_of::<BlockTQ2_0>() == 66);

/// The code of each value, in the order the values come: byte `j + m`, bits `2l`, holds value
/// `4j + 32l + m` (j steps by 32).
#[inline]
fn codes(qs: &[u8; QK_K / 4]) -> impl Iterator<Item = u8> + '_ {
    qs.chunks_exact(32)
        .flat_map(|half| (0..4).flat_map(move |l| half.iter().map(move |&b| (b >> (2 * l)) & 3)))
}

/// `quantize_row_tq2_0_ref`: d = max |x|, code = lroundf(x/d) + 1.
fn quantize_block(x: &[f32]) -> BlockTQ2_0 {
    let d = x.iter().fold(0.0f32, |m, v| m.max(v.abs()));
    let id = inverse_or_zero(d);
    let mut qs = [0u8; QK_K / 4];
    for (out, xs) in qs.chunks_exact_mut(32).zip(x.chunks_exact(128)) {
        for (m, q) in out.iter_mut().enumerate() {
            for n in 0..4 {
                let code = round_half_away(xs[m + 32 * n] * id).wrapping_add(1);
                *q = q.wrapping_add(((code & 3) as u8) << (2 * n));
            }
        }
    }
    BlockTQ2_0 {
        qs,
        d: F16Le::from_f32(d),
    }
}

fn dequantize_block(b: &BlockTQ2_0, y: &mut [f32]) {
    let d = b.d.to_f32();
    for (out, code) in y.iter_mut().zip(codes(&b.qs)) {
        *out = (i32::from(code) - 1) as f32 * d;
    }
}

pub fn dequantize(src: &[u8], dst: &mut [f32]) {
    dequantize_blocks(src, dst, QK_K, dequantize_block);
}

pub fn quantize(src: &[f32], dst: &mut [u8]) {
    quantize_blocks(src, dst, QK_K, quantize_block);
}

/// `ggml_vec_dot_tq2_0_q8_K`: per block, Σ (code − 1)·q8 times (dy · dx).
pub fn dot(weights: &[u8], activation: &[u8]) -> f32 {
    let mut sumf = 0.0f32;
    for (x, y) in dot_pairs::<BlockTQ2_0, BlockQ8_K>(weights, activation, 1) {
        let y = &y[0];
        let sumi: i32 = codes(&x.qs)
            .zip(y.qs)
            .map(|(code, q)| (i32::from(code) - 1) * i32::from(q))
            .sum();
        sumf += sumi as f32 * (y.d.to_f32() * x.d.to_f32());
    }
    sumf
}
