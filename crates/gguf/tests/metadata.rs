//! Typed getters: conversions that are safe succeed; wrong types, out-of-range values and missing
//! keys give errors naming the key and what was expected vs found.

use std::borrow::Cow;

use oxibonsai_gguf::{Array, GgufError, Metadata, Value};

fn metadata() -> Metadata {
    Metadata::new(vec![
        ("u8".into(), Value::U8(7)),
        ("i64".into(), Value::I64(151_643)),
        ("neg".into(), Value::I32(-1)),
        ("big".into(), Value::U64(1 << 40)),
        ("f32".into(), Value::F32(1e-6)),
        ("f64".into(), Value::F64(1e6)),
        ("f64.huge".into(), Value::F64(1e300)),
        ("flag".into(), Value::Bool(true)),
        ("name".into(), Value::from("qwen3")),
        (
            "tokens".into(),
            Value::from(vec!["a".to_string(), "b".into()]),
        ),
        ("types".into(), Value::from(vec![1i32, 3, 4])),
        ("types.u8".into(), Value::from(vec![1u8, 3])),
        ("types.u32".into(), Value::from(vec![1u32, u32::MAX])),
        ("scales".into(), Value::from(vec![0.5f32])),
        ("scales.f64".into(), Value::from(vec![0.25f64])),
        ("nested".into(), Value::Array(Array::Array(vec![]))),
    ])
    .expect("distinct keys")
}

fn wrong_type(
    result: Result<impl std::fmt::Debug, GgufError>,
    key: &str,
    expected: &str,
    found: &str,
) {
    match result {
        Err(GgufError::WrongType {
            key: k,
            expected: e,
            found: f,
        }) => {
            assert_eq!((k.as_str(), e, f), (key, expected, found));
        }
        other => panic!("{key}: expected WrongType, got {other:?}"),
    }
}

fn out_of_range(result: Result<impl std::fmt::Debug, GgufError>, key: &str, found: &str) {
    match result {
        Err(GgufError::ValueOutOfRange {
            key: k, found: f, ..
        }) => assert_eq!((k.as_str(), f.as_str()), (key, found)),
        other => panic!("{key}: expected ValueOutOfRange, got {other:?}"),
    }
}

#[test]
fn integers_convert_when_they_fit() {
    let md = metadata();
    assert_eq!(md.get_u32("u8").unwrap(), 7);
    assert_eq!(md.get_u32("i64").unwrap(), 151_643);
    assert_eq!(md.get_u64("big").unwrap(), 1 << 40);
    assert_eq!(md.get_i64("neg").unwrap(), -1);
    assert_eq!(md.get_i32("i64").unwrap(), 151_643);
    out_of_range(md.get_u32("neg"), "neg", "-1");
    out_of_range(md.get_u32("big"), "big", "1099511627776");
    out_of_range(md.get_u64("neg"), "neg", "-1");
    wrong_type(md.get_u32("name"), "name", "u32", "string");
    wrong_type(md.get_u32("f32"), "f32", "u32", "f32");
    wrong_type(md.get_i64("tokens"), "tokens", "i64", "array<string>");
}

#[test]
fn floats_bools_and_strings() {
    let md = metadata();
    assert_eq!(md.get_f32("f32").unwrap(), 1e-6);
    assert_eq!(md.get_f32("f64").unwrap(), 1e6);
    assert_eq!(md.get_f64("f32").unwrap(), f64::from(1e-6f32));
    out_of_range(md.get_f32("f64.huge"), "f64.huge", "1e300");
    wrong_type(md.get_f32("u8"), "u8", "f32", "u8");
    assert!(md.get_bool("flag").unwrap());
    wrong_type(md.get_bool("u8"), "u8", "bool", "u8");
    assert_eq!(md.get_str("name").unwrap(), "qwen3");
    wrong_type(md.get_str("flag"), "flag", "string", "bool");
}

#[test]
fn arrays() {
    let md = metadata();
    assert_eq!(md.get_str_array("tokens").unwrap(), ["a", "b"]);
    wrong_type(
        md.get_str_array("types"),
        "types",
        "array<string>",
        "array<i32>",
    );
    wrong_type(md.get_str_array("name"), "name", "array", "string");
    assert!(matches!(
        md.get_i32_array("types").unwrap(),
        Cow::Borrowed(&[1, 3, 4])
    ));
    assert_eq!(&*md.get_i32_array("types.u8").unwrap(), &[1, 3]);
    out_of_range(md.get_i32_array("types.u32"), "types.u32", "4294967295");
    wrong_type(
        md.get_i32_array("scales"),
        "scales",
        "array<i32>",
        "array<f32>",
    );
    assert!(matches!(
        md.get_f32_array("scales").unwrap(),
        Cow::Borrowed(&[0.5])
    ));
    assert_eq!(&*md.get_f32_array("scales.f64").unwrap(), &[0.25]);
    wrong_type(
        md.get_f32_array("nested"),
        "nested",
        "array<f32>",
        "array<array>",
    );
    assert_eq!(md.get_array("nested").unwrap(), &Array::Array(vec![]));
}

#[test]
fn missing_keys() {
    let md = metadata();
    for result in [
        md.get_u32("absent").map(|_| ()),
        md.get_str("absent").map(|_| ()),
        md.get_str_array("absent").map(|_| ()),
    ] {
        assert!(
            matches!(result, Err(GgufError::MissingKey { ref key }) if key == "absent"),
            "{result:?}"
        );
    }
    assert_eq!(md.opt_u32("absent").unwrap(), None);
    assert_eq!(md.opt_str("absent").unwrap(), None);
    assert_eq!(md.opt_f32_array("absent").unwrap(), None);
    assert_eq!(md.opt_u32("u8").unwrap(), Some(7));
    // Present but wrong stays an error: an optional key is not a licence for a wrong type.
    wrong_type(md.opt_u32("name"), "name", "u32", "string");
}

#[test]
fn order_and_duplicates() {
    let md = metadata();
    let keys: Vec<&str> = md.iter().map(|(k, _)| k).collect();
    assert_eq!(keys[..3], ["u8", "i64", "neg"]);
    assert_eq!(md.len(), 16);
    let duplicate = Metadata::new(vec![("x".into(), Value::U8(1)), ("x".into(), Value::U8(2))]);
    assert!(
        matches!(duplicate, Err(GgufError::DuplicateKey { key, first: 0, second: 1 }) if key == "x")
    );
}
