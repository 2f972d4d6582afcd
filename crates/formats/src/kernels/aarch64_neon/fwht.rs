//! The Walsh–Hadamard transform on NEON: 4 lanes, the strides 1 and 2 inside a vector by a lane
//! permutation and a sign flip (`v[i ^ h] + (±v[i])`), the wider ones by the shared driver.

use core::arch::aarch64::*;

use crate::kernels::fwht::{fwht_row, FwhtLanes};

pub(super) struct Neon;

/// `v` with the sign flipped in the lanes whose index has bit `h` (1 or 2) set.
#[inline(always)]
unsafe fn negate_where(v: float32x4_t, h: usize) -> float32x4_t {
    let bit = |i: usize| if i & h != 0 { 0x8000_0000u32 } else { 0 };
    let signs = [bit(0), bit(1), bit(2), bit(3)];
    let mask = vld1q_u32(signs.as_ptr());
    vreinterpretq_f32_u32(veorq_u32(vreinterpretq_u32_f32(v), mask))
}

impl FwhtLanes for Neon {
    const LANES: usize = 4;
    type F = float32x4_t;

    #[inline(always)]
    unsafe fn load(p: *const f32) -> float32x4_t {
        vld1q_f32(p)
    }
    #[inline(always)]
    unsafe fn store(p: *mut f32, v: float32x4_t) {
        vst1q_f32(p, v)
    }
    #[inline(always)]
    unsafe fn splat(x: f32) -> float32x4_t {
        vdupq_n_f32(x)
    }
    #[inline(always)]
    unsafe fn add(a: float32x4_t, b: float32x4_t) -> float32x4_t {
        vaddq_f32(a, b)
    }
    #[inline(always)]
    unsafe fn sub(a: float32x4_t, b: float32x4_t) -> float32x4_t {
        vsubq_f32(a, b)
    }
    #[inline(always)]
    unsafe fn mul(a: float32x4_t, b: float32x4_t) -> float32x4_t {
        vmulq_f32(a, b)
    }
    #[inline(always)]
    unsafe fn in_vector(v: float32x4_t) -> float32x4_t {
        // Lane i gets v[i ^ h] + v[i] (bit h clear) or v[i ^ h] − v[i] (bit h set): a + (−b)
        // is a − b exactly.
        let v = vaddq_f32(vrev64q_f32(v), negate_where(v, 1));
        vaddq_f32(vextq_f32::<2>(v, v), negate_where(v, 2))
    }
}

/// # Safety
/// NEON must be available; `check_fwht` holds for the arguments.
#[target_feature(enable = "neon")]
pub(super) unsafe fn fwht(row: &mut [f32], block: usize, signs: Option<&[f32]>) {
    fwht_row::<Neon>(row, block, signs)
}
