//! Q2_K (ggml type 10): 256 values as 2-bit codes in 16 sub-blocks of 16, each value
//! `d·sc·code − dmin·m` with a 4-bit scale `sc` and a 4-bit min `m` per sub-block (low and high
//! nibble of `scales[j]`) and two f16 super-scales. Dotted with Q8_K.
//!
//! Byte `l` of each 32-byte half of `qs` holds values `l`, `l+32`, `l+64`, `l+96` of that
//! half's 128, lowest bits first (Q3_K keeps its low two bits the same way).

use bytemuck::{Pod, Zeroable};

use crate::common::{dequantize_blocks, dot_pairs, nearest_int, quantize_blocks, F16Le};
use crate::kquant_common::{make_qkx2_quants, Qkx2Search};
use crate::q8_k::{BlockQ8_K, QK_K};

#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Pod, Zeroable)]
pub struct BlockQ2_K {
    /// Per sub-block: scale in the low nibble, min in the high nibble.
    pub scales: [u8; QK_K / 16],
    /// 2-bit codes.
    pub qs: [u8; QK_K / 4],
    /// Super-scale of the scales.
    pub d: F16Le,
    /// Super-scale of the mins.
    pub dmin: F16Le,
}
const _: () = assert!(size_of::<BlockQ2_K>() == 84);

/// The 2-bit codes of a block, in value order.
pub(crate) fn crumbs(qs: &[u8; QK_K / 4]) -> [u8; QK_K] {
    let mut out = [0u8; QK_K];
    for (y, q) in out.chunks_exact_mut(128).zip(qs.chunks_exact(32)) {
        for (k, ys) in y.chunks_exact_mut(32).enumerate() {
            for (out, &b) in ys.iter_mut().zip(q) {
                *out = (b >> (2 * k)) & 3;
            }
        }
    }
    out
}

/// Packs codes 0..=3 (value order), the inverse of [`crumbs`].
pub(crate) fn pack_crumbs(codes: &[u8; QK_K]) -> [u8; QK_K / 4] {
    let mut qs = [0u8; QK_K / 4];
    for (q, c) in qs.chunks_exact_mut(32).zip(codes.chunks_exact(128)) {
        for (k, cs) in c.chunks_exact(32).enumerate() {
            for (b, &code) in q.iter_mut().zip(cs) {
                *b |= (code & 3) << (2 * k);
            }
        }
    }
    qs
}

/// The reference's tuning of the scale-and-min search for 2-bit codes (absolute errors).
const SEARCH: Qkx2Search = Qkx2Search {
    nmax: 3,
    rmin: -0.5,
    rdelta: 0.1,
    nstep: 15,
    use_mad: true,
};

/// `quantize_row_q2_K_ref`: per sub-block of 16 a scale and a min from `make_qkx2_quants`
/// (weights |x|), both quantized to 4 bits against their largest (`d = max/15`), then every
/// value re-rounded against its quantized scale and min — except in a sub-block whose quantized
/// scale is 0, which keeps the search's codes.
fn quantize_block(x: &[f32]) -> BlockQ2_K {
    let mut codes = [0u8; QK_K];
    let mut scales = [0.0f32; QK_K / 16];
    let mut mins = [0.0f32; QK_K / 16];
    let mut max_scale = 0.0f32;
    let mut max_min = 0.0f32;
    let mut weights = [0.0f32; 16];
    for (((xs, ls), scale), min) in x
        .chunks_exact(16)
        .zip(codes.chunks_exact_mut(16))
        .zip(&mut scales)
        .zip(&mut mins)
    {
        for (w, &v) in weights.iter_mut().zip(xs) {
            *w = v.abs();
        }
        (*scale, *min) = make_qkx2_quants(xs, &weights, ls, &SEARCH);
        if *scale > max_scale {
            max_scale = *scale;
        }
        if *min > max_min {
            max_min = *min;
        }
    }
    let mut block = BlockQ2_K::zeroed();
    // The reference stores nearest_int's result in a uint8_t (and the min's shifted into the
    // high nibble), without clamping.
    if max_scale > 0.0 {
        let iscale = 15.0 / max_scale;
        for (q, &s) in block.scales.iter_mut().zip(&scales) {
            *q = nearest_int(iscale * s) as u8;
        }
        block.d = F16Le::from_f32(max_scale / 15.0);
    }
    if max_min > 0.0 {
        let iscale = 15.0 / max_min;
        for (q, &m) in block.scales.iter_mut().zip(&mins) {
            *q |= (nearest_int(iscale * m) << 4) as u8;
        }
        block.dmin = F16Le::from_f32(max_min / 15.0);
    }
    let d = block.d.to_f32();
    let dmin = block.dmin.to_f32();
    for ((&sc, xs), ls) in block
        .scales
        .iter()
        .zip(x.chunks_exact(16))
        .zip(codes.chunks_exact_mut(16))
    {
        let dl = d * f32::from(sc & 0xf);
        if dl == 0.0 {
            continue;
        }
        let dm = dmin * f32::from(sc >> 4);
        for (c, &v) in ls.iter_mut().zip(xs) {
            *c = nearest_int((v + dm) / dl).clamp(0, 3) as u8;
        }
    }
    block.qs = pack_crumbs(&codes);
    block
}

fn dequantize_block(b: &BlockQ2_K, y: &mut [f32]) {
    let d = b.d.to_f32();
    let min = b.dmin.to_f32();
    for ((ys, qs), &sc) in y
        .chunks_exact_mut(16)
        .zip(crumbs(&b.qs).chunks_exact(16))
        .zip(&b.scales)
    {
        let dl = d * f32::from(sc & 0xf);
        let ml = min * f32::from(sc >> 4);
        for (out, &q) in ys.iter_mut().zip(qs) {
            *out = dl * f32::from(q) - ml;
        }
    }
}

pub fn dequantize(src: &[u8], dst: &mut [f32]) {
    dequantize_blocks(src, dst, QK_K, dequantize_block);
}

pub fn quantize(src: &[f32], dst: &mut [u8]) {
    quantize_blocks(src, dst, QK_K, quantize_block);
}

/// `ggml_vec_dot_q2_K_q8_K`: per block, the integer Σ sc·Σ code·q8 scaled by dy·d, minus the
/// mins' part Σ m·bsum (the activation's stored per-16 sums, as the reference reads them)
/// scaled by dy·dmin.
pub fn dot(weights: &[u8], activation: &[u8]) -> f32 {
    let mut sumf = 0.0f32;
    for (x, y) in dot_pairs::<BlockQ2_K, BlockQ8_K>(weights, activation, 1) {
        let y = &y[0];
        let summs: i32 = y
            .bsums
            .iter()
            .zip(&x.scales)
            .map(|(s, &sc)| i32::from(s.to_i16()) * i32::from(sc >> 4))
            .sum();
        let isum: i32 = crumbs(&x.qs)
            .chunks_exact(16)
            .zip(y.qs.chunks_exact(16))
            .zip(&x.scales)
            .map(|((qs, q8), &sc)| {
                let s: i32 = qs
                    .iter()
                    .zip(q8)
                    .map(|(&a, &b)| i32::from(a) * i32::from(b))
                    .sum();
                i32::from(sc & 0xf) * s
            })
            .sum();
        let dall = y.d.to_f32() * x.d.to_f32();
        let dmin = y.d.to_f32() * x.dmin.to_f32();
        sumf += dall * isum as f32 - dmin * summs as f32;
    }
    sumf
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::common::I16Le;
    use crate::q8_k;

    #[test]
    fn an_all_zero_block_is_all_zero_bytes() {
        let mut out = [0xffu8; 84];
        quantize(&[0.0; QK_K], &mut out);
        assert_eq!(out, [0u8; 84]);
    }

    /// The reference takes the mins' term from the activation's stored per-16 sums: changing
    /// one moves the dot by exactly dy·dmin·m of that sub-block (up to f32 rounding).
    #[test]
    fn the_min_term_reads_the_activation_bsums() {
        let w: Vec<f32> = (0..QK_K)
            .map(|i| ((i * 37 % 101) as f32 - 30.0) / 64.0)
            .collect();
        let a: Vec<f32> = (0..QK_K)
            .map(|i| ((i * 53 % 97) as f32 - 48.0) / 32.0)
            .collect();
        let mut wq = [0u8; 84];
        let mut aq = [0u8; 292];
        quantize(&w, &mut wq);
        q8_k::quantize(&a, &mut aq);
        let before = f64::from(dot(&wq, &aq));
        let x = crate::common::blocks::<BlockQ2_K>(&wq)[0];
        let mut y = crate::common::blocks::<BlockQ8_K>(&aq)[0];
        let j = (0..16)
            .find(|&j| x.scales[j] >> 4 != 0)
            .expect("a sub-block with a min");
        y.bsums[j] = I16Le::from_i16(y.bsums[j].to_i16() + 10);
        let after = f64::from(dot(&wq, bytemuck::bytes_of(&y)));
        let want = -10.0
            * f64::from(y.d.to_f32())
            * f64::from(x.dmin.to_f32())
            * f64::from(x.scales[j] >> 4);
        assert!(
            ((after - before) - want).abs() <= 1e-5 * want.abs(),
            "moved by {} instead of {want}",
            after - before
        );
    }

    #[test]
    fn crumb_packing_round_trips_every_position() {
        let mut codes = [0u8; QK_K];
        for (i, c) in codes.iter_mut().enumerate() {
            *c = ((i * 3 + i / 64) % 4) as u8;
        }
        assert_eq!(crumbs(&pack_crumbs(&codes)), codes);
        // Value 32·k + l of a half sits in byte l at bits 2k.
        let mut one = [0u8; QK_K];
        one[128 + 64 + 5] = 3;
        let qs = pack_crumbs(&one);
        assert_eq!(qs[32 + 5], 3 << 4);
        assert_eq!(qs.iter().filter(|&&b| b != 0).count(), 1);
    }
}
