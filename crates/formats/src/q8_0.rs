//! Q8_0 (ggml type 8): 32 values as int8 codes times one f16 scale. The activation partner of
//! most weight formats here.

use bytemuck::{Pod, Zeroable};

use crate::common::{dequantize_blocks, dot_pairs, inverse_or_zero, quantize_blocks, F16Le};

pub const QK8_0: usize = 32;

#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Pod, Zeroable)]
pub struct BlockQ8_0 {
    pub d: F16Le,
    pub qs: [i8; QK8_0],
}
const _: () = assert!(size_of::<BlockQ8_0>() == 34);

/// Largest |x| of a block.
fn amax(x: &[f32]) -> f32 {
    x.iter().fold(0.0f32, |m, v| m.max(v.abs()))
}

/// `quantize_row_q8_0_ref`: d = amax/127, codes `roundf(x · (1/d))`.
fn quantize_block(x: &[f32]) -> BlockQ8_0 {
    let d = amax(x) / 127.0;
    let id = inverse_or_zero(d);
    let mut qs = [0i8; QK8_0];
    for (q, v) in qs.iter_mut().zip(x) {
        *q = (v * id).round() as i8;
    }
    BlockQ8_0 {
        d: F16Le::from_f32(d),
        qs,
    }
}

/// The CPU backend's `from_float` on x86 (AVX/AVX2/AVX-512): the same scale, but the multiplier
/// is `127/amax` rather than `1/d`, and codes round to nearest even (`_mm256_round_ps`). This is
/// what activations go through before a dot product, so matching it keeps the integer parts of
/// the dot products identical to the reference engine's.
fn quantize_activation_block(x: &[f32]) -> BlockQ8_0 {
    let max = amax(x);
    let d = max / 127.0;
    let id = if max != 0.0 { 127.0 / max } else { 0.0 };
    let mut qs = [0i8; QK8_0];
    for (q, v) in qs.iter_mut().zip(x) {
        *q = (v * id).round_ties_even() as i8;
    }
    BlockQ8_0 {
        d: F16Le::from_f32(d),
        qs,
    }
}

fn dequantize_block(b: &BlockQ8_0, y: &mut [f32]) {
    let d = b.d.to_f32();
    for (out, q) in y.iter_mut().zip(b.qs) {
        *out = f32::from(q) * d;
    }
}

/// Σ qx·qy over one pair of blocks: the integer part every Q8_0 dot is built from.
#[inline]
pub fn block_sum(x: &[i8; QK8_0], y: &[i8; QK8_0]) -> i32 {
    x.iter()
        .zip(y)
        .map(|(&a, &b)| i32::from(a) * i32::from(b))
        .sum()
}

pub fn dequantize(src: &[u8], dst: &mut [f32]) {
    dequantize_blocks(src, dst, QK8_0, dequantize_block);
}

pub fn quantize(src: &[f32], dst: &mut [u8]) {
    quantize_blocks(src, dst, QK8_0, quantize_block);
}

/// Quantizes activations the way the x86 CPU backend does: the reference's scale, but codes
/// `round_to_nearest_even(x · 127/amax)`, so exact ties (and last-ulp cases) can differ from
/// [`quantize`].
pub fn quantize_activation(src: &[f32], dst: &mut [u8]) {
    quantize_blocks(src, dst, QK8_0, quantize_activation_block);
}

/// `ggml_vec_dot_q8_0_q8_0`.
pub fn dot(weights: &[u8], activation: &[u8]) -> f32 {
    let mut sumf = 0.0f32;
    for (x, y) in dot_pairs::<BlockQ8_0, BlockQ8_0>(weights, activation, 1) {
        let sumi = block_sum(&x.qs, &y[0].qs);
        sumf += sumi as f32 * (x.d.to_f32() * y[0].d.to_f32());
    }
    sumf
}

#[cfg(test)]
mod tests {
    use super::*;

    fn codes(quantize: fn(&[f32], &mut [u8]), x: &[f32; QK8_0]) -> [i8; QK8_0] {
        let mut out = [0u8; 34];
        quantize(x, &mut out);
        bytemuck::pod_read_unaligned::<BlockQ8_0>(&out).qs
    }

    #[test]
    fn reference_rounds_ties_away_and_activations_round_them_to_even() {
        // amax 127 makes d = 1 exactly, so 2.5 and -0.5 are exact ties.
        let mut x = [0.0f32; QK8_0];
        x[0] = 127.0;
        x[1] = 2.5;
        x[2] = -0.5;
        let reference = codes(quantize, &x);
        let activation = codes(quantize_activation, &x);
        assert_eq!(reference[..3], [127, 3, -1]);
        assert_eq!(activation[..3], [127, 2, 0]);
    }

    #[test]
    fn zero_block_has_zero_scale_and_codes() {
        let x = [0.0f32; QK8_0];
        let mut out = [0xffu8; 34];
        quantize(&x, &mut out);
        assert_eq!(out, [0u8; 34]);
    }
}
