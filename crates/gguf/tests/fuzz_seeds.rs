//! The fuzz target's seeds, written by `fuzz/make_seeds.py` (a GGUF writer independent of ours; the
//! seeds are generated, not committed), are files the reader accepts, read back as the script
//! wrote them — so the fuzzer starts from valid files, and the reader agrees with a second writer.

use std::path::Path;
use std::process::Command;
use std::sync::OnceLock;

use oxibonsai_gguf::{validate_bytes, GgufFile};

/// The seeds, written once into a temporary folder by the script (`python3` is required).
fn seed_dir() -> &'static Path {
    static DIR: OnceLock<tempfile::TempDir> = OnceLock::new();
    DIR.get_or_init(|| {
        let dir = tempfile::tempdir().expect("a temporary folder");
        let script =
            oxibonsai_testkit::crate_dir(env!("CARGO_MANIFEST_DIR")).join("fuzz/make_seeds.py");
        let status = Command::new("python3")
            .arg(&script)
            .arg(dir.path())
            .status()
            .unwrap_or_else(|e| panic!("python3 {} cannot run: {e}", script.display()));
        assert!(status.success(), "{} failed: {status}", script.display());
        dir
    })
    .path()
}

fn seed(name: &str) -> GgufFile {
    let path = seed_dir().join(name);
    let bytes = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    assert_eq!(validate_bytes(&bytes).len(), 0, "{}", path.display());
    GgufFile::from_bytes(bytes).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

#[test]
fn the_fuzz_seeds_read_back_as_written() {
    assert!(seed("empty.gguf").tensors().is_empty());

    let file = seed("metadata.gguf");
    let m = file.metadata();
    assert_eq!(m.get_str("general.architecture").unwrap(), "llama");
    assert_eq!(m.get_u32("a.u32").unwrap(), 70000);
    assert_eq!(m.get_i32("a.i32").unwrap(), -70000);
    assert_eq!(m.get_u64("a.u64").unwrap(), 1 << 40);
    assert_eq!(m.get_i64("a.i64").unwrap(), -(1 << 40));
    assert_eq!(m.get_f32("a.f32").unwrap(), 1.5);
    assert_eq!(m.get_f64("a.f64").unwrap(), 2.5);
    assert!(m.get_bool("a.bool").unwrap());
    assert_eq!(
        m.get_str_array("a.strings").unwrap(),
        ["x", "", "<|im_end|>"]
    );

    let file = seed("tensors.gguf");
    let tensors: Vec<(&str, u64)> = file
        .tensors()
        .iter()
        .map(|t| (t.name.as_str(), t.n_bytes))
        .collect();
    // f32 4 × 2; one Q8_0 block (2 + 32 bytes); one Q4_0 block (2 + 16 bytes).
    assert_eq!(tensors, [("f32", 32), ("q8_0", 34), ("q4_0", 18)]);
    let f32_data = file.tensor_data(&file.tensors()[0]);
    assert_eq!(&f32_data[4..8], 0.5f32.to_le_bytes());
}
