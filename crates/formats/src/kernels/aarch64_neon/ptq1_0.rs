//! PTQ1_0 × Q8_0 on NEON, four rows a pass (`lowbit_util::gemv_q8_0`). Each block (128 trits,
//! the f16 scale last) spans four Q8_0 blocks. A group's 32 values are two vectors of packed
//! bytes in value order — the first stage's 16 bytes, or the second stage's 8 twice (a table
//! lookup into the load at offset 12, which also holds the two `qh` bytes and stays inside the
//! block) — multiplied by 3ⁿ per byte to bring trit n to the top and read as TQ1_0's kernel reads
//! it. Σ (trit − 1)·q = Σ trit·q − Σ q, exact, Σ q taken once for the band; the float arithmetic
//! is the scalar `dot`'s, so the result is bit-identical to it.

use core::arch::aarch64::*;
use core::mem::{offset_of, size_of};

use super::lowbit_util::{dot_bytes, gemv_q8_0, sum_bytes, Q8_0Weights};
use super::tq1_0::top_trit;
use crate::ptq1_0::{BlockPTQ1_0, QK_PTQ1_0};
use crate::q8_0::QK8_0;

/// One Q8_0 block's codes and their sum.
struct Codes {
    q: [int8x16_t; 2],
    all: int32x4_t,
}

struct PTQ1_0;

/// Lookups into the load at 12: the second stage twice, or once and then `qh` four times.
const SECOND: [u8; 16] = [4, 5, 6, 7, 8, 9, 10, 11, 4, 5, 6, 7, 8, 9, 10, 11];
const SECOND_QH: [u8; 16] = [4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 12, 13, 12, 13, 12, 13];

/// Per group, per half: the powers of 3 that bring each value's trit to the top.
const POWERS: [[[u8; 16]; 2]; 4] = {
    const fn runs(r: [(u8, usize); 4]) -> [u8; 16] {
        let mut t = [0u8; 16];
        let (mut at, mut i) = (0, 0);
        while i < 4 {
            let mut k = 0;
            while k < r[i].1 {
                t[at] = r[i].0;
                at += 1;
                k += 1;
            }
            i += 1;
        }
        t
    }
    [
        [[1; 16], [3; 16]],
        [[9; 16], [27; 16]],
        [[81; 16], runs([(1, 8), (3, 8), (0, 0), (0, 0)])],
        [
            runs([(9, 8), (27, 8), (0, 0), (0, 0)]),
            [81, 81, 81, 81, 81, 81, 81, 81, 1, 1, 3, 3, 9, 9, 27, 27],
        ],
    ]
};

impl Q8_0Weights for PTQ1_0 {
    const BLOCK_BYTES: usize = size_of::<BlockPTQ1_0>();
    const SPAN: usize = QK_PTQ1_0 / QK8_0;
    const SCALE_OFFSET: usize = offset_of!(BlockPTQ1_0, d);
    type Act = Codes;

    #[inline(always)]
    unsafe fn load_act<const DOT: bool>(codes: *const u8) -> Codes {
        let q = [vld1q_s8(codes.cast()), vld1q_s8(codes.add(16).cast())];
        Codes {
            q,
            all: vdupq_n_s32(vaddvq_s32(sum_bytes::<DOT>(q[0], q[1]))),
        }
    }

    #[inline(always)]
    unsafe fn group_dot<const DOT: bool>(block: *const u8, k: usize, act: &Codes) -> int32x4_t {
        let trits = codes(block, k);
        let acc = dot_bytes::<DOT>(vdupq_n_s32(0), trits[0], act.q[0]);
        dot_bytes::<DOT>(acc, trits[1], act.q[1])
    }

    #[inline(always)]
    unsafe fn finish(totals: int32x4_t, act: &Codes) -> int32x4_t {
        vsubq_s32(totals, act.all)
    }
}

/// The 32 codes (trit, 0..=2) of values 32k..32k+32 of the block at `block`, in value order.
///
/// # Safety
/// NEON present; `block` points at a whole block.
#[inline(always)]
pub(super) unsafe fn codes(block: *const u8, k: usize) -> [int8x16_t; 2] {
    let first = vld1q_u8(block);
    let from_12 = vld1q_u8(block.add(12));
    let second = vqtbl1q_u8(from_12, vld1q_u8(SECOND.as_ptr()));
    let bytes = match k {
        0 | 1 => [first, first],
        2 => [first, second],
        _ => [second, vqtbl1q_u8(from_12, vld1q_u8(SECOND_QH.as_ptr()))],
    };
    core::array::from_fn(|h| top_trit(vmulq_u8(bytes[h], vld1q_u8(POWERS[k][h].as_ptr()))))
}

/// # Safety
/// NEON present; buffers checked against the `GemvFn` contract (`check_lengths`).
#[target_feature(enable = "neon")]
pub(super) unsafe fn gemv(weights: &[u8], row_bytes: usize, activation: &[u8], out: &mut [f32]) {
    // SAFETY: the caller's contract; NEON was checked.
    unsafe { gemv_q8_0::<PTQ1_0, false>(weights, row_bytes, activation, out) }
}

/// # Safety
/// As [`gemv`], plus the dot-product extension.
#[target_feature(enable = "neon,dotprod")]
pub(super) unsafe fn gemv_dotprod(
    weights: &[u8],
    row_bytes: usize,
    activation: &[u8],
    out: &mut [f32],
) {
    // SAFETY: the caller's contract; NEON and the dot-product extension were checked.
    unsafe { gemv_q8_0::<PTQ1_0, true>(weights, row_bytes, activation, out) }
}
