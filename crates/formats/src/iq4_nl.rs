//! IQ4_NL (ggml type 20): 32 values as 4-bit indices into a fixed non-linear table of 16 int8
//! levels, times an f16 scale. Low nibbles hold the first 16 values, high nibbles the last 16.
//! Dotted with Q8_0. Two quantizers, as the reference has: `quantize` (`quantize_iq4_nl`, what
//! `ggml_quantize_chunk` writes: seven scale tries either side) and [`quantize_row_ref`]
//! (`quantize_row_iq4_nl_ref`, the CPU backend's `from_float`: what a KV cache of this type stores).

use bytemuck::{Pod, Zeroable};

use crate::common::{dequantize_blocks, dot_pairs, quantize_blocks, F16Le};
use crate::q8_0::BlockQ8_0;

pub const QK4_NL: usize = 32;

/// `kvalues_iq4nl`: the levels the indices name.
pub const LEVELS: [i8; 16] = [
    -127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113,
];

#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Pod, Zeroable)]
pub struct BlockIq4Nl {
    pub d: F16Le,
    pub qs: [u8; QK4_NL / 2],
}
const _: () = assert!(size_of::<BlockIq4Nl>() == 18);

/// ggml's `best_index_int8` over [`LEVELS`]: the nearest level's index (the upper one on a tie).
fn best_index(x: f32) -> u8 {
    let level = |i: usize| f32::from(LEVELS[i]);
    if x <= level(0) {
        return 0;
    }
    if x >= level(15) {
        return 15;
    }
    let (mut lo, mut hi) = (0usize, 15usize);
    while hi - lo > 1 {
        let mid = (lo + hi) / 2;
        if x < level(mid) {
            hi = mid;
        } else {
            lo = mid;
        }
    }
    if x - level(hi - 1) < level(hi) - x {
        (hi - 1) as u8
    } else {
        hi as u8
    }
}

/// `quantize_row_iq4_nl_impl` for one block without an importance matrix (weights `x²`), with
/// `ntry` scale tries either side (−1: none, and the indices of the first guess are kept).
fn quantize_block(x: &[f32], ntry: i32) -> BlockIq4Nl {
    let mut amax = 0.0f32;
    let mut max = 0.0f32;
    for &v in x {
        if v.abs() > amax {
            amax = v.abs();
            max = v;
        }
    }
    let mut codes = [0u8; QK4_NL];
    let mut d = 0.0f32;
    // The reference leaves an all-(near-)zero block's indices as they were (its `from_float`
    // reads an uninitialised buffer there); with d = 0 they mean nothing, and these are what
    // its scale-searching quantizer writes.
    if amax >= 1e-15 {
        let level0 = f32::from(LEVELS[0]);
        d = if ntry > 0 {
            -max / level0
        } else {
            max / level0
        };
        let sums = |id: f32, codes: Option<&mut [u8; QK4_NL]>| {
            let (mut sumqx, mut sumq2) = (0.0f32, 0.0f32);
            let mut codes = codes;
            for (j, &v) in x.iter().enumerate() {
                let l = best_index(id * v);
                if let Some(c) = codes.as_deref_mut() {
                    c[j] = l;
                }
                let q = f32::from(LEVELS[usize::from(l)]);
                let w = v * v;
                sumqx += w * q * v;
                sumq2 += w * q * q;
            }
            (sumqx, sumq2)
        };
        let (sumqx, sumq2) = sums(1.0 / d, Some(&mut codes));
        d = if sumq2 > 0.0 { sumqx / sumq2 } else { 0.0 };
        let mut best = d * sumqx;
        for itry in -ntry..=ntry {
            let (sumqx, sumq2) = sums((itry as f32 + level0) / max, None);
            if sumq2 > 0.0 && sumqx * sumqx > best * sumq2 {
                d = sumqx / sumq2;
                best = d * sumqx;
            }
        }
    } else {
        codes = [8; QK4_NL];
    }
    if ntry > 0 {
        let id = if d != 0.0 { 1.0 / d } else { 0.0 };
        for (c, &v) in codes.iter_mut().zip(x) {
            *c = best_index(id * v);
        }
    }
    let mut qs = [0u8; QK4_NL / 2];
    for (j, q) in qs.iter_mut().enumerate() {
        *q = codes[j] | (codes[j + QK4_NL / 2] << 4);
    }
    BlockIq4Nl {
        d: F16Le::from_f32(d),
        qs,
    }
}

fn dequantize_block(b: &BlockIq4Nl, y: &mut [f32]) {
    let d = b.d.to_f32();
    let (lo, hi) = y.split_at_mut(QK4_NL / 2);
    for ((q, a), c) in b.qs.iter().zip(lo).zip(hi) {
        *a = d * f32::from(LEVELS[usize::from(q & 0x0f)]);
        *c = d * f32::from(LEVELS[usize::from(q >> 4)]);
    }
}

pub fn dequantize(src: &[u8], dst: &mut [f32]) {
    dequantize_blocks(src, dst, QK4_NL, dequantize_block);
}

/// `quantize_iq4_nl` without an importance matrix (`ggml_quantize_chunk`'s).
pub fn quantize(src: &[f32], dst: &mut [u8]) {
    quantize_blocks(src, dst, QK4_NL, |x| quantize_block(x, 7));
}

/// `quantize_row_iq4_nl_ref`: the CPU backend's `from_float`, so what the reference's KV cache of
/// this type stores (the first scale guess refined once, no search).
pub fn quantize_row_ref(src: &[f32], dst: &mut [u8]) {
    quantize_blocks(src, dst, QK4_NL, |x| quantize_block(x, -1));
}

/// `ggml_vec_dot_iq4_nl_q8_0`: per block, Σ level·q8 times dx·dy.
pub fn dot(weights: &[u8], activation: &[u8]) -> f32 {
    let mut sumf = 0.0f32;
    for (x, y) in dot_pairs::<BlockIq4Nl, BlockQ8_0>(weights, activation, 1) {
        let y = &y[0];
        let d = y.d.to_f32() * x.d.to_f32();
        let (ylo, yhi) = y.qs.split_at(QK4_NL / 2);
        let (mut sumi1, mut sumi2) = (0i32, 0i32);
        for ((q, &a), &b) in x.qs.iter().zip(ylo).zip(yhi) {
            sumi1 += i32::from(a) * i32::from(LEVELS[usize::from(q & 0x0f)]);
            sumi2 += i32::from(b) * i32::from(LEVELS[usize::from(q >> 4)]);
        }
        sumf += d * (sumi1 + sumi2) as f32;
    }
    sumf
}
