//! The Q2_0 codec × Q8_0 on NEON, four rows a pass (`lowbit_util::gemv_q8_0`), for both layouts:
//! mainline Q2_0 (64 values, 18-byte blocks) and the group-128 layout of PQ2_0 and legacy Q2_0
//! (34-byte blocks). The 8 code bytes of a Q8_0 block's span hold value 4i + s in bits 2s of
//! byte i, so the activation is de-interleaved once per band (`ld4`: lane i of run s = code
//! 4i + s) and each row's 8 bytes, duplicated to both halves and shifted by 0/2 and 4/6 bits,
//! line up with it. Σ (code − 1)·q = Σ code·q − Σ q, exact, Σ q taken once for the band; the
//! float arithmetic is the scalar `dot`'s, so the result is bit-identical to it.

use core::arch::aarch64::*;
use core::mem::size_of;

use super::lowbit_util::{dot_bytes, gemv_q8_0, sum_bytes, Q8_0Weights};
use crate::q2_0::{BlockQ2_0, BlockQ2_0G128};
use crate::q8_0::QK8_0;

/// One Q8_0 block's codes de-interleaved (`runs[0]` = codes 4i then 4i + 1, `runs[1]` = 4i + 2
/// then 4i + 3, i = 0..8) and their sum in every lane.
struct Runs {
    runs: [int8x16_t; 2],
    sum: int32x4_t,
}

/// A Q2_0 layout whose block is `B`.
struct Q2<B>(core::marker::PhantomData<B>);

impl<B: crate::q2_0::Q2Block> Q8_0Weights for Q2<B> {
    const BLOCK_BYTES: usize = size_of::<B>();
    const SPAN: usize = B::ELEMS / QK8_0;
    type Act = Runs;

    #[inline(always)]
    unsafe fn load_act<const DOT: bool>(codes: *const u8) -> Runs {
        let a = vld4_s8(codes.cast());
        let runs = [vcombine_s8(a.0, a.1), vcombine_s8(a.2, a.3)];
        Runs {
            runs,
            sum: vdupq_n_s32(vaddvq_s32(sum_bytes::<DOT>(runs[0], runs[1]))),
        }
    }

    #[inline(always)]
    unsafe fn group_dot<const DOT: bool>(block: *const u8, k: usize, act: &Runs) -> int32x4_t {
        const LOW: [i8; 16] = [0, 0, 0, 0, 0, 0, 0, 0, -2, -2, -2, -2, -2, -2, -2, -2];
        const HIGH: [i8; 16] = [
            -4, -4, -4, -4, -4, -4, -4, -4, -6, -6, -6, -6, -6, -6, -6, -6,
        ];
        let bytes = u64::from_le_bytes(block.add(2 + 8 * k).cast::<[u8; 8]>().read_unaligned());
        let x = vreinterpretq_u8_u64(vdupq_n_u64(bytes));
        let three = vdupq_n_u8(3);
        let c0 = vandq_u8(vshlq_u8(x, vld1q_s8(LOW.as_ptr())), three);
        let c1 = vandq_u8(vshlq_u8(x, vld1q_s8(HIGH.as_ptr())), three);
        let acc = dot_bytes::<DOT>(vdupq_n_s32(0), vreinterpretq_s8_u8(c0), act.runs[0]);
        dot_bytes::<DOT>(acc, vreinterpretq_s8_u8(c1), act.runs[1])
    }

    #[inline(always)]
    unsafe fn finish(totals: int32x4_t, act: &Runs) -> int32x4_t {
        vsubq_s32(totals, act.sum)
    }
}

macro_rules! kernels {
    ($plain:ident, $dotprod:ident, $block:ty) => {
        /// # Safety
        /// NEON present; buffers checked against the `GemvFn` contract (`check_lengths`).
        #[target_feature(enable = "neon")]
        pub(super) unsafe fn $plain(
            weights: &[u8],
            row_bytes: usize,
            activation: &[u8],
            out: &mut [f32],
        ) {
            // SAFETY: the caller's contract; NEON was checked.
            unsafe { gemv_q8_0::<Q2<$block>, false>(weights, row_bytes, activation, out) }
        }

        /// # Safety
        /// As the plain kernel, plus the dot-product extension.
        #[target_feature(enable = "neon,dotprod")]
        pub(super) unsafe fn $dotprod(
            weights: &[u8],
            row_bytes: usize,
            activation: &[u8],
            out: &mut [f32],
        ) {
            // SAFETY: the caller's contract; NEON and the dot-product extension were checked.
            unsafe { gemv_q8_0::<Q2<$block>, true>(weights, row_bytes, activation, out) }
        }
    };
}

kernels!(gemv_g64, gemv_g64_dotprod, BlockQ2_0);
kernels!(gemv_g128, gemv_g128_dotprod, BlockQ2_0G128);
