//! Fixtures for the tiers' in-crate kernel tests (the variants the `Kernels` table does not hold,
//! e.g. AVX2 without VNNI on a VNNI CPU): random rows with sane f16 scales, random activations in
//! the partner format, the check of a product against the registry's scalar dot, and the checks
//! of a tier's matrix-vector variants that every ISA's tests use.

use super::entries::Variants;
use super::{GemvFn, Isa};
use crate::{format, Format, FormatKind};

/// A xorshift64 stream: reproducible, no dependency.
pub(crate) fn xorshift(seed: u64) -> impl FnMut() -> u64 {
    let mut state = seed;
    move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    }
}

/// The byte offsets of the f16 scales in one block of `kind` (overwritten with values in
/// [−0.5, 0.5) so that random codes stay finite).
fn scale_offsets(kind: FormatKind) -> &'static [usize] {
    match kind {
        FormatKind::TQ2_0 => &[64],
        FormatKind::TQ1_0 => &[52],
        FormatKind::PTQ1_0 => &[26],
        FormatKind::Q4_1 | FormatKind::Q5_1 | FormatKind::Q4_K | FormatKind::Q5_K => &[0, 2],
        FormatKind::Q6_K => &[208],
        FormatKind::Q2_K => &[80, 82],
        FormatKind::Q3_K => &[108],
        _ => &[0],
    }
}

/// `rows` rows of `n` values of `f`: random codes, sane scales.
pub(crate) fn random_rows(
    f: &Format,
    n: usize,
    rows: usize,
    next: &mut impl FnMut() -> u64,
) -> Vec<u8> {
    let row_bytes = n / f.block_elems * f.block_bytes;
    let mut weights: Vec<u8> = (0..rows * row_bytes).map(|_| next() as u8).collect();
    for block in weights.chunks_exact_mut(f.block_bytes) {
        for &at in scale_offsets(f.kind) {
            let v = half::f16::from_f32((next() % 1000) as f32 / 1000.0 - 0.5);
            block[at..at + 2].copy_from_slice(&v.to_le_bytes());
        }
    }
    weights
}

/// `tokens` activations of `n` values in [−10, 10], converted to `partner`.
pub(crate) fn random_activations(
    partner: &Format,
    n: usize,
    tokens: usize,
    next: &mut impl FnMut() -> u64,
) -> Vec<Vec<u8>> {
    (0..tokens)
        .map(|_| {
            let x: Vec<f32> = (0..n)
                .map(|_| (next() % 2001) as f32 / 100.0 - 10.0)
                .collect();
            let mut a = vec![0u8; n / partner.block_elems * partner.block_bytes];
            (partner.quantize_activation.expect("a partner format"))(&x, &mut a);
            a
        })
        .collect()
}

/// Asserts `out[t·rows + r]` equals the scalar dot of row `r` and token `t` within 1e-5 of
/// Σ|w·a| (over dequantized values) + 1e-6: the bound of every matrix kernel's test.
pub(crate) fn assert_matches_scalar_dot(
    f: &Format,
    partner: &Format,
    weights: &[u8],
    acts: &[Vec<u8>],
    out: &[f32],
    rows: usize,
    label: &str,
) {
    let row_bytes = weights.len() / rows;
    for (t, a) in acts.iter().enumerate() {
        let mut act = vec![0f32; a.len() / partner.block_bytes * partner.block_elems];
        (partner.dequantize)(a, &mut act);
        for r in 0..rows {
            let row = &weights[r * row_bytes..(r + 1) * row_bytes];
            let (want, got) = ((f.dot)(row, a), out[t * rows + r]);
            let mut w = vec![0f32; act.len()];
            (f.dequantize)(row, &mut w);
            let abs_sum: f32 = w.iter().zip(&act).map(|(w, a)| (w * a).abs()).sum();
            assert!(
                (got - want).abs() <= 1e-5 * abs_sum + 1e-6,
                "{:?} {label}: row {r} token {t}: {got} vs {want}",
                f.kind
            );
        }
    }
}

/// Every variant of a tier's matrix-vector kernels through `check` (the `Kernels` table holds
/// only the CPU's choice, so the other variant is reached only here): the dot-product ones
/// where the CPU has that extension (`dot`: its name, and whether the CPU has it).
pub(crate) fn assert_variants(
    isa: Isa,
    dot: (&str, bool),
    variants: &[Variants<GemvFn>],
    check: fn(FormatKind, GemvFn),
) {
    if !isa.available() {
        eprintln!(
            "{} not available on this CPU: variants not tested",
            isa.name()
        );
        return;
    }
    let (dot_name, has_dot) = dot;
    for &(kind, plain, with_dot) in variants {
        check(kind, plain);
        if has_dot {
            check(kind, with_dot);
        } else {
            eprintln!("no {dot_name}: {kind:?} VNNI variant not tested");
        }
    }
}

/// Runs `gemv` (a registered wrapper) on random blocks of `kind` (`sane` keeps each block's
/// f16 scales finite) and activations in [−1, 1], over `block_counts` blocks × 1, 4, 7 rows
/// (every unroll remainder), and checks each row against the scalar dot.
fn assert_gemv_matches_scalar(
    kind: FormatKind,
    gemv: GemvFn,
    seed: u64,
    block_counts: [usize; 3],
    sane: impl Fn(&mut [u8]),
) {
    let w = format(kind);
    let a = format(w.partner);
    let mut next = xorshift(seed ^ kind as u64);
    for n_blocks in block_counts {
        // 13 rows: AVX-512's bands of eight, four and one.
        for rows in [1usize, 4, 7, 13] {
            let row_bytes = n_blocks * w.block_bytes;
            let mut weights: Vec<u8> = (0..rows * row_bytes).map(|_| next() as u8).collect();
            weights.chunks_exact_mut(w.block_bytes).for_each(&sane);
            let n = n_blocks * w.block_elems;
            let x: Vec<f32> = (0..n)
                .map(|_| (next() % 2001) as f32 / 1000.0 - 1.0)
                .collect();
            let mut activation = vec![0u8; n / a.block_elems * a.block_bytes];
            (a.quantize_activation.expect("partner conversion"))(&x, &mut activation);
            let mut out = vec![0f32; rows];
            gemv(&weights, row_bytes, &activation, &mut out);
            assert_matches_scalar_dot(
                w,
                a,
                &weights,
                &[activation],
                &out,
                rows,
                &format!("{n_blocks} blocks"),
            );
        }
    }
}

/// [`assert_gemv_matches_scalar`] for a 1-bit or ternary kernel.
pub(crate) fn assert_lowbit_matches_scalar(kind: FormatKind, gemv: GemvFn) {
    let f = format(kind);
    // Keep the f16 scales finite (exponent below all-ones); blocks hold them first or last.
    let scale_at = if f.block_elems == 256 || kind == FormatKind::PTQ1_0 {
        f.block_bytes - 1
    } else {
        1
    };
    assert_gemv_matches_scalar(kind, gemv, 0x1234_5678_9abc_def0, [1, 3, 33], |block| {
        block[scale_at] &= 0x3b
    });
}

/// [`assert_gemv_matches_scalar`] for a K-quant, Q5_0 or Q5_1 kernel (f16 scales of either sign).
pub(crate) fn assert_kquant_matches_scalar(kind: FormatKind, gemv: GemvFn) {
    assert_gemv_matches_scalar(kind, gemv, 0x2545_f491_4f6c_dd1d, [1, 2, 9], |block| {
        for &at in scale_offsets(kind) {
            // Exponent below 15: finite, magnitude under 2.
            block[at + 1] &= 0xbb;
        }
    });
}
