//! Q5_K (ggml type 13): Q4_K with a fifth bit per code — 256 values in 8 sub-blocks of 32, each
//! a code 0..=31 meaning `d·scale·code − dmin·min`, with a 6-bit scale and a 6-bit minimum per
//! sub-block (packed in 12 bytes, see [`crate::kquant_common::scale_min`]) under two f16
//! super-scales. Dotted with Q8_K.
//!
//! The low four bits are laid out as Q4_K's (each 64 values own 32 bytes of `qs`: low nibbles
//! then high nibbles); the fifth bit of value `l + 32k` (k = 0..8) is bit `k` of `qh[l]`.

use bytemuck::{Pod, Zeroable};

use crate::common::{dequantize_blocks, dot_pairs, quantize_blocks, F16Le};
use crate::kquant_common::{dot_block, quantize_super_block, scale_min, Qkx2Search};
use crate::q8_k::{BlockQ8_K, QK_K};

#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Pod, Zeroable)]
pub struct BlockQ5_K {
    /// Super-scale of the sub-block scales.
    pub d: F16Le,
    /// Super-scale of the sub-block minimums.
    pub dmin: F16Le,
    /// Eight 6-bit scales and eight 6-bit minimums.
    pub scales: [u8; 12],
    /// Fifth bit of each code.
    pub qh: [u8; QK_K / 8],
    /// Low four bits of each code.
    pub qs: [u8; QK_K / 2],
}
impl BlockQ5_K {
    /// The 6-bit scale and 6-bit minimum of sub-block `j` (0..8): its values are
    /// `d·scale·code − dmin·min`. Panics when `j >= 8`.
    pub fn scale_min(&self, j: usize) -> (u8, u8) {
        scale_min(&self.scales, j)
    }
}

const _: () = assert!(size_of::<BlockQ5_K>() == 176);

/// `quantize_row_q5_K_ref`'s search: 16 refinements from `nmax` − 0.5.
const SEARCH: Qkx2Search = Qkx2Search {
    nmax: 31,
    rmin: -0.5,
    rdelta: 0.1,
    nstep: 15,
    use_mad: false,
};

/// The codes 0..=31 of one block, in value order.
fn codes(b: &BlockQ5_K) -> [u8; QK_K] {
    let mut out = [0u8; QK_K];
    for (pair, (y, qs)) in out
        .chunks_exact_mut(64)
        .zip(b.qs.chunks_exact(32))
        .enumerate()
    {
        let (lo, hi) = y.split_at_mut(32);
        for (((a, c), &q), &h) in lo.iter_mut().zip(hi).zip(qs).zip(&b.qh) {
            *a = (q & 0xf) | (((h >> (2 * pair)) & 1) << 4);
            *c = (q >> 4) | (((h >> (2 * pair + 1)) & 1) << 4);
        }
    }
    out
}

fn quantize_block(x: &[f32]) -> BlockQ5_K {
    let sb = quantize_super_block(x, &SEARCH);
    let mut qs = [0u8; QK_K / 2];
    let mut qh = [0u8; QK_K / 8];
    for (pair, (q, l)) in qs
        .chunks_exact_mut(32)
        .zip(sb.codes.chunks_exact(64))
        .enumerate()
    {
        let (lo, hi) = l.split_at(32);
        for (((q, h), &a), &b) in q.iter_mut().zip(&mut qh).zip(lo).zip(hi) {
            *q = (a & 0xf) | ((b & 0xf) << 4);
            *h |= ((a >> 4) << (2 * pair)) | ((b >> 4) << (2 * pair + 1));
        }
    }
    BlockQ5_K {
        d: sb.d,
        dmin: sb.dmin,
        scales: sb.scales,
        qh,
        qs,
    }
}

fn dequantize_block(b: &BlockQ5_K, y: &mut [f32]) {
    let d = b.d.to_f32();
    let min = b.dmin.to_f32();
    for (j, (ys, ls)) in y
        .chunks_exact_mut(32)
        .zip(codes(b).chunks_exact(32))
        .enumerate()
    {
        let (sc, m) = scale_min(&b.scales, j);
        let dl = d * f32::from(sc);
        let ml = min * f32::from(m);
        for (out, &l) in ys.iter_mut().zip(ls) {
            *out = dl * f32::from(l) - ml;
        }
    }
}

pub fn dequantize(src: &[u8], dst: &mut [f32]) {
    dequantize_blocks(src, dst, QK_K, dequantize_block);
}

/// `quantize_row_q5_K_ref` (no importance matrix).
pub fn quantize(src: &[f32], dst: &mut [u8]) {
    quantize_blocks(src, dst, QK_K, quantize_block);
}

/// `ggml_vec_dot_q5_K_q8_K`: per block, d·y.d times Σ scale·code·q8 in eight lanes, minus
/// dmin·y.d times Σ bsums·min; the lanes are summed at the end.
pub fn dot(weights: &[u8], activation: &[u8]) -> f32 {
    let mut lanes = [0.0f32; 8];
    let mut sumf = 0.0f32;
    for (x, y) in dot_pairs::<BlockQ5_K, BlockQ8_K>(weights, activation, 1) {
        dot_block(
            &codes(x),
            &x.scales,
            x.d,
            x.dmin,
            &y[0],
            &mut lanes,
            &mut sumf,
        );
    }
    for l in lanes {
        sumf += l;
    }
    sumf
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::q8_k;

    /// A deterministic spread of values (xorshift), so the tests need no seed handling.
    fn values(n: usize, mut state: u64) -> Vec<f32> {
        (0..n)
            .map(|_| {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                (state >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0
            })
            .collect()
    }

    #[test]
    fn dot_matches_the_dequantized_product() {
        let n = 4 * QK_K;
        let w = values(n, 0x9e37_79b9_7f4a_7c15);
        let a = values(n, 0x2545_f491_4f6c_dd1d);
        let mut wq = vec![0u8; n / QK_K * 176];
        let mut aq = vec![0u8; n / QK_K * 292];
        quantize(&w, &mut wq);
        q8_k::quantize(&a, &mut aq);
        let (mut wd, mut ad) = (vec![0f32; n], vec![0f32; n]);
        dequantize(&wq, &mut wd);
        q8_k::dequantize(&aq, &mut ad);
        // The exact product of the codes' values, in f64: only the float summation may differ.
        let exact: f64 = wd
            .iter()
            .zip(&ad)
            .map(|(&x, &y)| f64::from(x) * f64::from(y))
            .sum();
        let abs_sum: f64 = wd
            .iter()
            .zip(&ad)
            .map(|(&x, &y)| f64::from(x * y).abs())
            .sum();
        let ours = f64::from(dot(&wq, &aq));
        assert!(
            (ours - exact).abs() <= 1e-5 * abs_sum + 1e-6,
            "dot {ours} vs dequantized {exact}"
        );
        // 5 bits a value on uniform values in [-1, 1]: a sub-block's step is about 2/31, and the
        // 6-bit scales and minimums leave every value within one step.
        let err = w
            .iter()
            .zip(&wd)
            .map(|(x, y)| (x - y).abs())
            .fold(0.0, f32::max);
        assert!(err < 2.0 / 31.0, "worst reconstruction error {err}");
    }

    #[test]
    fn an_all_zero_block_is_all_zero_bytes() {
        let mut out = [0xffu8; 176];
        quantize(&[0.0; QK_K], &mut out);
        assert_eq!(out, [0u8; 176]);
    }
}
