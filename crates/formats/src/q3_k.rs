//! Q3_K (ggml type 11): 256 values as 3-bit codes (code − 4 ∈ −4..=3) in 16 sub-blocks of 16,
//! each with a 6-bit scale (stored + 32), times one f16 super-scale. Dotted with Q8_K.
//!
//! The low two bits of each code are laid out as Q2_K's codes ([`crate::q2_k::crumbs`]); the
//! third bit of value `v` is bit `v / 32` of `hmask[v % 32]`. Scale `j` keeps its low nibble in
//! `scales[j % 8]` (low nibble for j < 8, high for j ≥ 8) and its top two bits in
//! `scales[8 + j % 4]` at bit `2·(j / 4)`.

use bytemuck::{Pod, Zeroable};

use crate::common::{dequantize_blocks, dot_pairs, nearest_int, quantize_blocks, F16Le};
use crate::q2_k::{crumbs, pack_crumbs};
use crate::q8_k::{BlockQ8_K, QK_K};

#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Pod, Zeroable)]
pub struct BlockQ3_K {
    /// Third (high) bit of each code.
    pub hmask: [u8; QK_K / 8],
    /// Low 2 bits of each code.
    pub qs: [u8; QK_K / 4],
    /// Sixteen 6-bit scales, packed.
    pub scales: [u8; 12],
    pub d: F16Le,
}
const _: () = assert!(size_of::<BlockQ3_K>() == 110);

/// The reference treats a group whose largest magnitude is below this as all zero.
const GROUP_MAX_EPS: f32 = 1e-15;

impl BlockQ3_K {
    /// The sixteen signed sub-block scales (stored level − 32 ∈ −32..=31).
    pub fn signed_scales(&self) -> [i8; QK_K / 16] {
        let packed = &self.scales;
        let mut out = [0i8; QK_K / 16];
        for (j, s) in out.iter_mut().enumerate() {
            let low = if j < 8 {
                packed[j] & 0xf
            } else {
                packed[j - 8] >> 4
            };
            let high = (packed[8 + j % 4] >> (2 * (j / 4))) & 3;
            *s = (low | (high << 4)) as i8 - 32;
        }
        out
    }

    /// The signed codes (code − 4 ∈ −4..=3), in value order.
    pub fn signed_codes(&self) -> [i8; QK_K] {
        let mut out = crumbs(&self.qs).map(|c| c as i8);
        for (v, q) in out.iter_mut().enumerate() {
            let high = ((self.hmask[v % 32] >> (v / 32)) & 1) as i8;
            *q += 4 * high - 4;
        }
        out
    }
}

/// Packs levels 0..=63, the inverse of [`BlockQ3_K::signed_scales`] (before its − 32).
fn pack_scales(levels: &[u8; QK_K / 16]) -> [u8; 12] {
    let mut packed = [0u8; 12];
    for (j, &l) in levels.iter().enumerate() {
        if j < 8 {
            packed[j] = l & 0xf;
        } else {
            packed[j - 8] |= (l & 0xf) << 4;
        }
        packed[8 + j % 4] |= (l >> 4) << (2 * (j / 4));
    }
    packed
}

/// Packs codes 0..=7 (value order) into `hmask` / `qs`, the inverse of [`BlockQ3_K::signed_codes`].
fn pack(codes: &[u8; QK_K], hmask: &mut [u8; QK_K / 8], qs: &mut [u8; QK_K / 4]) {
    for (v, &c) in codes.iter().enumerate() {
        hmask[v % 32] |= (c >> 2) << (v / 32);
    }
    *qs = pack_crumbs(&codes.map(|c| c & 3));
}

/// ggml's `make_q3_quants` with `do_rmse` (the only form its reference quantizer calls): codes
/// from the largest-magnitude value (signed, so the scale may be negative), then up to five
/// sweeps moving one code at a time to its least-squares level (weights x²) while the fit
/// improves. Codes `l + nmax` in `codes`. Every float operation is in the reference's order and
/// precision: the accepted moves, and so the bytes, depend on it.
fn make_q3_quants(nmax: i32, x: &[f32; 16], codes: &mut [u8]) -> f32 {
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
    let iscale = -(nmax as f32) / max;
    let mut levels = [0i32; 16];
    let mut sumlx = 0.0f32;
    let mut suml2 = 0.0f32;
    for (l, &v) in levels.iter_mut().zip(x) {
        *l = nearest_int(iscale * v).clamp(-nmax, nmax - 1);
        let (w, lf) = (v * v, *l as f32);
        sumlx += w * v * lf;
        suml2 += w * lf * lf;
    }
    for _ in 0..5 {
        let mut changed = false;
        for (l, &v) in levels.iter_mut().zip(x) {
            let (w, lf) = (v * v, *l as f32);
            let mut slx = sumlx - w * v * lf;
            if slx > 0.0 {
                let mut sl2 = suml2 - w * lf * lf;
                let new_l = nearest_int(v * sl2 / slx).clamp(-nmax, nmax - 1);
                if new_l != *l {
                    let nf = new_l as f32;
                    slx += w * v * nf;
                    sl2 += w * nf * nf;
                    if sl2 > 0.0 && slx * slx * suml2 > sumlx * sumlx * sl2 {
                        *l = new_l;
                        sumlx = slx;
                        suml2 = sl2;
                        changed = true;
                    }
                }
            }
        }
        if !changed {
            break;
        }
    }
    for (c, &l) in codes.iter_mut().zip(&levels) {
        *c = (l + nmax) as u8;
    }
    if suml2 > 0.0 {
        sumlx / suml2
    } else {
        0.0
    }
}

/// `quantize_row_q3_K_ref`: a scale per sub-block from [`make_q3_quants`], those scales
/// quantized to 6 bits against the one of largest magnitude (with its sign, so `d` may be
/// negative), then every value re-rounded against its quantized scale.
fn quantize_block(x: &[f32]) -> BlockQ3_K {
    let mut codes = [0u8; QK_K];
    let mut scales = [0.0f32; QK_K / 16];
    let mut max_scale = 0.0f32;
    let mut amax = 0.0f32;
    for ((scale, xs), ls) in scales
        .iter_mut()
        .zip(x.as_chunks::<16>().0)
        .zip(codes.chunks_exact_mut(16))
    {
        *scale = make_q3_quants(4, xs, ls);
        if scale.abs() > amax {
            amax = scale.abs();
            max_scale = *scale;
        }
    }
    let mut block = BlockQ3_K::zeroed();
    // NaN is "non-zero" here as in the reference's `if (max_scale)`.
    if max_scale != 0.0 {
        let iscale = -32.0 / max_scale;
        let mut levels = [0u8; QK_K / 16];
        for (l, &s) in levels.iter_mut().zip(&scales) {
            // The reference stores nearest_int in an int8_t before clamping.
            *l = ((nearest_int(iscale * s) as i8).clamp(-32, 31) + 32) as u8;
        }
        block.scales = pack_scales(&levels);
        block.d = F16Le::from_f32(1.0 / iscale);
    }
    let d = block.d.to_f32();
    for ((&sc, xs), ls) in block
        .signed_scales()
        .iter()
        .zip(x.chunks_exact(16))
        .zip(codes.chunks_exact_mut(16))
    {
        let dl = d * f32::from(sc);
        // A sub-block whose scale is zero keeps make_q3_quants' codes, as in the reference.
        if dl == 0.0 {
            continue;
        }
        for (c, &v) in ls.iter_mut().zip(xs) {
            *c = (nearest_int(v / dl).clamp(-4, 3) + 4) as u8;
        }
    }
    pack(&codes, &mut block.hmask, &mut block.qs);
    block
}

fn dequantize_block(b: &BlockQ3_K, y: &mut [f32]) {
    let d = b.d.to_f32();
    for ((ys, qs), &sc) in y
        .chunks_exact_mut(16)
        .zip(b.signed_codes().chunks_exact(16))
        .zip(&b.signed_scales())
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

/// `ggml_vec_dot_q3_K_q8_K`: per block and sub-block, Σ (code − 4)·q8 times the signed scale,
/// the block's integer sums scaled by dx·dy into eight float lanes (lane = position within
/// each 8 values, as in the reference's scalar path), summed at the end.
pub fn dot(weights: &[u8], activation: &[u8]) -> f32 {
    let mut sums = [0.0f32; 8];
    for (x, y) in dot_pairs::<BlockQ3_K, BlockQ8_K>(weights, activation, 1) {
        let y = &y[0];
        let codes = x.signed_codes();
        let mut lanes = [0i32; 8];
        for ((qs, q8), &sc) in codes
            .chunks_exact(16)
            .zip(y.qs.chunks_exact(16))
            .zip(&x.signed_scales())
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

    #[test]
    fn scale_packing_round_trips_every_level() {
        let mut levels = [0u8; QK_K / 16];
        for (j, l) in levels.iter_mut().enumerate() {
            *l = ((j * 23 + 5) % 64) as u8;
        }
        let block = BlockQ3_K {
            scales: pack_scales(&levels),
            ..BlockQ3_K::zeroed()
        };
        let back = block.signed_scales();
        for (j, (&l, &s)) in levels.iter().zip(&back).enumerate() {
            assert_eq!(i32::from(l) - 32, i32::from(s), "scale {j}");
        }
    }

    #[test]
    fn code_packing_round_trips_every_position() {
        let mut codes = [0u8; QK_K];
        for (i, c) in codes.iter_mut().enumerate() {
            *c = ((i * 5 + i / 32) % 8) as u8;
        }
        let mut block = BlockQ3_K::zeroed();
        pack(&codes, &mut block.hmask, &mut block.qs);
        for (i, (&c, &s)) in codes.iter().zip(&block.signed_codes()).enumerate() {
            assert_eq!(i32::from(c) - 4, i32::from(s), "value {i}");
        }
    }

    #[test]
    fn an_all_zero_block_is_all_zero_bytes() {
        let mut out = [0xffu8; 110];
        quantize(&[0.0; QK_K], &mut out);
        assert_eq!(out, [0u8; 110]);
    }
}
