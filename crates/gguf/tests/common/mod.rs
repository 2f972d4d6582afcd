//! A small valid GGUF written by our writer, and a malformed corpus made from it by mutation.
#![allow(dead_code)] // each test binary uses part of this module

use oxibonsai_formats::{format, FormatKind};
use oxibonsai_gguf::{Array, GgufError, GgufWriter, Value};

/// Deterministic filler bytes (the container never decodes tensor data).
pub fn filler(n: usize, seed: u32) -> Vec<u8> {
    let mut state = seed.wrapping_mul(2_654_435_761).wrapping_add(1);
    (0..n)
        .map(|_| {
            state = state.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
            (state >> 24) as u8
        })
        .collect()
}

/// The tensors of the base file: name, dims, format. Sizes (alignment 32):
/// alpha f32 512 B; beta q8_0 102 B (+26 padding); gamma q2_0 72 B (+24) — as legacy it would be
/// 68 B, so its extent of 96 fits both id-42 layouts; delta q2_0 1152 B, legacy 1088 B: fits only
/// q2_0, which decides the file; zeta pq2_0 544 B; omega f32 64 B, last, unpadded end.
pub const BASE_TENSORS: &[(&str, &[u64], FormatKind)] = &[
    ("alpha", &[64, 2], FormatKind::F32),
    ("beta", &[32, 3], FormatKind::Q8_0),
    ("gamma", &[128, 2], FormatKind::Q2_0),
    ("delta", &[64, 64], FormatKind::Q2_0),
    ("zeta", &[128, 16], FormatKind::PQ2_0),
    ("omega", &[16], FormatKind::F32),
];

pub fn base_metadata() -> Vec<(String, Value)> {
    vec![
        ("general.architecture".into(), Value::from("test")),
        ("general.alignment".into(), Value::U32(32)),
        ("test.aaaa".into(), Value::U32(7)),
        ("test.bbbb".into(), Value::U32(8)),
        ("test.flag".into(), Value::Bool(true)),
        (
            "test.tokens".into(),
            Value::from(vec!["a".to_string(), "bc".into(), "def".into()]),
        ),
        (
            "test.nested".into(),
            Value::Array(Array::Array(vec![
                Array::I32(vec![1, -2]),
                Array::String(vec!["x".into()]),
                Array::F64(vec![]),
            ])),
        ),
    ]
}

pub fn writer_with(tensors: &[(&str, &[u64], FormatKind)]) -> GgufWriter<'static> {
    let mut writer = GgufWriter::new();
    for (key, value) in base_metadata() {
        writer.add_kv(key, value).expect("valid key");
    }
    for (i, &(name, dims, kind)) in tensors.iter().enumerate() {
        let f = format(kind);
        let n = f.bytes_for(dims.iter().product()).expect("whole blocks") as usize;
        writer
            .add_tensor(name, dims, f, filler(n, i as u32))
            .expect("valid tensor");
    }
    writer
}

pub fn base_file() -> Vec<u8> {
    writer_with(BASE_TENSORS).to_bytes().expect("in memory")
}

/// The position of the only occurrence of `needle`.
pub fn find(bytes: &[u8], needle: &[u8]) -> usize {
    let hits: Vec<usize> = bytes
        .windows(needle.len())
        .enumerate()
        .filter(|(_, w)| *w == needle)
        .map(|(i, _)| i)
        .collect();
    assert_eq!(
        hits.len(),
        1,
        "{:?} occurs {} times",
        String::from_utf8_lossy(needle),
        hits.len()
    );
    hits[0]
}

fn encoded(s: &str) -> Vec<u8> {
    let mut v = (s.len() as u64).to_le_bytes().to_vec();
    v.extend_from_slice(s.as_bytes());
    v
}

/// Where a key's length prefix starts.
pub fn key_pos(bytes: &[u8], key: &str) -> usize {
    find(bytes, &encoded(key))
}

/// Where a key's value type id is.
pub fn value_type_pos(bytes: &[u8], key: &str) -> usize {
    key_pos(bytes, key) + 8 + key.len()
}

/// Where a key's value starts.
pub fn value_pos(bytes: &[u8], key: &str) -> usize {
    value_type_pos(bytes, key) + 4
}

/// Positions of a tensor info's fields: (name length, n_dims, first dim, type, offset).
pub struct TensorFields {
    pub name: usize,
    pub n_dims: usize,
    pub dims: usize,
    pub type_id: usize,
    pub offset: usize,
}

pub fn tensor_fields(bytes: &[u8], name: &str) -> TensorFields {
    let at = find(bytes, &encoded(name));
    let n_dims_pos = at + 8 + name.len();
    let n_dims = get_u32(bytes, n_dims_pos) as usize;
    let dims = n_dims_pos + 4;
    TensorFields {
        name: at,
        n_dims: n_dims_pos,
        dims,
        type_id: dims + 8 * n_dims,
        offset: dims + 8 * n_dims + 4,
    }
}

pub fn get_u32(bytes: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(bytes[at..at + 4].try_into().unwrap())
}

pub fn get_u64(bytes: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(bytes[at..at + 8].try_into().unwrap())
}

pub fn put_u32(bytes: &mut [u8], at: usize, v: u32) {
    bytes[at..at + 4].copy_from_slice(&v.to_le_bytes());
}

pub fn put_u64(bytes: &mut [u8], at: usize, v: u64) {
    bytes[at..at + 8].copy_from_slice(&v.to_le_bytes());
}

/// A malformed file and the one error it must produce first.
pub struct Case {
    pub name: &'static str,
    pub bytes: Vec<u8>,
    pub expect: Box<dyn Fn(&GgufError) -> bool>,
}

fn case(name: &'static str, bytes: Vec<u8>, expect: impl Fn(&GgufError) -> bool + 'static) -> Case {
    Case {
        name,
        bytes,
        expect: Box::new(expect),
    }
}

/// Applies `mutate` to a copy of the base file.
fn mutated(mutate: impl FnOnce(&mut Vec<u8>)) -> Vec<u8> {
    let mut bytes = base_file();
    mutate(&mut bytes);
    bytes
}

/// A vocabulary-style file with one key whose array nests `levels` deep (hand-encoded: the writer
/// refuses to write one too deep).
pub fn nested_file(levels: u32) -> Vec<u8> {
    let mut b = b"GGUF".to_vec();
    b.extend_from_slice(&3u32.to_le_bytes());
    b.extend_from_slice(&0u64.to_le_bytes());
    b.extend_from_slice(&1u64.to_le_bytes());
    b.extend_from_slice(&encoded("deep"));
    b.extend_from_slice(&9u32.to_le_bytes());
    for _ in 1..levels {
        b.extend_from_slice(&9u32.to_le_bytes());
        b.extend_from_slice(&1u64.to_le_bytes());
    }
    b.extend_from_slice(&0u32.to_le_bytes());
    b.extend_from_slice(&0u64.to_le_bytes());
    b.resize(b.len().next_multiple_of(32), 0);
    b
}

pub fn corpus() -> Vec<Case> {
    use GgufError as E;
    const HUGE: u64 = 1 << 60;
    vec![
        case(
            "bad magic",
            mutated(|b| b[0..4].copy_from_slice(b"GGML")),
            |e| matches!(e, E::BadMagic { found } if found == b"GGML"),
        ),
        case("version 1", mutated(|b| put_u32(b, 4, 1)), |e| {
            matches!(e, E::UnsupportedVersion { found: 1 })
        }),
        case("version 4", mutated(|b| put_u32(b, 4, 4)), |e| {
            matches!(e, E::UnsupportedVersion { found: 4 })
        }),
        case(
            "big-endian version",
            mutated(|b| put_u32(b, 4, 3u32.swap_bytes())),
            |e| matches!(e, E::UnsupportedVersion { found: 0x0300_0000 }),
        ),
        case("tensor count 2^60", mutated(|b| put_u64(b, 8, HUGE)), |e| {
            matches!(e, E::TensorCountTooLarge { count: HUGE, .. })
        }),
        case("kv count 2^60", mutated(|b| put_u64(b, 16, HUGE)), |e| {
            matches!(e, E::KvCountTooLarge { count: HUGE, .. })
        }),
        case(
            "array count 2^60",
            mutated(|b| {
                let at = value_pos(b, "test.tokens") + 4;
                put_u64(b, at, HUGE)
            }),
            |e| matches!(e, E::ArrayCountTooLarge { key, count: HUGE, .. } if key == "test.tokens"),
        ),
        case(
            "nested array count 2^60",
            mutated(|b| {
                // The first inner array's count: outer (type, count), inner type.
                let at = value_pos(b, "test.nested") + 4 + 8 + 4;
                put_u64(b, at, HUGE)
            }),
            |e| matches!(e, E::ArrayCountTooLarge { key, count: HUGE, .. } if key == "test.nested"),
        ),
        case(
            "string value longer than the file",
            mutated(|b| {
                let at = value_pos(b, "general.architecture");
                put_u64(b, at, 1 << 40)
            }),
            |e| {
                matches!(e, E::StringTooLong { what, len, .. }
                    if what.contains("'general.architecture'") && *len == 1 << 40)
            },
        ),
        case(
            "key length longer than the file",
            mutated(|b| {
                let at = key_pos(b, "test.aaaa");
                put_u64(b, at, HUGE)
            }),
            |e| matches!(e, E::StringTooLong { what, len: HUGE, .. } if what == "key #2"),
        ),
        case(
            "tensor name longer than the file",
            mutated(|b| {
                let at = tensor_fields(b, "gamma").name;
                put_u64(b, at, HUGE)
            }),
            |e| matches!(e, E::StringTooLong { what, len: HUGE, .. } if what == "the name of tensor #2"),
        ),
        case(
            "invalid UTF-8 in a key",
            mutated(|b| {
                let at = key_pos(b, "test.bbbb") + 8;
                b[at + 1] = 0xff;
            }),
            |e| matches!(e, E::InvalidKeyUtf8 { index: 3, .. }),
        ),
        case(
            "invalid UTF-8 in a string value",
            mutated(|b| {
                let at = value_pos(b, "general.architecture") + 8;
                b[at] = 0xc3; // a lead byte followed by ASCII
            }),
            |e| matches!(e, E::InvalidStringUtf8 { key, .. } if key == "general.architecture"),
        ),
        case(
            "invalid UTF-8 in a string array",
            mutated(|b| {
                // Third element "def": after type, count, "a" and "bc".
                let at = value_pos(b, "test.tokens") + 4 + 8 + 9 + 10 + 8;
                assert_eq!(&b[at..at + 3], b"def");
                b[at + 2] = 0x80;
            }),
            |e| matches!(e, E::InvalidStringUtf8 { key, .. } if key == "test.tokens"),
        ),
        case(
            "invalid UTF-8 in a tensor name",
            mutated(|b| {
                let at = tensor_fields(b, "delta").name + 8;
                b[at] = 0xfe;
            }),
            |e| matches!(e, E::InvalidTensorNameUtf8 { index: 3, .. }),
        ),
        case(
            "unknown value type",
            mutated(|b| {
                let at = value_type_pos(b, "test.bbbb");
                put_u32(b, at, 13)
            }),
            |e| matches!(e, E::UnknownValueType { key, type_id: 13, .. } if key == "test.bbbb"),
        ),
        case(
            "unknown array element type",
            mutated(|b| {
                let at = value_pos(b, "test.tokens");
                put_u32(b, at, 77)
            }),
            |e| matches!(e, E::UnknownValueType { key, type_id: 77, .. } if key == "test.tokens"),
        ),
        case(
            "bool byte 2",
            mutated(|b| {
                let at = value_pos(b, "test.flag");
                b[at] = 2;
            }),
            |e| matches!(e, E::InvalidBool { key, found: 2, .. } if key == "test.flag"),
        ),
        case(
            "arrays nested too deep",
            nested_file(9),
            |e| matches!(e, E::NestingTooDeep { key, .. } if key == "deep"),
        ),
        case(
            "duplicate key",
            mutated(|b| {
                let at = key_pos(b, "test.bbbb") + 8;
                b[at..at + 9].copy_from_slice(b"test.aaaa");
            }),
            |e| matches!(e, E::DuplicateKey { key, first: 2, second: 3 } if key == "test.aaaa"),
        ),
        case(
            "non-power-of-two alignment",
            mutated(|b| {
                let at = value_pos(b, "general.alignment");
                put_u32(b, at, 48)
            }),
            |e| matches!(e, E::BadAlignment { found: 48 }),
        ),
        case(
            "zero alignment",
            mutated(|b| {
                let at = value_pos(b, "general.alignment");
                put_u32(b, at, 0)
            }),
            |e| matches!(e, E::BadAlignment { found: 0 }),
        ),
        case(
            "alignment of a float type",
            mutated(|b| {
                let at = value_type_pos(b, "general.alignment");
                put_u32(b, at, 6); // f32 of the same width
            }),
            |e| matches!(e, E::WrongType { key, expected: "u32", found: "f32" } if key == "general.alignment"),
        ),
        case(
            "n_dims 0",
            mutated(|b| {
                let at = tensor_fields(b, "beta").n_dims;
                put_u32(b, at, 0)
            }),
            |e| matches!(e, E::BadDimCount { tensor, n_dims: 0 } if tensor == "beta"),
        ),
        case(
            "n_dims 5",
            mutated(|b| {
                let at = tensor_fields(b, "beta").n_dims;
                put_u32(b, at, 5)
            }),
            |e| matches!(e, E::BadDimCount { tensor, n_dims: 5 } if tensor == "beta"),
        ),
        case(
            "duplicate tensor name",
            mutated(|b| {
                let at = tensor_fields(b, "alpha").name + 8;
                b[at..at + 5].copy_from_slice(b"gamma");
            }),
            |e| matches!(e, E::DuplicateTensor { tensor, first: 0, second: 2 } if tensor == "gamma"),
        ),
        case(
            "unknown tensor type",
            mutated(|b| {
                let at = tensor_fields(b, "alpha").type_id;
                put_u32(b, at, 99)
            }),
            |e| matches!(e, E::UnknownTensorType { tensor, type_id: 99 } if tensor == "alpha"),
        ),
        case(
            "zero dimension",
            mutated(|b| {
                let at = tensor_fields(b, "alpha").dims + 8;
                put_u64(b, at, 0)
            }),
            |e| matches!(e, E::ZeroDim { tensor, .. } if tensor == "alpha"),
        ),
        case(
            "element count overflow",
            mutated(|b| {
                let at = tensor_fields(b, "alpha").dims + 8;
                put_u64(b, at, HUGE)
            }),
            |e| matches!(e, E::ElementCountOverflow { tensor, .. } if tensor == "alpha"),
        ),
        case(
            "element count beyond i64",
            mutated(|b| {
                let at = tensor_fields(b, "omega").dims;
                put_u64(b, at, 1 << 63)
            }),
            |e| matches!(e, E::ElementCountOverflow { tensor, .. } if tensor == "omega"),
        ),
        case(
            "row length not a multiple of the block",
            mutated(|b| {
                let at = tensor_fields(b, "beta").dims;
                put_u64(b, at, 16);
                put_u64(b, at + 8, 6);
            }),
            |e| {
                matches!(e, E::RowNotBlockMultiple { tensor, format: "q8_0", row_len: 16, block_elems: 32 }
                    if tensor == "beta")
            },
        ),
        case(
            "misaligned tensor offset",
            mutated(|b| {
                let at = tensor_fields(b, "beta").offset;
                let offset = get_u64(b, at);
                put_u64(b, at, offset + 4)
            }),
            |e| matches!(e, E::MisalignedTensor { tensor, alignment: 32, .. } if tensor == "beta"),
        ),
        case(
            "offset past the end",
            mutated(|b| {
                let at = tensor_fields(b, "omega").offset;
                put_u64(b, at, 1 << 20)
            }),
            |e| matches!(e, E::TensorOutOfBounds { tensor, offset: 0x10_0000, .. } if tensor == "omega"),
        ),
        case(
            "last tensor running past the end",
            mutated(|b| {
                let at = tensor_fields(b, "omega").dims;
                put_u64(b, at, 24)
            }),
            |e| matches!(e, E::TensorOutOfBounds { tensor, .. } if tensor == "omega"),
        ),
        case(
            "overlapping tensors",
            mutated(|b| {
                let at = tensor_fields(b, "beta").offset;
                put_u64(b, at, 256)
            }),
            |e| {
                matches!(e, E::TensorsOverlap { first, second, second_offset: 256, .. }
                    if first == "alpha" && second == "beta")
            },
        ),
        case(
            "shape smaller than the data",
            mutated(|b| {
                let at = tensor_fields(b, "alpha").dims + 8;
                put_u64(b, at, 1)
            }),
            |e| {
                matches!(e, E::SizeMismatch { tensor, n_bytes: 256, extent: 512, next, .. }
                    if tensor == "alpha" && next == "beta")
            },
        ),
        case(
            "id-42 tensor fitting neither layout",
            mutated(|b| {
                let at = tensor_fields(b, "delta").dims + 8;
                put_u64(b, at, 65)
            }),
            |e| {
                matches!(e, E::Id42FitsNeither { tensor, extent: 1152, q2_0_bytes: Some(1170), legacy_bytes: None }
                    if tensor == "delta")
            },
        ),
        case(
            "id-42 tensors disagreeing",
            mutated(|b| {
                let at = tensor_fields(b, "zeta").type_id;
                put_u32(b, at, 42)
            }),
            |e| {
                matches!(e, E::Id42Disagree { q2_0_tensor, legacy_tensor }
                    if q2_0_tensor == "delta" && legacy_tensor == "zeta")
            },
        ),
        case(
            "no id-42 tensor decides",
            writer_with(&BASE_TENSORS[..3]).to_bytes().unwrap(),
            |e| matches!(e, E::Id42Undecided { tensors } if tensors == &["gamma".to_string()]),
        ),
    ]
}
