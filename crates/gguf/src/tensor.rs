//! Tensor infos: resolving each type id to a registry row, and checking every tensor's shape and
//! place in the data section.
//!
//! Decisions:
//! - A zero dimension is rejected. ggml accepts `ne == 0`, but no model tensor is empty, and an empty
//!   tensor has no extent to tell layouts apart by.
//! - Element counts must fit in `i64` (ggml's `ne` type), and byte sizes in `u64`.
//! - Tensors must be packed as ggml writes them: between two neighbours (in offset order) there may be
//!   alignment padding, never more. A larger gap means the shape disagrees with the data
//!   ([`GgufError::SizeMismatch`]). Bytes after the last tensor are allowed, as in llama.cpp.
//! - Type id 42 is two layouts (Q2_0 group 64, 18-byte blocks; PrismML's legacy group 128, 34-byte
//!   blocks), decided once per file from the tensors whose extent (the gap to the next tensor, or
//!   the end of the data section for the last) fits exactly one of them. `general.file_type` plays
//!   no part: it is never trusted.

use oxibonsai_formats::{formats_with_type_id, Format, FormatKind};

use crate::error::GgufError;
use crate::header::RawTensor;

/// One tensor of a validated file.
#[derive(Clone, Debug)]
pub struct TensorInfo {
    pub name: String,
    /// ne0 first, as in the file: `dims[0]` is the row length.
    pub dims: Vec<u64>,
    pub type_id: u32,
    /// The layout, with id 42 resolved for this file.
    pub format: &'static Format,
    /// Relative to the data section.
    pub offset: u64,
    /// Exactly the bytes of the tensor's data, without padding.
    pub n_bytes: u64,
}

impl PartialEq for TensorInfo {
    fn eq(&self, other: &TensorInfo) -> bool {
        // Registry rows are unique per kind; `Format` itself holds function pointers.
        self.name == other.name
            && self.dims == other.dims
            && self.type_id == other.type_id
            && self.format.kind == other.format.kind
            && self.offset == other.offset
            && self.n_bytes == other.n_bytes
    }
}

impl TensorInfo {
    pub fn n_elements(&self) -> u64 {
        self.dims.iter().product()
    }

    /// Values per row (`dims[0]`).
    pub fn row_len(&self) -> u64 {
        self.dims[0]
    }

    /// Rows: the product of every dimension after the first.
    pub fn n_rows(&self) -> u64 {
        self.dims[1..].iter().product()
    }

    /// Bytes of one row.
    pub fn row_bytes(&self) -> u64 {
        self.row_len() / self.format.block_elems as u64 * self.format.block_bytes as u64
    }
}

/// A tensor's size as far as its own info tells.
#[derive(Clone, Copy)]
enum Sizing {
    /// One layout, this many bytes.
    Known(&'static Format, u64),
    /// Type id 42: the byte size under each layout the row length allows.
    Id42 {
        q2_0: Option<(&'static Format, u64)>,
        legacy: Option<(&'static Format, u64)>,
    },
    /// Already reported as wrong.
    Invalid,
}

/// Checks every tensor; on success returns them in file order and the indices sorted by name.
/// Every problem is collected: first each tensor's own (file order), then the layout's.
pub(crate) fn resolve(
    raw: Vec<RawTensor>,
    alignment: u64,
    data_size: u64,
) -> Result<(Vec<TensorInfo>, Vec<usize>), Vec<GgufError>> {
    let mut errors = Vec::new();
    let by_name = sorted_by_name(&raw, &mut errors);

    let mut sizing: Vec<Sizing> = raw.iter().map(|t| own_sizing(t, &mut errors)).collect();
    for t in &raw {
        if !t.offset.is_multiple_of(alignment) {
            errors.push(GgufError::MisalignedTensor {
                tensor: t.name.clone(),
                offset: t.offset,
                alignment,
            });
        }
    }

    let (mut layout_errors, id42_fits) = layout(&raw, &mut sizing, alignment, data_size);
    errors.append(&mut layout_errors);
    if let Some(legacy) = decide_id42(&raw, &id42_fits, &mut errors) {
        settle_id42(&mut sizing, &id42_fits, legacy);
    }

    if !errors.is_empty() {
        return Err(errors);
    }
    let tensors = raw
        .into_iter()
        .zip(sizing)
        .map(|(t, sizing)| match sizing {
            Sizing::Known(format, n_bytes) => TensorInfo {
                name: t.name,
                dims: t.dims,
                type_id: t.type_id,
                format,
                offset: t.offset,
                n_bytes,
            },
            _ => unreachable!("every tensor is sized when no error was found"),
        })
        .collect();
    Ok((tensors, by_name))
}

/// The tensors' indices sorted by name; a name given twice is reported.
fn sorted_by_name(raw: &[RawTensor], errors: &mut Vec<GgufError>) -> Vec<usize> {
    let mut by_name: Vec<usize> = (0..raw.len()).collect();
    by_name.sort_by(|&a, &b| raw[a].name.cmp(&raw[b].name));
    let mut duplicates = Vec::new();
    for pair in by_name.windows(2) {
        if raw[pair[0]].name == raw[pair[1]].name {
            duplicates.push(GgufError::DuplicateTensor {
                tensor: raw[pair[1]].name.clone(),
                first: pair[0],
                second: pair[1],
            });
        }
    }
    errors.append(&mut duplicates);
    by_name
}

/// Places each sized tensor in the data section against its neighbour (by offset): the layout's
/// problems, most telling first, and for each id-42 tensor that fits, which layouts fit its
/// extent (index, q2_0, legacy). A tensor found to have no place is marked invalid in `sizing`.
fn layout(
    raw: &[RawTensor],
    sizing: &mut [Sizing],
    alignment: u64,
    data_size: u64,
) -> (Vec<GgufError>, Vec<(usize, bool, bool)>) {
    // Tensors starting at or past the end of the data section have no place at all: report them
    // alone, so that their neighbours are not blamed for the gap they leave behind.
    let mut layout_errors = Vec::new();
    let mut by_offset = Vec::with_capacity(raw.len());
    for (i, t) in raw.iter().enumerate() {
        if t.offset < data_size {
            by_offset.push(i);
            continue;
        }
        let n_bytes = match sizing[i] {
            Sizing::Invalid => continue,
            Sizing::Known(_, n) => n,
            Sizing::Id42 { q2_0, legacy } => q2_0.or(legacy).map_or(0, |(_, n)| n),
        };
        layout_errors.push(GgufError::TensorOutOfBounds {
            tensor: t.name.clone(),
            offset: t.offset,
            end: t.offset.saturating_add(n_bytes),
            data_size,
        });
        sizing[i] = Sizing::Invalid;
    }
    by_offset.sort_by_key(|&i| (raw[i].offset, i));
    // For id-42 tensors: which layouts fit their extent (q2_0, legacy).
    let mut id42_fits: Vec<(usize, bool, bool)> = Vec::new();
    for (k, &i) in by_offset.iter().enumerate() {
        let t = &raw[i];
        let next = by_offset.get(k + 1).map(|&j| &raw[j]);
        match sizing[i] {
            Sizing::Invalid => {}
            Sizing::Known(format, n_bytes) => {
                if let Some(error) = place(t, format, n_bytes, next, alignment, data_size) {
                    layout_errors.push(error);
                }
            }
            Sizing::Id42 { q2_0, legacy } => {
                let fits = |candidate: Option<(&'static Format, u64)>| {
                    candidate.is_some_and(|(format, n_bytes)| {
                        place(t, format, n_bytes, next, alignment, data_size).is_none()
                    })
                };
                let (fits_q2_0, fits_legacy) = (fits(q2_0), fits(legacy));
                if fits_q2_0 || fits_legacy {
                    id42_fits.push((i, fits_q2_0, fits_legacy));
                } else {
                    layout_errors.push(GgufError::Id42FitsNeither {
                        tensor: t.name.clone(),
                        extent: extent(t, next, data_size),
                        q2_0_bytes: q2_0.map(|(_, n)| n),
                        legacy_bytes: legacy.map(|(_, n)| n),
                    });
                }
            }
        }
    }
    // The most telling problem first: a tensor outside the file explains more than a gap.
    layout_errors.sort_by_key(|e| match e {
        GgufError::TensorOutOfBounds { .. } => 0,
        GgufError::TensorsOverlap { .. } => 1,
        GgufError::SizeMismatch { .. } => 2,
        _ => 3,
    });
    (layout_errors, id42_fits)
}

/// Sizes the id-42 tensors that fit by the layout the file was found to use.
fn settle_id42(sizing: &mut [Sizing], id42_fits: &[(usize, bool, bool)], legacy: bool) {
    let kind = if legacy {
        FormatKind::Q2_0G128Legacy
    } else {
        FormatKind::Q2_0
    };
    for &(i, _, _) in id42_fits {
        if let Sizing::Id42 { q2_0, legacy } = sizing[i] {
            if let Some((format, n_bytes)) = [q2_0, legacy]
                .into_iter()
                .flatten()
                .find(|(f, _)| f.kind == kind)
            {
                sizing[i] = Sizing::Known(format, n_bytes);
            }
        }
    }
}

/// Type, dimensions, element count and row length: what a tensor info says about itself.
fn own_sizing(t: &RawTensor, errors: &mut Vec<GgufError>) -> Sizing {
    let formats: Vec<&'static Format> = formats_with_type_id(t.type_id).collect();
    if formats.is_empty() {
        errors.push(GgufError::UnknownTensorType {
            tensor: t.name.clone(),
            type_id: t.type_id,
        });
        return Sizing::Invalid;
    }
    if t.dims.contains(&0) {
        errors.push(GgufError::ZeroDim {
            tensor: t.name.clone(),
            dims: t.dims.clone(),
        });
        return Sizing::Invalid;
    }
    let overflow = || GgufError::ElementCountOverflow {
        tensor: t.name.clone(),
        dims: t.dims.clone(),
    };
    let n_elements = t
        .dims
        .iter()
        .try_fold(1u64, |acc, &d| acc.checked_mul(d))
        .filter(|&n| n <= i64::MAX as u64);
    let Some(n_elements) = n_elements else {
        errors.push(overflow());
        return Sizing::Invalid;
    };
    let row_len = t.dims[0];
    let sized = |format: &'static Format| {
        row_len
            .is_multiple_of(format.block_elems as u64)
            .then(|| format.bytes_for(n_elements).map(|n| (format, n)))
    };
    if let [format] = formats[..] {
        return match sized(format) {
            Some(Some((format, n_bytes))) => Sizing::Known(format, n_bytes),
            Some(None) => {
                errors.push(overflow());
                Sizing::Invalid
            }
            None => {
                errors.push(not_block_multiple(t, format));
                Sizing::Invalid
            }
        };
    }
    let of_kind = |kind: FormatKind| {
        formats
            .iter()
            .find(|f| f.kind == kind)
            .and_then(|&f| sized(f).flatten())
    };
    let (q2_0, legacy) = (
        of_kind(FormatKind::Q2_0),
        of_kind(FormatKind::Q2_0G128Legacy),
    );
    if q2_0.is_none() && legacy.is_none() {
        // Report the smallest block: a row that is not even a multiple of that fits no layout.
        let smallest = formats
            .iter()
            .min_by_key(|f| f.block_elems)
            .expect("two formats");
        errors.push(not_block_multiple(t, smallest));
        return Sizing::Invalid;
    }
    Sizing::Id42 { q2_0, legacy }
}

fn not_block_multiple(t: &RawTensor, format: &'static Format) -> GgufError {
    GgufError::RowNotBlockMultiple {
        tensor: t.name.clone(),
        format: format.name,
        row_len: t.dims[0],
        block_elems: format.block_elems as u64,
    }
}

/// Bytes from the tensor's offset to the next tensor's (or to the end of the data section).
fn extent(t: &RawTensor, next: Option<&RawTensor>, data_size: u64) -> u64 {
    match next {
        Some(next) => next.offset - t.offset,
        None => data_size.saturating_sub(t.offset),
    }
}

/// Whether `n_bytes` at the tensor's offset fit in the data section, before the next tensor, and
/// leave no more than alignment padding before it. `None` when they do.
fn place(
    t: &RawTensor,
    format: &'static Format,
    n_bytes: u64,
    next: Option<&RawTensor>,
    alignment: u64,
    data_size: u64,
) -> Option<GgufError> {
    let end = t
        .offset
        .checked_add(n_bytes)
        .filter(|&end| end <= data_size);
    let Some(end) = end else {
        return Some(GgufError::TensorOutOfBounds {
            tensor: t.name.clone(),
            offset: t.offset,
            end: t.offset.saturating_add(n_bytes),
            data_size,
        });
    };
    let next = next?;
    if end > next.offset {
        return Some(GgufError::TensorsOverlap {
            first: t.name.clone(),
            first_offset: t.offset,
            first_end: end,
            second: next.name.clone(),
            second_offset: next.offset,
        });
    }
    // `end` <= data_size, so rounding up to a power of two cannot overflow unless the alignment is
    // absurd; then any gap counts as padding.
    let padded_end = end.checked_next_multiple_of(alignment).unwrap_or(u64::MAX);
    if next.offset > padded_end {
        return Some(GgufError::SizeMismatch {
            tensor: t.name.clone(),
            dims: t.dims.clone(),
            format: format.name,
            n_bytes,
            extent: next.offset - t.offset,
            next: next.name.clone(),
        });
    }
    None
}

/// The id-42 layout of the file (`Some(true)` = legacy), or `None` when there is no id-42 tensor
/// left to decide or the file cannot be decided (then an error is pushed).
fn decide_id42(
    raw: &[RawTensor],
    fits: &[(usize, bool, bool)],
    errors: &mut Vec<GgufError>,
) -> Option<bool> {
    if fits.is_empty() {
        return None;
    }
    let only_q2_0 = fits.iter().find(|&&(_, q, l)| q && !l);
    let only_legacy = fits.iter().find(|&&(_, q, l)| l && !q);
    match (only_q2_0, only_legacy) {
        (Some(&(q, _, _)), Some(&(l, _, _))) => {
            errors.push(GgufError::Id42Disagree {
                q2_0_tensor: raw[q].name.clone(),
                legacy_tensor: raw[l].name.clone(),
            });
            None
        }
        (Some(_), None) => Some(false),
        (None, Some(_)) => Some(true),
        (None, None) => {
            errors.push(GgufError::Id42Undecided {
                tensors: fits.iter().map(|&(i, _, _)| raw[i].name.clone()).collect(),
            });
            None
        }
    }
}
