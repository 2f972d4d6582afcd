//! Properties every codec must keep on inputs nobody has seen: requantizing dequantized values is
//! a fixed point, dequantizing arbitrary bytes never panics, and each dot product equals the
//! float64 dot product of the dequantized operands up to f32 rounding.

use oxibonsai_formats::common::blocks;
use oxibonsai_formats::q4_1::BlockQ4_1;
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
    q8_0 => Q8_0,
    q8_1 => Q8_1,
    q8_k => Q8_K,
    tq1_0 => TQ1_0,
    tq2_0 => TQ2_0,
    q1_0 => Q1_0,
    q2_0 => Q2_0,
    q2_0_g128_legacy => Q2_0G128Legacy,
    pq2_0 => PQ2_0,
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

/// Σ dequant(w)·dequant(a) in f64, the value a dot product approximates. For Q4_1 the kernel
/// uses Q8_1's stored `s` where the dequantized activations give d·Σq; `s` was rounded to f16 from
/// the unrounded scale, so that known difference, m·(s − d·Σq) per block, is added in.
fn exact_dot(fmt: &Format, weights: &[u8], activation: &[u8], w: &[f32], a: &[f32]) -> f64 {
    let mut exact: f64 = w
        .iter()
        .zip(a)
        .map(|(p, q)| f64::from(*p) * f64::from(*q))
        .sum();
    if fmt.kind == FormatKind::Q4_1 {
        for (x, y) in blocks::<BlockQ4_1>(weights)
            .iter()
            .zip(blocks::<BlockQ8_1>(activation))
        {
            let sum_q: i32 = y.qs.iter().map(|&q| i32::from(q)).sum();
            let s_exact = f64::from(y.d.to_f32()) * f64::from(sum_q);
            exact += f64::from(x.m.to_f32()) * (f64::from(y.s.to_f32()) - s_exact);
        }
    }
    exact
}

/// Bound on |dot − exact_dot|: the kernels round each block term and the running sum to f32
/// (f32/f16/bf16 only round each product, summing in f64), so (terms + a few) unit roundoffs of
/// Σ|wᵢ·aᵢ|. Q4_1's dequantized value code·d + m is itself rounded after a possible cancellation,
/// which adds a few roundoffs of |m|·Σ|a|.
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
    if fmt.kind == FormatKind::Q4_1 {
        for (x, av) in blocks::<BlockQ4_1>(weights).iter().zip(a.chunks_exact(32)) {
            let sum_abs_a: f64 = av.iter().map(|v| f64::from(*v).abs()).sum();
            bound += 4.0 * u * f64::from(x.m.to_f32()).abs() * sum_abs_a;
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
