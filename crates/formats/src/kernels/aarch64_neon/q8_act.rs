//! The f32 → Q8_0 and f32 → Q8_K activation conversions on NEON, each byte-identical to its
//! scalar `quantize_activation`. Q8_0: amax with NaN skipped (`fmaxnm`, as `f32::max`), the same scale
//! and multiplier, codes rounded to nearest even (`fcvtns`: NaN → 0) and saturated to i8 (as
//! `f32 as i8`).

use core::arch::aarch64::*;

use crate::common::F16Le;

const QK: usize = crate::q8_0::QK8_0;
const BLOCK_BYTES: usize = core::mem::size_of::<crate::q8_0::BlockQ8_0>();

/// # Safety
/// NEON present (the lengths are checked here).
#[target_feature(enable = "neon")]
pub(super) unsafe fn quantize_q8_0(src: &[f32], dst: &mut [u8]) {
    let n = src.len() / QK;
    assert!(
        src.len() == n * QK && dst.len() == n * BLOCK_BYTES,
        "q8_0 activation: {} values and {} bytes are not whole {QK}-value blocks of {BLOCK_BYTES} bytes",
        src.len(),
        dst.len()
    );
    for (x, out) in src.chunks_exact(QK).zip(dst.chunks_exact_mut(BLOCK_BYTES)) {
        // SAFETY: `x` holds 32 floats (`chunks_exact`); NEON was checked by the caller.
        let v: [float32x4_t; 8] =
            core::array::from_fn(|k| unsafe { vld1q_f32(x.as_ptr().add(4 * k)) });
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
        out[..2].copy_from_slice(&F16Le::from_f32(max / 127.0).0);
        out[2..].copy_from_slice(bytemuck::cast_slice(&codes));
    }
}

const QK_K: usize = crate::q8_k::QK_K;
const Q8_K_BYTES: usize = core::mem::size_of::<crate::q8_k::BlockQ8_K>();

/// The f32 → Q8_K conversion, byte-identical to the scalar `q8_k::quantize_activation`: the
/// largest magnitude with NaN skipped (`fmaxnm`), the sign of the FIRST value that has it,
/// `nearest_int` by the same magic-constant addition (separate multiply and add, as the scalar
/// code), capped at 127 and truncated to the low byte (`as i8`), and the sums of each 16 codes.
///
/// # Safety
/// NEON present (the lengths are checked here).
#[target_feature(enable = "neon")]
pub(super) unsafe fn quantize_q8_k(src: &[f32], dst: &mut [u8]) {
    let n = src.len() / QK_K;
    assert!(
        src.len() == n * QK_K && dst.len() == n * Q8_K_BYTES,
        "q8_K activation: {} values and {} bytes are not whole {QK_K}-value blocks of {Q8_K_BYTES} bytes",
        src.len(),
        dst.len()
    );
    for (x, out) in src.chunks_exact(QK_K).zip(dst.chunks_exact_mut(Q8_K_BYTES)) {
        let load = |k: usize| {
            // SAFETY: `x` holds 256 floats (`chunks_exact`) and `k < 64`; NEON was checked.
            unsafe { vld1q_f32(x.as_ptr().add(4 * k)) }
        };
        let mut acc = vdupq_n_f32(0.0);
        for k in 0..QK_K / 4 {
            acc = vmaxnmq_f32(acc, vabsq_f32(load(k)));
        }
        let amax = vmaxnmvq_f32(acc);
        if amax == 0.0 {
            out.fill(0);
            continue;
        }
        // The scalar code keeps the first value of largest magnitude, with its sign.
        let target = vdupq_n_f32(amax);
        let first = (0..QK_K / 4)
            .find(|&k| vmaxvq_u32(vceqq_f32(vabsq_f32(load(k)), target)) != 0)
            .expect("amax is one of the magnitudes");
        let max = *x[4 * first..4 * first + 4]
            .iter()
            .find(|v| v.abs() == amax)
            .expect("lane found above");
        let iscale = -127.0 / max;
        let scale = vdupq_n_f32(iscale);
        // `nearest_int`: adding 1.5·2²³ makes the FPU round half to even into the mantissa.
        let magic = vdupq_n_f32(12_582_912.0);
        let mantissa = vdupq_n_s32(0x007f_ffff);
        let bias = vdupq_n_s32(0x0040_0000);
        let cap = vdupq_n_s32(127);
        for g in 0..QK_K / 16 {
            let q: [int16x4_t; 4] = core::array::from_fn(|k| {
                let biased = vaddq_f32(vmulq_f32(scale, load(4 * g + k)), magic);
                let i = vsubq_s32(vandq_s32(vreinterpretq_s32_f32(biased), mantissa), bias);
                vmovn_s32(vminq_s32(i, cap))
            });
            // `as i8` keeps the low byte: the narrowing moves truncate.
            let codes = vcombine_s8(
                vmovn_s16(vcombine_s16(q[0], q[1])),
                vmovn_s16(vcombine_s16(q[2], q[3])),
            );
            // SAFETY: 16 code bytes of group `g` start at 4 + 16g < 260 of the 292-byte block.
            unsafe { vst1q_s8(out.as_mut_ptr().add(4 + 16 * g).cast(), codes) };
            let at = 4 + QK_K + 2 * g;
            out[at..at + 2].copy_from_slice(&vaddlvq_s8(codes).to_le_bytes());
        }
        out[..4].copy_from_slice(&(1.0 / iscale).to_le_bytes());
    }
}
