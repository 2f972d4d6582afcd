//! The Walsh–Hadamard transform on AVX2: 8 lanes, the strides 1, 2 and 4 inside a vector by a
//! lane permutation and a sign flip (`v[i ^ h] + (±v[i])`), the wider ones by the shared driver.

use core::arch::x86_64::*;

use crate::kernels::fwht::{fwht_row, FwhtLanes};

pub(super) struct Avx2;

/// A vector with the sign bit set in the lanes whose index has bit `h` set.
#[inline(always)]
unsafe fn negate_where(h: usize) -> __m256 {
    let bit = |i: i32| if (i as usize) & h != 0 { -0.0f32 } else { 0.0 };
    _mm256_setr_ps(
        bit(0),
        bit(1),
        bit(2),
        bit(3),
        bit(4),
        bit(5),
        bit(6),
        bit(7),
    )
}

impl FwhtLanes for Avx2 {
    const LANES: usize = 8;
    type F = __m256;

    #[inline(always)]
    unsafe fn load(p: *const f32) -> __m256 {
        _mm256_loadu_ps(p)
    }
    #[inline(always)]
    unsafe fn store(p: *mut f32, v: __m256) {
        _mm256_storeu_ps(p, v)
    }
    #[inline(always)]
    unsafe fn splat(x: f32) -> __m256 {
        _mm256_set1_ps(x)
    }
    #[inline(always)]
    unsafe fn add(a: __m256, b: __m256) -> __m256 {
        _mm256_add_ps(a, b)
    }
    #[inline(always)]
    unsafe fn sub(a: __m256, b: __m256) -> __m256 {
        _mm256_sub_ps(a, b)
    }
    #[inline(always)]
    unsafe fn mul(a: __m256, b: __m256) -> __m256 {
        _mm256_mul_ps(a, b)
    }
    #[inline(always)]
    unsafe fn in_vector(v: __m256) -> __m256 {
        // Lane i gets v[i ^ h] + v[i] (bit h clear) or v[i ^ h] − v[i] (bit h set): a + (−b)
        // is a − b exactly.
        let p = _mm256_permute_ps::<0b10_11_00_01>(v);
        let v = _mm256_add_ps(p, _mm256_xor_ps(v, negate_where(1)));
        let p = _mm256_permute_ps::<0b01_00_11_10>(v);
        let v = _mm256_add_ps(p, _mm256_xor_ps(v, negate_where(2)));
        let p = _mm256_permute2f128_ps::<0x01>(v, v);
        _mm256_add_ps(p, _mm256_xor_ps(v, negate_where(4)))
    }
}

/// # Safety
/// AVX2 (and FMA, F16C: the tier) must be available; `check_fwht` holds for the arguments.
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn fwht(row: &mut [f32], block: usize, signs: Option<&[f32]>) {
    fwht_row::<Avx2>(row, block, signs)
}
