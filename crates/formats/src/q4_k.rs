//! Q4_K (ggml type 12): 256 values in 8 sub-blocks of 32, each value a 4-bit code meaning
//! `d·scale·code − dmin·min`, with a 6-bit scale and a 6-bit minimum per sub-block (packed in 12
//! bytes, see [`crate::kquant_common::scale_min`]) under two f16 super-scales. Dotted with Q8_K.
//!
//! Each 64 values own 32 bytes of `qs`: the first 32 values are the low nibbles, the next 32 the
//! high nibbles.

use bytemuck::{Pod, Zeroable};

use crate::common::{dequantize_blocks, quantize_blocks, F16Le};
use crate::kquant_common::{
    dequantize_scale_min, dot_scale_min, quantize_super_block, scale_min, Qkx2Search, ScaleMinBlock,
};
use crate::q8_k::QK_K;

#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Pod, Zeroable)]
pub struct BlockQ4_K {
    /// Super-scale of the sub-block scales.
    pub d: F16Le,
    /// Super-scale of the sub-block minimums.
    pub dmin: F16Le,
    /// Eight 6-bit scales and eight 6-bit minimums.
    pub scales: [u8; 12],
    pub qs: [u8; QK_K / 2],
}
impl BlockQ4_K {
    /// The 6-bit scale and 6-bit minimum of sub-block `j` (0..8): its values are
    /// `d·scale·code − dmin·min`. Panics when `j >= 8`.
    pub fn scale_min(&self, j: usize) -> (u8, u8) {
        scale_min(&self.scales, j)
    }
}

const _: () = assert!(size_of::<BlockQ4_K>() == 144);

/// `quantize_row_q4_K_ref`'s search: 21 refinements around `nmax` − 1.
const SEARCH: Qkx2Search = Qkx2Search {
    nmax: 15,
    rmin: -1.0,
    rdelta: 0.1,
    nstep: 20,
    use_mad: false,
};

/// The codes 0..=15 of one block, in value order.
fn codes(b: &BlockQ4_K) -> [u8; QK_K] {
    let mut out = [0u8; QK_K];
    for (y, qs) in out.chunks_exact_mut(64).zip(b.qs.chunks_exact(32)) {
        let (lo, hi) = y.split_at_mut(32);
        for ((a, c), &q) in lo.iter_mut().zip(hi).zip(qs) {
            *a = q & 0xf;
            *c = q >> 4;
        }
    }
    out
}

fn quantize_block(x: &[f32]) -> BlockQ4_K {
    let sb = quantize_super_block(x, &SEARCH);
    let mut qs = [0u8; QK_K / 2];
    for (q, l) in qs.chunks_exact_mut(32).zip(sb.codes.chunks_exact(64)) {
        let (lo, hi) = l.split_at(32);
        for ((q, &a), &b) in q.iter_mut().zip(lo).zip(hi) {
            *q = a | (b << 4);
        }
    }
    BlockQ4_K {
        d: sb.d,
        dmin: sb.dmin,
        scales: sb.scales,
        qs,
    }
}

impl ScaleMinBlock for BlockQ4_K {
    fn codes(&self) -> [u8; QK_K] {
        codes(self)
    }
    fn packed(&self) -> &[u8; 12] {
        &self.scales
    }
    fn super_scales(&self) -> (F16Le, F16Le) {
        (self.d, self.dmin)
    }
}

pub fn dequantize(src: &[u8], dst: &mut [f32]) {
    dequantize_blocks(src, dst, QK_K, dequantize_scale_min::<BlockQ4_K>);
}

/// `quantize_row_q4_K_ref` (no importance matrix).
pub fn quantize(src: &[f32], dst: &mut [u8]) {
    quantize_blocks(src, dst, QK_K, quantize_block);
}

/// `ggml_vec_dot_q4_K_q8_K`: per block, d·y.d times Σ scale·code·q8 in eight lanes, minus
/// dmin·y.d times Σ bsums·min; the lanes are summed at the end.
pub fn dot(weights: &[u8], activation: &[u8]) -> f32 {
    dot_scale_min::<BlockQ4_K>(weights, activation)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dot_reconstruction_and_zero_block() {
        crate::kquant_common::codec_tests::check_codec(
            quantize,
            dequantize,
            dot,
            144,
            // One code step of a sub-block spanning [-1, 1].
            2.0 / 15.0,
        );
    }
}
