//! The driver every vector tier shares for attention's weighted sums over value rows of the
//! 32-value block formats (a quantized value cache), read in place: each block widens once to 32
//! floats of its codes, and every query of the pass adds them scaled by `weight · d` (its
//! `weight · m` terms summed apart and added to the whole block at the end, for the formats with
//! a minimum). Keys go a tile at a time, so a tile's rows stay in L1 while every column block of
//! them is summed. A tier brings its vector operations ([`ValueLanes`]) and, per format, how a
//! block's codes widen ([`ValueBlock`]); the order of every operation is the driver's, so the
//! tiers agree with each other as they agree with the scalar twin.

/// Keys per tile: 64 rows of a 128-value Q8_0 head are 8.5 KiB.
const TILE: usize = 64;
/// Queries per pass: two sets of accumulators beside the block's vectors (4 on AVX2, 8 on NEON).
const G: usize = 2;

/// The vector operations of one tier that [`block_values_rows`] uses; every method is a few
/// intrinsics, inlined into the tier's `#[target_feature]` kernel.
pub(crate) trait ValueLanes {
    /// f32 lanes per vector.
    const LANES: usize;
    type V: Copy;
    /// A block's 32 values as `32 / LANES` vectors, in column order.
    type Block: Copy + AsRef<[Self::V]> + AsMut<[Self::V]>;

    /// # Safety
    /// The tier's features are enabled (so for every method); pointers readable / writable for
    /// what each reads or writes (`LANES` floats, two bytes).
    unsafe fn zero() -> Self::Block;
    unsafe fn splat(x: f32) -> Self::V;
    /// `acc + c · v`, fused (one rounding).
    unsafe fn mul_add(acc: Self::V, c: Self::V, v: Self::V) -> Self::V;
    unsafe fn add(a: Self::V, b: Self::V) -> Self::V;
    unsafe fn load(p: *const f32) -> Self::V;
    unsafe fn store(p: *mut f32, v: Self::V);
    /// The f16 at `p`, widened.
    unsafe fn half(p: *const u8) -> f32;
}

/// One 32-value block format on tier `L`: value `i` is `d · code_i (+ m)`, `d` the f16 at offset
/// 0 (and `m` the f16 at offset 2 where `MIN`).
pub(crate) trait ValueBlock<L: ValueLanes> {
    const BYTES: usize;
    const MIN: bool;
    /// The block's 32 codes, widened to floats in value order.
    ///
    /// # Safety
    /// The tier's features are enabled; `blk` readable for one block.
    unsafe fn widen(blk: *const u8) -> L::Block;
}

/// The `BlockValuesFn` contract for format `B` on tier `L` (lengths checked by the caller).
///
/// # Safety
/// The tier's features are enabled; the lengths as [`crate::kernels::check_block_values`]
/// checks them.
#[inline(always)]
pub(crate) unsafe fn block_values_rows<L: ValueLanes, B: ValueBlock<L>>(
    weights: &[f32],
    w_stride: usize,
    lens: &[usize],
    rows: &[u8],
    row_bytes: usize,
    out: &mut [f32],
) {
    out.fill(0.0);
    let n_q = lens.len();
    if n_q == 0 {
        return;
    }
    let dim = out.len() / n_q;
    let n_blocks = dim / 32;
    let n_keys = lens.iter().copied().max().unwrap_or(0);
    let (w, r, o) = (weights.as_ptr(), rows.as_ptr(), out.as_mut_ptr());
    let mut t0 = 0;
    while t0 < n_keys {
        let t1 = (t0 + TILE).min(n_keys);
        for first in (0..n_q).step_by(G) {
            let here = G.min(n_q - first);
            let ends: [usize; G] =
                core::array::from_fn(|g| if g < here { lens[first + g].min(t1) } else { 0 });
            let end = ends.iter().copied().max().unwrap_or(0);
            for b in 0..n_blocks {
                // SAFETY: the tier's features are enabled (the caller's contract).
                let mut acc = [unsafe { L::zero() }; G];
                let mut mins = [0.0f32; G];
                for j in t0..end {
                    // SAFETY: row j < max(lens) of whole blocks, block b inside the row; one
                    // block readable there.
                    let (blk, v, d) = unsafe {
                        let blk = r.add(j * row_bytes + b * B::BYTES);
                        (blk, B::widen(blk), L::half(blk))
                    };
                    for g in 0..G {
                        if j < ends[g] {
                            // SAFETY: weights row first + g holds lens[first + g] > j values.
                            let p = unsafe { *w.add((first + g) * w_stride + j) };
                            // SAFETY: the tier's features are enabled.
                            let c = unsafe { L::splat(p * d) };
                            for (a, v) in acc[g].as_mut().iter_mut().zip(v.as_ref()) {
                                // SAFETY: the tier's features are enabled.
                                *a = unsafe { L::mul_add(*a, c, *v) };
                            }
                            if B::MIN {
                                // SAFETY: the minimum follows the scale.
                                mins[g] += p * unsafe { L::half(blk.add(2)) };
                            }
                        }
                    }
                }
                for g in 0..here {
                    // SAFETY: the tier's features are enabled; out row first + g, columns
                    // 32b + LANES·u.. inside `dim`.
                    unsafe {
                        let m = L::splat(mins[g]);
                        for (u, a) in acc[g].as_ref().iter().enumerate() {
                            let at = o.add((first + g) * dim + 32 * b + L::LANES * u);
                            L::store(at, L::add(L::load(at), L::add(*a, m)));
                        }
                    }
                }
            }
        }
        t0 = t1;
    }
}
