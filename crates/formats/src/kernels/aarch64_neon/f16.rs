//! f16 ↔ f32 on aarch64, in one place for every kernel of the ARM tiers.
//!
//! Rust's f16 vector types and their intrinsics are unstable, so the conversions are written as
//! `asm!`: `fcvt` (one value), `fcvtl` / `fcvtl2` (four / eight, widening, exact) and `fcvtn` /
//! `fcvtn2` (narrowing, rounded to nearest even as FPCR's default mode; a NaN is made quiet and
//! keeps the top of its payload; overflow gives ±inf). They are ARMv8.0 instructions (the FP16
//! extension adds half-precision *arithmetic*, not used here), so plain `neon` is enough, and they
//! are the conversions `half` makes (its hardware `fcvt` path or its software fallback, checked
//! byte for byte by `float.rs`'s tests). `half::f16::to_f32` itself is an out-of-line call behind
//! a run-time feature check on aarch64: in a loop over 32-value blocks it costs more than the
//! block's arithmetic, which is why the kernels use these.

use core::arch::aarch64::*;
use core::arch::asm;

/// One f16 (its bits) widened exactly (`fcvt`).
#[inline]
#[target_feature(enable = "neon")]
pub(super) fn widen1(bits: u16) -> f32 {
    let out: f32;
    // SAFETY: register-only ARMv8.0 floating-point instructions; NEON is enabled here.
    unsafe {
        asm!(
            "fmov {tmp:s}, {bits:w}",
            "fcvt {out:s}, {tmp:h}",
            bits = in(reg) u32::from(bits),
            tmp = out(vreg) _,
            out = lateout(vreg) out,
            options(pure, nomem, nostack, preserves_flags),
        );
    }
    out
}

/// One f32 narrowed to f16 bits (`fcvt`), as `half::f16::from_f32`.
#[inline]
#[target_feature(enable = "neon")]
pub(super) fn narrow1(value: f32) -> u16 {
    let bits: u32;
    // SAFETY: register-only ARMv8.0 floating-point instructions; NEON is enabled here.
    unsafe {
        asm!(
            "fcvt {tmp:h}, {value:s}",
            "fmov {bits:w}, {tmp:s}",
            value = in(vreg) value,
            tmp = out(vreg) _,
            bits = lateout(reg) bits,
            options(pure, nomem, nostack, preserves_flags),
        );
    }
    bits as u16
}

/// The f16 at `p` (two bytes, little-endian, any alignment) widened exactly.
///
/// # Safety
/// NEON present; `p` readable for two bytes.
#[inline(always)]
pub(super) unsafe fn load1(p: *const u8) -> f32 {
    widen1(u16::from_le_bytes(p.cast::<[u8; 2]>().read_unaligned()))
}

/// Four f16 values widened exactly (`fcvtl`).
#[inline]
#[target_feature(enable = "neon")]
pub(super) fn widen4(h: uint16x4_t) -> float32x4_t {
    let out: float32x4_t;
    // SAFETY: a register-only ARMv8.0 Advanced SIMD instruction; NEON is enabled here.
    unsafe {
        asm!(
            "fcvtl {out:v}.4s, {h:v}.4h",
            h = in(vreg) h,
            out = lateout(vreg) out,
            options(pure, nomem, nostack, preserves_flags),
        );
    }
    out
}

/// Eight f16 values widened exactly (`fcvtl`, `fcvtl2`).
#[inline]
#[target_feature(enable = "neon")]
pub(super) fn widen8(h: uint16x8_t) -> [float32x4_t; 2] {
    let (lo, hi): (float32x4_t, float32x4_t);
    // SAFETY: register-only ARMv8.0 Advanced SIMD instructions; `lo` is written before `h` is
    // read again, so it is an early-clobber output (`out`) that cannot share `h`'s register.
    unsafe {
        asm!(
            "fcvtl {lo:v}.4s, {h:v}.4h",
            "fcvtl2 {hi:v}.4s, {h:v}.8h",
            h = in(vreg) h,
            lo = out(vreg) lo,
            hi = lateout(vreg) hi,
            options(pure, nomem, nostack, preserves_flags),
        );
    }
    [lo, hi]
}

/// Eight f32 values narrowed to f16 (`fcvtn`, `fcvtn2`), as `half::f16::from_f32`.
#[inline]
#[target_feature(enable = "neon")]
pub(super) fn narrow8(a: float32x4_t, b: float32x4_t) -> uint16x8_t {
    let out: uint16x8_t;
    // SAFETY: register-only ARMv8.0 Advanced SIMD instructions; `out` is written before `b` is
    // read, so it is an early-clobber output that cannot share `b`'s register.
    unsafe {
        asm!(
            "fcvtn {out:v}.4h, {a:v}.4s",
            "fcvtn2 {out:v}.8h, {b:v}.4s",
            a = in(vreg) a,
            b = in(vreg) b,
            out = out(vreg) out,
            options(pure, nomem, nostack, preserves_flags),
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every f16 widens as `half` widens it, and every f32 the widening gives (plus values between
    /// f16s, ties, overflow, NaN payloads) narrows as `half` narrows it.
    #[test]
    fn one_value_conversions_are_halfs() {
        assert!(
            crate::kernels::Isa::Neon.available(),
            "NEON on every aarch64 CPU"
        );
        for bits in 0..=u16::MAX {
            let want = half::f16::from_bits(bits).to_f32();
            // SAFETY: NEON checked above.
            let got = unsafe { widen1(bits) };
            assert_eq!(got.to_bits(), want.to_bits(), "widen {bits:#06x}");
            for x in [
                want,
                want * 1.000_3,
                want * 0.999_7,
                f32::from_bits(want.to_bits() + 1),
            ] {
                // SAFETY: as above.
                let narrowed = unsafe { narrow1(x) };
                assert_eq!(narrowed, half::f16::from_f32(x).to_bits(), "narrow {x:e}");
            }
        }
        for x in [
            65520.0f32,
            -65520.0,
            1e9,
            f32::MAX,
            f32::from_bits(0x7fa0_1234),
            5.960_464_5e-8,
        ] {
            // SAFETY: as above.
            let narrowed = unsafe { narrow1(x) };
            assert_eq!(narrowed, half::f16::from_f32(x).to_bits(), "narrow {x:e}");
        }
    }
}
