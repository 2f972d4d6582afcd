//! Q1_0 (ggml type 41, Bonsai's format): 128 values as one sign bit each times one f16 scale,
//! the mean |x| of the block. Bit `j % 8` of byte `j / 8` is set for x ≥ 0 (so −0.0 and 0 both
//! read back as +d). One block spans four Q8_0 activation blocks.

use bytemuck::{Pod, Zeroable};

use crate::common::{dequantize_blocks, dot_pairs, quantize_blocks, F16Le};
use crate::q8_0::{BlockQ8_0, QK8_0};

pub const QK1_0: usize = 128;

#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Pod, Zeroable)]
pub struct BlockQ1_0 {
    pub d: F16Le,
    pub qs: [u8; QK1_0 / 8],
}
const _: () = assert!(size_of::<BlockQ1_0>() == 18);
const _: () = assert!(QK1_0.is_multiple_of(QK8_0));

/// Q8_0 blocks per Q1_0 block.
const SPAN: usize = QK1_0 / QK8_0;

/// Whether value `j` of a block is positive.
#[inline]
fn sign_bit(qs: &[u8; QK1_0 / 8], j: usize) -> bool {
    (qs[j / 8] >> (j % 8)) & 1 != 0
}

/// `quantize_row_q1_0_ref`: d = (Σ|x|, summed in order) / 128.
fn quantize_block(x: &[f32]) -> BlockQ1_0 {
    let sum_abs = x.iter().fold(0.0f32, |s, v| s + v.abs());
    let d = sum_abs / QK1_0 as f32;
    let mut qs = [0u8; QK1_0 / 8];
    for (j, &v) in x.iter().enumerate() {
        if v >= 0.0 {
            qs[j / 8] |= 1 << (j % 8);
        }
    }
    BlockQ1_0 {
        d: F16Le::from_f32(d),
        qs,
    }
}

fn dequantize_block(b: &BlockQ1_0, y: &mut [f32]) {
    let d = b.d.to_f32();
    for (j, out) in y.iter_mut().enumerate() {
        *out = if sign_bit(&b.qs, j) { d } else { -d };
    }
}

pub fn dequantize(src: &[u8], dst: &mut [f32]) {
    dequantize_blocks(src, dst, QK1_0, dequantize_block);
}

pub fn quantize(src: &[f32], dst: &mut [u8]) {
    quantize_blocks(src, dst, QK1_0, quantize_block);
}

/// `ggml_vec_dot_q1_0_q8_0`: each of the four Q8_0 blocks has its own scale, so per block
/// `dx · Σₖ dyₖ · (Σ ±q8)`, the inner sums exact integers.
pub fn dot(weights: &[u8], activation: &[u8]) -> f32 {
    let mut sumf = 0.0f32;
    for (x, ys) in dot_pairs::<BlockQ1_0, BlockQ8_0>(weights, activation, SPAN) {
        let mut sum_scaled = 0.0f32;
        for (k, y) in ys.iter().enumerate() {
            let sumi: i32 =
                y.qs.iter()
                    .enumerate()
                    .map(|(j, &q)| {
                        let q = i32::from(q);
                        if sign_bit(&x.qs, k * QK8_0 + j) {
                            q
                        } else {
                            -q
                        }
                    })
                    .sum();
            sum_scaled += y.d.to_f32() * sumi as f32;
        }
        sumf += x.d.to_f32() * sum_scaled;
    }
    sumf
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signs_are_bits_lowest_first_and_negative_zero_is_positive() {
        let mut x = [-1.0f32; QK1_0];
        x[0] = 1.0;
        x[9] = -0.0;
        x[127] = 0.0;
        let mut bytes = [0u8; 18];
        quantize(&x, &mut bytes);
        let block: BlockQ1_0 = bytemuck::pod_read_unaligned(&bytes);
        assert_eq!(block.d.to_f32(), 126.0 / 128.0);
        let mut want = [0u8; 16];
        want[0] = 0b0000_0001;
        want[1] = 0b0000_0010;
        want[15] = 0b1000_0000;
        assert_eq!(block.qs, want);
    }
}
