//! The Walsh–Hadamard transform on AVX-512: 16 lanes, the strides 1 to 8 inside a vector by a
//! lane permutation and a sign flip (`v[i ^ h] + (±v[i])`), the wider ones by the shared driver.

use core::arch::x86_64::*;

use crate::kernels::fwht::{fwht_row, FwhtLanes};

pub(super) struct Avx512;

/// A vector with the sign bit set in the lanes whose index has bit `h` set.
#[inline(always)]
unsafe fn negate_where(h: i32) -> __m512 {
    let lanes = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    let set = _mm512_test_epi32_mask(lanes, _mm512_set1_epi32(h));
    _mm512_maskz_mov_ps(set, _mm512_set1_ps(-0.0))
}

impl FwhtLanes for Avx512 {
    const LANES: usize = 16;
    type F = __m512;

    #[inline(always)]
    unsafe fn load(p: *const f32) -> __m512 {
        _mm512_loadu_ps(p)
    }
    #[inline(always)]
    unsafe fn store(p: *mut f32, v: __m512) {
        _mm512_storeu_ps(p, v)
    }
    #[inline(always)]
    unsafe fn splat(x: f32) -> __m512 {
        _mm512_set1_ps(x)
    }
    #[inline(always)]
    unsafe fn add(a: __m512, b: __m512) -> __m512 {
        _mm512_add_ps(a, b)
    }
    #[inline(always)]
    unsafe fn sub(a: __m512, b: __m512) -> __m512 {
        _mm512_sub_ps(a, b)
    }
    #[inline(always)]
    unsafe fn mul(a: __m512, b: __m512) -> __m512 {
        _mm512_mul_ps(a, b)
    }
    #[inline(always)]
    unsafe fn in_vector(v: __m512) -> __m512 {
        // Lane i gets v[i ^ h] + v[i] (bit h clear) or v[i ^ h] − v[i] (bit h set): a + (−b)
        // is a − b exactly.
        let p = _mm512_permute_ps::<0b10_11_00_01>(v);
        let v = _mm512_add_ps(p, _mm512_xor_ps(v, negate_where(1)));
        let p = _mm512_permute_ps::<0b01_00_11_10>(v);
        let v = _mm512_add_ps(p, _mm512_xor_ps(v, negate_where(2)));
        let p = _mm512_shuffle_f32x4::<0b10_11_00_01>(v, v);
        let v = _mm512_add_ps(p, _mm512_xor_ps(v, negate_where(4)));
        let p = _mm512_shuffle_f32x4::<0b01_00_11_10>(v, v);
        _mm512_add_ps(p, _mm512_xor_ps(v, negate_where(8)))
    }
}

/// # Safety
/// AVX-512 F/BW/VL/DQ (the tier) must be available; `check_fwht` holds for the arguments.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")]
pub(super) unsafe fn fwht(row: &mut [f32], block: usize, signs: Option<&[f32]>) {
    fwht_row::<Avx512>(row, block, signs)
}
