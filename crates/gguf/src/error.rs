//! Every way a GGUF file can be wrong, each naming the key / tensor / field and expected vs found.

use std::path::PathBuf;

/// An error reading, validating or writing a GGUF file.
///
/// Byte positions (`at`) are absolute offsets in the file. Tensor offsets are relative to the data
/// section, as in the file.
#[derive(thiserror::Error, Debug)]
#[non_exhaustive]
pub enum GgufError {
    /// The file could not be opened or mapped. The message leaves the path to the caller, which
    /// names the file as it does for every other error here (`cannot open model 'X': …`), and
    /// shows the I/O error itself rather than returning it as `source()`, so it is said once.
    #[error("cannot read the file: {error}")]
    Io {
        path: PathBuf,
        error: std::io::Error,
    },

    // ---- structural: parsing stops at the first of these ----
    #[error("truncated: reading {what} at byte {at} needs {needed} bytes but the file has {available} left")]
    Truncated {
        what: String,
        at: u64,
        needed: u64,
        available: u64,
    },
    #[error(
        "not a GGUF file: magic is {found:02x?} (\"{}\"), expected \"GGUF\"",
        String::from_utf8_lossy(found)
    )]
    BadMagic { found: [u8; 4] },
    #[error("unsupported GGUF version {found}: only versions 2 and 3 are read{}", version_hint(*found))]
    UnsupportedVersion { found: u32 },
    #[error("key/value count {count} cannot fit in the file: at most {max} pairs fit in the bytes left (the count is corrupt or the file truncated)")]
    KvCountTooLarge { count: u64, max: u64 },
    #[error("tensor count {count} cannot fit in the file: at most {max} tensor infos fit in the bytes left (the count is corrupt or the file truncated)")]
    TensorCountTooLarge { count: u64, max: u64 },
    #[error("array of key '{key}' claims {count} elements but at most {max} fit in the bytes left (the count is corrupt or the file truncated)")]
    ArrayCountTooLarge { key: String, count: u64, max: u64 },
    #[error("{what} at byte {at} claims a length of {len} bytes but only {available} are left (the length is corrupt or the file truncated)")]
    StringTooLong {
        what: String,
        at: u64,
        len: u64,
        available: u64,
    },
    #[error("key #{index} at byte {at} is not valid UTF-8")]
    InvalidKeyUtf8 { index: u64, at: u64 },
    #[error("a string value of key '{key}' at byte {at} is not valid UTF-8")]
    InvalidStringUtf8 { key: String, at: u64 },
    #[error("the name of tensor #{index} at byte {at} is not valid UTF-8")]
    InvalidTensorNameUtf8 { index: u64, at: u64 },
    #[error("key '{key}' has unknown value type id {type_id} at byte {at} (known: 0..=12)")]
    UnknownValueType { key: String, type_id: u32, at: u64 },
    #[error("key '{key}' nests arrays deeper than {max_depth} levels at byte {at}")]
    NestingTooDeep {
        key: String,
        max_depth: u32,
        at: u64,
    },
    #[error("key '{key}' holds bool byte {found} at byte {at}: expected 0 or 1")]
    InvalidBool { key: String, found: u8, at: u64 },
    #[error("tensor '{tensor}' has {n_dims} dimensions: expected 1 to 4")]
    BadDimCount { tensor: String, n_dims: u32 },
    #[error("general.alignment is {found}: expected a non-zero power of two")]
    BadAlignment { found: u64 },

    // ---- metadata ----
    #[error("duplicate key '{key}' (keys #{first} and #{second})")]
    DuplicateKey {
        key: String,
        first: usize,
        second: usize,
    },
    #[error("missing key '{key}'")]
    MissingKey { key: String },
    #[error("key '{key}' is {found}, expected {expected}")]
    WrongType {
        key: String,
        expected: &'static str,
        found: &'static str,
    },
    #[error("key '{key}' holds {found}, which does not fit in {expected}")]
    ValueOutOfRange {
        key: String,
        expected: &'static str,
        found: String,
    },

    // ---- tensors: every one of these is collected by `validate_bytes` ----
    #[error("duplicate tensor name '{tensor}' (tensors #{first} and #{second})")]
    DuplicateTensor {
        tensor: String,
        first: usize,
        second: usize,
    },
    #[error("tensor '{tensor}' has unknown type id {type_id}")]
    UnknownTensorType { tensor: String, type_id: u32 },
    #[error(
        "tensor '{tensor}' has a zero dimension in {dims:?}: every dimension must be at least 1"
    )]
    ZeroDim { tensor: String, dims: Vec<u64> },
    #[error("tensor '{tensor}': the element count of dims {dims:?} (or its byte size) overflows")]
    ElementCountOverflow { tensor: String, dims: Vec<u64> },
    #[error("tensor '{tensor}' ({format}) has rows of {row_len} values: expected a multiple of the block size {block_elems}")]
    RowNotBlockMultiple {
        tensor: String,
        format: &'static str,
        row_len: u64,
        block_elems: u64,
    },
    #[error("tensor '{tensor}' starts at data offset {offset}, which is not a multiple of the alignment {alignment}")]
    MisalignedTensor {
        tensor: String,
        offset: u64,
        alignment: u64,
    },
    #[error("tensor '{tensor}' spans data bytes {offset}..{end} but the data section holds only {data_size} bytes")]
    TensorOutOfBounds {
        tensor: String,
        offset: u64,
        end: u64,
        data_size: u64,
    },
    #[error("tensors '{first}' (data bytes {first_offset}..{first_end}) and '{second}' (starting at {second_offset}) overlap")]
    TensorsOverlap {
        first: String,
        first_offset: u64,
        first_end: u64,
        second: String,
        second_offset: u64,
    },
    #[error("tensor '{tensor}': its dims {dims:?} as {format} need {n_bytes} bytes, but '{next}' starts {extent} bytes after it (more than alignment padding): the shape does not match the data")]
    SizeMismatch {
        tensor: String,
        dims: Vec<u64>,
        format: &'static str,
        n_bytes: u64,
        extent: u64,
        next: String,
    },
    #[error("tensor '{tensor}' (type id 42) has a data extent of {extent} bytes, which fits neither q2_0 ({}) nor q2_0_g128_legacy ({})", layout_size(*q2_0_bytes), layout_size(*legacy_bytes))]
    Id42FitsNeither {
        tensor: String,
        extent: u64,
        q2_0_bytes: Option<u64>,
        legacy_bytes: Option<u64>,
    },
    #[error("type id 42 tensors disagree on the layout: '{q2_0_tensor}' fits only q2_0 (group 64) while '{legacy_tensor}' fits only q2_0_g128_legacy")]
    Id42Disagree {
        q2_0_tensor: String,
        legacy_tensor: String,
    },
    #[error(
        "no type id 42 tensor's extent tells q2_0 (group 64) from q2_0_g128_legacy: {} fit both",
        some_names(tensors)
    )]
    Id42Undecided { tensors: Vec<String> },

    // ---- writer ----
    #[error(
        "tensor '{tensor}' gets {found} bytes of data but its dims as {format} need {expected}"
    )]
    TensorDataLength {
        tensor: String,
        format: &'static str,
        expected: u64,
        found: u64,
    },
}

fn version_hint(found: u32) -> &'static str {
    if found == 1 {
        " (version 1 is obsolete: re-convert the model with a current llama.cpp)"
    } else if found != 0 && found & 0xffff == 0 {
        " (this looks like a big-endian file; only little-endian files are read)"
    } else {
        ""
    }
}

fn layout_size(n_bytes: Option<u64>) -> String {
    match n_bytes {
        Some(n) => format!("{n} bytes"),
        None => "its rows are not whole blocks".to_owned(),
    }
}

/// A few names, then how many there are in all: enough to find them, short enough to read.
fn some_names(names: &[String]) -> String {
    const SHOWN: usize = 4;
    let quoted: Vec<String> = names.iter().take(SHOWN).map(|n| format!("'{n}'")).collect();
    if names.len() > SHOWN {
        format!("{}, … ({} tensors)", quoted.join(", "), names.len())
    } else {
        quoted.join(", ")
    }
}
