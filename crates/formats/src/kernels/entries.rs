//! What the ISA folders' registrations share: the length checks of the `GemvFn` contract (block
//! sizes from the registry), the safe wrapper around an `unsafe` kernel, the choice between a
//! kernel's plain and dot-product variants, the lists of kernels every x86 tier provides under
//! the same module and function names (so each tier states them once, not a copy each), and the
//! row-band loop of the kernels that compute a few rows a pass.

use crate::{format, FormatKind};

/// Panics unless the buffers hold what the `GemvFn` contract promises (a caller's bug, not
/// data from outside): the kernels read through raw pointers, and this keeps them in bounds.
pub(crate) fn check_lengths(
    kind: FormatKind,
    weights: &[u8],
    row_bytes: usize,
    activation: &[u8],
    rows: usize,
) {
    let w = format(kind);
    let a = format(w.partner);
    assert!(
        row_bytes.is_multiple_of(w.block_bytes),
        "gemv {}: a row of {row_bytes} bytes is not whole {}-byte blocks",
        w.name,
        w.block_bytes
    );
    let elems = row_bytes / w.block_bytes * w.block_elems;
    assert!(
        activation.len() * a.block_elems == elems * a.block_bytes,
        "gemv {}: {} activation bytes for rows of {elems} values",
        w.name,
        activation.len()
    );
    assert!(
        weights.len() / row_bytes.max(1) >= rows,
        "gemv {}: weights shorter than the {rows} rows asked for",
        w.name
    );
}

/// The standard formats' form of the `GemvFn` contract check (as [`check_lengths`], but a row
/// of zero bytes asks for no weights at all).
pub(crate) fn check_blocks(
    kind: FormatKind,
    weights: &[u8],
    row_bytes: usize,
    activation: &[u8],
    rows: usize,
) {
    let (w, a) = (format(kind), format(format(kind).partner));
    let (w_block, a_block) = (w.block_bytes, a.block_bytes);
    let what = w.name.to_lowercase();
    assert!(
        row_bytes.is_multiple_of(w_block) && weights.len() >= rows * row_bytes,
        "{what} gemv: {} weight bytes cannot hold {rows} rows of {row_bytes} bytes in {w_block}-byte blocks",
        weights.len(),
    );
    assert!(
        activation.len() == row_bytes / w_block * a_block,
        "{what} gemv: activation has {} bytes, a row of {row_bytes} weight bytes needs {}",
        activation.len(),
        row_bytes / w_block * a_block
    );
}

/// A safe `GemvFn` around the `unsafe` kernel `$kernel` of format `$kind`, behind `$check`
/// (one of the checks above).
macro_rules! safe_gemv {
    ($check:path, $kernel:path, $kind:ident) => {{
        fn wrapper(weights: &[u8], row_bytes: usize, activation: &[u8], out: &mut [f32]) {
            $check(
                $crate::FormatKind::$kind,
                weights,
                row_bytes,
                activation,
                out.len(),
            );
            // SAFETY: registered only in its tier's table, which `Kernels::new` folds in only on
            // a CPU that has the tier (and, for a dot-product variant, only where the tier found
            // that extension); the lengths were just checked against the contract the kernel
            // reads within.
            unsafe { $kernel(weights, row_bytes, activation, out) }
        }
        wrapper as $crate::kernels::GemvFn
    }};
}
pub(crate) use safe_gemv;

/// A tier's registered matrix-matrix kernel of format `$w`, as module `$name` holding one
/// [`GemmKernel`](crate::kernels::GemmKernel) constant per variant, written
/// `VARIANT: "target features" => driver[more generic arguments]`: the shared layout and
/// preparation of `gemm_layout`, and `driver::<$w, …>` compiled with the variant's target features
/// behind `gemm_layout::check_run`. Every tier's `gemm.rs` registers its formats through it.
macro_rules! gemm_entry {
    ($name:ident, $w:ty, $($variant:ident: $features:literal => $($driver:ident)::+ [$($arg:tt),*]),+ $(,)?) => {
        mod $name {
            use super::*;
            $(
                #[allow(non_snake_case)]
                mod $variant {
                    use super::*;

                    #[target_feature(enable = $features)]
                    #[allow(clippy::too_many_arguments)]
                    unsafe fn unchecked(
                        l: &$crate::kernels::gemm_layout::Layout,
                        w: &[u8],
                        rb: usize,
                        n: usize,
                        p: &[u8],
                        t: usize,
                        o: &mut [f32],
                        s: usize,
                    ) {
                        $($driver)::+::<$w $(, $arg)*>(
                            l, w.as_ptr(), rb, n, p.as_ptr(), t, o.as_mut_ptr(), s,
                        )
                    }

                    fn run(
                        n_values: usize,
                        weights: &[u8],
                        n_rows: usize,
                        prepared: &[u8],
                        n_tokens: usize,
                        out: &mut [f32],
                        out_stride: usize,
                    ) {
                        let Some((l, row_bytes)) = $crate::kernels::gemm_layout::check_run::<$w>(
                            n_values, weights, n_rows, prepared, n_tokens, out, out_stride,
                        ) else {
                            return;
                        };
                        // SAFETY: the constant below is registered only in the table of a tier
                        // whose CPU check covers this variant's target features (a variant that
                        // needs an extension the tier does not guarantee is picked only where
                        // the tier found it); `check_run` just checked every length the driver
                        // reads and writes within.
                        unsafe {
                            unchecked(
                                &l, weights, row_bytes, n_rows, prepared, n_tokens, out, out_stride,
                            )
                        }
                    }

                    pub(crate) const KERNEL: $crate::kernels::GemmKernel =
                        $crate::kernels::GemmKernel {
                            prepared_bytes: $crate::kernels::gemm_layout::prepared_bytes::<$w>,
                            prepare: $crate::kernels::gemm_layout::prepare_row::<$w>,
                            run,
                        };
                }
                // A tier may leave a variant unused for a format (AVX2's Q8_0 without VNNI).
                #[allow(dead_code)]
                pub(crate) const $variant: $crate::kernels::GemmKernel = $variant::KERNEL;
            )+
        }
    };
}
pub(crate) use gemm_entry;

/// A kernel's variants: `(format, plain, with the dot-product extension)`.
pub(crate) type Variants<K> = (FormatKind, K, K);

/// The variant of `kind`'s kernel this CPU runs (`dot`: it has the tier's dot-product extension).
pub(crate) fn pick<K: Copy>(variants: &[Variants<K>], kind: FormatKind, dot: bool) -> Option<K> {
    variants
        .iter()
        .find(|v| v.0 == kind)
        .map(|&(_, plain, with_dot)| if dot { with_dot } else { plain })
}

/// The 1-bit and ternary matrix-vector kernels of an x86 tier, plain and VNNI, as
/// `[Variants<GemvFn>; 7]`: the invoking folder has modules `q1_0`, `q2_0`, `tq1_0`, `tq2_0`,
/// `ptq1_0` with kernels of these names.
#[cfg(target_arch = "x86_64")]
macro_rules! lowbit_variants {
    () => {{
        use $crate::kernels::entries::{check_lengths, safe_gemv};
        [
            (
                $crate::FormatKind::Q1_0,
                safe_gemv!(check_lengths, q1_0::gemv, Q1_0),
                safe_gemv!(check_lengths, q1_0::gemv_vnni, Q1_0),
            ),
            (
                $crate::FormatKind::Q2_0,
                safe_gemv!(check_lengths, q2_0::gemv_g64, Q2_0),
                safe_gemv!(check_lengths, q2_0::gemv_g64_vnni, Q2_0),
            ),
            (
                $crate::FormatKind::PQ2_0,
                safe_gemv!(check_lengths, q2_0::gemv_g128, PQ2_0),
                safe_gemv!(check_lengths, q2_0::gemv_g128_vnni, PQ2_0),
            ),
            (
                $crate::FormatKind::Q2_0G128Legacy,
                safe_gemv!(check_lengths, q2_0::gemv_g128, Q2_0G128Legacy),
                safe_gemv!(check_lengths, q2_0::gemv_g128_vnni, Q2_0G128Legacy),
            ),
            (
                $crate::FormatKind::TQ2_0,
                safe_gemv!(check_lengths, tq2_0::gemv, TQ2_0),
                safe_gemv!(check_lengths, tq2_0::gemv_vnni, TQ2_0),
            ),
            (
                $crate::FormatKind::TQ1_0,
                safe_gemv!(check_lengths, tq1_0::gemv, TQ1_0),
                safe_gemv!(check_lengths, tq1_0::gemv_vnni, TQ1_0),
            ),
            (
                $crate::FormatKind::PTQ1_0,
                safe_gemv!(check_lengths, ptq1_0::gemv, PTQ1_0),
                safe_gemv!(check_lengths, ptq1_0::gemv_vnni, PTQ1_0),
            ),
        ]
    }};
}
#[cfg(target_arch = "x86_64")]
pub(crate) use lowbit_variants;

/// The K-quant (and Q5_0 / Q5_1) matrix-vector kernels of an x86 tier, plain and VNNI, as
/// `[Variants<GemvFn>; 7]`: the invoking module has modules `k_min`, `k_signed`, `q5` with
/// kernels of these names.
#[cfg(target_arch = "x86_64")]
macro_rules! kquant_variants {
    () => {{
        use $crate::kernels::entries::{check_lengths, safe_gemv};
        [
            (
                $crate::FormatKind::Q4_K,
                safe_gemv!(check_lengths, k_min::gemv_q4_k, Q4_K),
                safe_gemv!(check_lengths, k_min::gemv_q4_k_vnni, Q4_K),
            ),
            (
                $crate::FormatKind::Q5_K,
                safe_gemv!(check_lengths, k_min::gemv_q5_k, Q5_K),
                safe_gemv!(check_lengths, k_min::gemv_q5_k_vnni, Q5_K),
            ),
            (
                $crate::FormatKind::Q6_K,
                safe_gemv!(check_lengths, k_signed::gemv_q6_k, Q6_K),
                safe_gemv!(check_lengths, k_signed::gemv_q6_k_vnni, Q6_K),
            ),
            (
                $crate::FormatKind::Q2_K,
                safe_gemv!(check_lengths, k_min::gemv_q2_k, Q2_K),
                safe_gemv!(check_lengths, k_min::gemv_q2_k_vnni, Q2_K),
            ),
            (
                $crate::FormatKind::Q3_K,
                safe_gemv!(check_lengths, k_signed::gemv_q3_k, Q3_K),
                safe_gemv!(check_lengths, k_signed::gemv_q3_k_vnni, Q3_K),
            ),
            (
                $crate::FormatKind::Q5_0,
                safe_gemv!(check_lengths, q5::gemv_q5_0, Q5_0),
                safe_gemv!(check_lengths, q5::gemv_q5_0_vnni, Q5_0),
            ),
            (
                $crate::FormatKind::Q5_1,
                safe_gemv!(check_lengths, q5::gemv_q5_1, Q5_1),
                safe_gemv!(check_lengths, q5::gemv_q5_1_vnni, Q5_1),
            ),
        ]
    }};
}
#[cfg(target_arch = "x86_64")]
pub(crate) use kquant_variants;

/// The standard-format matrix-vector kernel of `$kind` in an x86 tier (Q4_0, Q4_1, Q8_0, IQ4_NL
/// only when `$ints`, the tier's condition for its integer kernels; F32 and F16 always): the
/// invoking folder has modules `q4` and `float` with kernels of these names.
#[cfg(target_arch = "x86_64")]
macro_rules! standard_gemv {
    ($kind:expr, $ints:expr) => {{
        use $crate::kernels::entries::{check_blocks, safe_gemv};
        use $crate::FormatKind;
        match $kind {
            FormatKind::Q4_0 if $ints => Some(safe_gemv!(check_blocks, q4::gemv_q4_0, Q4_0)),
            FormatKind::Q4_1 if $ints => Some(safe_gemv!(check_blocks, q4::gemv_q4_1, Q4_1)),
            FormatKind::Q8_0 if $ints => Some(safe_gemv!(check_blocks, q4::gemv_q8_0, Q8_0)),
            FormatKind::IQ4_NL if $ints => Some(safe_gemv!(check_blocks, q4::gemv_iq4_nl, IQ4_NL)),
            FormatKind::F32 => Some(safe_gemv!(check_blocks, float::gemv_f32, F32)),
            FormatKind::F16 => Some(safe_gemv!(check_blocks, float::gemv_f16, F16)),
            _ => None,
        }
    }};
}
#[cfg(target_arch = "x86_64")]
pub(crate) use standard_gemv;

/// The row-band loop of a matrix-vector kernel whose `$rows::<.., R>(first_row, row_bytes,
/// activation) -> [f32; R]` computes `R` rows a pass (`$pre`: its generic arguments before `R`):
/// `$band` rows a pass, the rest one at a time. Expanded inside the tier's `#[target_feature]`
/// kernel, so `$rows` inlines there.
#[cfg(target_arch = "x86_64")]
macro_rules! drive_rows {
    ($weights:ident, $row_bytes:ident, $activation:ident, $out:ident, $band:ident, $rows:ident $(, $pre:tt)*) => {{
        let mut r = 0;
        while r + $band <= $out.len() {
            // SAFETY: rows r..r+band lie inside `weights` (the kernel's contract, checked by
            // its wrapper).
            let v = unsafe {
                $rows::<$($pre,)* $band>(
                    $weights.as_ptr().add(r * $row_bytes),
                    $row_bytes,
                    $activation,
                )
            };
            $out[r..r + $band].copy_from_slice(&v);
            r += $band;
        }
        while r < $out.len() {
            // SAFETY: as above, one row.
            $out[r] = unsafe {
                $rows::<$($pre,)* 1>(
                    $weights.as_ptr().add(r * $row_bytes),
                    $row_bytes,
                    $activation,
                )
            }[0];
            r += 1;
        }
    }};
}
#[cfg(target_arch = "x86_64")]
pub(crate) use drive_rows;

/// A matrix-vector kernel `$name` of the few-rows-a-pass kind: `unsafe`, with the tier's
/// `#[target_feature(enable = $features)]`, the row-band loop of [`drive_rows!`] over `$rows`
/// (`$band` rows a pass; `$pre`: `$rows`'s generic arguments before the row count).
#[cfg(target_arch = "x86_64")]
macro_rules! row_band_kernel {
    ($(#[$doc:meta])* $name:ident, $features:literal, $band:ident, $rows:ident $(, $pre:tt)*) => {
        $(#[$doc])*
        #[target_feature(enable = $features)]
        pub(crate) unsafe fn $name(
            weights: &[u8],
            row_bytes: usize,
            activation: &[u8],
            out: &mut [f32],
        ) {
            $crate::kernels::entries::drive_rows!(
                weights, row_bytes, activation, out, $band, $rows $(, $pre)*
            )
        }
    };
}
#[cfg(target_arch = "x86_64")]
pub(crate) use row_band_kernel;
