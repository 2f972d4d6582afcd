//! Q6_K (ggml type 14): 256 values as 6-bit codes (code − 32 ∈ −32..=31) in 16 sub-blocks of 16,
//! each with an int8 scale, times one f16 super-scale. Dotted with Q8_K.
//!
//! Each 128-value half owns 64 bytes of `ql` and 32 of `qh`: for `l` in 0..32, value `l + 32k`
//! (k = 0..4) takes its low nibble from `ql[l + 32·(k & 1)]` (low nibble for k < 2, high for
//! k ≥ 2) and its top two bits from `qh[l]` bits `2k`.

use bytemuck::{Pod, Zeroable};

use crate::common::{dequantize_blocks, dot_pairs, nearest_int, quantize_blocks, F16Le};
use crate::q8_k::{BlockQ8_K, QK_K};

#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Pod, Zeroable)]
pub struct BlockQ6_K {
    /// Low 4 bits of each code.
    pub ql: [u8; QK_K / 2],
    /// High 2 bits of each code.
    pub qh: [u8; QK_K / 4],
    /// One scale per 16 values.
    pub scales: [i8; QK_K / 16],
    pub d: F16Le,
}
const _: () = assert!(size_of::<BlockQ6_K>() == 210);

/// The reference treats a group whose largest magnitude is below this as all zero.
const GROUP_MAX_EPS: f32 = 1e-15;

/// The signed codes (code − 32) of one block, in value order.
fn signed_codes(b: &BlockQ6_K) -> [i8; QK_K] {
    let mut out = [0i8; QK_K];
    for ((y, ql), qh) in out
        .chunks_exact_mut(128)
        .zip(b.ql.chunks_exact(64))
        .zip(b.qh.chunks_exact(32))
    {
        for l in 0..32 {
            let h = qh[l];
            let lo = [ql[l] & 0xf, ql[l + 32] & 0xf, ql[l] >> 4, ql[l + 32] >> 4];
            for (k, low) in lo.into_iter().enumerate() {
                let code = low | (((h >> (2 * k)) & 3) << 4);
                y[l + 32 * k] = code as i8 - 32;
            }
        }
    }
    out
}

/// Packs codes 0..=63 (value order) into `ql` / `qh`, the inverse of [`signed_codes`].
fn pack(codes: &[u8; QK_K], ql: &mut [u8; QK_K / 2], qh: &mut [u8; QK_K / 4]) {
    for ((l8, ql), qh) in codes
        .chunks_exact(128)
        .zip(ql.chunks_exact_mut(64))
        .zip(qh.chunks_exact_mut(32))
    {
        for l in 0..32 {
            let q = [l8[l], l8[l + 32], l8[l + 64], l8[l + 96]];
            ql[l] = (q[0] & 0xf) | ((q[2] & 0xf) << 4);
            ql[l + 32] = (q[1] & 0xf) | ((q[3] & 0xf) << 4);
            qh[l] = (q[0] >> 4) | ((q[1] >> 4) << 2) | ((q[2] >> 4) << 4) | ((q[3] >> 4) << 6);
        }
    }
}

/// ggml's `make_qx_quants` with `rmse_type = 1` (weights x²) and no importance matrix: the scale
/// minimising the weighted squared error over 19 candidate inverse scales, codes `l + nmax` in
/// `L`. Every float operation is in the reference's order and precision: the chosen candidate,
/// and so the bytes, depend on it.
fn make_qx_quants(nmax: i32, x: &[f32], codes: &mut [u8]) -> f32 {
    let mut max = 0.0f32;
    let mut amax = 0.0f32;
    for &v in x {
        if v.abs() > amax {
            amax = v.abs();
            max = v;
        }
    }
    if amax < GROUP_MAX_EPS {
        codes.fill(0);
        return 0.0;
    }
    let nmaxf = nmax as f32;
    let level = |iscale: f32, v: f32| nearest_int(iscale * v).clamp(-nmax, nmax - 1);
    let sums = |iscale: f32| {
        let mut sumlx = 0.0f32;
        let mut suml2 = 0.0f32;
        for &v in x {
            let l = level(iscale, v) as f32;
            let w = v * v;
            sumlx += w * v * l;
            suml2 += w * l * l;
        }
        (sumlx, suml2)
    };
    let fill = |iscale: f32, codes: &mut [u8]| {
        for (c, &v) in codes.iter_mut().zip(x) {
            *c = (level(iscale, v) + nmax) as u8;
        }
    };

    let iscale = -nmaxf / max;
    fill(iscale, codes);
    let (sumlx, suml2) = sums(iscale);
    let mut scale = if suml2 != 0.0 { sumlx / suml2 } else { 0.0 };
    let mut best = scale * sumlx;
    for is in (-9..=9).filter(|&is| is != 0) {
        let iscale = -(nmaxf + 0.1 * is as f32) / max;
        let (sumlx, suml2) = sums(iscale);
        if suml2 > 0.0 && sumlx * sumlx > best * suml2 {
            fill(iscale, codes);
            scale = sumlx / suml2;
            best = scale * sumlx;
        }
    }
    scale
}

/// `quantize_row_q6_K_ref`: a scale per sub-block from [`make_qx_quants`], those scales
/// quantized to int8 against the one of largest magnitude (with its sign, so `d` may be
/// negative), then every value re-rounded against its quantized scale.
fn quantize_block(x: &[f32]) -> BlockQ6_K {
    let mut codes = [0u8; QK_K];
    let mut scales = [0.0f32; QK_K / 16];
    let mut max_scale = 0.0f32;
    let mut max_abs_scale = 0.0f32;
    for ((scale, xs), ls) in scales
        .iter_mut()
        .zip(x.chunks_exact(16))
        .zip(codes.chunks_exact_mut(16))
    {
        *scale = make_qx_quants(32, xs, ls);
        if scale.abs() > max_abs_scale {
            max_abs_scale = scale.abs();
            max_scale = *scale;
        }
    }
    let mut block = BlockQ6_K::zeroed();
    if max_abs_scale < GROUP_MAX_EPS {
        return block;
    }
    let iscale = -128.0 / max_scale;
    block.d = F16Le::from_f32(1.0 / iscale);
    for (q, &s) in block.scales.iter_mut().zip(&scales) {
        *q = nearest_int(iscale * s).min(127) as i8;
    }
    let d = block.d.to_f32();
    for ((&sc, xs), ls) in block
        .scales
        .iter()
        .zip(x.chunks_exact(16))
        .zip(codes.chunks_exact_mut(16))
    {
        let dl = d * f32::from(sc);
        // A sub-block whose scale rounds to zero keeps make_qx_quants' codes, as in the reference.
        if dl == 0.0 {
            continue;
        }
        for (c, &v) in ls.iter_mut().zip(xs) {
            *c = (nearest_int(v / dl).clamp(-32, 31) + 32) as u8;
        }
    }
    pack(&codes, &mut block.ql, &mut block.qh);
    block
}

fn dequantize_block(b: &BlockQ6_K, y: &mut [f32]) {
    let d = b.d.to_f32();
    for ((ys, qs), &sc) in y
        .chunks_exact_mut(16)
        .zip(signed_codes(b).chunks_exact(16))
        .zip(&b.scales)
    {
        let dl = d * f32::from(sc);
        for (out, &q) in ys.iter_mut().zip(qs) {
            *out = dl * f32::from(q);
        }
    }
}

pub fn dequantize(src: &[u8], dst: &mut [f32]) {
    dequantize_blocks(src, dst, QK_K, dequantize_block);
}

pub fn quantize(src: &[f32], dst: &mut [u8]) {
    quantize_blocks(src, dst, QK_K, quantize_block);
}

/// `ggml_vec_dot_q6_K_q8_K`: per block and sub-block, Σ (code − 32)·q8 times the int8 scale,
/// the block's integer sums scaled by dx·dy into eight float lanes (lane = position within
/// each 8 values, as in the reference's scalar path), summed at the end.
pub fn dot(weights: &[u8], activation: &[u8]) -> f32 {
    let mut sums = [0.0f32; 8];
    for (x, y) in dot_pairs::<BlockQ6_K, BlockQ8_K>(weights, activation, 1) {
        let y = &y[0];
        let codes = signed_codes(x);
        let mut lanes = [0i32; 8];
        for ((qs, q8), &sc) in codes
            .chunks_exact(16)
            .zip(y.qs.chunks_exact(16))
            .zip(&x.scales)
        {
            for (k, (&a, &b)) in qs.iter().zip(q8).enumerate() {
                lanes[k % 8] += i32::from(sc) * (i32::from(a) * i32::from(b));
            }
        }
        let d = x.d.to_f32() * y.d.to_f32();
        for (s, &l) in sums.iter_mut().zip(&lanes) {
            *s += d * l as f32;
        }
    }
    sums.iter().sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::kquant_common::codec_tests::check_codec;

    #[test]
    fn packing_round_trips_every_code_position() {
        let mut codes = [0u8; QK_K];
        for (i, c) in codes.iter_mut().enumerate() {
            *c = ((i * 37 + i / 64) % 64) as u8;
        }
        let mut block = BlockQ6_K::zeroed();
        pack(&codes, &mut block.ql, &mut block.qh);
        let back = signed_codes(&block);
        for (i, (&c, &s)) in codes.iter().zip(&back).enumerate() {
            assert_eq!(i32::from(c) - 32, i32::from(s), "value {i}");
        }
    }

    #[test]
    fn dot_reconstruction_and_zero_block() {
        // 6 bits a value leave well under 2 % error on [-1, 1).
        check_codec(quantize, dequantize, dot, 210, 0.02);
    }
}
