//! Properties every codec must keep on inputs nobody has seen: requantizing dequantized values is
//! a fixed point, dequantizing arbitrary bytes never panics, and each dot product equals the
//! float64 dot product of the dequantized operands up to f32 rounding.

use oxibonsai_formats::common::blocks;
use oxibonsai_formats::q2_k::BlockQ2_K;
use oxibonsai_formats::q3_k::BlockQ3_K;
use oxibonsai_formats::q4_1::BlockQ4_1;
use oxibonsai_formats::q4_k::BlockQ4_K;
use oxibonsai_formats::q5_1::BlockQ5_1;
use oxibonsai_formats::q5_k::BlockQ5_K;
use oxibonsai_formats::q8_1::BlockQ8_1;
use oxibonsai_formats::q8_k::BlockQ8_K;
use oxibonsai_formats::{format, Format, FormatKind, REGISTRY};
use proptest::prelude::*;

/// Values a weight or activation row plausibly holds, with the awkward ones over-represented:
/// exact zeros of both signs and multiples of ½ (rounding ties).
fn value() -> impl Strategy<Value = f32> {
    prop_oneof![
        6 => -1.0f32..1.0,
        1 => Just(0.0f32),
        1 => Just(-0.0f32),
        2 => (-16i32..=16).prop_map(|k| k as f32 * 0.5),
    ]
}

/// Up to `max_blocks` runs of 256 values (a multiple of every block size), each scaled by its own
/// power of ten in `exponents`, so tiny and large block scales both occur.
fn row(
    max_blocks: usize,
    exponents: std::ops::RangeInclusive<i32>,
) -> impl Strategy<Value = Vec<f32>> {
    proptest::collection::vec(
        (proptest::collection::vec(value(), 256), exponents),
        1..=max_blocks,
    )
    .prop_map(|blocks| {
        blocks
            .into_iter()
            .flat_map(|(values, exp)| {
                let scale = 10f32.powi(exp);
                values.into_iter().map(move |v| v * scale)
            })
            .collect()
    })
}

/// Scales whose f16 form is normal (the fixed point needs the stored scale to carry the block).
fn normal_row() -> impl Strategy<Value = Vec<f32>> {
    row(3, -4..=3)
}

/// Down to scales that underflow f16 (to subnormals and to zero).
fn any_scale_row() -> impl Strategy<Value = Vec<f32>> {
    row(3, -12..=3)
}

/// The gap between consecutive f16 values around `x`.
fn f16_spacing(x: f32) -> f32 {
    let x = x.abs();
    if x < 2f32.powi(-14) {
        2f32.powi(-24)
    } else {
        2f32.powi(x.log2().floor() as i32 - 10)
    }
}

/// `once == twice` byte for byte, except the two fields the reference computes from an unrounded
/// intermediate, while every code stays put: Q8_1's `s = fp16(d·Σq)` uses the f32 scale before its
/// f16 rounding, so it may move by |Σq| times that rounding (large when d is an f16 subnormal);
/// Q8_K's f32 scale `1/(−127/max)` goes through two divisions and may move by a few f32 ulps.
fn assert_same_encoding(kind: FormatKind, once: &[u8], twice: &[u8]) -> Result<(), TestCaseError> {
    match kind {
        FormatKind::Q8_1 => {
            for (a, b) in blocks::<BlockQ8_1>(once)
                .iter()
                .zip(blocks::<BlockQ8_1>(twice))
            {
                prop_assert_eq!(a.d, b.d);
                prop_assert_eq!(a.qs, b.qs);
                let sum: i32 = a.qs.iter().map(|&q| i32::from(q)).sum();
                let (sa, sb) = (a.s.to_f32(), b.s.to_f32());
                let bound = sum.unsigned_abs() as f32 * f16_spacing(a.d.to_f32()) / 2.0
                    + f16_spacing(sa.abs().max(sb.abs()));
                prop_assert!(
                    (sa - sb).abs() <= bound,
                    "s {} → {} (bound {})",
                    sa,
                    sb,
                    bound
                );
            }
        }
        FormatKind::Q8_K => {
            for (a, b) in blocks::<BlockQ8_K>(once)
                .iter()
                .zip(blocks::<BlockQ8_K>(twice))
            {
                prop_assert_eq!(a.qs, b.qs);
                prop_assert_eq!(a.bsums, b.bsums);
                let (da, db) = (a.d.to_f32(), b.d.to_f32());
                prop_assert!(
                    (da - db).abs() <= 4.0 * f32::EPSILON * da.abs(),
                    "d {} → {}",
                    da,
                    db
                );
            }
        }
        _ => prop_assert_eq!(once, twice),
    }
    Ok(())
}

fn fixed_point(fmt: &Format, x: &[f32]) -> Result<(), TestCaseError> {
    let once = fmt.quantize_row(x).unwrap();
    let twice = fmt
        .quantize_row(&fmt.dequantize_row(&once).unwrap())
        .unwrap();
    assert_same_encoding(fmt.kind, &once, &twice)
}

/// dequantize∘quantize is idempotent on values at any scale (a block whose f16 scale underflowed
/// to zero may change its codes — Q1_0's −0.0 reads back as +, Q2_0's codes collapse to 0 — but
/// not its values).
fn idempotent_values(fmt: &Format, x: &[f32]) -> Result<(), TestCaseError> {
    let first = fmt.dequantize_row(&fmt.quantize_row(x).unwrap()).unwrap();
    let second = fmt
        .dequantize_row(&fmt.quantize_row(&first).unwrap())
        .unwrap();
    let slack = if fmt.kind == FormatKind::Q8_K {
        4.0 * f32::EPSILON
    } else {
        0.0
    };
    for (i, (a, b)) in first.iter().zip(&second).enumerate() {
        prop_assert!(
            (a - b).abs() <= slack * a.abs(),
            "{}: value {} went {} → {}",
            fmt.name,
            i,
            a,
            b
        );
    }
    Ok(())
}

macro_rules! codec_properties {
    ($($module:ident => $kind:ident),* $(,)?) => {
        $(
            mod $module {
                use super::*;
                proptest! {
                    #![proptest_config(ProptestConfig::with_cases(128))]

                    #[test]
                    fn requantizing_is_a_fixed_point(x in normal_row()) {
                        fixed_point(format(FormatKind::$kind), &x)?;
                    }

                    #[test]
                    fn requantized_values_are_stable_at_any_scale(x in any_scale_row()) {
                        idempotent_values(format(FormatKind::$kind), &x)?;
                    }

                    #[test]
                    fn dot_matches_the_dequantized_dot_product(x in normal_row(), y in normal_row()) {
                        dot_matches_dequantized(format(FormatKind::$kind), &x, &y)?;
                    }
                }
            }
        )*
    };
}

codec_properties! {
    float32 => F32,
    float16 => F16,
    bfloat16 => BF16,
    q4_0 => Q4_0,
    q4_1 => Q4_1,
    q5_0 => Q5_0,
    q5_1 => Q5_1,
    q8_0 => Q8_0,
    q8_1 => Q8_1,
    q8_k => Q8_K,
    tq1_0 => TQ1_0,
    tq2_0 => TQ2_0,
    q1_0 => Q1_0,
    q2_0 => Q2_0,
    q2_0_g128_legacy => Q2_0G128Legacy,
    pq2_0 => PQ2_0,
    ptq1_0 => PTQ1_0,
}

/// One K-quant sub-block as its reference quantizer last rounds it: `len` values, each
/// `step·code − offset` with `code` in `lo..=hi`.
struct SubBlock {
    len: usize,
    step: f32,
    offset: f32,
    lo: f32,
    hi: f32,
}

/// The sub-blocks of every block in `bytes`, read from the stored scales and minimums.
fn k_sub_blocks(kind: FormatKind, bytes: &[u8]) -> Vec<SubBlock> {
    let fields = |d: f32, dmin: f32, scale_min: &dyn Fn(usize) -> (u8, u8), nmax: f32| {
        (0..8)
            .map(|j| {
                let (sc, m) = scale_min(j);
                SubBlock {
                    len: 32,
                    step: d * f32::from(sc),
                    offset: dmin * f32::from(m),
                    lo: 0.0,
                    hi: nmax,
                }
            })
            .collect::<Vec<_>>()
    };
    match kind {
        FormatKind::Q2_K => blocks::<BlockQ2_K>(bytes)
            .iter()
            .flat_map(|b| {
                b.scales.map(|sc| SubBlock {
                    len: 16,
                    step: b.d.to_f32() * f32::from(sc & 0xf),
                    offset: b.dmin.to_f32() * f32::from(sc >> 4),
                    lo: 0.0,
                    hi: 3.0,
                })
            })
            .collect(),
        // Signed codes and a signed scale (the sign of the block's largest value).
        FormatKind::Q3_K => blocks::<BlockQ3_K>(bytes)
            .iter()
            .flat_map(|b| {
                b.signed_scales().map(|sc| SubBlock {
                    len: 16,
                    step: b.d.to_f32() * f32::from(sc),
                    offset: 0.0,
                    lo: -4.0,
                    hi: 3.0,
                })
            })
            .collect(),
        FormatKind::Q4_K => blocks::<BlockQ4_K>(bytes)
            .iter()
            .flat_map(|b| fields(b.d.to_f32(), b.dmin.to_f32(), &|j| b.scale_min(j), 15.0))
            .collect(),
        FormatKind::Q5_K => blocks::<BlockQ5_K>(bytes)
            .iter()
            .flat_map(|b| fields(b.d.to_f32(), b.dmin.to_f32(), &|j| b.scale_min(j), 31.0))
            .collect(),
        _ => unreachable!("{kind:?} is not a K-quant with a sub-block search"),
    }
}

/// What the K-quants' final rounding guarantees on any input: with the stored scale and
/// minimum of its sub-block, every value inside the representable range between
/// `lo·step − offset` and `hi·step − offset` reconstructs within half a step, and every value
/// outside it at the nearer end. A sub-block whose step is 0 holds only `−offset`.
fn codes_are_nearest(fmt: &Format, x: &[f32]) -> Result<(), TestCaseError> {
    let bytes = fmt.quantize_row(x).unwrap();
    let w = fmt.dequantize_row(&bytes).unwrap();
    let u = f32::EPSILON;
    let (mut xs, mut ws) = (x, w.as_slice());
    for (s, sub) in k_sub_blocks(fmt.kind, &bytes).iter().enumerate() {
        let (xv, rest_x) = xs.split_at(sub.len);
        let (wv, rest_w) = ws.split_at(sub.len);
        (xs, ws) = (rest_x, rest_w);
        for (i, (&v, &r)) in xv.iter().zip(wv).enumerate() {
            if sub.step == 0.0 {
                prop_assert_eq!(r, -sub.offset, "{}: sub-block {} value {}", fmt.name, s, i);
                continue;
            }
            let (a, b) = (
                sub.lo * sub.step - sub.offset,
                sub.hi * sub.step - sub.offset,
            );
            let (bottom, top) = (a.min(b), a.max(b));
            let want = v.clamp(bottom, top);
            let slack = 4.0 * u * (v.abs() + sub.offset.abs() + bottom.abs().max(top.abs()));
            prop_assert!(
                (r - want).abs() <= sub.step.abs() / 2.0 + slack,
                "{}: sub-block {} value {}: {} reads back {} (step {}, offset {})",
                fmt.name,
                s,
                i,
                v,
                r,
                sub.step,
                sub.offset
            );
        }
    }
    prop_assert!(xs.is_empty(), "{}: sub-blocks cover the row", fmt.name);
    Ok(())
}

/// Formats whose reference quantizer searches for each sub-block's scale (and minimum: ggml's
/// `make_qkx2_quants` for Q2_K / Q4_K / Q5_K, `make_q3_quants` for Q3_K) and then quantizes those
/// to 4 or 6 bits against the block's largest: the search re-fits dequantized values differently,
/// so neither the bytes nor the values are a fixed point of requantization (these formats are the
/// exception to the fixed-point properties above; on random blocks ~all Q2_K and ~17% of Q3_K
/// blocks re-encode differently, values moving by up to ~1.2 steps). What holds instead is that
/// each code is the nearest one under the stored scales.
macro_rules! search_codec_properties {
    ($($module:ident => $kind:ident),* $(,)?) => {
        $(
            mod $module {
                use super::*;
                proptest! {
                    #![proptest_config(ProptestConfig::with_cases(128))]

                    #[test]
                    fn codes_are_nearest_under_the_stored_scales(x in any_scale_row()) {
                        codes_are_nearest(format(FormatKind::$kind), &x)?;
                    }

                    #[test]
                    fn dot_matches_the_dequantized_dot_product(x in normal_row(), y in normal_row()) {
                        dot_matches_dequantized(format(FormatKind::$kind), &x, &y)?;
                    }
                }
            }
        )*
    };
}

search_codec_properties! {
    q2_k => Q2_K,
    q3_k => Q3_K,
    q4_k => Q4_K,
    q5_k => Q5_K,
}

/// f16 bit patterns that break naive arithmetic: ±inf, NaNs, ±0, the largest finite, subnormals.
const AWKWARD_F16: [u16; 9] = [
    0x7c00, 0xfc00, 0x7e00, 0x7c01, 0xfe00, 0x8000, 0x7bff, 0x0001, 0x83ff,
];

/// Arbitrary bytes for `n_blocks` blocks of `fmt`, with awkward f16 patterns written at random
/// even offsets (where f16 scales live in every layout here).
fn arbitrary_blocks(fmt: &'static Format) -> impl Strategy<Value = Vec<u8>> {
    (1usize..=3).prop_flat_map(move |n_blocks| {
        let len = n_blocks * fmt.block_bytes;
        (
            proptest::collection::vec(any::<u8>(), len),
            proptest::collection::vec(
                (0..len / 2, proptest::sample::select(AWKWARD_F16.to_vec())),
                0..8,
            ),
        )
            .prop_map(|(mut bytes, patches)| {
                for (word, bits) in patches {
                    bytes[2 * word..2 * word + 2].copy_from_slice(&bits.to_le_bytes());
                }
                bytes
            })
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// Dequantizing and dotting arbitrary bytes (NaN / inf scales included) returns, never panics.
    #[test]
    fn arbitrary_bytes_never_panic(
        (index, weights, activation_seed) in (0..REGISTRY.len()).prop_flat_map(|i| {
            (Just(i), arbitrary_blocks(&REGISTRY[i]), any::<u64>())
        })
    ) {
        let fmt = &REGISTRY[index];
        let values = fmt.dequantize_row(&weights).unwrap();
        prop_assert_eq!(values.len(), weights.len() / fmt.block_bytes * fmt.block_elems);
        // An arbitrary activation of the right length: bytes from a simple generator.
        let partner = fmt.partner_format();
        let n_partner_blocks = partner.blocks_for_elems(values.len()).unwrap();
        let mut state = activation_seed;
        let activation: Vec<u8> = (0..n_partner_blocks * partner.block_bytes)
            .map(|_| {
                state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                (state >> 56) as u8
            })
            .collect();
        fmt.dot_row(&weights, &activation).unwrap();
    }

    /// Quantizing any f32 bit patterns (NaN, inf, subnormals) returns, never panics.
    #[test]
    fn arbitrary_floats_never_panic(bits in proptest::collection::vec(any::<u32>(), 256)) {
        let x: Vec<f32> = bits.into_iter().map(f32::from_bits).collect();
        for fmt in REGISTRY {
            let q = fmt.quantize_row(&x).unwrap();
            fmt.dequantize_row(&q).unwrap();
            if let Some(quantize) = fmt.quantize_activation {
                let mut out = vec![0u8; q.len()];
                quantize(&x, &mut out);
            }
        }
    }
}

/// The per-block minimums `m` of a format whose values are code·d + m and whose dot product takes
/// the `m` term from Q8_1's block sums (Q4_1, Q5_1); `None` for every other format.
fn q8_1_minimums(fmt: &Format, weights: &[u8]) -> Option<Vec<f32>> {
    match fmt.kind {
        FormatKind::Q4_1 => Some(
            blocks::<BlockQ4_1>(weights)
                .iter()
                .map(|x| x.m.to_f32())
                .collect(),
        ),
        FormatKind::Q5_1 => Some(
            blocks::<BlockQ5_1>(weights)
                .iter()
                .map(|x| x.m.to_f32())
                .collect(),
        ),
        _ => None,
    }
}

/// Σ dequant(w)·dequant(a) in f64, the value a dot product approximates. For Q4_1 / Q5_1 the
/// kernel uses Q8_1's stored `s` where the dequantized activations give d·Σq; `s` was rounded to
/// f16 from the unrounded scale, so that known difference, m·(s − d·Σq) per block, is added in.
fn exact_dot(fmt: &Format, weights: &[u8], activation: &[u8], w: &[f32], a: &[f32]) -> f64 {
    let mut exact: f64 = w
        .iter()
        .zip(a)
        .map(|(p, q)| f64::from(*p) * f64::from(*q))
        .sum();
    if let Some(minimums) = q8_1_minimums(fmt, weights) {
        for (m, y) in minimums.iter().zip(blocks::<BlockQ8_1>(activation)) {
            let sum_q: i32 = y.qs.iter().map(|&q| i32::from(q)).sum();
            let s_exact = f64::from(y.d.to_f32()) * f64::from(sum_q);
            exact += f64::from(*m) * (f64::from(y.s.to_f32()) - s_exact);
        }
    }
    exact
}

/// Bound on |dot − exact_dot|: the kernels round each block term and the running sum to f32
/// (f32/f16/bf16 only round each product, summing in f64), so (terms + a few) unit roundoffs of
/// Σ|wᵢ·aᵢ|. Q4_1's / Q5_1's dequantized value code·d + m is itself rounded after a possible
/// cancellation, which adds a few roundoffs of |m|·Σ|a|.
fn dot_bound(fmt: &Format, weights: &[u8], w: &[f32], a: &[f32]) -> f64 {
    let u = f64::from(f32::EPSILON);
    let magnitude: f64 = w
        .iter()
        .zip(a)
        .map(|(x, y)| f64::from(*x).abs() * f64::from(*y).abs())
        .sum();
    let terms = if fmt.block_elems == 1 {
        2.0
    } else {
        (w.len() / fmt.block_elems) as f64 + 8.0
    };
    let mut bound = terms * u * magnitude + 1e-30;
    if let Some(minimums) = q8_1_minimums(fmt, weights) {
        for (m, av) in minimums.iter().zip(a.chunks_exact(32)) {
            let sum_abs_a: f64 = av.iter().map(|v| f64::from(*v).abs()).sum();
            bound += 4.0 * u * f64::from(*m).abs() * sum_abs_a;
        }
    }
    bound
}

/// dot(w, activation(a)) is Σ dequant(w)·dequant(activation(a)) computed exactly, up to f32
/// rounding: the integer parts of the kernels carry no error.
fn dot_matches_dequantized(fmt: &Format, x: &[f32], y: &[f32]) -> Result<(), TestCaseError> {
    let n = x.len().min(y.len());
    let (x, y) = (&x[..n], &y[..n]);
    let partner = fmt.partner_format();
    let weights = fmt.quantize_row(x).unwrap();
    let activation = partner.quantize_activation_row(y).unwrap();
    let w = fmt.dequantize_row(&weights).unwrap();
    let a = partner.dequantize_row(&activation).unwrap();
    let exact = exact_dot(fmt, &weights, &activation, &w, &a);
    let result = f64::from(fmt.dot_row(&weights, &activation).unwrap());
    let bound = dot_bound(fmt, &weights, &w, &a);
    prop_assert!(
        (result - exact).abs() <= bound,
        "{}: dot {} vs exact {} (bound {})",
        fmt.name,
        result,
        exact,
        bound
    );
    Ok(())
}
