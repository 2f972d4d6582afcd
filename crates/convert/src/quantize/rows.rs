//! Converting one tensor's data: each row is decoded to f32 with the source format's own
//! dequantizer, then encoded with the target's reference quantizer, as the reference does. Rows
//! are independent (no importance matrix), so they are split over threads in chunks.
//!
//! Re-encoding already quantized data as PTQ1_0 is a transcode, not a quantization: PTQ1_0 is
//! meant for weights that are ternary at 128 values a block (Bonsai's), which it holds exactly,
//! so a row whose values do not come back unchanged is refused, naming the first that did not.

use oxibonsai_formats::{Format, FormatError, FormatKind};
use rayon::prelude::*;

/// Rows per parallel task: enough work per task to amortize the scheduling.
const ROWS_PER_TASK: usize = 16;

#[derive(Debug, thiserror::Error)]
pub enum RowError {
    #[error("tensor '{tensor}': {from} → {to}")]
    Format {
        tensor: String,
        from: &'static str,
        to: &'static str,
        #[source]
        source: FormatError,
    },
    #[error("tensor '{tensor}': {from} → {to}: data of {len} bytes is not whole rows of {row_bytes} bytes")]
    NotWholeRows {
        tensor: String,
        from: &'static str,
        to: &'static str,
        len: usize,
        row_bytes: usize,
    },
    #[error(
        "tensor '{tensor}': {from} → {to} would change value {index} ({from_value:e} became \
         {to_value:e}): only data that is ternary at {to}'s block size transcodes exactly"
    )]
    NotExact {
        tensor: String,
        from: &'static str,
        to: &'static str,
        index: usize,
        from_value: f32,
        to_value: f32,
    },
    #[error("tensor '{tensor}': rows of {row_len} values do not fit this machine's address space")]
    RowTooLong { tensor: String, row_len: u64 },
}

/// Converts `data` (whole rows of `row_len` values in `from`) into `to`. The row length must be
/// a whole number of blocks of both formats (checked by the caller's plan; checked again here).
pub fn convert(
    tensor: &str,
    data: &[u8],
    row_len: u64,
    from: &'static Format,
    to: &'static Format,
) -> Result<Vec<u8>, RowError> {
    let row_len = usize::try_from(row_len).map_err(|_| RowError::RowTooLong {
        tensor: tensor.to_owned(),
        row_len,
    })?;
    let context = |source: FormatError| RowError::Format {
        tensor: tensor.to_owned(),
        from: from.name,
        to: to.name,
        source,
    };
    let src_row = from.blocks_for_elems(row_len).map_err(context)? * from.block_bytes;
    let dst_row = to.blocks_for_elems(row_len).map_err(context)? * to.block_bytes;
    if src_row == 0 || !data.len().is_multiple_of(src_row) {
        return Err(RowError::NotWholeRows {
            tensor: tensor.to_owned(),
            from: from.name,
            to: to.name,
            len: data.len(),
            row_bytes: src_row,
        });
    }
    let n_rows = data.len() / src_row;
    let exact = must_be_exact(from, to);
    let mut out = vec![0u8; n_rows * dst_row];
    out.par_chunks_mut(dst_row * ROWS_PER_TASK)
        .zip(data.par_chunks(src_row * ROWS_PER_TASK))
        .enumerate()
        .try_for_each(|(task, (dst, src))| -> Result<(), RowError> {
            let mut values = vec![0f32; row_len];
            let mut back = vec![0f32; if exact { row_len } else { 0 }];
            let rows = dst.chunks_exact_mut(dst_row).zip(src.chunks_exact(src_row));
            for (r, (dst, src)) in rows.enumerate() {
                decode_row(from, src, &mut values).map_err(context)?;
                to.quantize_row_into(&values, dst).map_err(context)?;
                if exact {
                    to.dequantize_row_into(dst, &mut back).map_err(context)?;
                    // Equal as numbers: a zero of either sign is the same weight.
                    if let Some(i) = (0..row_len).find(|&i| back[i] != values[i]) {
                        let row = task * ROWS_PER_TASK + r;
                        return Err(RowError::NotExact {
                            tensor: tensor.to_owned(),
                            from: from.name,
                            to: to.name,
                            index: row * row_len + i,
                            from_value: values[i],
                            to_value: back[i],
                        });
                    }
                }
            }
            Ok(())
        })?;
    Ok(out)
}

/// Whether `from → to` is a transcode that must keep every value: quantized data into PTQ1_0.
fn must_be_exact(from: &Format, to: &Format) -> bool {
    to.kind == FormatKind::PTQ1_0 && from.block_elems > 1
}

fn decode_row(from: &'static Format, src: &[u8], dst: &mut [f32]) -> Result<(), FormatError> {
    if from.kind == FormatKind::F32 {
        for (value, bytes) in dst.iter_mut().zip(src.chunks_exact(4)) {
            *value = f32::from_le_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]);
        }
        return Ok(());
    }
    from.dequantize_row_into(src, dst)
}

#[cfg(test)]
mod tests {
    use super::*;
    use oxibonsai_formats::format;

    /// The parallel chunked path agrees with quantizing the whole tensor in one call.
    #[test]
    fn chunked_conversion_matches_one_call() {
        let row_len = 256;
        let n_rows = 37; // not a multiple of ROWS_PER_TASK
        let values: Vec<f32> = (0..row_len * n_rows)
            .map(|i| ((i * 7919 % 1000) as f32 - 500.0) / 97.0)
            .collect();
        let f32_bytes: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
        for to in [FormatKind::Q4_0, FormatKind::TQ1_0, FormatKind::Q1_0] {
            let to = format(to);
            let ours = convert("t", &f32_bytes, row_len, format(FormatKind::F32), to).unwrap();
            assert_eq!(ours, to.quantize_row(&values).unwrap(), "{}", to.name);
        }
    }

    /// TQ2_0 → PTQ1_0 keeps ternary values exactly; a code 3 (+2·d, not ternary) is refused,
    /// naming the tensor.
    #[test]
    fn transcoding_into_ptq1_0_keeps_ternary_data_and_refuses_the_rest() {
        let row_len = 512;
        let ternary: Vec<f32> = (0..row_len)
            .map(|i| ((i * 7 % 3) as f32 - 1.0) * 0.25)
            .collect();
        let tq2_0 = format(FormatKind::TQ2_0);
        let ptq1_0 = format(FormatKind::PTQ1_0);
        let src = tq2_0.quantize_row(&ternary).unwrap();
        let out = convert("t", &src, row_len as u64, tq2_0, ptq1_0).unwrap();
        assert_eq!(ptq1_0.dequantize_row(&out).unwrap(), ternary);

        let mut bad = src.clone();
        bad[5] |= 0b11; // value 5 becomes code 3
        let err = convert("t", &bad, row_len as u64, tq2_0, ptq1_0).unwrap_err();
        let text = format!("{err}");
        assert!(matches!(err, RowError::NotExact { .. }), "{text}");
        assert!(
            text.contains("tensor 't'") && text.contains("ternary"),
            "{text}"
        );
    }

    #[test]
    fn ragged_data_is_an_error() {
        let err = convert(
            "t",
            &[0u8; 6],
            2,
            format(FormatKind::F16),
            format(FormatKind::F32),
        )
        .unwrap_err();
        assert!(format!("{err:#}").contains("tensor 't'"), "{err:#}");
    }
}
