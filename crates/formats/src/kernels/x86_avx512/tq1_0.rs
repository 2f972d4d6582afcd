//! TQ1_0 × Q8_K on AVX-512. A byte holds five trits as a base-3 fraction: multiplying by 3ⁿ
//! (mod 256) brings trit n to the top, where it reads as (q ≥ 86) + (q ≥ 171) — the same as
//! ⌊3q / 256⌋. The 52 packed bytes are laid into four zmm (x = bytes 0..32, y = 32..48,
//! h = the 4 high bytes) next to per-byte multipliers so each zmm yields 64 trits in value order:
//! [x·1, x·3], [x·9, x·27], [x·81, y·1, y·3], [y·9, y·27, y·81, h·(1,3,9,27)].

use core::arch::x86_64::*;
use core::mem::{offset_of, size_of};

use super::lowbit_util::{constant, dot4, Avx512};
use crate::kernels::lowbit_rows::{gemv_q8_k, Q8KWeights};
use crate::tq1_0::BlockTQ1_0;

pub(super) const fn multipliers(runs: &[(u8, usize)]) -> [u8; 64] {
    let mut t = [0u8; 64];
    let mut at = 0;
    let mut i = 0;
    while i < runs.len() {
        let mut k = 0;
        while k < runs[i].1 {
            t[at] = runs[i].0;
            at += 1;
            k += 1;
        }
        i += 1;
    }
    t
}

const M0: [u8; 64] = multipliers(&[(1, 32), (3, 32)]);
const M1: [u8; 64] = multipliers(&[(9, 32), (27, 32)]);
const M2: [u8; 64] = multipliers(&[(81, 32), (1, 16), (3, 16)]);
const M3: [u8; 64] = multipliers(&[(9, 16), (27, 16), (81, 16), (1, 4), (3, 4), (9, 4), (27, 4)]);

/// Byte-wise `b · m mod 256`; `m` is the same for both bytes of every 16-bit lane.
#[inline(always)]
pub(super) unsafe fn mul_bytes(b: __m512i, m: __m512i) -> __m512i {
    let even = _mm512_mullo_epi16(b, m);
    let odd = _mm512_mullo_epi16(_mm512_and_si512(b, _mm512_set1_epi16(0xff00u16 as i16)), m);
    _mm512_mask_blend_epi8(0xaaaa_aaaa_aaaa_aaaa, even, odd)
}

/// Trit at the top of each byte, as a code 0..=2.
#[inline(always)]
pub(super) unsafe fn top_trit(q: __m512i) -> __m512i {
    let one = _mm512_cmpge_epu8_mask(q, _mm512_set1_epi8(86));
    let two = _mm512_cmpge_epu8_mask(q, _mm512_set1_epi8(171u8 as i8));
    let t = _mm512_maskz_mov_epi8(one, _mm512_set1_epi8(1));
    _mm512_mask_mov_epi8(t, two, _mm512_set1_epi8(2))
}

struct TQ1_0;

impl Q8KWeights<Avx512> for TQ1_0 {
    const BLOCK_BYTES: usize = size_of::<BlockTQ1_0>();
    const SCALE_OFFSET: usize = offset_of!(BlockTQ1_0, d);

    #[inline(always)]
    unsafe fn block_dot<const VNNI: bool>(block: *const u8, act: &[__m512i; 4]) -> __m512i {
        let x = _mm256_loadu_si256(block.cast());
        let y = _mm_loadu_si128(block.add(32).cast());
        let h = block.add(48).cast::<i32>().read_unaligned();
        let b01 = _mm512_broadcast_i64x4(x);
        let b2 = _mm512_inserti64x4::<1>(_mm512_castsi256_si512(x), _mm256_broadcastsi128_si256(y));
        let b3 = _mm512_mask_set1_epi32(_mm512_broadcast_i32x4(y), 0xf000, h);
        let mut s = _mm512_setzero_si512();
        for (k, (b, m)) in [(b01, &M0), (b01, &M1), (b2, &M2), (b3, &M3)]
            .into_iter()
            .enumerate()
        {
            let t = top_trit(mul_bytes(b, constant(m)));
            s = dot4::<VNNI>(s, t, act[k]);
        }
        s
    }
}

/// # Safety
/// AVX-512 F/BW/VL/DQ present; buffers checked against the `GemvFn` contract.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq")]
pub(super) unsafe fn gemv(weights: &[u8], row_bytes: usize, activation: &[u8], out: &mut [f32]) {
    gemv_q8_k::<Avx512, TQ1_0, false>(weights, row_bytes, activation, out)
}

/// # Safety
/// As [`gemv`], plus AVX-512 VNNI.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq,avx512vnni")]
pub(super) unsafe fn gemv_vnni(
    weights: &[u8],
    row_bytes: usize,
    activation: &[u8],
    out: &mut [f32],
) {
    gemv_q8_k::<Avx512, TQ1_0, true>(weights, row_bytes, activation, out)
}
