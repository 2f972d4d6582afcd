//! The malformed corpus: every file is rejected by both `GgufFile::from_bytes` and `validate_bytes`
//! with its own error variant naming the key or tensor at fault, and nothing panics.

mod common;

use common::*;
use oxibonsai_gguf::{validate_bytes, GgufError, GgufFile};
use proptest::prelude::*;

#[test]
fn the_base_file_is_valid() {
    let bytes = base_file();
    assert!(
        validate_bytes(&bytes).is_empty(),
        "{:?}",
        validate_bytes(&bytes)
    );
    let file = GgufFile::from_bytes(bytes).expect("valid");
    let names: Vec<&str> = file.tensors().iter().map(|t| t.name.as_str()).collect();
    assert_eq!(names, ["alpha", "beta", "gamma", "delta", "zeta", "omega"]);
    // delta decides the file; gamma alone could not.
    assert_eq!(file.tensor("gamma").unwrap().format.name, "q2_0");
    assert_eq!(file.tensor("delta").unwrap().n_bytes, 1152);
}

#[test]
fn every_malformed_file_gets_its_own_error() {
    let corpus = corpus();
    assert!(corpus.len() >= 20);
    let mut variants = std::collections::BTreeSet::new();
    for case in corpus {
        let listed = validate_bytes(&case.bytes);
        let first = listed
            .first()
            .unwrap_or_else(|| panic!("{}: validate_bytes found nothing", case.name));
        assert!(
            (case.expect)(first),
            "{}: validate_bytes gave {first:?}",
            case.name
        );
        let opened = GgufFile::from_bytes(case.bytes.clone())
            .err()
            .unwrap_or_else(|| panic!("{}: from_bytes accepted it", case.name));
        assert!(
            (case.expect)(&opened),
            "{}: from_bytes gave {opened:?}",
            case.name
        );
        assert_eq!(opened.to_string(), first.to_string(), "{}", case.name);
        println!("{}: {opened}", case.name);
        variants.insert(
            format!("{opened:?}")
                .split([' ', '{', '('])
                .next()
                .unwrap()
                .to_owned(),
        );
    }
    assert!(
        variants.len() >= 20,
        "only {} distinct variants: {variants:?}",
        variants.len()
    );
}

#[test]
fn validate_collects_every_tensor_problem() {
    let mut bytes = base_file();
    let alpha = tensor_fields(&bytes, "alpha");
    put_u32(&mut bytes, alpha.type_id, 99);
    let beta = tensor_fields(&bytes, "beta");
    let offset = get_u64(&bytes, beta.offset);
    put_u64(&mut bytes, beta.offset, offset + 4);
    let omega = tensor_fields(&bytes, "omega");
    put_u64(&mut bytes, omega.offset, 1 << 20);
    let errors = validate_bytes(&bytes);
    let summary: Vec<String> = errors.iter().map(|e| e.to_string()).collect();
    assert!(
        matches!(&errors[0], GgufError::UnknownTensorType { tensor, .. } if tensor == "alpha"),
        "{summary:#?}"
    );
    assert!(
        matches!(&errors[1], GgufError::MisalignedTensor { tensor, .. } if tensor == "beta"),
        "{summary:#?}"
    );
    assert!(
        matches!(&errors[2], GgufError::TensorOutOfBounds { tensor, .. } if tensor == "omega"),
        "{summary:#?}"
    );
    // The first error is what opening reports.
    let opened = GgufFile::from_bytes(bytes).unwrap_err();
    assert_eq!(opened.to_string(), summary[0]);
}

#[test]
fn truncation_anywhere_is_reported_as_missing_bytes() {
    let bytes = base_file();
    let data_offset = GgufFile::from_bytes(bytes.clone()).unwrap().data_offset() as usize;
    for cut in 0..bytes.len() {
        let truncated = &bytes[..cut];
        let errors = validate_bytes(truncated);
        let error = GgufFile::from_bytes(truncated.to_vec())
            .err()
            .unwrap_or_else(|| panic!("accepted a file cut at {cut}"));
        assert_eq!(error.to_string(), errors[0].to_string());
        match &error {
            GgufError::Truncated {
                at,
                available,
                needed,
                what,
            } => {
                assert!(cut < data_offset, "cut {cut}: {error}");
                assert_eq!(at + available, cut as u64, "cut {cut}: {error}");
                assert!(needed > available, "cut {cut}: {error}");
                assert!(!what.is_empty());
            }
            GgufError::StringTooLong {
                at, len, available, ..
            } => {
                assert!(cut < data_offset, "cut {cut}: {error}");
                assert_eq!(at + 8 + available, cut as u64, "cut {cut}: {error}");
                assert!(len > available);
            }
            GgufError::TensorCountTooLarge { .. }
            | GgufError::KvCountTooLarge { .. }
            | GgufError::ArrayCountTooLarge { .. } => {
                assert!(cut < data_offset, "cut {cut}: {error}")
            }
            GgufError::TensorOutOfBounds { data_size, .. } => {
                assert_eq!(
                    *data_size,
                    cut.saturating_sub(data_offset) as u64,
                    "cut {cut}: {error}"
                );
            }
            other => panic!("cut {cut}: unexpected {other}"),
        }
    }
}

#[test]
fn truncated_value_names_its_key_and_position() {
    let bytes = base_file();
    let at = tensor_fields(&bytes, "omega").offset;
    let error = GgufFile::from_bytes(bytes[..at + 2].to_vec()).unwrap_err();
    assert_eq!(
        error.to_string(),
        format!("truncated: reading the data offset of tensor 'omega' at byte {at} needs 8 bytes but the file has 2 left")
    );
    // Earlier in the header the counts already say the file is too short, before anything is read.
    let at = value_pos(&bytes, "test.aaaa");
    let error = GgufFile::from_bytes(bytes[..at + 2].to_vec()).unwrap_err();
    assert!(
        matches!(error, GgufError::TensorCountTooLarge { count: 6, .. }),
        "{error}"
    );
}

#[test]
fn nesting_at_the_limit_is_accepted() {
    let file = GgufFile::from_bytes(nested_file(8)).expect("8 levels are allowed");
    assert_eq!(file.metadata().get_array("deep").unwrap().len(), 1);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    /// Overwrites of bytes, u32s and u64s (counts, lengths, offsets), and truncations never panic, and
    /// both entry points agree.
    #[test]
    fn arbitrary_mutations_never_panic(
        edits in prop::collection::vec((any::<prop::sample::Index>(), 0u8..3, any::<u64>()), 1..6),
        cut in any::<prop::sample::Index>(),
        do_cut in any::<bool>(),
    ) {
        let mut bytes = base_file();
        for (index, width, value) in edits {
            let width = [1usize, 4, 8][width as usize];
            let at = index.index(bytes.len() - width);
            bytes[at..at + width].copy_from_slice(&value.to_le_bytes()[..width]);
        }
        if do_cut {
            bytes.truncate(cut.index(bytes.len()));
        }
        let errors = validate_bytes(&bytes);
        match GgufFile::from_bytes(bytes) {
            Ok(file) => {
                prop_assert!(errors.is_empty());
                for t in file.tensors() {
                    prop_assert_eq!(file.tensor_data(t).len() as u64, t.n_bytes);
                }
            }
            Err(error) => prop_assert_eq!(error.to_string(), errors[0].to_string()),
        }
    }

    /// Edits confined to the header (where counts and lengths live) reach deeper into the parser.
    #[test]
    fn header_mutations_never_panic(
        edits in prop::collection::vec((0usize..600, any::<u8>()), 1..8),
    ) {
        let mut bytes = base_file();
        for (at, value) in edits {
            let at = at.min(bytes.len() - 1);
            bytes[at] = value;
        }
        let errors = validate_bytes(&bytes);
        let opened = GgufFile::from_bytes(bytes);
        prop_assert_eq!(opened.is_ok(), errors.is_empty());
    }
}
