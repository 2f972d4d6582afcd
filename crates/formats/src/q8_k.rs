//! Q8_K (ggml type 15): 256 int8 codes, an f32 scale and the sums of each 16 codes. The
//! activation partner of the K-quants and of TQ1_0 / TQ2_0.

use bytemuck::{Pod, Zeroable};

use crate::common::{dequantize_blocks, dot_pairs, nearest_int, quantize_blocks, F32Le, I16Le};

pub const QK_K: usize = 256;

#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Pod, Zeroable)]
pub struct BlockQ8_K {
    pub d: F32Le,
    pub qs: [i8; QK_K],
    /// Sum of each group of 16 codes.
    pub bsums: [I16Le; QK_K / 16],
}
const _: () = assert!(size_of::<BlockQ8_K>() == 292);

/// `quantize_row_q8_K_ref`, which the x86 CPU backend also uses as `from_float`. The scale is
/// taken from the value of largest magnitude *with its sign* (`iscale = -127/max`), so `d` is
/// negative when that value is positive; codes round with `nearest_int` and are capped at 127.
fn quantize_block(x: &[f32]) -> BlockQ8_K {
    let mut max = 0.0f32;
    let mut amax = 0.0f32;
    for &v in x {
        if v.abs() > amax {
            amax = v.abs();
            max = v;
        }
    }
    let mut block = BlockQ8_K::zeroed();
    if amax == 0.0 {
        // The reference leaves `bsums` untouched here; zero is what they sum to.
        return block;
    }
    let iscale = -127.0 / max;
    for (q, &v) in block.qs.iter_mut().zip(x) {
        *q = nearest_int(iscale * v).min(127) as i8;
    }
    for (sum, group) in block.bsums.iter_mut().zip(block.qs.chunks_exact(16)) {
        let s: i32 = group.iter().map(|&q| i32::from(q)).sum();
        *sum = I16Le::from_i16(s as i16);
    }
    block.d = F32Le::from_f32(1.0 / iscale);
    block
}

fn dequantize_block(b: &BlockQ8_K, y: &mut [f32]) {
    let d = b.d.to_f32();
    for (out, q) in y.iter_mut().zip(b.qs) {
        *out = d * f32::from(q);
    }
}

pub fn dequantize(src: &[u8], dst: &mut [f32]) {
    dequantize_blocks(src, dst, QK_K, dequantize_block);
}

pub fn quantize(src: &[f32], dst: &mut [u8]) {
    quantize_blocks(src, dst, QK_K, quantize_block);
}

/// The CPU backend converts activations with the reference quantizer itself.
pub fn quantize_activation(src: &[f32], dst: &mut [u8]) {
    quantize(src, dst);
}

/// Σ qx·qy over one pair of blocks.
#[inline]
pub fn block_sum(x: &[i8; QK_K], y: &[i8; QK_K]) -> i32 {
    x.iter()
        .zip(y)
        .map(|(&a, &b)| i32::from(a) * i32::from(b))
        .sum()
}

/// Q8_K · Q8_K (ggml has no such kernel): Σ per block of sumi · dx · dy.
pub fn dot(weights: &[u8], activation: &[u8]) -> f32 {
    let mut sumf = 0.0f32;
    for (x, y) in dot_pairs::<BlockQ8_K, BlockQ8_K>(weights, activation, 1) {
        let sumi = block_sum(&x.qs, &y[0].qs);
        sumf += sumi as f32 * (x.d.to_f32() * y[0].d.to_f32());
    }
    sumf
}
