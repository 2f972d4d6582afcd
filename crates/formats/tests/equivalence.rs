//! The `exact_ternary` case holds values that are exactly {−1, 0, 1}·d with d f16-exact per 256
//! values, so every ternary-capable format must represent it without loss. The reference agrees
//! (its dequantized floats for TQ1_0, TQ2_0, Q2_0, PQ2_0 and legacy Q2_0 are the same bytes);
//! ours must give those same floats through each format, and transcoding between the formats
//! must land on the reference's bytes.

use oxibonsai_formats::{format, FormatKind};
use oxibonsai_testkit::{golden, hex_bytes, hex_f32};

const TERNARY: [(FormatKind, &str); 5] = [
    (FormatKind::TQ1_0, "tq1_0"),
    (FormatKind::TQ2_0, "tq2_0"),
    (FormatKind::Q2_0, "q2_0"),
    (FormatKind::PQ2_0, "pq2_0"),
    (FormatKind::Q2_0G128Legacy, "q2_0_g128_legacy"),
];

struct Ternary {
    input: Vec<f32>,
    quantized: Vec<u8>,
    dequantized: Vec<u8>,
}

fn exact_ternary(name: &str) -> Ternary {
    let path = golden(&format!("quant/{name}.json"));
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let file: serde_json::Value =
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let case = file["cases"]
        .as_array()
        .and_then(|cases| cases.iter().find(|c| c["name"] == "exact_ternary"))
        .unwrap_or_else(|| panic!("{}: no exact_ternary case", path.display()));
    let field = |key: &str| {
        case[key]
            .as_str()
            .unwrap_or_else(|| panic!("{name}: {key} missing"))
            .to_owned()
    };
    Ternary {
        input: hex_f32(&field("input_f32")),
        quantized: hex_bytes(&field("quantized")),
        dequantized: hex_bytes(&field("dequantized_f32")),
    }
}

fn f32_bytes(values: &[f32]) -> Vec<u8> {
    values.iter().flat_map(|v| v.to_le_bytes()).collect()
}

#[test]
fn exact_ternary_dequantizes_identically_through_every_ternary_format() {
    let cases: Vec<_> = TERNARY
        .iter()
        .map(|(_, name)| exact_ternary(name))
        .collect();
    let reference = &cases[0];
    for ((_, name), case) in TERNARY.iter().zip(&cases) {
        assert_eq!(
            case.input, reference.input,
            "{name}: a different exact_ternary input"
        );
        // The precondition for the comparison: the reference says these formats agree.
        assert_eq!(
            case.dequantized, reference.dequantized,
            "{name}: golden dequantization differs from tq1_0's"
        );
    }
    // And the values are the input itself.
    assert_eq!(reference.dequantized, f32_bytes(&reference.input));

    for (kind, name) in TERNARY {
        let fmt = format(kind);
        let quantized = fmt.quantize_row(&reference.input).unwrap();
        let values = fmt.dequantize_row(&quantized).unwrap();
        assert_eq!(
            f32_bytes(&values),
            reference.dequantized,
            "{name}: our round trip"
        );
    }
}

#[test]
fn transcoding_between_ternary_formats_gives_the_reference_bytes() {
    let cases: Vec<_> = TERNARY
        .iter()
        .map(|(_, name)| exact_ternary(name))
        .collect();
    for ((from_kind, from), from_case) in TERNARY.iter().zip(&cases) {
        let values = format(*from_kind)
            .dequantize_row(&from_case.quantized)
            .unwrap();
        for ((to_kind, to), to_case) in TERNARY.iter().zip(&cases) {
            let bytes = format(*to_kind).quantize_row(&values).unwrap();
            assert_eq!(bytes, to_case.quantized, "{from} → {to}");
        }
    }
}
