//! TQ1_0 (ggml type 34): 256 ternary values packed five to a byte in base 3 (1.6875 bits each).
//!
//! Layout: `qs[48]` then `qh[4]` then the f16 scale. Bytes 0..32 of `qs` carry values 0..160
//! (byte m: values m, m+32, …, m+128), bytes 32..48 carry values 160..240 (byte m: 160+m,
//! 176+m, …), and `qh` the last 16 (byte j: 240+j, 244+j, 248+j, 252+j). A byte stores its
//! trits t0..t4 (first value most significant) as ⌈(Σ tᵢ·3^(4−i)) · 256 / 243⌉, so multiplying
//! by 3ⁿ mod 256 brings trit n to the top and `(q·3) >> 8` reads it. Dotted with Q8_K.

use bytemuck::{Pod, Zeroable};

use crate::common::{
    dequantize_blocks, dot_pairs, inverse_or_zero, quantize_blocks, round_half_away, F16Le,
};
use crate::q8_k::{BlockQ8_K, QK_K};
use crate::tq2_0::BlockTQ2_0;

#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Pod, Zeroable)]
pub struct BlockTQ1_0 {
    pub qs: [u8; (QK_K - 4 * QK_K / 64) / 5],
    pub qh: [u8; QK_K / 64],
    pub d: F16Le,
}
const _: () = assert!(size_of::<BlockTQ1_0>() == 54);

const POW3: [u8; 5] = [1, 3, 9, 27, 81];

/// Trit `n` (0 = most significant) of a packed byte, 0..=2.
#[inline]
pub(crate) fn trit(byte: u8, n: usize) -> u8 {
    let q = byte.wrapping_mul(POW3[n]);
    ((u16::from(q) * 3) >> 8) as u8
}

/// Packs up to five trits (first most significant), padded with zero trits to five, as the
/// fixed-point fraction the decoder reads.
#[inline]
pub(crate) fn pack(trits: impl Iterator<Item = i32>, count: u32) -> u8 {
    let mut q = 0u8;
    for t in trits {
        q = q.wrapping_mul(3).wrapping_add(t as u8);
    }
    for _ in count..5 {
        q = q.wrapping_mul(3);
    }
    (u16::from(q) * 256).div_ceil(243) as u8
}

/// The trit (0..=2) of each value, in the order the values come.
fn trits(b: &BlockTQ1_0) -> impl Iterator<Item = u8> + '_ {
    let (wide, narrow) = b.qs.split_at(32);
    let wide = (0..5).flat_map(move |n| wide.iter().map(move |&q| trit(q, n)));
    let narrow = (0..5).flat_map(move |n| narrow.iter().map(move |&q| trit(q, n)));
    let high = (0..4).flat_map(move |n| b.qh.iter().map(move |&q| trit(q, n)));
    wide.chain(narrow).chain(high)
}

/// `quantize_row_tq1_0_ref`: d = max |x|, trit = lroundf(x/d) + 1.
fn quantize_block(x: &[f32]) -> BlockTQ1_0 {
    let d = x.iter().fold(0.0f32, |m, v| m.max(v.abs()));
    let id = inverse_or_zero(d);
    let mut block = block_of_trits(|i| round_half_away(x[i] * id).wrapping_add(1));
    block.d = F16Le::from_f32(d);
    block
}

/// A block (scale zero) holding trit `t(i)` (0..=2) of each value `i`, in the canonical bytes.
fn block_of_trits(t: impl Fn(usize) -> i32) -> BlockTQ1_0 {
    let mut block = BlockTQ1_0::zeroed();
    let (wide, narrow) = block.qs.split_at_mut(32);
    for (m, q) in wide.iter_mut().enumerate() {
        *q = pack((0..5).map(|n| t(m + 32 * n)), 5);
    }
    for (m, q) in narrow.iter_mut().enumerate() {
        *q = pack((0..5).map(|n| t(160 + m + 16 * n)), 5);
    }
    for (j, q) in block.qh.iter_mut().enumerate() {
        *q = pack((0..4).map(|n| t(240 + j + 4 * n)), 4);
    }
    block
}

/// The block as TQ2_0 (the same values: a trit is a 2-bit code), for the packed kernels but
/// AVX-512 VNNI's, which read TQ1_0 weights converted at load as TQ2_0's: 22 % more bytes, but a
/// shift and a mask per code instead of a base-3 decode (AVX-512 VNNI reads the base-3 bytes).
pub fn to_tq2_0(b: &BlockTQ1_0) -> BlockTQ2_0 {
    let mut qs = [0u8; QK_K / 4];
    for (v, t) in trits(b).enumerate() {
        // TQ2_0 keeps value 128h + 32l + m at bits 2l of byte 32h + m.
        qs[32 * (v / 128) + v % 32] |= t << (2 * (v % 128 / 32));
    }
    BlockTQ2_0 { qs, d: b.d }
}

/// The inverse of [`to_tq2_0`] (codes 0..=2): a block of the same values, in the canonical
/// trit bytes (a stored byte the quantizer would not write comes back as the one it would).
pub(crate) fn from_tq2_0(b: &BlockTQ2_0) -> BlockTQ1_0 {
    let code = |v: usize| i32::from((b.qs[32 * (v / 128) + v % 32] >> (2 * (v % 128 / 32))) & 3);
    let mut block = block_of_trits(code);
    block.d = b.d;
    block
}

fn dequantize_block(b: &BlockTQ1_0, y: &mut [f32]) {
    let d = b.d.to_f32();
    for (out, t) in y.iter_mut().zip(trits(b)) {
        *out = (i32::from(t) - 1) as f32 * d;
    }
}

pub fn dequantize(src: &[u8], dst: &mut [f32]) {
    dequantize_blocks(src, dst, QK_K, dequantize_block);
}

pub fn quantize(src: &[f32], dst: &mut [u8]) {
    quantize_blocks(src, dst, QK_K, quantize_block);
}

/// `ggml_vec_dot_tq1_0_q8_K`: per block, Σ (trit − 1)·q8 times (dx · dy).
pub fn dot(weights: &[u8], activation: &[u8]) -> f32 {
    let mut sumf = 0.0f32;
    for (x, y) in dot_pairs::<BlockTQ1_0, BlockQ8_K>(weights, activation, 1) {
        let y = &y[0];
        let sumi: i32 = trits(x)
            .zip(y.qs)
            .map(|(t, q)| (i32::from(t) - 1) * i32::from(q))
            .sum();
        sumf += sumi as f32 * (x.d.to_f32() * y.d.to_f32());
    }
    sumf
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_five_trit_byte_reads_back() {
        for n in 0..243u32 {
            let trits: Vec<i32> = (0..5).rev().map(|k| (n / 3u32.pow(k) % 3) as i32).collect();
            let byte = pack(trits.iter().copied(), 5);
            let read: Vec<i32> = (0..5).map(|k| i32::from(trit(byte, k))).collect();
            assert_eq!(read, trits, "packed {n} as {byte:#04x}");
        }
    }

    #[test]
    fn four_trit_bytes_read_back_with_a_zero_fifth() {
        for n in 0..81u32 {
            let trits: Vec<i32> = (0..4).rev().map(|k| (n / 3u32.pow(k) % 3) as i32).collect();
            let byte = pack(trits.iter().copied(), 4);
            let read: Vec<i32> = (0..5).map(|k| i32::from(trit(byte, k))).collect();
            assert_eq!(read[..4], trits[..], "packed {n} as {byte:#04x}");
            assert_eq!(read[4], 0);
        }
    }

    /// Random blocks (any byte, canonical or not) → TQ2_0 has the same values; back → the
    /// same values again, and a canonical block comes back byte for byte.
    #[test]
    fn the_tq2_0_form_keeps_every_value() {
        let mut state = 0x1234_5678_9abc_def0u64;
        for round in 0..200 {
            let mut bytes = [0u8; 54];
            for b in &mut bytes {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                *b = state as u8;
            }
            bytes[52..].copy_from_slice(&crate::common::F16Le::from_f32(0.25).0);
            let block: BlockTQ1_0 = *bytemuck::from_bytes(&bytes);
            let mut want = [0f32; QK_K];
            dequantize(&bytes, &mut want);
            let as_tq2 = to_tq2_0(&block);
            let mut got = [0f32; QK_K];
            crate::tq2_0::dequantize(bytemuck::bytes_of(&as_tq2), &mut got);
            assert_eq!(got, want, "round {round}: as TQ2_0");
            let back = from_tq2_0(&as_tq2);
            dequantize(bytemuck::bytes_of(&back), &mut got);
            assert_eq!(got, want, "round {round}: back");
            assert_eq!(
                from_tq2_0(&to_tq2_0(&back)),
                back,
                "round {round}: canonical"
            );
        }
    }

    #[test]
    fn values_land_in_the_documented_places() {
        // One +d value at each position in turn must decode at that position only.
        for pos in [0, 31, 32, 159, 160, 175, 176, 239, 240, 243, 244, 255] {
            let mut x = [0.0f32; QK_K];
            x[pos] = 1.0;
            let mut bytes = [0u8; 54];
            quantize(&x, &mut bytes);
            let mut y = [0.0f32; QK_K];
            dequantize(&bytes, &mut y);
            assert_eq!(y, x, "value {pos}");
        }
    }
}
