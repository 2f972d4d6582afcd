//! The checked row helpers reject every length mismatch with an error naming the format and the
//! numbers, instead of reaching the raw functions' panics.

use oxibonsai_formats::{format, FormatError, FormatKind};

#[test]
fn quantize_rejects_a_partial_block() {
    let q1_0 = format(FormatKind::Q1_0);
    let err = q1_0.quantize_row(&[0.0; 576]).unwrap_err();
    assert_eq!(
        err,
        FormatError::NotWholeBlocks {
            format: "q1_0",
            elems: 576,
            block_elems: 128
        }
    );
    assert_eq!(
        err.to_string(),
        "q1_0: 576 values are not a whole number of 128-value blocks"
    );
}

#[test]
fn quantize_into_rejects_a_wrong_output_length() {
    let q8_0 = format(FormatKind::Q8_0);
    let mut out = vec![0u8; 33];
    let err = q8_0.quantize_row_into(&[1.0; 32], &mut out).unwrap_err();
    assert_eq!(
        err,
        FormatError::LengthMismatch {
            format: "q8_0",
            what: "quantized output",
            expected: 34,
            found: 33
        }
    );
    assert!(err.to_string().contains("expected 34"), "{err}");
}

#[test]
fn dequantize_rejects_partial_blocks_and_wrong_outputs() {
    let tq1_0 = format(FormatKind::TQ1_0);
    assert_eq!(
        tq1_0.dequantize_row(&[0u8; 55]).unwrap_err(),
        FormatError::NotWholeBlockBytes {
            format: "tq1_0",
            bytes: 55,
            block_bytes: 54
        }
    );
    let mut out = vec![0f32; 255];
    assert_eq!(
        tq1_0.dequantize_row_into(&[0u8; 54], &mut out).unwrap_err(),
        FormatError::LengthMismatch {
            format: "tq1_0",
            what: "dequantized output",
            expected: 256,
            found: 255
        }
    );
}

#[test]
fn dot_rejects_an_activation_of_the_wrong_length() {
    let q2_0 = format(FormatKind::Q2_0);
    // One Q2_0 block of 64 values needs two Q8_0 blocks (68 bytes).
    let err = q2_0.dot_row(&[0u8; 18], &[0u8; 34]).unwrap_err();
    assert_eq!(
        err,
        FormatError::LengthMismatch {
            format: "q2_0",
            what: "partner activation bytes",
            expected: 68,
            found: 34
        }
    );
    assert!(q2_0.dot_row(&[0u8; 18], &[0u8; 68]).is_ok());
    assert_eq!(
        q2_0.dot_row(&[0u8; 17], &[0u8; 68]).unwrap_err(),
        FormatError::NotWholeBlockBytes {
            format: "q2_0",
            bytes: 17,
            block_bytes: 18
        }
    );
}

#[test]
fn a_weight_only_format_has_no_activation_quantizer() {
    let q4_0 = format(FormatKind::Q4_0);
    assert_eq!(
        q4_0.quantize_activation_row(&[0.0; 32]).unwrap_err(),
        FormatError::NotAnActivationFormat { format: "q4_0" }
    );
    let q8_k = format(FormatKind::Q8_K);
    assert_eq!(
        q8_k.quantize_activation_row(&[0.0; 100]).unwrap_err(),
        FormatError::NotWholeBlocks {
            format: "q8_K",
            elems: 100,
            block_elems: 256
        }
    );
}
