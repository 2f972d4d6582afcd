//! Writer round trips: our own files read back equal, and every golden file (written by llama.cpp's
//! gguf writer) is reproduced byte for byte after reading it and writing it again.

mod common;

use common::*;
use oxibonsai_formats::{format, FormatKind};
use oxibonsai_gguf::{Array, GgufError, GgufFile, GgufWriter, Value, DEFAULT_ALIGNMENT};
use oxibonsai_testkit::golden;

fn rewrite(path: &std::path::Path) {
    let original = std::fs::read(path).expect("readable");
    let file = GgufFile::open(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let rewritten = GgufWriter::from_file(&file)
        .expect("a valid file's parts")
        .to_bytes()
        .unwrap();
    assert_eq!(rewritten.len(), original.len(), "{}", path.display());
    if let Some(at) = rewritten.iter().zip(&original).position(|(a, b)| a != b) {
        panic!("{}: first difference at byte {at}", path.display());
    }
}

#[test]
fn every_golden_file_is_rewritten_byte_for_byte() {
    let models = std::fs::read_dir(golden("models")).expect("models folder");
    let mut paths: Vec<_> = models
        .map(|e| e.expect("entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "gguf"))
        .collect();
    assert!(
        paths.len() >= 10,
        "expected the ten golden models, found {}",
        paths.len()
    );
    paths.push(golden("tokenizer/qwen3/qwen3-vocab.gguf"));
    paths.push(golden("tokenizer/smollm2/smollm2-vocab.gguf"));
    for path in paths {
        rewrite(&path);
    }
}

#[test]
fn written_files_read_back_equal() {
    let writer = writer_with(BASE_TENSORS);
    let bytes = writer.to_bytes().unwrap();
    let file = GgufFile::from_bytes(bytes.clone()).expect("valid");
    assert_eq!(file.version(), 3);
    assert_eq!(file.alignment(), 32);
    let read: Vec<(String, Value)> = file
        .metadata()
        .iter()
        .map(|(k, v)| (k.to_owned(), v.clone()))
        .collect();
    assert_eq!(read, base_metadata());
    for (i, (t, &(name, dims, kind))) in file.tensors().iter().zip(BASE_TENSORS).enumerate() {
        assert_eq!(t.name, name);
        assert_eq!(t.dims, dims);
        assert_eq!(t.format.kind, kind);
        assert_eq!(t.type_id, format(kind).type_id);
        assert_eq!(
            file.tensor_data(t),
            filler(t.n_bytes as usize, i as u32),
            "{name}"
        );
        assert_eq!((file.data_offset() + t.offset) % 32, 0);
    }
    assert_eq!(file.tensors().len(), BASE_TENSORS.len());
    // And it is a fixed point.
    assert_eq!(
        GgufWriter::from_file(&file).unwrap().to_bytes().unwrap(),
        bytes
    );
}

#[test]
fn every_value_type_round_trips() {
    let values: Vec<(String, Value)> = vec![
        ("u8".into(), Value::U8(200)),
        ("i8".into(), Value::I8(-100)),
        ("u16".into(), Value::U16(60_000)),
        ("i16".into(), Value::I16(-30_000)),
        ("u32".into(), Value::U32(4_000_000_000)),
        ("i32".into(), Value::I32(-2_000_000_000)),
        ("f32".into(), Value::F32(-0.0)),
        ("bool".into(), Value::Bool(false)),
        ("string".into(), Value::from("héllo ✓")),
        ("empty".into(), Value::from("")),
        ("u64".into(), Value::U64(u64::MAX)),
        ("i64".into(), Value::I64(i64::MIN)),
        ("f64".into(), Value::F64(1e300)),
        ("a.u8".into(), Value::from(vec![1u8, 2, 255])),
        ("a.i8".into(), Value::from(vec![-1i8, 2])),
        ("a.u16".into(), Value::from(vec![1u16])),
        ("a.i16".into(), Value::from(vec![-1i16])),
        ("a.u32".into(), Value::from(vec![7u32, 8])),
        ("a.i32".into(), Value::from(vec![-7i32])),
        ("a.f32".into(), Value::from(vec![1.5f32, f32::INFINITY])),
        ("a.bool".into(), Value::from(vec![true, false, true])),
        (
            "a.string".into(),
            Value::from(vec![String::new(), "ü".into()]),
        ),
        ("a.u64".into(), Value::from(Vec::<u64>::new())),
        ("a.i64".into(), Value::from(vec![i64::MAX])),
        ("a.f64".into(), Value::from(vec![-2.25f64])),
        (
            "a.nested".into(),
            Value::Array(Array::Array(vec![
                Array::Array(vec![Array::U8(vec![9])]),
                Array::Bool(vec![]),
            ])),
        ),
        ("general.alignment".into(), Value::U32(64)),
    ];
    let mut writer = GgufWriter::new();
    for (k, v) in values.clone() {
        writer.add_kv(k, v).unwrap();
    }
    let f = format(FormatKind::Q4_0);
    writer
        .add_tensor("t", &[32, 2, 1, 3], f, vec![7u8; 6 * 18])
        .unwrap();
    writer.add_tensor("u", &[32], f, vec![9u8; 18]).unwrap();
    let bytes = writer.to_bytes().unwrap();
    let file = GgufFile::from_bytes(bytes).expect("valid");
    assert_eq!(file.alignment(), 64);
    let read: Vec<(String, Value)> = file
        .metadata()
        .iter()
        .map(|(k, v)| (k.to_owned(), v.clone()))
        .collect();
    assert_eq!(read, values);
    let t = file.tensor("t").unwrap();
    assert_eq!((t.n_rows(), t.row_len(), t.n_bytes), (6, 32, 108));
    let u = file.tensor("u").unwrap();
    assert_eq!(u.offset, 128, "108 bytes padded to 64");
    assert_eq!(file.tensor_data(u), &[9u8; 18]);
    assert_eq!(file.data_offset() % 64, 0);
    assert_eq!(file.file_size(), file.data_offset() + 128 + 64);
}

#[test]
fn an_empty_writer_writes_a_valid_file() {
    let bytes = GgufWriter::new().to_bytes().unwrap();
    assert_eq!(
        bytes.len() as u64,
        24u64.next_multiple_of(DEFAULT_ALIGNMENT)
    );
    let file = GgufFile::from_bytes(bytes).unwrap();
    assert!(file.metadata().is_empty() && file.tensors().is_empty());
}

#[test]
fn written_legacy_id_42_tensors_read_back_as_legacy() {
    let legacy = format(FormatKind::Q2_0G128Legacy);
    let mut writer = GgufWriter::new();
    writer
        .add_tensor("w", &[256, 128], legacy, vec![1u8; 128 * 2 * 34])
        .unwrap();
    let file = GgufFile::from_bytes(writer.to_bytes().unwrap()).unwrap();
    assert_eq!(
        file.tensor("w").unwrap().format.kind,
        FormatKind::Q2_0G128Legacy
    );
}

#[test]
fn the_writer_refuses_what_the_reader_would_reject() {
    let mut writer = GgufWriter::new();
    writer.add_kv("k", 1u32).unwrap();
    assert!(
        matches!(writer.add_kv("k", 2u32), Err(GgufError::DuplicateKey { key, first: 0, second: 1 }) if key == "k")
    );
    assert!(matches!(
        writer.add_kv("general.alignment", 24u32),
        Err(GgufError::BadAlignment { found: 24 })
    ));
    assert!(matches!(
        writer.add_kv("general.alignment", -32i32),
        Err(GgufError::BadAlignment { found: 0 })
    ));
    assert!(matches!(
        writer.add_kv("general.alignment", "32"),
        Err(GgufError::WrongType {
            expected: "u32",
            found: "string",
            ..
        })
    ));
    let mut deep = Array::U8(vec![]);
    for _ in 0..8 {
        deep = Array::Array(vec![deep]);
    }
    assert!(
        matches!(writer.add_kv("deep", deep), Err(GgufError::NestingTooDeep { key, .. }) if key == "deep")
    );

    let q8 = format(FormatKind::Q8_0);
    assert!(matches!(
        writer.add_tensor("a", &[32, 2], q8, vec![0u8; 67]),
        Err(GgufError::TensorDataLength { tensor, expected: 68, found: 67, .. }) if tensor == "a"
    ));
    assert!(matches!(
        writer.add_tensor("a", &[16, 4], q8, vec![0u8; 68]),
        Err(GgufError::RowNotBlockMultiple {
            row_len: 16,
            block_elems: 32,
            ..
        })
    ));
    assert!(matches!(
        writer.add_tensor("a", &[], q8, vec![]),
        Err(GgufError::BadDimCount { n_dims: 0, .. })
    ));
    assert!(matches!(
        writer.add_tensor("a", &[32, 0], q8, vec![]),
        Err(GgufError::ZeroDim { .. })
    ));
    assert!(matches!(
        writer.add_tensor("a", &[1 << 40, 1 << 40], q8, vec![]),
        Err(GgufError::ElementCountOverflow { .. })
    ));
    writer.add_tensor("a", &[32, 2], q8, vec![0u8; 68]).unwrap();
    assert!(matches!(
        writer.add_tensor("a", &[32], q8, vec![0u8; 34]),
        Err(GgufError::DuplicateTensor {
            first: 0,
            second: 1,
            ..
        })
    ));
    // What was accepted is a valid file.
    let file = GgufFile::from_bytes(writer.to_bytes().unwrap()).unwrap();
    assert_eq!(file.metadata().len(), 1);
    assert_eq!(file.tensors().len(), 1);
}

#[test]
fn write_file_and_open_agree_with_to_bytes() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("base.gguf");
    let writer = writer_with(BASE_TENSORS);
    writer.write_file(&path).unwrap();
    assert_eq!(std::fs::read(&path).unwrap(), writer.to_bytes().unwrap());
    let file = GgufFile::open(&path).unwrap();
    assert_eq!(file.tensors().len(), BASE_TENSORS.len());
    let missing = GgufFile::open(dir.path().join("absent.gguf")).unwrap_err();
    assert!(
        matches!(&missing, GgufError::Io { path, .. } if path.ends_with("absent.gguf")),
        "{missing}"
    );
    let empty = dir.path().join("empty.gguf");
    std::fs::write(&empty, b"").unwrap();
    assert!(matches!(
        GgufFile::open(&empty),
        Err(GgufError::Truncated { at: 0, .. })
    ));
}

#[test]
fn an_absurd_alignment_is_an_io_error_not_a_panic() {
    let mut writer = GgufWriter::new();
    writer.add_kv("general.alignment", 1u64 << 63).unwrap();
    let f32_format = format(FormatKind::F32);
    writer
        .add_tensor("a", &[1], f32_format, vec![0u8; 4])
        .unwrap();
    writer
        .add_tensor("b", &[1], f32_format, vec![0u8; 4])
        .unwrap();
    // Offsets 0 and 2^63, and the next would be 2^64: refused before anything is written.
    let mut sink = Vec::new();
    let error = writer.write_to(&mut sink).unwrap_err();
    assert_eq!(error.kind(), std::io::ErrorKind::InvalidInput);
    assert!(sink.is_empty());
}
