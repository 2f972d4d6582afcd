//! Test support shared by every crate's tests (a dev-dependency only).
//!
//! Golden reference data produced by the reference engine lives outside the repository, in
//! `../shared/golden` beside the workspace, or wherever `OXIBONSAI_GOLDEN` points. Every test reads
//! it through [`golden`], which fails loudly with the path it wanted when a file is missing: a test
//! that needs reference data is never silently skipped.

use std::path::{Path, PathBuf};

/// The workspace root (the folder holding the top `Cargo.toml`).
pub fn workspace_root() -> PathBuf {
    // This crate sits at <root>/crates/testkit.
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .expect("workspace root exists")
}

/// The golden data folder: `$OXIBONSAI_GOLDEN`, else `<workspace root>/../shared/golden`.
pub fn golden_dir() -> PathBuf {
    match std::env::var_os("OXIBONSAI_GOLDEN") {
        Some(dir) if !dir.is_empty() => PathBuf::from(dir),
        _ => workspace_root().join("../shared/golden"),
    }
}

/// The path of a golden file, e.g. `golden("quant/q1_0.json")`. Panics, naming the full path and
/// how to point the tests elsewhere, when the file does not exist.
pub fn golden(relative: &str) -> PathBuf {
    let path = golden_dir().join(relative);
    assert!(
        path.exists(),
        "golden reference file missing: {} (set OXIBONSAI_GOLDEN to the folder holding the \
         reference data, default ../shared/golden beside the workspace)",
        path.display()
    );
    path
}

/// Reads a golden file whole.
pub fn read_golden(relative: &str) -> Vec<u8> {
    let path = golden(relative);
    std::fs::read(&path).unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()))
}

/// The path of a fixture committed in the repository under `<workspace root>/tests/fixtures`.
pub fn fixture(relative: &str) -> PathBuf {
    let path = workspace_root().join("tests/fixtures").join(relative);
    assert!(path.exists(), "fixture missing: {}", path.display());
    path
}

/// Decodes lowercase or uppercase hex (the encoding of the golden JSON files).
pub fn hex_bytes(text: &str) -> Vec<u8> {
    assert!(text.len() % 2 == 0, "odd-length hex string");
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&text[i..i + 2], 16).expect("valid hex"))
        .collect()
}

/// Decodes hex into little-endian f32 values.
pub fn hex_f32(text: &str) -> Vec<f32> {
    hex_bytes(text)
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}
