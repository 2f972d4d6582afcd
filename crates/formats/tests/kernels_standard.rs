//! The fast standard-format kernels of every tier this CPU runs, against the scalar twins of the
//! registry: matrix-vector products (F32, F16, BF16, Q8_0, Q4_0, Q4_1, IQ4_NL) within a tolerance
//! scaled by Σ|w·a|, and exactly where the float arithmetic is exact (every KV-cache block type's
//! key product: the integer sums must be the scalar twin's), and activation conversions (Q8_0,
//! Q8_1, Q8_K, F16, BF16) byte for byte.

use oxibonsai_formats::kernels::{Isa, Kernels};
use oxibonsai_formats::{format, Format, FormatKind};
use proptest::prelude::*;

mod common;

const GEMV_FORMATS: [FormatKind; 7] = [
    FormatKind::F32,
    FormatKind::F16,
    FormatKind::BF16,
    FormatKind::Q8_0,
    FormatKind::Q4_0,
    FormatKind::Q4_1,
    FormatKind::IQ4_NL,
];
const ACTIVATIONS: [FormatKind; 5] = [
    FormatKind::Q8_0,
    FormatKind::Q8_1,
    FormatKind::Q8_K,
    FormatKind::F16,
    FormatKind::BF16,
];

/// Whether tier `isa` has a fast matrix-vector kernel for `kind`: as `common::expects_fast_gemv`,
/// except that the x86 tiers have none for BF16 (it takes the scalar path there).
fn expects_fast_gemv(isa: Isa, kind: FormatKind) -> bool {
    match isa {
        Isa::Avx2 | Isa::Avx512 => kind != FormatKind::BF16,
        _ => common::expects_fast_gemv(isa, kind),
    }
}

/// xorshift64*: reproducible data without a dependency.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    fn unit(&mut self) -> f32 {
        (self.next() >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0
    }
    /// Values over many magnitudes, both signs.
    fn value(&mut self) -> f32 {
        let scale = [1e-3f32, 0.1, 1.0, 10.0, 300.0][self.below(5) as usize];
        self.unit() * scale
    }
    /// A block scale: zero, negative, tiny, large or ordinary, rounded to f16.
    fn scale(&mut self) -> [u8; 2] {
        let v = match self.below(8) {
            0 => 0.0,
            1 => -self.unit().abs() * 0.05,
            2 => 6.0e-6 * self.unit(),
            3 => 200.0 * self.unit(),
            _ => 0.05 * self.unit(),
        };
        half::f16::from_f32(v).to_bits().to_le_bytes()
    }
}

/// `n_rows` random rows of valid blocks of `kind`.
fn random_weights(kind: FormatKind, n_rows: usize, n_values: usize, rng: &mut Rng) -> Vec<u8> {
    let f = format(kind);
    let n_blocks = n_rows * n_values / f.block_elems;
    let mut out = Vec::with_capacity(n_blocks * f.block_bytes);
    for _ in 0..n_blocks {
        match kind {
            FormatKind::F32 => out.extend(rng.value().to_le_bytes()),
            FormatKind::F16 => out.extend(half::f16::from_f32(rng.value()).to_bits().to_le_bytes()),
            FormatKind::BF16 => {
                out.extend(half::bf16::from_f32(rng.value()).to_bits().to_le_bytes())
            }
            FormatKind::Q8_0 => {
                out.extend(rng.scale());
                out.extend((0..32).map(|_| rng.next() as u8));
            }
            FormatKind::Q4_0 | FormatKind::IQ4_NL => {
                out.extend(rng.scale());
                out.extend((0..16).map(|_| rng.next() as u8));
            }
            FormatKind::Q4_1 => {
                out.extend(rng.scale());
                out.extend(rng.scale());
                out.extend((0..16).map(|_| rng.next() as u8));
            }
            other => unreachable!("{other:?} is not in this group"),
        }
    }
    out
}

fn random_row(n: usize, rng: &mut Rng) -> Vec<f32> {
    let scale = [1e-4f32, 1.0, 50.0][rng.below(3) as usize];
    (0..n).map(|_| rng.unit() * scale).collect()
}

fn scalar_activation(partner: &Format, x: &[f32]) -> Vec<u8> {
    partner.quantize_activation_row(x).expect("whole blocks")
}

/// Σ|w·a| over dequantized values; for Q4_1 the offset term is counted on its own too, since
/// `code·d + m` can cancel while the kernel still adds both parts.
fn magnitude(f: &Format, row: &[u8], activation: &[u8]) -> f64 {
    let partner = f.partner_format();
    let w = f.dequantize_row(row).expect("whole blocks");
    let a = partner.dequantize_row(activation).expect("whole blocks");
    let mut sum: f64 = w.iter().zip(&a).map(|(x, y)| f64::from(x * y).abs()).sum();
    if f.kind == FormatKind::Q4_1 {
        for (b, (wb, ab)) in row
            .chunks_exact(20)
            .zip(activation.chunks_exact(36))
            .enumerate()
        {
            let m = f64::from(half::f16::from_le_bytes([wb[2], wb[3]]).to_f32());
            let s = f64::from(half::f16::from_le_bytes([ab[2], ab[3]]).to_f32());
            let a_abs: f64 = a[32 * b..32 * b + 32]
                .iter()
                .map(|v| f64::from(v.abs()))
                .sum();
            sum += m.abs() * (s.abs() + a_abs);
            let d = f64::from(half::f16::from_le_bytes([wb[0], wb[1]]).to_f32());
            sum += d.abs() * 15.0 * a_abs;
        }
    }
    sum
}

fn fast_tiers() -> Vec<Kernels> {
    let tiers: Vec<Kernels> = common::tiers()
        .into_iter()
        .filter(|k| k.isa() != Isa::Scalar)
        .collect();
    #[cfg(target_arch = "x86_64")]
    assert!(
        !tiers.is_empty() || !std::arch::is_x86_feature_detected!("avx2"),
        "an AVX2 CPU must offer a fast tier"
    );
    tiers
}

/// Runs one gemv case on every fast tier and returns the worst |fast − scalar| / bound.
/// `offset` misaligns the weight start; the weights end exactly at the end of their buffer and
/// the rows after `out.len()` (and the bytes after the activation) hold poison that would turn
/// any result that used them into NaN or garbage.
fn check_gemv(kind: FormatKind, n_values: usize, n_rows: usize, offset: usize, seed: u64) -> f64 {
    let f = format(kind);
    let partner = f.partner_format();
    let mut rng = Rng(seed | 1);
    let row_bytes = n_values / f.block_elems * f.block_bytes;
    let weights = random_weights(kind, n_rows, n_values, &mut rng);
    let x = random_row(n_values, &mut rng);
    let activation = scalar_activation(partner, &x);

    let mut w_buf = vec![0x7cu8; offset];
    w_buf.extend_from_slice(&weights);
    let mut poisoned = w_buf.clone();
    poisoned.extend(std::iter::repeat_n(0x7fu8, row_bytes + 64));
    let mut a_buf = vec![0x7fu8; offset + activation.len() + 64];
    a_buf[offset..offset + activation.len()].copy_from_slice(&activation);
    let a_view = &a_buf[offset..offset + activation.len()];

    let mut worst = 0.0f64;
    for kernels in fast_tiers() {
        // Each tier has exactly the kernels it is expected to (the ARM tiers: `ARM_FAST_GEMV`).
        assert_eq!(
            kernels.has_fast_gemv(kind),
            expects_fast_gemv(kernels.isa(), kind),
            "{}: fast {} gemv present vs expected",
            kernels.isa().name(),
            f.name
        );
        for w_view in [&w_buf[offset..], &poisoned[offset..]] {
            let mut out = vec![f32::NAN; n_rows];
            kernels.gemv(f, w_view, row_bytes, a_view, &mut out);
            for (r, got) in out.iter().enumerate() {
                let row = &weights[r * row_bytes..(r + 1) * row_bytes];
                let want = (f.dot)(row, &activation);
                let bound = 1e-5 * magnitude(f, row, &activation) + 1e-6;
                let err = f64::from((got - want).abs());
                assert!(
                    err <= bound,
                    "{} {}: {n_rows}×{n_values} offset {offset} seed {seed} row {r}: fast {got} scalar {want} (|Δ| {err:e} > {bound:e})",
                    kernels.isa().name(),
                    f.name
                );
                worst = worst.max(err / bound);
            }
        }
    }
    worst
}

#[test]
fn gemv_matches_scalar_on_awkward_and_bonsai_shapes() {
    let mut worst = Vec::new();
    for kind in GEMV_FORMATS {
        let f = format(kind);
        let block = f.block_elems.max(32);
        let mut w = 0.0f64;
        let mut seed = 1u64;
        for blocks in [1usize, 2, 3, 5, 7, 33] {
            for rows in (1..=13).chain([37]) {
                for offset in [0usize, 1, 3, 7] {
                    seed += 1;
                    w = w.max(check_gemv(kind, blocks * block, rows, offset, seed * 7919));
                }
            }
        }
        if matches!(kind, FormatKind::F32 | FormatKind::F16 | FormatKind::BF16) {
            // Lengths that leave a tail after the 8- and 16-wide bodies.
            for n in [1usize, 3, 7, 9, 15, 17, 31, 33, 47] {
                for rows in [1usize, 4, 5] {
                    seed += 1;
                    w = w.max(check_gemv(kind, n, rows, 3, seed));
                }
            }
        }
        for n in [2048usize, 6144, 4096] {
            seed += 1;
            w = w.max(check_gemv(kind, n, 9, 1, seed));
        }
        worst.push((f.name, w));
    }
    eprintln!("worst |fast − scalar| / tolerance per format: {worst:?}");
}

/// The KV cache's block types, whose key rows attention scores by the tier's matrix-vector
/// kernel against the query in the partner format.
const KV_KEY_FORMATS: [FormatKind; 6] = [
    FormatKind::Q8_0,
    FormatKind::Q4_0,
    FormatKind::Q4_1,
    FormatKind::Q5_0,
    FormatKind::Q5_1,
    FormatKind::IQ4_NL,
];

/// f16 bytes of `v` (exact for the small integers used here).
fn f16_bytes(v: f32) -> [u8; 2] {
    half::f16::from_f32(v).to_bits().to_le_bytes()
}

/// Random blocks of `kind` whose f16 scales are ±1 or ±2 (and minimums 0, ±1, ±2, ±4), with
/// random codes; a Q8_0 code of −128 (which its conversions never write) becomes −127.
fn exact_blocks(kind: FormatKind, n_blocks: usize, rng: &mut Rng) -> Vec<u8> {
    let f = format(kind);
    let mut out = Vec::with_capacity(n_blocks * f.block_bytes);
    for _ in 0..n_blocks {
        let mut block: Vec<u8> = (0..f.block_bytes).map(|_| rng.next() as u8).collect();
        let d = [1.0f32, -1.0, 2.0, -2.0][rng.below(4) as usize];
        block[..2].copy_from_slice(&f16_bytes(d));
        if matches!(kind, FormatKind::Q4_1 | FormatKind::Q5_1) {
            let m = [0.0f32, 1.0, -1.0, 2.0, -2.0, 4.0, -4.0][rng.below(7) as usize];
            block[2..4].copy_from_slice(&f16_bytes(m));
        }
        if kind == FormatKind::Q8_0 {
            for c in &mut block[2..] {
                *c = (*c as i8).max(-127) as u8;
            }
        }
        out.extend(block);
    }
    out
}

/// A random activation of `n_blocks` partner blocks (Q8_0 or Q8_1) with scale 1 or 2, codes in
/// −127..=127 and, for Q8_1, a stored sum that is an integer in −2048..=2048 (the kernels take
/// it as given, as they take it from the conversion).
fn exact_activation(partner: FormatKind, n_blocks: usize, rng: &mut Rng) -> Vec<u8> {
    let mut out = Vec::new();
    for _ in 0..n_blocks {
        out.extend(f16_bytes([1.0f32, 2.0][rng.below(2) as usize]));
        if partner == FormatKind::Q8_1 {
            out.extend(f16_bytes(rng.below(4097) as f32 - 2048.0));
        }
        out.extend((0..32).map(|_| (rng.below(255) as i32 - 127) as i8 as u8));
    }
    out
}

/// The format's dot product of `row` with `activation` in float64 from the registry's
/// dequantizations — Σ (w − m)·a per block plus m·s, s the stored Q8_1 sum (ggml's definition) —
/// and Σ |term|, which bounds every float a kernel forms (an offset such as Q4_0's 8 is folded in
/// the integers, before any conversion).
fn exact_dot(f: &Format, row: &[u8], activation: &[u8]) -> (f64, f64) {
    let partner = f.partner_format();
    let w = f.dequantize_row(row).expect("whole blocks");
    let a = partner.dequantize_row(activation).expect("whole blocks");
    let with_min = matches!(f.kind, FormatKind::Q4_1 | FormatKind::Q5_1);
    let half_at = |bytes: &[u8], at: usize| {
        f64::from(half::f16::from_le_bytes([bytes[at], bytes[at + 1]]).to_f32())
    };
    let (mut sum, mut magnitude) = (0f64, 0f64);
    for (b, (wb, ab)) in row
        .chunks_exact(f.block_bytes)
        .zip(activation.chunks_exact(partner.block_bytes))
        .enumerate()
    {
        let (m, s) = if with_min {
            (half_at(wb, 2), half_at(ab, 2))
        } else {
            (0.0, 0.0)
        };
        for i in 32 * b..32 * b + 32 {
            let term = (f64::from(w[i]) - m) * f64::from(a[i]);
            sum += term;
            magnitude += term.abs();
        }
        sum += m * s;
        magnitude += (m * s).abs();
    }
    (sum, magnitude)
}

/// Each KV-cache key type's product, on every tier, where every float operation is exact: scales
/// ±1 / ±2 and integer minimums and sums keep every term, partial sum and product an integer
/// below 2²⁴, so a result is the exact sum whatever the order of the additions, and any tier that
/// differs from it (or from the scalar twin, which must equal it too) has summed the wrong
/// integers (a code, a fifth bit, an offset or a minimum term). Row counts around the 4- and
/// 8-row bands, rows of one to seven blocks (odd counts leave AVX-512's pair half empty).
#[test]
fn kv_key_products_are_exact_where_the_arithmetic_is() {
    let mut rng = Rng(0x6b65_7973);
    let tiers = common::tiers();
    for kind in KV_KEY_FORMATS {
        let f = format(kind);
        for n_blocks in [1usize, 2, 3, 4, 5, 7] {
            for n_rows in (1..=10).chain([17]) {
                let row_bytes = n_blocks * f.block_bytes;
                let weights = exact_blocks(kind, n_blocks * n_rows, &mut rng);
                let activation = exact_activation(f.partner, n_blocks, &mut rng);
                let want: Vec<f32> = weights
                    .chunks_exact(row_bytes)
                    .map(|row| {
                        let (sum, magnitude) = exact_dot(f, row, &activation);
                        assert!(
                            magnitude < f64::from(1u32 << 24),
                            "{}: the premise fails: terms of {magnitude} are not exact in f32",
                            f.name
                        );
                        assert_eq!(f64::from(sum as f32), sum, "{}: {sum} not exact", f.name);
                        sum as f32
                    })
                    .collect();
                for (r, row) in weights.chunks_exact(row_bytes).enumerate() {
                    assert_eq!(
                        (f.dot)(row, &activation),
                        want[r],
                        "{} scalar dot, {n_blocks} blocks, row {r}",
                        f.name
                    );
                }
                for kernels in &tiers {
                    let mut got = vec![f32::NAN; n_rows];
                    kernels.gemv(f, &weights, row_bytes, &activation, &mut got);
                    assert_eq!(
                        got,
                        want,
                        "{} on {}: {n_rows} rows of {n_blocks} blocks",
                        f.name,
                        kernels.isa().name()
                    );
                }
            }
        }
    }
}

fn assert_conversion(kind: FormatKind, x: &[f32], what: &str) {
    let f = format(kind);
    let want = scalar_activation(f, x);
    for kernels in fast_tiers() {
        let mut got = vec![0xa5u8; want.len() + 1];
        kernels.quantize_activation(f, x, &mut got[1..]);
        assert_eq!(
            &got[1..],
            &want[..],
            "{} {}: {what}",
            kernels.isa().name(),
            f.name
        );
        assert_eq!(got[0], 0xa5, "{}: wrote before its output", f.name);
    }
}

/// Rows built to hit each rounding edge of the conversions.
fn special_rows(kind: FormatKind, n: usize, rng: &mut Rng) -> Vec<(String, Vec<f32>)> {
    let block = format(kind).block_elems.max(32);
    let mut rows = vec![
        ("random".to_owned(), random_row(n, rng)),
        ("zeros".to_owned(), vec![0.0; n]),
        ("negative zeros".to_owned(), vec![-0.0; n]),
        ("all equal".to_owned(), vec![0.3; n]),
        ("all equal negative".to_owned(), vec![-7.25; n]),
        (
            "huge".to_owned(),
            (0..n).map(|_| rng.unit() * 3.0e38).collect(),
        ),
        (
            "tiny".to_owned(),
            (0..n).map(|_| rng.unit() * 1.0e-38).collect(),
        ),
        (
            "subnormal".to_owned(),
            (0..n).map(|_| rng.unit() * 1.0e-42).collect(),
        ),
        (
            "mixed zeros and signs".to_owned(),
            (0..n).map(|i| [0.0, -0.0, 1.0, -1.0, 0.5][i % 5]).collect(),
        ),
    ];
    // Exact ties after scaling: amax 127 gives multiplier 1 (Q8_0/Q8_1); a leading −127 gives
    // iscale 1 (Q8_K). Values k + 0.5 then sit exactly between two codes.
    let ties: Vec<f32> = (0..n)
        .map(|i| {
            if i % block == 0 {
                -127.0
            } else {
                (rng.below(253) as f32 - 126.0) + 0.5
            }
        })
        .collect();
    rows.push(("ties".to_owned(), ties));
    // Equal magnitudes with opposite signs: Q8_K must keep the first one's sign.
    let opposite: Vec<f32> = (0..n)
        .map(|i| match i % block {
            3 => 2.0,
            9 => -2.0,
            _ => rng.unit(),
        })
        .collect();
    rows.push(("first of equal magnitudes".to_owned(), opposite));
    let opposite_neg: Vec<f32> = (0..n)
        .map(|i| match i % block {
            5 => -2.0,
            200 => 2.0,
            _ => rng.unit(),
        })
        .collect();
    rows.push((
        "first of equal magnitudes, negative".to_owned(),
        opposite_neg,
    ));
    rows
}

#[test]
fn activation_conversions_are_byte_identical() {
    let mut rng = Rng(0x1234_5678);
    for kind in ACTIVATIONS {
        let block = format(kind).block_elems.max(32);
        for blocks in [1usize, 2, 3, 7, 33] {
            for (what, x) in special_rows(kind, blocks * block, &mut rng) {
                assert_conversion(kind, &x, &format!("{what}, {blocks} blocks"));
            }
        }
    }
    // F16 and BF16 have no block: odd lengths exercise the tail.
    for kind in [FormatKind::F16, FormatKind::BF16] {
        for n in [1usize, 7, 9, 23] {
            let x = random_row(n, &mut rng);
            assert_conversion(kind, &x, &format!("{n} values"));
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn gemv_matches_scalar_on_random_shapes(
        kind in prop::sample::select(GEMV_FORMATS.to_vec()),
        blocks in 1usize..40,
        rows in 1usize..20,
        offset in 0usize..8,
        seed in any::<u64>(),
    ) {
        let n = blocks * format(kind).block_elems.max(32);
        check_gemv(kind, n, rows, offset, seed);
    }

    #[test]
    fn conversions_match_scalar_on_random_rows(
        kind in prop::sample::select(ACTIVATIONS.to_vec()),
        blocks in 1usize..6,
        values in prop::collection::vec(-1.0e4f32..1.0e4, 256 * 6),
        scale in prop::sample::select(vec![1.0e-30f32, 1.0e-3, 1.0, 1.0e20]),
    ) {
        let n = blocks * format(kind).block_elems.max(32);
        let x: Vec<f32> = values[..n].iter().map(|v| v * scale).collect();
        assert_conversion(kind, &x, "proptest row");
    }
}
