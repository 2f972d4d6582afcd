//! The row-band drivers of the ternary matrix-vector kernels (TQ1_0, TQ2_0 × Q8_K), shared by
//! every ISA: what differs between tiers is the vector width ([`Lanes`]) and each format's block
//! dot ([`Q8KWeights`]); the loop over rows and blocks and the float work are written once.
//!
//! A TQ block has one f16 scale per 256 values, the span of a Q8_K block, so each row's block
//! reduces to one integer vector before any float work: value = code − 1 makes the dot
//! Σ code·q − Σ q, with Σ q computed once per activation block for every row of the band.

use core::mem::size_of;

use crate::q8_k::BlockQ8_K;

/// Bytes of one Q8_K activation block: f32 scale, 256 codes, 16 sums.
const Q8_K_BYTES: usize = size_of::<BlockQ8_K>();

/// The vector operations of one ISA tier that the shared drivers use. Every method is a few
/// intrinsics, inlined into the caller's `#[target_feature]` kernel.
pub(crate) trait Lanes {
    /// An integer vector (i32 lanes) of the tier's width.
    type I: Copy;
    /// A float vector (f32 lanes) of the tier's width.
    type F: Copy;
    /// The 256 codes of one Q8_K block, as the tier's integer vectors in value order.
    type Q8KCodes;

    /// # Safety
    /// The tier's features are enabled (so for every method).
    unsafe fn zero() -> Self::F;
    unsafe fn splat(x: f32) -> Self::F;
    /// An f16 read from 2 unaligned bytes, widened and broadcast.
    unsafe fn f16_splat(p: *const u8) -> Self::F;
    /// `a·b + c`.
    unsafe fn fmadd(a: Self::F, b: Self::F, c: Self::F) -> Self::F;
    unsafe fn mul(a: Self::F, b: Self::F) -> Self::F;
    /// `a − b` in i32 lanes, converted to f32.
    unsafe fn sub_to_f32(a: Self::I, b: Self::I) -> Self::F;
    /// The sum of the lanes.
    unsafe fn sum(v: Self::F) -> f32;
    /// The codes of the Q8_K block at `y` (`y + 4` holds them).
    unsafe fn load_q8k(y: *const u8) -> Self::Q8KCodes;
    /// Σ q per dword lane over the block's codes (four codes a lane per vector).
    unsafe fn sum_q8k(codes: &Self::Q8KCodes) -> Self::I;
}

/// A ternary format dotted with Q8_K on tier `L`.
pub(crate) trait Q8KWeights<L: Lanes> {
    const BLOCK_BYTES: usize;
    const SCALE_OFFSET: usize;
    /// Per dword lane, Σ code·activation over the block (value = code − 1).
    ///
    /// # Safety
    /// `block` points at a whole block; the tier's features are enabled.
    unsafe fn block_dot<const VNNI: bool>(block: *const u8, act: &L::Q8KCodes) -> L::I;
}

/// `R` rows of the band: per row a vector accumulator, reduced once at the end.
#[inline(always)]
unsafe fn rows_q8_k<L: Lanes, W: Q8KWeights<L>, const VNNI: bool, const R: usize>(
    base: *const u8,
    row_bytes: usize,
    activation: *const u8,
    n_blocks: usize,
    out: &mut [f32],
) {
    let mut acc = [L::zero(); R];
    for i in 0..n_blocks {
        let y = activation.add(i * Q8_K_BYTES);
        let dy = L::splat(y.cast::<f32>().read_unaligned());
        let act = L::load_q8k(y);
        // Σ q per lane, shared by the rows: value = code − 1 makes the dot Σ code·q − Σ q.
        let sum_q = L::sum_q8k(&act);
        for (r, acc) in acc.iter_mut().enumerate() {
            let block = base.add(r * row_bytes + i * W::BLOCK_BYTES);
            let s = W::block_dot::<VNNI>(block, &act);
            let dx = L::f16_splat(block.add(W::SCALE_OFFSET));
            let v = L::sub_to_f32(s, sum_q);
            *acc = L::fmadd(v, L::mul(dx, dy), *acc);
        }
    }
    for (o, acc) in out.iter_mut().zip(acc) {
        *o = L::sum(acc);
    }
}

/// The whole `GemvFn` contract for a Q8_K-partner format; the caller checked the lengths.
///
/// # Safety
/// The lengths hold the `GemvFn` contract; the tier's features (and VNNI when `VNNI`) enabled.
#[inline(always)]
pub(crate) unsafe fn gemv_q8_k<L: Lanes, W: Q8KWeights<L>, const VNNI: bool>(
    weights: &[u8],
    row_bytes: usize,
    activation: &[u8],
    out: &mut [f32],
) {
    let n_blocks = row_bytes / W::BLOCK_BYTES;
    let base = weights.as_ptr();
    let act = activation.as_ptr();
    let mut r = 0;
    while r + 4 <= out.len() {
        rows_q8_k::<L, W, VNNI, 4>(
            base.add(r * row_bytes),
            row_bytes,
            act,
            n_blocks,
            &mut out[r..r + 4],
        );
        r += 4;
    }
    while r < out.len() {
        rows_q8_k::<L, W, VNNI, 1>(
            base.add(r * row_bytes),
            row_bytes,
            act,
            n_blocks,
            &mut out[r..r + 1],
        );
        r += 1;
    }
}
