//! Q5_0 (ggml type 6): 32 values as 5-bit codes 0..31 meaning (code − 16)·d. The low four bits
//! sit in nibbles as Q4_0's (low nibbles the first 16 values, high nibbles the last 16); the
//! fifth bit of value `i` is bit `i` of the little-endian `qh`. Dotted with Q8_0.

use bytemuck::{Pod, Zeroable};

use crate::common::{
    dequantize_blocks, dot_pairs, inverse_or_zero, quantize_blocks, truncate_to_i8, F16Le,
};
use crate::q8_0::BlockQ8_0;

pub const QK5_0: usize = 32;

#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Pod, Zeroable)]
pub struct BlockQ5_0 {
    pub d: F16Le,
    /// Fifth bit of each code, value `i` at bit `i` (little-endian u32).
    pub qh: [u8; 4],
    /// Low four bits of each code.
    pub qs: [u8; QK5_0 / 2],
}
const _: () = assert!(size_of::<BlockQ5_0>() == 22);

/// Splits 32 codes (value order, 0..=31) into nibbles and the fifth-bit word.
pub(crate) fn pack5(codes: &[u8; 32]) -> ([u8; 16], [u8; 4]) {
    let (lo, hi) = codes.split_at(16);
    let mut qs = [0u8; 16];
    let mut qh = 0u32;
    for (j, ((q, &a), &b)) in qs.iter_mut().zip(lo).zip(hi).enumerate() {
        *q = (a & 0xf) | ((b & 0xf) << 4);
        qh |= u32::from((a & 0x10) >> 4) << j;
        qh |= u32::from((b & 0x10) >> 4) << (j + 16);
    }
    (qs, qh.to_le_bytes())
}

/// The 32 codes (value order, 0..=31) of nibbles `qs` and fifth bits `qh`.
pub(crate) fn unpack5(qs: &[u8; 16], qh: [u8; 4]) -> [u8; 32] {
    let qh = u32::from_le_bytes(qh);
    let mut codes = [0u8; 32];
    let (lo, hi) = codes.split_at_mut(16);
    for (j, ((a, b), &q)) in lo.iter_mut().zip(hi).zip(qs).enumerate() {
        *a = (q & 0xf) | ((((qh >> j) & 1) as u8) << 4);
        *b = (q >> 4) | ((((qh >> (j + 16)) & 1) as u8) << 4);
    }
    codes
}

/// `quantize_row_q5_0_ref`: `d = max / −16` from the value of largest magnitude with its sign, so
/// that value lands on code 0; codes `(int8_t)(x·id + 16.5)` (truncation: rounding half up)
/// capped at 31.
fn quantize_block(x: &[f32]) -> BlockQ5_0 {
    let mut amax = 0.0f32;
    let mut max = 0.0f32;
    for &v in x {
        if amax < v.abs() {
            amax = v.abs();
            max = v;
        }
    }
    let d = max / -16.0;
    let id = inverse_or_zero(d);
    let mut codes = [0u8; 32];
    for (c, &v) in codes.iter_mut().zip(x) {
        // The reference keeps `MIN(31, (int8_t)…)` in a uint8_t: a negative byte wraps.
        *c = i32::from(truncate_to_i8(v * id + 16.5)).min(31) as u8;
    }
    let (qs, qh) = pack5(&codes);
    BlockQ5_0 {
        d: F16Le::from_f32(d),
        qh,
        qs,
    }
}

fn dequantize_block(b: &BlockQ5_0, y: &mut [f32]) {
    let d = b.d.to_f32();
    for (out, &c) in y.iter_mut().zip(&unpack5(&b.qs, b.qh)) {
        *out = (i32::from(c) - 16) as f32 * d;
    }
}

pub fn dequantize(src: &[u8], dst: &mut [f32]) {
    dequantize_blocks(src, dst, QK5_0, dequantize_block);
}

pub fn quantize(src: &[f32], dst: &mut [u8]) {
    quantize_blocks(src, dst, QK5_0, quantize_block);
}

/// `ggml_vec_dot_q5_0_q8_0`: per block, Σ (code − 16)·q8 times dx·dy.
pub fn dot(weights: &[u8], activation: &[u8]) -> f32 {
    let mut sumf = 0.0f32;
    for (x, y) in dot_pairs::<BlockQ5_0, BlockQ8_0>(weights, activation, 1) {
        let y = &y[0];
        let sumi: i32 = unpack5(&x.qs, x.qh)
            .iter()
            .zip(&y.qs)
            .map(|(&c, &q)| (i32::from(c) - 16) * i32::from(q))
            .sum();
        sumf += (x.d.to_f32() * y.d.to_f32()) * sumi as f32;
    }
    sumf
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fifth_bits_round_trip_every_position() {
        for shift in 0..32 {
            let codes: [u8; 32] = std::array::from_fn(|i| ((i * 11 + shift) % 32) as u8);
            let (qs, qh) = pack5(&codes);
            assert_eq!(unpack5(&qs, qh), codes, "shift {shift}");
        }
    }

    #[test]
    fn the_largest_magnitude_lands_on_code_zero_and_ties_round_up() {
        // d = −16/−16 = 1: every value is exact and the half-way 2.5 rounds up to 3.
        let mut x = [0.0f32; 32];
        x[0] = -16.0;
        x[1] = 2.5;
        x[2] = -2.5;
        x[3] = 15.0;
        let mut out = [0u8; 22];
        quantize(&x, &mut out);
        let mut back = [0.0f32; 32];
        dequantize(&out, &mut back);
        assert_eq!(&back[..4], &[-16.0, 3.0, -2.0, 15.0]);
    }
}
