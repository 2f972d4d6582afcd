//! The float kernels on NEON: F32 × F32, F16 × F16 and BF16 × BF16 matrix-vector products, the
//! f32 → F16 / BF16 activation conversions, and the float kernels of attention and SwiGLU
//! (weighted sum, softmax numerator, SiLU gate).
//!
//! f16 ↔ f32 through `f16.rs` (`fcvtl` / `fcvtn` in `asm!`), the same conversions as `half`'s,
//! hence byte-identical to `f16::quantize`.
//! bf16 → f32 is a 16-bit left shift (`shll`); f32 → bf16 is integer arithmetic exactly as `half`'s
//! (`+ 0x7fff + lsb`, then the upper half; a NaN keeps its upper half with the quiet bit set).
//!
//! The products fuse into f32 lane accumulators (the scalar twins round each product to f32 and
//! sum in f64; the tests bound the difference, as on x86). The exponential of softmax and SiLU is
//! the x86 tiers' (`exp_poly`, degree 7 on `|r| ≤ ln 2 / 2`, `2^n` built in the exponent bits)
//! step for step, so a lane computes what an AVX2 lane does.

use super::f16::{narrow1, narrow8 as narrow8_f16, widen4 as widen4_f16, widen8 as widen8_f16};
use crate::common::Bf16Le;
use crate::kernels::exp_poly;
use core::arch::aarch64::*;

/// Element kinds of the matrix-vector kernels (a const generic parameter).
const F32: u8 = 0;
const F16: u8 = 1;
const BF16: u8 = 2;

/// Rows per pass of the matrix-vector kernels (each activation load serves them all).
const ROWS: usize = 4;
/// Values per step of a row: four vectors, so each row keeps four independent sums.
const STEP: usize = 16;

/// Bytes of one element of kind `E`.
const fn elem_bytes<const E: u8>() -> usize {
    if E == F32 {
        4
    } else {
        2
    }
}

/// Eight bf16 values widened to f32 (exact: the bits shifted into the upper half).
#[inline]
#[target_feature(enable = "neon")]
fn widen8_bf16(h: uint16x8_t) -> [float32x4_t; 2] {
    [
        vreinterpretq_f32_u32(vshll_n_u16::<16>(vget_low_u16(h))),
        vreinterpretq_f32_u32(vshll_high_n_u16::<16>(h)),
    ]
}

/// Eight f32 values narrowed to bf16 as `half::bf16::from_f32`: a NaN keeps its upper half with
/// the quiet bit (0x0040) set; the rest round to nearest even (`x + 0x7fff + lsb`, upper half).
#[inline]
#[target_feature(enable = "neon")]
fn narrow8_bf16(a: float32x4_t, b: float32x4_t) -> uint16x8_t {
    let half = |v: float32x4_t| {
        let x = vreinterpretq_u32_f32(v);
        let nan = vcgtq_u32(
            vandq_u32(x, vdupq_n_u32(0x7fff_ffff)),
            vdupq_n_u32(0x7f80_0000),
        );
        let lsb = vandq_u32(vshrq_n_u32::<16>(x), vdupq_n_u32(1));
        let rounded = vaddq_u32(vaddq_u32(x, vdupq_n_u32(0x7fff)), lsb);
        let quiet = vorrq_u32(x, vdupq_n_u32(0x0040_0000));
        vshrn_n_u32::<16>(vbslq_u32(nan, quiet, rounded))
    };
    vcombine_u16(half(a), half(b))
}

/// Eight elements of kind `E` at `p`, widened to f32.
///
/// # Safety
/// `8 · elem_bytes::<E>()` bytes are readable at `p` (no alignment needed).
#[inline]
#[target_feature(enable = "neon")]
unsafe fn load8<const E: u8>(p: *const u8) -> [float32x4_t; 2] {
    // SAFETY: the caller guarantees the bytes; byte loads need no alignment.
    unsafe {
        match E {
            F32 => [
                vreinterpretq_f32_u8(vld1q_u8(p)),
                vreinterpretq_f32_u8(vld1q_u8(p.add(16))),
            ],
            F16 => widen8_f16(vreinterpretq_u16_u8(vld1q_u8(p))),
            _ => widen8_bf16(vreinterpretq_u16_u8(vld1q_u8(p))),
        }
    }
}

/// `STEP` elements of kind `E` at `p`, widened to f32.
///
/// # Safety
/// `STEP · elem_bytes::<E>()` bytes are readable at `p`.
#[inline]
#[target_feature(enable = "neon")]
unsafe fn load_step<const E: u8>(p: *const u8) -> [float32x4_t; 4] {
    // SAFETY: two runs of 8 elements inside the caller's range.
    let (a, b) = unsafe { (load8::<E>(p), load8::<E>(p.add(8 * elem_bytes::<E>()))) };
    [a[0], a[1], b[0], b[1]]
}

/// The dots of `R` rows (`row_bytes` apart from `w`) with the activation `a`, `STEP` values a
/// step; the last (fewer than `STEP`) through the same step on zero-padded copies.
///
/// # Safety
/// NEON; `R` rows of `row_bytes` (whole elements of kind `E`) readable at `w`;
/// `a.len() == row_bytes`.
#[inline]
#[target_feature(enable = "neon")]
unsafe fn rows<const E: u8, const R: usize>(w: *const u8, row_bytes: usize, a: &[u8]) -> [f32; R] {
    let eb = elem_bytes::<E>();
    let n = row_bytes / eb;
    let body = n / STEP * STEP;
    let mut acc = [[vdupq_n_f32(0.0); 4]; R];
    let fma = |acc: &mut [float32x4_t; 4], wv: [float32x4_t; 4], av: [float32x4_t; 4]| {
        for k in 0..4 {
            acc[k] = vfmaq_f32(acc[k], wv[k], av[k]);
        }
    };
    let mut i = 0;
    while i < body {
        // SAFETY: elements i..i + STEP ≤ n lie inside `a` and inside each row.
        let av = unsafe { load_step::<E>(a.as_ptr().add(i * eb)) };
        for (r, acc) in acc.iter_mut().enumerate() {
            // SAFETY: as above.
            fma(
                acc,
                unsafe { load_step::<E>(w.add(r * row_bytes + i * eb)) },
                av,
            );
        }
        i += STEP;
    }
    if body < n {
        let tail = (n - body) * eb;
        let mut pad = [0u8; STEP * 4];
        pad[..tail].copy_from_slice(&a[body * eb..]);
        // SAFETY: `pad` holds STEP elements of any kind.
        let av = unsafe { load_step::<E>(pad.as_ptr()) };
        for (r, acc) in acc.iter_mut().enumerate() {
            // SAFETY: the last `tail` bytes of row r, inside the row; `pad` as above. The
            // padding is zero on both sides, so it adds nothing.
            let wv = unsafe {
                core::ptr::copy_nonoverlapping(
                    w.add(r * row_bytes + body * eb),
                    pad.as_mut_ptr(),
                    tail,
                );
                load_step::<E>(pad.as_ptr())
            };
            fma(acc, wv, av);
        }
    }
    acc.map(|[a0, a1, a2, a3]| vaddvq_f32(vaddq_f32(vaddq_f32(a0, a1), vaddq_f32(a2, a3))))
}

/// `out[r] = dot(row r, activation)`: `ROWS` rows a pass, the rest one at a time.
///
/// # Safety
/// NEON; `weights` holds `out.len()` rows of `row_bytes` (whole elements of kind `E`) and
/// `activation` one row (checked by the wrapper).
#[inline]
#[target_feature(enable = "neon")]
unsafe fn gemv<const E: u8>(weights: &[u8], row_bytes: usize, activation: &[u8], out: &mut [f32]) {
    let mut r = 0;
    while r + ROWS <= out.len() {
        // SAFETY: rows r..r + ROWS lie inside `weights`.
        let v =
            unsafe { rows::<E, ROWS>(weights.as_ptr().add(r * row_bytes), row_bytes, activation) };
        out[r..r + ROWS].copy_from_slice(&v);
        r += ROWS;
    }
    while r < out.len() {
        // SAFETY: row r lies inside `weights`.
        out[r] =
            unsafe { rows::<E, 1>(weights.as_ptr().add(r * row_bytes), row_bytes, activation) }[0];
        r += 1;
    }
}

/// F32 × F32 matrix-vector product.
///
/// # Safety
/// NEON; `weights` holds `out.len()` rows of `row_bytes` (a multiple of 4) and `activation`
/// `row_bytes` bytes (checked by the wrapper).
#[target_feature(enable = "neon")]
pub(super) unsafe fn gemv_f32(
    weights: &[u8],
    row_bytes: usize,
    activation: &[u8],
    out: &mut [f32],
) {
    // SAFETY: the caller's contract.
    unsafe { gemv::<F32>(weights, row_bytes, activation, out) }
}

/// F16 × F16 matrix-vector product.
///
/// # Safety
/// As [`gemv_f32`], rows of whole 2-byte elements.
#[target_feature(enable = "neon")]
pub(super) unsafe fn gemv_f16(
    weights: &[u8],
    row_bytes: usize,
    activation: &[u8],
    out: &mut [f32],
) {
    // SAFETY: the caller's contract.
    unsafe { gemv::<F16>(weights, row_bytes, activation, out) }
}

/// BF16 × BF16 matrix-vector product.
///
/// # Safety
/// As [`gemv_f32`], rows of whole 2-byte elements.
#[target_feature(enable = "neon")]
pub(super) unsafe fn gemv_bf16(
    weights: &[u8],
    row_bytes: usize,
    activation: &[u8],
    out: &mut [f32],
) {
    // SAFETY: the caller's contract.
    unsafe { gemv::<BF16>(weights, row_bytes, activation, out) }
}

/// f32 → 2-byte float activation (bf16 when `BF`, else f16), 8 values a step, the last (fewer
/// than 8) through the scalar conversion.
#[inline]
#[target_feature(enable = "neon")]
fn quantize_2byte<const BF: bool>(src: &[f32], dst: &mut [u8]) {
    assert!(
        dst.len() == 2 * src.len(),
        "{} activation: {} values need {} bytes, found {}",
        if BF { "bf16" } else { "f16" },
        src.len(),
        2 * src.len(),
        dst.len()
    );
    let mut chunks = src.chunks_exact(8);
    let mut out = dst.chunks_exact_mut(16);
    for (v, o) in (&mut chunks).zip(&mut out) {
        // SAFETY: `v` holds 8 floats and `o` 16 bytes.
        unsafe {
            let (a, b) = (vld1q_f32(v.as_ptr()), vld1q_f32(v.as_ptr().add(4)));
            let h = if BF {
                narrow8_bf16(a, b)
            } else {
                narrow8_f16(a, b)
            };
            vst1q_u8(o.as_mut_ptr(), vreinterpretq_u8_u16(h));
        }
    }
    for (&v, o) in chunks
        .remainder()
        .iter()
        .zip(out.into_remainder().chunks_exact_mut(2))
    {
        o.copy_from_slice(&if BF {
            Bf16Le::from_f32(v).0
        } else {
            narrow1(v).to_le_bytes()
        });
    }
}

/// f32 → F16 activation, byte-identical to `f16::quantize`.
///
/// # Safety
/// NEON present (the lengths are checked here).
#[target_feature(enable = "neon")]
pub(super) unsafe fn quantize_f16(src: &[f32], dst: &mut [u8]) {
    quantize_2byte::<false>(src, dst)
}

/// f32 → BF16 activation, byte-identical to `bf16::quantize`.
///
/// # Safety
/// NEON present (the lengths are checked here).
#[target_feature(enable = "neon")]
pub(super) unsafe fn quantize_bf16(src: &[f32], dst: &mut [u8]) {
    quantize_2byte::<true>(src, dst)
}

/// `out[c] = Σ_j weights[j] · rows[j·out.len() + c]`: the value side of attention, one query —
/// the several-query kernel with one query (so each query of a batch gets exactly this).
///
/// # Safety
/// NEON present; `rows.len() >= weights.len() * out.len()` (checked by the caller).
#[target_feature(enable = "neon")]
pub(super) unsafe fn weighted_sum(weights: &[f32], rows: &[half::f16], out: &mut [f32]) {
    // SAFETY: one query of `weights.len()` weights over as many rows of `out.len()` values.
    unsafe {
        super::attention::attention_values(weights, weights.len(), &[weights.len()], rows, out)
    }
}

/// `exp(x)` for each lane, for `x ≤ 0` (softmax arguments), as the AVX2 tier's: `x = n·ln 2 + r`
/// (`n` rounded to nearest even, ln 2 in two parts so `r` is exact), `exp(r)` by the degree-7
/// polynomial of `exp_poly`, times `2^n` built in the exponent bits; arguments below −87 are
/// clamped there (`exp(−87) ≈ 1.6e-38`, nothing beside the maximum's 1).
#[inline]
#[target_feature(enable = "neon")]
fn exp_nonpositive(x: float32x4_t) -> float32x4_t {
    let x = vmaxq_f32(x, vdupq_n_f32(-87.0));
    let n = vrndnq_f32(vmulq_f32(x, vdupq_n_f32(core::f32::consts::LOG2_E)));
    let r = vfmsq_f32(x, n, vdupq_n_f32(exp_poly::LN2_HI));
    let r = vfmsq_f32(r, n, vdupq_n_f32(exp_poly::LN2_LO));
    let mut p = vdupq_n_f32(exp_poly::HIGHEST);
    for c in exp_poly::REST {
        p = vfmaq_f32(vdupq_n_f32(c), p, r);
    }
    let two_n = vreinterpretq_f32_s32(vshlq_n_s32::<23>(vaddq_s32(
        vcvtq_s32_f32(n),
        vdupq_n_s32(127),
    )));
    vmulq_f32(p, two_n)
}

/// Attention's softmax numerator in place: scale and maximum in one pass, exponentials and their
/// sum in a second, 4 lanes at a time; the last (fewer than 4) scores through the same vector
/// code on a padded copy.
///
/// # Safety
/// NEON present.
#[target_feature(enable = "neon")]
pub(super) unsafe fn softmax(scores: &mut [f32], scale: f32) -> f32 {
    let vscale = vdupq_n_f32(scale);
    let (body, tail) = scores.split_at_mut(scores.len() / 4 * 4);
    let mut vmax = vdupq_n_f32(f32::NEG_INFINITY);
    for chunk in body.chunks_exact_mut(4) {
        // SAFETY: 4 values of `chunk`.
        unsafe {
            let v = vmulq_f32(vld1q_f32(chunk.as_ptr()), vscale);
            vst1q_f32(chunk.as_mut_ptr(), v);
            vmax = vmaxq_f32(vmax, v);
        }
    }
    let mut max = vmaxvq_f32(vmax);
    for s in tail.iter_mut() {
        *s *= scale;
        max = max.max(*s);
    }
    let vmax = vdupq_n_f32(max);
    let mut vsum = vdupq_n_f32(0.0);
    for chunk in body.chunks_exact_mut(4) {
        // SAFETY: 4 values of `chunk`.
        unsafe {
            let e = exp_nonpositive(vsubq_f32(vld1q_f32(chunk.as_ptr()), vmax));
            vst1q_f32(chunk.as_mut_ptr(), e);
            vsum = vaddq_f32(vsum, e);
        }
    }
    let mut tail_sum = 0.0f32;
    if !tail.is_empty() {
        // The padding lanes (the maximum, so exp(0)) are dropped.
        let mut pad = [max; 4];
        pad[..tail.len()].copy_from_slice(tail);
        // SAFETY: 4 values of `pad`.
        unsafe {
            let e = exp_nonpositive(vsubq_f32(vld1q_f32(pad.as_ptr()), vmax));
            vst1q_f32(pad.as_mut_ptr(), e);
        }
        tail.copy_from_slice(&pad[..tail.len()]);
        tail_sum = tail.iter().sum();
    }
    vaddvq_f32(vsum) + tail_sum
}

/// `silu(g) · u` for 4 lanes, as the x86 tiers': `silu(g) = g · σ(g)` with `σ` from
/// `e = exp(−|g|)` (an argument the polynomial covers): `1 / (1 + e)` for `g ≥ 0`, `e / (1 + e)`
/// below.
#[inline]
#[target_feature(enable = "neon")]
fn silu_mul4(g: float32x4_t, u: float32x4_t) -> float32x4_t {
    let e = exp_nonpositive(vnegq_f32(vabsq_f32(g)));
    let one = vdupq_n_f32(1.0);
    let negative = vcltq_f32(g, vdupq_n_f32(0.0));
    let num = vbslq_f32(negative, e, one);
    vmulq_f32(vmulq_f32(g, vdivq_f32(num, vaddq_f32(one, e))), u)
}

/// SwiGLU's gate in place, 4 lanes at a time; the last (fewer than 4) through a padded copy.
///
/// # Safety
/// NEON present; `up.len() == gate.len()` (checked by the caller).
#[target_feature(enable = "neon")]
pub(super) unsafe fn silu_mul(gate: &mut [f32], up: &[f32]) {
    let body = gate.len() / 4 * 4;
    let (gate_body, gate_tail) = gate.split_at_mut(body);
    for (g, u) in gate_body.chunks_exact_mut(4).zip(up.chunks_exact(4)) {
        // SAFETY: 4 values of each chunk.
        unsafe {
            let v = silu_mul4(vld1q_f32(g.as_ptr()), vld1q_f32(u.as_ptr()));
            vst1q_f32(g.as_mut_ptr(), v);
        }
    }
    if !gate_tail.is_empty() {
        let (mut g, mut u) = ([0.0f32; 4], [0.0f32; 4]);
        g[..gate_tail.len()].copy_from_slice(gate_tail);
        u[..gate_tail.len()].copy_from_slice(&up[body..]);
        // SAFETY: 4 values of each padded copy.
        unsafe {
            let v = silu_mul4(vld1q_f32(g.as_ptr()), vld1q_f32(u.as_ptr()));
            vst1q_f32(g.as_mut_ptr(), v);
        }
        gate_tail.copy_from_slice(&g[..gate_tail.len()]);
    }
}

/// Four f16 values at `p` widened to f32.
///
/// # Safety
/// 4 f16 values readable at `p`.
#[inline]
#[target_feature(enable = "neon")]
pub(super) unsafe fn load4_f16(p: *const half::f16) -> float32x4_t {
    // SAFETY: the caller guarantees the 8 bytes; byte loads need no alignment.
    widen4_f16(vreinterpret_u16_u8(unsafe { vld1_u8(p.cast()) }))
}

/// Sixteen f16 values at `p` widened to f32.
///
/// # Safety
/// 16 f16 values readable at `p`.
#[inline]
#[target_feature(enable = "neon")]
pub(super) unsafe fn load16_f16(p: *const half::f16) -> [float32x4_t; 4] {
    // SAFETY: the caller guarantees the 32 bytes.
    unsafe { load_step::<F16>(p.cast()) }
}

#[cfg(test)]
mod tests {
    //! The conversions' special values (the public tests' rows hold no NaN or infinity).

    /// Every class of f32 the conversions meet, including NaNs with payloads, ties and
    /// overflow, in runs long enough for the vector body and the scalar tail.
    fn specials() -> Vec<f32> {
        let mut bits: Vec<u32> = vec![
            0x7f80_0000, // +inf
            0xff80_0000, // −inf
            0x7fc0_0000, // quiet NaN
            0xffc0_0001, // negative quiet NaN with a payload
            0x7f80_0001, // signaling NaN, lowest payload
            0x7fbf_ffff, // signaling NaN, every payload bit
            0x7fff_ffff,
            0xffff_ffff,
            0x0000_0001, // f32 subnormals
            0x807f_ffff,
            0x7f7f_ffff, // largest finite: overflows f16, rounds to inf in bf16
            0x477f_f000, // 65520: ties to f16 inf
            0x477f_efff, // just below: 65504
            0x3f80_8000, // bf16 tie, even below
            0x3f81_8000, // bf16 tie, odd below
            0x3f80_8001, // bf16 just above a tie
            0x3880_0000, // 2^-14: f16's smallest normal
            0x3380_0000, // 2^-24: f16's smallest subnormal
            0x3300_0000, // 2^-25: f16 tie to zero
            0x3300_0001, // just above: rounds up to 2^-24
            0x0000_0000,
            0x8000_0000,
        ];
        let mut x = 0x1234_5678u32;
        for _ in 0..200 {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            bits.push(x);
        }
        bits.into_iter().map(f32::from_bits).collect()
    }

    #[test]
    fn conversions_are_byte_identical_on_special_values() {
        let x = specials();
        for start in 0..8 {
            for len in [1, 7, 8, 9, 17, x.len() - start] {
                let src = &x[start..start + len];
                for (what, scalar, fast) in [
                    (
                        "f16",
                        crate::f16::quantize as fn(&[f32], &mut [u8]),
                        super::quantize_f16 as unsafe fn(&[f32], &mut [u8]),
                    ),
                    ("bf16", crate::bf16::quantize, super::quantize_bf16),
                ] {
                    let mut want = vec![0u8; 2 * len];
                    scalar(src, &mut want);
                    let mut got = vec![0xa5u8; 2 * len];
                    // SAFETY: NEON is baseline on aarch64; the kernel checks the lengths.
                    unsafe { fast(src, &mut got) };
                    assert_eq!(got, want, "{what}, values {start}..+{len}");
                }
            }
        }
    }
}
