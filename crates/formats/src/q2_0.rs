//! The Q2_0 codec: values as 2-bit codes meaning (code − 1)·d, d = max |x| as f16, code =
//! clamp(roundf(x/d) + 1, 0, 3), four codes a byte, lowest bits first. Code 3 (+2·d) is never
//! produced by the quantizer but decodes like any other.
//!
//! Three layouts share it, differing only in how many values a block holds: mainline Q2_0
//! (GGUF id 42, 64 values, 18-byte [`BlockQ2_0`]) and PrismML's 128-value [`BlockQ2_0G128`]
//! used by both PQ2_0 (id 142) and the legacy id-42 layout. All dot with Q8_0, one Q8_0 block per
//! 32 values.

use bytemuck::{Pod, Zeroable};

use crate::common::{
    dequantize_blocks, dot_pairs, inverse_or_zero, quantize_blocks, round_half_away, F16Le,
};
use crate::q8_0::{BlockQ8_0, QK8_0};

pub const QK2_0: usize = 64;
pub const QK2_0_G128: usize = 128;

/// Mainline Q2_0: 64 values.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Pod, Zeroable)]
pub struct BlockQ2_0 {
    pub d: F16Le,
    pub qs: [u8; QK2_0 / 4],
}
const _: () = assert!(size_of::<BlockQ2_0>() == 18);

/// PrismML's group-128 layout (PQ2_0 and legacy Q2_0): the same codec, 128 values.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Pod, Zeroable)]
pub struct BlockQ2_0G128 {
    pub d: F16Le,
    pub qs: [u8; QK2_0_G128 / 4],
}
const _: () = assert!(size_of::<BlockQ2_0G128>() == 34);

/// A block of the Q2_0 codec: one f16 scale and `ELEMS / 4` bytes of codes.
pub trait Q2Block: Pod {
    const ELEMS: usize;
    fn scale(&self) -> F16Le;
    fn codes(&self) -> &[u8];
    fn from_parts(d: F16Le, codes: &[u8]) -> Self;
}

impl Q2Block for BlockQ2_0 {
    const ELEMS: usize = QK2_0;
    fn scale(&self) -> F16Le {
        self.d
    }
    fn codes(&self) -> &[u8] {
        &self.qs
    }
    fn from_parts(d: F16Le, codes: &[u8]) -> Self {
        let mut b = Self::zeroed();
        b.d = d;
        b.qs.copy_from_slice(codes);
        b
    }
}

impl Q2Block for BlockQ2_0G128 {
    const ELEMS: usize = QK2_0_G128;
    fn scale(&self) -> F16Le {
        self.d
    }
    fn codes(&self) -> &[u8] {
        &self.qs
    }
    fn from_parts(d: F16Le, codes: &[u8]) -> Self {
        let mut b = Self::zeroed();
        b.d = d;
        b.qs.copy_from_slice(codes);
        b
    }
}

/// Code `j` (0..=3) of a block.
#[inline]
fn code(codes: &[u8], j: usize) -> u8 {
    (codes[j / 4] >> (2 * (j % 4))) & 3
}

fn quantize_block<B: Q2Block>(x: &[f32]) -> B {
    let d = x.iter().fold(0.0f32, |m, v| m.max(v.abs()));
    let id = inverse_or_zero(d);
    let mut codes = [0u8; QK2_0_G128 / 4];
    let codes = &mut codes[..B::ELEMS / 4];
    for (j, &v) in x.iter().enumerate() {
        let q = round_half_away(v * id).saturating_add(1).clamp(0, 3) as u8;
        codes[j / 4] |= q << (2 * (j % 4));
    }
    B::from_parts(F16Le::from_f32(d), codes)
}

fn dequantize_block<B: Q2Block>(b: &B, y: &mut [f32]) {
    let d = b.scale().to_f32();
    for (j, out) in y.iter_mut().enumerate() {
        *out = (i32::from(code(b.codes(), j)) - 1) as f32 * d;
    }
}

/// Dequantizes whole blocks of any Q2_0 layout.
pub fn dequantize_layout<B: Q2Block>(src: &[u8], dst: &mut [f32]) {
    dequantize_blocks(src, dst, B::ELEMS, dequantize_block::<B>);
}

/// Quantizes whole blocks of any Q2_0 layout.
pub fn quantize_layout<B: Q2Block>(src: &[f32], dst: &mut [u8]) {
    quantize_blocks(src, dst, B::ELEMS, quantize_block::<B>);
}

/// `ggml_vec_dot_q2_0_q8_0`, for any Q2_0 layout: per block `dx · Σₖ dyₖ · Σ (code − 1)·q8`
/// over the Q8_0 blocks it spans.
pub fn dot_layout<B: Q2Block>(weights: &[u8], activation: &[u8]) -> f32 {
    let mut sumf = 0.0f32;
    for (x, ys) in dot_pairs::<B, BlockQ8_0>(weights, activation, B::ELEMS / QK8_0) {
        let mut sum_scaled = 0.0f32;
        for (k, y) in ys.iter().enumerate() {
            let sumi: i32 =
                y.qs.iter()
                    .enumerate()
                    .map(|(j, &q)| (i32::from(code(x.codes(), k * QK8_0 + j)) - 1) * i32::from(q))
                    .sum();
            sum_scaled += y.d.to_f32() * sumi as f32;
        }
        sumf += x.scale().to_f32() * sum_scaled;
    }
    sumf
}

pub fn dequantize(src: &[u8], dst: &mut [f32]) {
    dequantize_layout::<BlockQ2_0>(src, dst);
}

pub fn quantize(src: &[f32], dst: &mut [u8]) {
    quantize_layout::<BlockQ2_0>(src, dst);
}

pub fn dot(weights: &[u8], activation: &[u8]) -> f32 {
    dot_layout::<BlockQ2_0>(weights, activation)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_are_two_bits_lowest_first() {
        let mut x = [0.0f32; QK2_0];
        x[0] = -2.0; // code 0
        x[1] = 2.0; // code 2
        x[5] = 1.0; // 0.5 rounds away from zero: code 2
        x[6] = -1.0; // −0.5 rounds away from zero: code 0
        let mut bytes = [0u8; 18];
        quantize(&x, &mut bytes);
        let block: BlockQ2_0 = bytemuck::pod_read_unaligned(&bytes);
        assert_eq!(block.d.to_f32(), 2.0);
        assert_eq!(block.qs[0], 0b01_01_10_00);
        assert_eq!(block.qs[1], 0b01_00_10_01);
        assert!(block.qs[2..].iter().all(|&b| b == 0x55));
    }

    #[test]
    fn zero_block_codes_zero_as_one() {
        let mut bytes = [0u8; 34];
        quantize_layout::<BlockQ2_0G128>(&[0.0; QK2_0_G128], &mut bytes);
        assert_eq!(bytes[..2], [0, 0]);
        assert!(bytes[2..].iter().all(|&b| b == 0x55));
    }

    #[test]
    fn code_three_decodes_as_two_d() {
        let block = BlockQ2_0 {
            d: F16Le::from_f32(1.5),
            qs: [0xff; 16],
        };
        let mut y = [0.0f32; QK2_0];
        dequantize(bytemuck::bytes_of(&block), &mut y);
        assert!(y.iter().all(|&v| v == 3.0));
    }
}
