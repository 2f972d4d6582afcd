//! The f32 → Q8_0 / Q8_1 / Q8_K activation conversions on NEON, byte-identical to the scalar
//! `q8_0::quantize_activation`, `q8_1::quantize_activation` and `q8_k::quantize_activation`.
//!
//! Q8_0 and Q8_1: amax with NaN skipped (`fmaxnm`, as `f32::max`), the same scale and multiplier,
//! codes rounded to nearest even (`fcvtns`: NaN → 0) and saturated to i8 (as `f32 as i8`); Q8_1
//! adds `d·Σq` from the exact integer sum. Q8_K: the first value of largest magnitude with its
//! sign (NaN skipped, as the scalar `abs() > amax` skips it), `iscale = −127/max`, and ggml's
//! `nearest_int` bit trick lane by lane (the same f32 multiply and add, then the mantissa bits),
//! capped at 127 and truncated to a byte as `as i8` does; the group sums from the stored bytes.

use core::arch::aarch64::*;

use super::f16::narrow1;
use crate::common::F32Le;

const QK: usize = crate::q8_0::QK8_0;
const Q8_0_BYTES: usize = core::mem::size_of::<crate::q8_0::BlockQ8_0>();
const Q8_1_BYTES: usize = core::mem::size_of::<crate::q8_1::BlockQ8_1>();
const QK_K: usize = crate::q8_k::QK_K;
const Q8_K_BYTES: usize = core::mem::size_of::<crate::q8_k::BlockQ8_K>();

/// Panics unless `src` is whole blocks of `elems` values and `dst` holds exactly their bytes.
fn check(src: &[f32], dst: &[u8], elems: usize, bytes: usize, what: &str) -> usize {
    let n = src.len() / elems;
    assert!(
        src.len() == n * elems && dst.len() == n * bytes,
        "{what} activation: {} values and {} bytes are not whole {elems}-value blocks of {bytes} bytes",
        src.len(),
        dst.len()
    );
    n
}

/// The largest |x| of 32 values (NaN skipped) and their codes `round_ties_even(x·127/amax)`
/// saturated to i8, as the scalar Q8_0 / Q8_1 activation conversions compute them.
///
/// # Safety
/// NEON present.
#[inline(always)]
unsafe fn amax_codes32(x: &[f32]) -> (f32, [i8; QK]) {
    // SAFETY: `x` holds 32 floats (the callers' `chunks_exact`).
    let v: [float32x4_t; 8] = core::array::from_fn(|k| unsafe { vld1q_f32(x.as_ptr().add(4 * k)) });
    let mut acc = vdupq_n_f32(0.0);
    for &vk in &v {
        acc = vmaxnmq_f32(acc, vabsq_f32(vk));
    }
    let max = vmaxnmvq_f32(acc);
    let id = if max != 0.0 { 127.0 / max } else { 0.0 };
    let idv = vdupq_n_f32(id);
    let mut codes = [0i8; QK];
    for (k, pair) in v.chunks_exact(2).enumerate() {
        let a = vcvtnq_s32_f32(vmulq_f32(pair[0], idv));
        let b = vcvtnq_s32_f32(vmulq_f32(pair[1], idv));
        let h = vcombine_s16(vqmovn_s32(a), vqmovn_s32(b));
        // SAFETY: 8 bytes at `8 * k` of the 32-byte `codes`.
        unsafe { vst1_s8(codes.as_mut_ptr().add(8 * k), vqmovn_s16(h)) };
    }
    (max, codes)
}

/// # Safety
/// NEON present (the lengths are checked here).
#[target_feature(enable = "neon")]
pub(super) unsafe fn quantize_q8_0(src: &[f32], dst: &mut [u8]) {
    check(src, dst, QK, Q8_0_BYTES, "q8_0");
    for (x, out) in src.chunks_exact(QK).zip(dst.chunks_exact_mut(Q8_0_BYTES)) {
        // SAFETY: NEON was checked by the caller.
        let (max, codes) = unsafe { amax_codes32(x) };
        out[..2].copy_from_slice(&narrow1(max / 127.0).to_le_bytes());
        out[2..].copy_from_slice(bytemuck::cast_slice(&codes));
    }
}

/// # Safety
/// NEON present (the lengths are checked here).
#[target_feature(enable = "neon")]
pub(super) unsafe fn quantize_q8_1(src: &[f32], dst: &mut [u8]) {
    check(src, dst, QK, Q8_1_BYTES, "q8_1");
    for (x, out) in src.chunks_exact(QK).zip(dst.chunks_exact_mut(Q8_1_BYTES)) {
        // SAFETY: NEON was checked by the caller.
        let (max, codes) = unsafe { amax_codes32(x) };
        let d = max / 127.0;
        // SAFETY: 32 bytes in `codes`.
        let sum = unsafe {
            let q = codes.as_ptr();
            i32::from(vaddlvq_s8(vld1q_s8(q))) + i32::from(vaddlvq_s8(vld1q_s8(q.add(16))))
        };
        out[..2].copy_from_slice(&narrow1(d).to_le_bytes());
        out[2..4].copy_from_slice(&narrow1(sum as f32 * d).to_le_bytes());
        out[4..].copy_from_slice(bytemuck::cast_slice(&codes));
    }
}

/// # Safety
/// NEON present (the lengths are checked here).
#[target_feature(enable = "neon")]
pub(super) unsafe fn quantize_q8_k(src: &[f32], dst: &mut [u8]) {
    check(src, dst, QK_K, Q8_K_BYTES, "q8_K");
    for (x, out) in src.chunks_exact(QK_K).zip(dst.chunks_exact_mut(Q8_K_BYTES)) {
        let mut acc = vdupq_n_f32(0.0);
        for v in x.chunks_exact(4) {
            // SAFETY: `v` holds 4 floats.
            acc = vmaxnmq_f32(acc, vabsq_f32(unsafe { vld1q_f32(v.as_ptr()) }));
        }
        let amax = vmaxnmvq_f32(acc);
        if amax == 0.0 {
            out.fill(0);
            continue;
        }
        // The scalar code keeps the FIRST value of largest magnitude, with its sign.
        let max = x.iter().copied().find(|v| v.abs() == amax).unwrap_or(amax);
        let iscale = -127.0 / max;
        let scale = vdupq_n_f32(iscale);
        // `nearest_int`: the magic constant makes the FPU round half to even into the mantissa.
        let magic = vdupq_n_f32(12_582_912.0);
        let mantissa = vdupq_n_s32(0x007f_ffff);
        let bias = vdupq_n_s32(0x0040_0000);
        let cap = vdupq_n_s32(127);
        let (d_out, rest) = out.split_at_mut(4);
        let (codes, sums) = rest.split_at_mut(QK_K);
        for (g, (chunk, sum)) in x.chunks_exact(16).zip(sums.chunks_exact_mut(2)).enumerate() {
            let mut q = [vdupq_n_s32(0); 4];
            for (k, o) in q.iter_mut().enumerate() {
                // SAFETY: `chunk` holds 16 floats.
                let v = unsafe { vld1q_f32(chunk.as_ptr().add(4 * k)) };
                let biased = vaddq_f32(vmulq_f32(scale, v), magic);
                let i = vsubq_s32(vandq_s32(vreinterpretq_s32_f32(biased), mantissa), bias);
                *o = vminq_s32(i, cap);
            }
            // Truncating narrows: `as i8` keeps the low byte.
            let lo = vcombine_s16(vmovn_s32(q[0]), vmovn_s32(q[1]));
            let hi = vcombine_s16(vmovn_s32(q[2]), vmovn_s32(q[3]));
            let bytes = vcombine_s8(vmovn_s16(lo), vmovn_s16(hi));
            // SAFETY: the 16 code bytes of group `g` lie inside the 256 of `codes`.
            unsafe { vst1q_s8(codes.as_mut_ptr().add(16 * g).cast(), bytes) };
            sum.copy_from_slice(&(vaddlvq_s8(bytes)).to_le_bytes());
        }
        d_out.copy_from_slice(&F32Le::from_f32(1.0 / iscale).0);
    }
}
