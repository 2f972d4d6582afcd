//! PTQ1_0 (GGUF id 143, PrismML): TQ1_0's base-3 packing at 128 values a block, so one f16
//! scale covers 128 ternary values (28 bytes, 1.75 bits each). Dotted with Q8_0, four Q8_0
//! blocks per block, as the fork's CPU backend pairs it.
//!
//! Layout: `qs[24]`, `qh[2]`, then the f16 scale — last, unlike PQ2_0. The fork walks `qs` in
//! stages of 32, 16 and 8 bytes while a stage still fits; at 24 bytes the 32-byte stage never
//! does, so bytes 0..16 carry values 0..80 (byte m: values m, m+16, …, m+64), bytes 16..24 carry
//! values 80..120 (byte 16+m: 80+m, 88+m, …, 112+m) and `qh` the last 8 (byte h: 120+h, 122+h,
//! 124+h, 126+h). Each byte holds its trits as TQ1_0's do (see [`crate::tq1_0`]).

use bytemuck::{Pod, Zeroable};

use crate::common::{
    dequantize_blocks, dot_pairs, inverse_or_zero, quantize_blocks, round_half_away, F16Le,
};
use crate::q8_0::{BlockQ8_0, QK8_0};
use crate::tq1_0::{pack, trit};

pub const QK_PTQ1_0: usize = 128;

#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Pod, Zeroable)]
pub struct BlockPTQ1_0 {
    pub qs: [u8; (QK_PTQ1_0 - 4 * QK_PTQ1_0 / 64) / 5],
    pub qh: [u8; QK_PTQ1_0 / 64],
    pub d: F16Le,
}
const _: () = assert!(size_of::<BlockPTQ1_0>() == 28);

/// The `qs` stages that fit 24 bytes, as `(first byte, bytes)`: the fork's {32, 16, 8} walk
/// with the 32-byte stage skipped. A stage of `c` bytes holds 5·c values, trit n of byte m
/// being value n·c + m of the stage.
pub const STAGES: [(usize, usize); 2] = [(0, 16), (16, 8)];
/// The first value `qh` carries.
pub const QH_FIRST: usize = 120;

/// The trit (0..=2) of each value, in the order the values come.
fn trits(b: &BlockPTQ1_0) -> impl Iterator<Item = u8> + '_ {
    let staged = STAGES.iter().flat_map(move |&(start, c)| {
        let bytes = &b.qs[start..start + c];
        (0..5).flat_map(move |n| bytes.iter().map(move |&q| trit(q, n)))
    });
    let high = (0..4).flat_map(move |n| b.qh.iter().map(move |&q| trit(q, n)));
    staged.chain(high)
}

/// `quantize_row_ptq1_0_ref`: d = max |x|, trit = lroundf(x/d) + 1 (no clamp: with d the
/// maximum every ratio is within ±1).
fn quantize_block(x: &[f32]) -> BlockPTQ1_0 {
    let d = x.iter().fold(0.0f32, |m, v| m.max(v.abs()));
    let id = inverse_or_zero(d);
    let codes: [u8; QK_PTQ1_0] =
        core::array::from_fn(|i| round_half_away(x[i] * id).wrapping_add(1) as u8);
    block_of_codes(&codes, F16Le::from_f32(d))
}

/// The block holding `codes` (trits 0..=2, value order) and the scale `d`, each byte as the
/// fork's encoder writes it. Many bytes decode alike (256 > 3⁵), so a block decoded and
/// re-encoded keeps its values, and its bytes when they came from the encoder.
pub(crate) fn block_of_codes(codes: &[u8; QK_PTQ1_0], d: F16Le) -> BlockPTQ1_0 {
    let t = |i: usize| i32::from(codes[i]);
    let mut block = BlockPTQ1_0::zeroed();
    for (start, c) in STAGES {
        for m in 0..c {
            block.qs[start + m] = pack((0..5).map(|n| t(5 * start + n * c + m)), 5);
        }
    }
    for (h, q) in block.qh.iter_mut().enumerate() {
        *q = pack((0..4).map(|n| t(QH_FIRST + 2 * n + h)), 4);
    }
    block.d = d;
    block
}

/// The five trits of every byte (`trit(q, n)` for n = 0..5): packing at load decodes whole
/// matrices, where a lookup per value is several times faster than the multiply per value.
static TRITS: [[u8; 5]; 256] = {
    let mut t = [[0u8; 5]; 256];
    let mut q = 0;
    while q < 256 {
        let mut n = 0;
        let mut p = 1u8;
        while n < 5 {
            t[q][n] = ((((q as u8).wrapping_mul(p)) as u16 * 3) >> 8) as u8;
            p = p.wrapping_mul(3);
            n += 1;
        }
        q += 1;
    }
    t
};

/// The trit (0..=2) of each of the block's values, in value order: the packed kernels and the GPU
/// read PTQ1_0 as 2-bit codes.
pub fn block_codes(b: &BlockPTQ1_0) -> [u8; QK_PTQ1_0] {
    let mut codes = [0u8; QK_PTQ1_0];
    for (start, c) in STAGES {
        for (m, &q) in b.qs[start..start + c].iter().enumerate() {
            for (n, &t) in TRITS[usize::from(q)].iter().enumerate() {
                codes[5 * start + n * c + m] = t;
            }
        }
    }
    for (h, &q) in b.qh.iter().enumerate() {
        for (n, &t) in TRITS[usize::from(q)][..4].iter().enumerate() {
            codes[QH_FIRST + 2 * n + h] = t;
        }
    }
    codes
}

fn dequantize_block(b: &BlockPTQ1_0, y: &mut [f32]) {
    let d = b.d.to_f32();
    for (out, t) in y.iter_mut().zip(trits(b)) {
        *out = (i32::from(t) - 1) as f32 * d;
    }
}

pub fn dequantize(src: &[u8], dst: &mut [f32]) {
    dequantize_blocks(src, dst, QK_PTQ1_0, dequantize_block);
}

pub fn quantize(src: &[f32], dst: &mut [u8]) {
    quantize_blocks(src, dst, QK_PTQ1_0, quantize_block);
}

/// `ggml_vec_dot_ptq1_0_q8_0`: the block decoded in value order, then per block
/// `dx · Σₖ dyₖ · Σ (trit − 1)·q8` over its four Q8_0 blocks.
pub fn dot(weights: &[u8], activation: &[u8]) -> f32 {
    let mut sumf = 0.0f32;
    for (x, ys) in dot_pairs::<BlockPTQ1_0, BlockQ8_0>(weights, activation, QK_PTQ1_0 / QK8_0) {
        let mut values = [0i32; QK_PTQ1_0];
        for (v, t) in values.iter_mut().zip(trits(x)) {
            *v = i32::from(t) - 1;
        }
        let mut sum_scaled = 0.0f32;
        for (y, v) in ys.iter().zip(values.chunks_exact(QK8_0)) {
            let sumi: i32 = y.qs.iter().zip(v).map(|(&q, &v)| i32::from(q) * v).sum();
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
    fn values_land_in_the_documented_places() {
        // One +d value at each position in turn must decode at that position only: the edges of
        // both stages and of qh.
        for pos in [0, 15, 16, 79, 80, 87, 88, 119, 120, 121, 122, 127] {
            let mut x = [0.0f32; QK_PTQ1_0];
            x[pos] = 1.0;
            let mut bytes = [0u8; 28];
            quantize(&x, &mut bytes);
            let mut y = [0.0f32; QK_PTQ1_0];
            dequantize(&bytes, &mut y);
            assert_eq!(y, x, "value {pos}");
        }
    }

    #[test]
    fn the_block_decode_table_matches_the_trit_walk() {
        // Every byte value in every place (the scale bytes are not read).
        for q in 0..=255u8 {
            let mut bytes = [q; 28];
            bytes[5] = q.wrapping_add(77);
            bytes[20] = q.wrapping_mul(3);
            bytes[25] = q ^ 0x5a;
            let block: BlockPTQ1_0 = bytemuck::pod_read_unaligned(&bytes);
            let walked: Vec<u8> = trits(&block).collect();
            assert_eq!(block_codes(&block)[..], walked[..], "{bytes:?}");
        }
    }

    #[test]
    fn the_scale_is_the_last_field() {
        let mut x = [0.0f32; QK_PTQ1_0];
        x[3] = -2.5;
        let mut bytes = [0u8; 28];
        quantize(&x, &mut bytes);
        assert_eq!(bytes[26..], half::f16::from_f32(2.5).to_le_bytes());
    }
}
