//! Known-answer vectors from the reference engine (`golden/quant/<format>.json`): for every case,
//! our reference quantizer must reproduce its bytes, our dequantizer its floats bit for bit, our
//! activation conversion its partner bytes, and our dot product its result within
//! |ours − result| ≤ 1e-5·abs_sum + 1e-6.
//!
//! PTQ1_0 exists only in PrismML's fork, so its vectors are a committed fixture in the same
//! schema (`tests/fixtures/quant/ptq1_0.json`), written by an independent Python implementation
//! of the fork's code (`scripts/ptq1_0_vectors.py`), and checked by the same function.

use oxibonsai_formats::{format_by_name, Format};
use oxibonsai_testkit::{fixture, golden, hex_bytes, hex_f32};
use serde::Deserialize;

#[derive(Deserialize)]
struct File {
    format: String,
    block_elems: usize,
    block_bytes: usize,
    cases: Vec<Case>,
    /// Raw blocks (not only what the encoder writes) and the digit (trit + 1, 0..=2) the decoder
    /// reads for each value: only in the PTQ1_0 fixture.
    #[serde(default)]
    decode_cases: Vec<DecodeCase>,
}

#[derive(Deserialize)]
struct DecodeCase {
    name: String,
    quantized: String,
    digits: Vec<String>,
}

#[derive(Deserialize)]
struct Case {
    name: String,
    rows: usize,
    n_per_row: usize,
    input_f32: String,
    quantized: String,
    dequantized_f32: String,
    dot: Option<Dot>,
    /// The CPU backend's `from_float` of the input, where it is not the quantizer (IQ4_NL's:
    /// what a KV cache of the type stores): our activation conversion must write it.
    #[serde(default)]
    from_float: Option<String>,
}

#[derive(Deserialize)]
struct Dot {
    activation_f32: String,
    activation_quantized: String,
    result: f64,
    abs_sum: f64,
}

fn load(name: &str) -> File {
    load_path(golden(&format!("quant/{name}.json")))
}

fn load_path(path: std::path::PathBuf) -> File {
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The first block whose bytes differ, for a readable failure.
fn first_block_mismatch(
    ours: &[u8],
    want: &[u8],
    block_bytes: usize,
) -> Option<(usize, Vec<u8>, Vec<u8>)> {
    ours.chunks(block_bytes)
        .zip(want.chunks(block_bytes))
        .enumerate()
        .find(|(_, (a, b))| a != b)
        .map(|(i, (a, b))| (i, a.to_vec(), b.to_vec()))
}

/// Checks every case of one format; returns the worst dot-product error as a fraction of the
/// tolerance (0 when the file has no dot products).
fn check_format(name: &str) -> f64 {
    check_file(name, load(name))
}

fn check_file(name: &str, file: File) -> f64 {
    let fmt: &Format = format_by_name(name).unwrap_or_else(|| panic!("{name} is not registered"));
    assert_eq!(file.format, name);
    assert_eq!(
        (file.block_elems, file.block_bytes),
        (fmt.block_elems, fmt.block_bytes),
        "{name}: geometry"
    );
    assert!(!file.cases.is_empty(), "{name}: no cases");
    let mut worst = 0.0f64;
    for case in &file.cases {
        let what = format!("{name}/{}", case.name);
        let input = hex_f32(&case.input_f32);
        assert_eq!(
            input.len(),
            case.rows * case.n_per_row,
            "{what}: input length"
        );
        let want_q = hex_bytes(&case.quantized);

        // Quantized row by row, as ggml_quantize_chunk does.
        let mut ours = Vec::new();
        for row in input.chunks(case.n_per_row) {
            ours.extend(
                fmt.quantize_row(row)
                    .unwrap_or_else(|e| panic!("{what}: {e}")),
            );
        }
        assert_eq!(ours.len(), want_q.len(), "{what}: quantized length");
        if let Some((block, a, b)) = first_block_mismatch(&ours, &want_q, fmt.block_bytes) {
            panic!("{what}: quantized block {block} differs\n ours {a:02x?}\n want {b:02x?}");
        }

        if let Some(want) = &case.from_float {
            let want = hex_bytes(want);
            let mut ours = Vec::new();
            for row in input.chunks(case.n_per_row) {
                ours.extend(
                    fmt.quantize_activation_row(row)
                        .unwrap_or_else(|e| panic!("{what}: {e}")),
                );
            }
            assert_eq!(ours.len(), want.len(), "{what}: from_float length");
            // A block of scale 0 means zeros whatever its codes, and the reference leaves those
            // codes uninitialised there: compare its scale only.
            for (i, (a, b)) in ours
                .chunks(fmt.block_bytes)
                .zip(want.chunks(fmt.block_bytes))
                .enumerate()
            {
                let zero = b[..2] == [0, 0] || b[..2] == [0, 0x80];
                let same = if zero { a[..2] == b[..2] } else { a == b };
                assert!(
                    same,
                    "{what}: from_float block {i} differs\n ours {a:02x?}\n want {b:02x?}"
                );
            }
        }

        let want_dq = hex_f32(&case.dequantized_f32);
        let dq = fmt
            .dequantize_row(&want_q)
            .unwrap_or_else(|e| panic!("{what}: {e}"));
        assert_eq!(dq.len(), want_dq.len(), "{what}: dequantized length");
        for (i, (a, b)) in dq.iter().zip(&want_dq).enumerate() {
            assert_eq!(
                a.to_bits(),
                b.to_bits(),
                "{what}: dequantized value {i}: ours {a:e}, want {b:e}"
            );
        }

        let Some(dot) = &case.dot else { continue };
        let partner = fmt.partner_format();
        let activation = hex_f32(&dot.activation_f32);
        let want_a = hex_bytes(&dot.activation_quantized);
        let ours_a = partner
            .quantize_activation_row(&activation)
            .unwrap_or_else(|e| panic!("{what}: {e}"));
        assert_eq!(ours_a.len(), want_a.len(), "{what}: activation length");
        if let Some((block, a, b)) = first_block_mismatch(&ours_a, &want_a, partner.block_bytes) {
            panic!(
                "{what}: activation block {block} ({}) differs\n ours {a:02x?}\n want {b:02x?}",
                partner.name
            );
        }

        let result = fmt
            .dot_row(&want_q, &want_a)
            .unwrap_or_else(|e| panic!("{what}: {e}"));
        let tolerance = 1e-5 * dot.abs_sum + 1e-6;
        let ratio = (f64::from(result) - dot.result).abs() / tolerance;
        assert!(
            ratio <= 1.0,
            "{what}: dot {result} vs reference {} (error {:.3} × tolerance)",
            dot.result,
            ratio
        );
        worst = worst.max(ratio);
    }
    println!("{name}: worst dot error {worst:.4} × tolerance");
    worst
}

macro_rules! golden_tests {
    ($($test:ident => $name:literal),* $(,)?) => {
        $( #[test] fn $test() { check_format($name); } )*

        /// Prints the worst dot error over every format (run with --nocapture to see it).
        #[test]
        fn worst_dot_error_over_all_formats() {
            let worst = [$($name),*]
                .iter()
                .map(|name| (check_format(name), *name))
                .fold((0.0, ""), |a, b| if b.0 > a.0 { b } else { a });
            println!("worst dot error over all formats: {:.4} × tolerance ({})", worst.0, worst.1);
        }
    };
}

golden_tests! {
    f32_matches_reference => "f32",
    f16_matches_reference => "f16",
    bf16_matches_reference => "bf16",
    q8_0_matches_reference => "q8_0",
    q4_0_matches_reference => "q4_0",
    q4_1_matches_reference => "q4_1",
    q5_0_matches_reference => "q5_0",
    q5_1_matches_reference => "q5_1",
    q2_k_matches_reference => "q2_k",
    q3_k_matches_reference => "q3_k",
    q4_k_matches_reference => "q4_k",
    q5_k_matches_reference => "q5_k",
    q6_k_matches_reference => "q6_k",
    tq1_0_matches_reference => "tq1_0",
    tq2_0_matches_reference => "tq2_0",
    q1_0_matches_reference => "q1_0",
    q2_0_matches_reference => "q2_0",
    pq2_0_matches_reference => "pq2_0",
    q2_0_g128_legacy_matches_reference => "q2_0_g128_legacy",
}

/// IQ4_NL's vectors, made by the reference's own C functions (`scripts/iq4_nl_vectors.py`:
/// golden/quant has none): the quantizer, `from_float`, the dequantizer and the Q8_0 dot.
#[test]
fn iq4_nl_matches_the_reference_functions() {
    let file = load_path(fixture("quant/iq4_nl.json"));
    assert!(
        file.cases.iter().all(|c| c.from_float.is_some()),
        "iq4_nl: every case carries from_float"
    );
    check_file("iq4_nl", file);
}

#[test]
fn ptq1_0_matches_the_independent_vectors() {
    let file = load_path(fixture("quant/ptq1_0.json"));
    let fmt = format_by_name("ptq1_0").expect("ptq1_0 is registered");
    assert!(!file.decode_cases.is_empty(), "ptq1_0: no decode cases");
    for case in &file.decode_cases {
        let what = format!("ptq1_0/{}", case.name);
        let bytes = hex_bytes(&case.quantized);
        let dq = fmt
            .dequantize_row(&bytes)
            .unwrap_or_else(|e| panic!("{what}: {e}"));
        assert_eq!(case.digits.len(), bytes.len() / fmt.block_bytes, "{what}");
        for (b, (block, digits)) in bytes.chunks(fmt.block_bytes).zip(&case.digits).enumerate() {
            let d = half::f16::from_le_bytes([block[26], block[27]]).to_f32();
            for (i, digit) in digits.bytes().enumerate() {
                let want = (i32::from(digit - b'0') - 1) as f32 * d;
                let got = dq[b * fmt.block_elems + i];
                assert_eq!(got.to_bits(), want.to_bits(), "{what}: block {b} value {i}");
            }
        }
    }
    check_file("ptq1_0", file);
}

/// Q6_K's codec is complete but not in the registry yet (registering it changes what the
/// quantize command writes, which its tests must follow first), so its vectors are checked
/// against the module's functions directly, with the same criteria as [`check_format`].
#[test]
fn q6_k_codec_matches_reference() {
    use oxibonsai_formats::{format, q6_k, FormatKind};
    const ELEMS: usize = 256;
    const BYTES: usize = 210;
    let file = load("q6_k");
    assert_eq!(
        (file.block_elems, file.block_bytes),
        (ELEMS, BYTES),
        "q6_k: geometry"
    );
    assert!(!file.cases.is_empty(), "q6_k: no cases");
    let q8_k = format(FormatKind::Q8_K);
    let mut worst = 0.0f64;
    for case in &file.cases {
        let what = format!("q6_k/{}", case.name);
        let input = hex_f32(&case.input_f32);
        assert_eq!(
            input.len(),
            case.rows * case.n_per_row,
            "{what}: input length"
        );
        assert_eq!(case.n_per_row % ELEMS, 0, "{what}: rows of whole blocks");
        let want_q = hex_bytes(&case.quantized);
        let mut ours = vec![0u8; input.len() / ELEMS * BYTES];
        q6_k::quantize(&input, &mut ours);
        assert_eq!(ours.len(), want_q.len(), "{what}: quantized length");
        if let Some((block, a, b)) = first_block_mismatch(&ours, &want_q, BYTES) {
            panic!("{what}: quantized block {block} differs\n ours {a:02x?}\n want {b:02x?}");
        }

        let want_dq = hex_f32(&case.dequantized_f32);
        assert_eq!(want_dq.len(), input.len(), "{what}: dequantized length");
        let mut dq = vec![0f32; want_q.len() / BYTES * ELEMS];
        q6_k::dequantize(&want_q, &mut dq);
        for (i, (a, b)) in dq.iter().zip(&want_dq).enumerate() {
            assert_eq!(
                a.to_bits(),
                b.to_bits(),
                "{what}: dequantized value {i}: ours {a:e}, want {b:e}"
            );
        }

        let Some(dot) = &case.dot else { continue };
        let activation = hex_f32(&dot.activation_f32);
        let want_a = hex_bytes(&dot.activation_quantized);
        let ours_a = q8_k
            .quantize_activation_row(&activation)
            .unwrap_or_else(|e| panic!("{what}: {e}"));
        assert_eq!(ours_a, want_a, "{what}: q8_K activation");
        assert_eq!(
            want_a.len(),
            want_q.len() / BYTES * q8_k.block_bytes,
            "{what}: activation length"
        );
        let result = q6_k::dot(&want_q, &want_a);
        let tolerance = 1e-5 * dot.abs_sum + 1e-6;
        let ratio = (f64::from(result) - dot.result).abs() / tolerance;
        assert!(
            ratio <= 1.0,
            "{what}: dot {result} vs reference {} (error {ratio:.3} × tolerance)",
            dot.result
        );
        worst = worst.max(ratio);
    }
    println!("q6_k: worst dot error {worst:.4} × tolerance");
}
