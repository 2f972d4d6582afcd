//! What every codec shares: little-endian scalar fields, the reference engine's rounding rules,
//! and block views over raw bytes.
//!
//! Every block struct in this crate is built from byte arrays only, so it has alignment 1: a
//! `&[u8]` of whole blocks can be viewed as `&[Block]` at any address (tensor data in an mmap is
//! only as aligned as the file made it). The fields are little-endian, as GGUF stores them.

use bytemuck::{Pod, Zeroable};
use std::fmt;

/// An IEEE half-precision value stored little-endian (ggml's `ggml_half`).
#[repr(transparent)]
#[derive(Clone, Copy, Default, PartialEq, Eq, Hash, Pod, Zeroable)]
pub struct F16Le(pub [u8; 2]);

impl F16Le {
    /// Round to nearest, ties to even, as `GGML_FP32_TO_FP16` does (overflow gives ±inf, NaN stays NaN).
    #[inline]
    pub fn from_f32(value: f32) -> Self {
        Self(half::f16::from_f32(value).to_bits().to_le_bytes())
    }

    /// Exact widening.
    #[inline]
    pub fn to_f32(self) -> f32 {
        half::f16::from_bits(u16::from_le_bytes(self.0)).to_f32()
    }

    #[inline]
    pub fn to_bits(self) -> u16 {
        u16::from_le_bytes(self.0)
    }
}

impl fmt::Debug for F16Le {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}f16", self.to_f32())
    }
}

/// A bfloat16 value stored little-endian (ggml's `ggml_bf16_t`).
#[repr(transparent)]
#[derive(Clone, Copy, Default, PartialEq, Eq, Hash, Pod, Zeroable)]
pub struct Bf16Le(pub [u8; 2]);

impl Bf16Le {
    /// Round to nearest, ties to even; a NaN keeps its upper bits and is made quiet
    /// (`GGML_FP32_TO_BF16`, which `half` implements identically).
    #[inline]
    pub fn from_f32(value: f32) -> Self {
        Self(half::bf16::from_f32(value).to_bits().to_le_bytes())
    }

    /// Exact widening.
    #[inline]
    pub fn to_f32(self) -> f32 {
        half::bf16::from_bits(u16::from_le_bytes(self.0)).to_f32()
    }
}

impl fmt::Debug for Bf16Le {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}bf16", self.to_f32())
    }
}

/// An f32 stored little-endian, for block fields that would otherwise force alignment 4.
#[repr(transparent)]
#[derive(Clone, Copy, Default, PartialEq, Eq, Hash, Pod, Zeroable)]
pub struct F32Le(pub [u8; 4]);

impl F32Le {
    #[inline]
    pub fn from_f32(value: f32) -> Self {
        Self(value.to_le_bytes())
    }

    #[inline]
    pub fn to_f32(self) -> f32 {
        f32::from_le_bytes(self.0)
    }
}

impl fmt::Debug for F32Le {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}f32", self.to_f32())
    }
}

/// A plain floating-point element (F32, F16, BF16: one value per "block"), so the three float
/// formats share one codec.
pub trait FloatElement: Pod {
    const NAME: &'static str;
    fn from_f32(value: f32) -> Self;
    fn to_f32(self) -> f32;
}

macro_rules! float_element {
    ($t:ty, $name:literal) => {
        impl FloatElement for $t {
            const NAME: &'static str = $name;
            #[inline]
            fn from_f32(value: f32) -> Self {
                <$t>::from_f32(value)
            }
            #[inline]
            fn to_f32(self) -> f32 {
                <$t>::to_f32(self)
            }
        }
    };
}
float_element!(F32Le, "f32");
float_element!(F16Le, "f16");
float_element!(Bf16Le, "bf16");

/// Exact widening of every element.
pub fn float_dequantize<T: FloatElement>(src: &[u8], dst: &mut [f32]) {
    let src = blocks::<T>(src);
    assert_eq!(
        src.len(),
        dst.len(),
        "{} dequantize: element counts differ",
        T::NAME
    );
    for (x, y) in src.iter().zip(dst) {
        *y = x.to_f32();
    }
}

/// Round to the element type (to nearest, ties to even, as the reference converts).
pub fn float_quantize<T: FloatElement>(src: &[f32], dst: &mut [u8]) {
    let dst = blocks_mut::<T>(dst);
    assert_eq!(
        src.len(),
        dst.len(),
        "{} quantize: element counts differ",
        T::NAME
    );
    for (x, y) in src.iter().zip(dst) {
        *y = T::from_f32(*x);
    }
}

/// `ggml_vec_dot_{f32,f16,bf16}`: both sides widened exactly, each product rounded to f32, the
/// sum carried in f64 (`ggml_float`).
pub fn float_dot<T: FloatElement>(weights: &[u8], activation: &[u8]) -> f32 {
    let w = blocks::<T>(weights);
    let a = blocks::<T>(activation);
    assert_eq!(w.len(), a.len(), "{} dot: element counts differ", T::NAME);
    let sum: f64 = w
        .iter()
        .zip(a)
        .map(|(x, y)| f64::from(x.to_f32() * y.to_f32()))
        .sum();
    sum as f32
}

/// An i16 stored little-endian.
#[repr(transparent)]
#[derive(Clone, Copy, Default, PartialEq, Eq, Hash, Pod, Zeroable)]
pub struct I16Le(pub [u8; 2]);

impl I16Le {
    #[inline]
    pub fn from_i16(value: i16) -> Self {
        Self(value.to_le_bytes())
    }

    #[inline]
    pub fn to_i16(self) -> i16 {
        i16::from_le_bytes(self.0)
    }
}

impl fmt::Debug for I16Le {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}i16", self.to_i16())
    }
}

/// ggml's `nearest_int`: adds 1.5·2²³ so the FPU's round-to-nearest-even does the rounding, then
/// reads the integer out of the mantissa. Exact for |x| < 2²²; beyond that it returns what the
/// reference returns (wrapped bits), never panicking.
#[inline]
pub fn nearest_int(x: f32) -> i32 {
    let biased = x + 12_582_912.0;
    (biased.to_bits() & 0x007f_ffff) as i32 - 0x0040_0000
}

/// C's `roundf` / `lroundf`: to nearest, ties away from zero (NaN gives 0, out of range saturates).
#[inline]
pub fn round_half_away(x: f32) -> i32 {
    x.round() as i32
}

/// C's float → `int8_t` cast on x86: truncate toward zero into an int32 (NaN and out-of-range
/// give the "integer indefinite" 0x8000_0000), then keep the low byte. The reference quantizers
/// rely on it for `(int8_t)(x0 + 8.5f)`.
#[inline]
pub fn truncate_to_i8(x: f32) -> i8 {
    let wide = if !(-2_147_483_648.0..2_147_483_648.0).contains(&x) {
        i32::MIN
    } else {
        x as i32
    };
    wide as i8
}

/// `1/d`, or 0 where `d` is 0: the inverse scale every reference quantizer uses (`d ? 1/d : 0`).
#[inline]
pub fn inverse_or_zero(d: f32) -> f32 {
    if d != 0.0 {
        1.0 / d
    } else {
        0.0
    }
}

/// Views raw bytes as whole blocks. Panics (naming the block type) when `bytes` is not a whole
/// number of blocks: that is the caller's contract, checked by the fallible row helpers.
#[inline]
pub fn blocks<B: Pod>(bytes: &[u8]) -> &[B] {
    const { assert!(align_of::<B>() == 1, "block structs must have alignment 1") };
    let size = size_of::<B>();
    assert!(
        bytes.len().is_multiple_of(size),
        "{} bytes are not a whole number of {}-byte {} blocks",
        bytes.len(),
        size,
        std::any::type_name::<B>()
    );
    bytemuck::cast_slice(bytes)
}

/// Mutable twin of [`blocks`].
#[inline]
pub fn blocks_mut<B: Pod>(bytes: &mut [u8]) -> &mut [B] {
    const { assert!(align_of::<B>() == 1, "block structs must have alignment 1") };
    let size = size_of::<B>();
    assert!(
        bytes.len().is_multiple_of(size),
        "{} bytes are not a whole number of {}-byte {} blocks",
        bytes.len(),
        size,
        std::any::type_name::<B>()
    );
    bytemuck::cast_slice_mut(bytes)
}

/// Checks that `values` holds exactly `n_blocks` blocks of `block_elems` values.
#[inline]
pub fn assert_elems(values: usize, n_blocks: usize, block_elems: usize, what: &str) {
    assert!(
        values == n_blocks * block_elems,
        "{what}: {values} values for {n_blocks} blocks of {block_elems}"
    );
}

/// Drives a per-block dequantizer over whole blocks.
#[inline]
pub fn dequantize_blocks<B: Pod>(
    src: &[u8],
    dst: &mut [f32],
    block_elems: usize,
    mut decode: impl FnMut(&B, &mut [f32]),
) {
    let src = blocks::<B>(src);
    assert_elems(dst.len(), src.len(), block_elems, "dequantize");
    for (block, out) in src.iter().zip(dst.chunks_exact_mut(block_elems)) {
        decode(block, out);
    }
}

/// Drives a per-block quantizer over whole blocks.
#[inline]
pub fn quantize_blocks<B: Pod>(
    src: &[f32],
    dst: &mut [u8],
    block_elems: usize,
    mut encode: impl FnMut(&[f32]) -> B,
) {
    let dst = blocks_mut::<B>(dst);
    assert_elems(src.len(), dst.len(), block_elems, "quantize");
    for (block, x) in dst.iter_mut().zip(src.chunks_exact(block_elems)) {
        *block = encode(x);
    }
}

/// Pairs each weight block with the `per_block` activation blocks covering the same values.
#[inline]
pub fn dot_pairs<'a, W: Pod, A: Pod>(
    weights: &'a [u8],
    activation: &'a [u8],
    per_block: usize,
) -> impl Iterator<Item = (&'a W, &'a [A])> {
    let w = blocks::<W>(weights);
    let a = blocks::<A>(activation);
    assert!(
        a.len() == w.len() * per_block,
        "dot: {} weight blocks need {} activation blocks, found {}",
        w.len(),
        w.len() * per_block,
        a.len()
    );
    w.iter().zip(a.chunks_exact(per_block))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_int_rounds_ties_to_even_like_the_reference() {
        let cases = [
            (0.5, 0),
            (1.5, 2),
            (2.5, 2),
            (-0.5, 0),
            (-1.5, -2),
            (-2.5, -2),
            (126.7, 127),
        ];
        for (x, want) in cases {
            assert_eq!(nearest_int(x), want, "nearest_int({x})");
            assert_eq!(
                nearest_int(x),
                x.round_ties_even() as i32,
                "twin of nearest_int({x})"
            );
        }
    }

    #[test]
    fn round_half_away_matches_roundf() {
        for (x, want) in [
            (0.5, 1),
            (1.5, 2),
            (2.5, 3),
            (-0.5, -1),
            (-2.5, -3),
            (0.49999997, 0),
        ] {
            assert_eq!(round_half_away(x), want, "roundf({x})");
        }
    }

    #[test]
    fn truncate_to_i8_wraps_like_x86() {
        assert_eq!(truncate_to_i8(15.9), 15);
        assert_eq!(truncate_to_i8(-0.9), 0);
        assert_eq!(truncate_to_i8(300.0), 300_i32 as i8);
        assert_eq!(truncate_to_i8(f32::NAN), 0);
        assert_eq!(truncate_to_i8(f32::INFINITY), 0);
    }

    #[test]
    fn scalar_fields_round_trip() {
        for x in [0.0f32, -0.0, 1.0, -2.5, 65504.0, 6.103_515_6e-5] {
            assert_eq!(
                F16Le::from_f32(x).to_f32().to_bits(),
                x.to_bits(),
                "f16 {x}"
            );
            assert_eq!(
                F32Le::from_f32(x).to_f32().to_bits(),
                x.to_bits(),
                "f32 {x}"
            );
        }
        assert_eq!(F16Le::from_f32(1e6).to_f32(), f32::INFINITY);
        assert_eq!(Bf16Le::from_f32(1.0).0, [0x80, 0x3f]);
        // ggml: a NaN keeps its top 16 bits with the quiet bit forced.
        assert_eq!(
            Bf16Le::from_f32(f32::from_bits(0x7f80_0001)).0,
            0x7fc0u16.to_le_bytes()
        );
        assert_eq!(I16Le::from_i16(-300).to_i16(), -300);
    }
}
