//! The f32 → Q8_0 activation conversion on NEON, byte-identical to the scalar
//! `q8_0::quantize_activation`: amax with NaN skipped (`fmaxnm`, as `f32::max`), the same scale
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
