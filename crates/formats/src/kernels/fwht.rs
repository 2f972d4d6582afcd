//! The blockwise normalised fast Walsh–Hadamard transform of PrismML's `prism.hadamard` rotation:
//! its function-pointer type, the scalar twin, and the driver every vector tier shares.
//!
//! Each `block`-value chunk `x` of a row becomes `(1/√block)·S·x` with `S[r][c] =
//! (−1)^popcount(r & c)` (Sylvester, natural order), optionally after `x ⊙ signs`. The in-place
//! butterfly `(a, b) → (a + b, a − b)` over strides 1, 2, 4, … gives exactly that order. Every
//! tier does the same floating-point operations on every element in the same order (the sign
//! product, the butterflies, the final scale — no fused multiply-add), so the vector tiers are
//! bit-identical to the scalar twin, which the tests demand.

/// `row ← FWHT_block(row ⊙ signs)` per `block`-value chunk of `row`, scaled by `1/√block`.
/// `block` is a power of two in [`FWHT_BLOCKS`], `row.len()` a multiple of it, and `signs`
/// (±1 per value, `None` for all +1) as long as `row`: [`check_fwht`] holds it for every tier.
pub type FwhtFn = fn(row: &mut [f32], block: usize, signs: Option<&[f32]>);

/// The block sizes the kernels take: every power of two from 2 to 65,536 (the published models
/// use 512 to 4096).
pub const FWHT_BLOCKS: core::ops::RangeInclusive<usize> = 2..=65_536;

/// The lengths the transform relies on; panics naming the first that fails (a caller's bug: the
/// rotation validates a file's block size and widths before any row is transformed).
pub fn check_fwht(row: &[f32], block: usize, signs: Option<&[f32]>) {
    assert!(
        block.is_power_of_two() && FWHT_BLOCKS.contains(&block),
        "fwht: block {block} is not a power of two in 2..=65536"
    );
    assert!(
        row.len().is_multiple_of(block),
        "fwht: a row of {} values is not whole blocks of {block}",
        row.len()
    );
    if let Some(signs) = signs {
        assert_eq!(signs.len(), row.len(), "fwht: signs and row lengths");
    }
}

/// The scale of a block: `1/√block` as the reference computes it (`1.0f / sqrtf(n)`).
pub fn fwht_scale(block: usize) -> f32 {
    1.0 / (block as f32).sqrt()
}

/// The scalar transform: the reference for the fast ones.
pub fn fwht_scalar(row: &mut [f32], block: usize, signs: Option<&[f32]>) {
    check_fwht(row, block, signs);
    if let Some(signs) = signs {
        for (x, s) in row.iter_mut().zip(signs) {
            *x *= s;
        }
    }
    let scale = fwht_scale(block);
    for chunk in row.chunks_exact_mut(block) {
        let mut h = 1;
        while h < block {
            for pair in chunk.chunks_exact_mut(2 * h) {
                let (lo, hi) = pair.split_at_mut(h);
                for (a, b) in lo.iter_mut().zip(hi) {
                    let (x, y) = (*a, *b);
                    *a = x + y;
                    *b = x - y;
                }
            }
            h *= 2;
        }
        for x in chunk.iter_mut() {
            *x *= scale;
        }
    }
}

/// The vector operations of one tier that [`fwht_row`] uses; every method is a few intrinsics,
/// inlined into the tier's `#[target_feature]` kernel.
#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
pub(crate) trait FwhtLanes {
    /// f32 lanes per vector (a power of two).
    const LANES: usize;
    type F: Copy;

    /// # Safety
    /// The tier's features are enabled (so for every method); `p` has `LANES` readable /
    /// writable values.
    unsafe fn load(p: *const f32) -> Self::F;
    unsafe fn store(p: *mut f32, v: Self::F);
    unsafe fn splat(x: f32) -> Self::F;
    unsafe fn add(a: Self::F, b: Self::F) -> Self::F;
    unsafe fn sub(a: Self::F, b: Self::F) -> Self::F;
    unsafe fn mul(a: Self::F, b: Self::F) -> Self::F;
    /// The butterflies of strides 1, 2, …, `LANES/2` inside one vector: lane `i` with bit `h`
    /// clear becomes `v[i] + v[i + h]`, lane `i` with it set `v[i − h] − v[i]` (the same two
    /// operands as the scalar twin's; a sum's operands may be swapped, IEEE addition commutes).
    unsafe fn in_vector(v: Self::F) -> Self::F;
}

/// The transform of one row (the contract of [`FwhtFn`], checked by the caller) on tier `L`:
/// blocks below the vector width go to the scalar twin; otherwise a first pass takes each vector
/// through the sign product and its in-vector strides, then every wider stride is a butterfly of
/// two whole vectors, the last one scaled.
///
/// # Safety
/// `check_fwht` holds for the arguments; the tier's features are enabled.
#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
#[inline(always)]
pub(crate) unsafe fn fwht_row<L: FwhtLanes>(row: &mut [f32], block: usize, signs: Option<&[f32]>) {
    if block < L::LANES {
        return fwht_scalar(row, block, signs);
    }
    let n = row.len();
    let p = row.as_mut_ptr();
    let scale = L::splat(fwht_scale(block));
    let mut i = 0;
    while i < n {
        // SAFETY: i + LANES ≤ n (n is whole blocks of at least LANES), inside `row` and `signs`.
        let mut v = L::load(p.add(i));
        if let Some(signs) = signs {
            v = L::mul(v, L::load(signs.as_ptr().add(i)));
        }
        v = L::in_vector(v);
        if block == L::LANES {
            v = L::mul(v, scale);
        }
        L::store(p.add(i), v);
        i += L::LANES;
    }
    for chunk in (0..n).step_by(block) {
        let mut h = L::LANES;
        while h < block {
            let last = 2 * h == block;
            for pair in (chunk..chunk + block).step_by(2 * h) {
                for j in (pair..pair + h).step_by(L::LANES) {
                    // SAFETY: j + h + LANES ≤ pair + 2h ≤ chunk + block ≤ n.
                    let a = L::load(p.add(j));
                    let b = L::load(p.add(j + h));
                    let (mut s, mut d) = (L::add(a, b), L::sub(a, b));
                    if last {
                        s = L::mul(s, scale);
                        d = L::mul(d, scale);
                    }
                    L::store(p.add(j), s);
                    L::store(p.add(j + h), d);
                }
            }
            h *= 2;
        }
    }
}

/// The safe entry of a vector tier's transform over `$module::fwht`, its `unsafe` kernel; checks
/// the contract, and `Kernels::new` registers it for that tier only.
#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
macro_rules! fwht_entry {
    ($module:ident) => {
        /// The blockwise normalised Walsh–Hadamard transform (`Kernels::fwht`).
        pub(crate) fn fwht(row: &mut [f32], block: usize, signs: Option<&[f32]>) {
            crate::kernels::check_fwht(row, block, signs);
            // SAFETY: registered only through `Kernels::new` for this tier, which checked the
            // CPU; the lengths were just checked.
            unsafe { $module::fwht(row, block, signs) }
        }
    };
}
#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
pub(crate) use fwht_entry;
