//! Test support shared by every crate's tests (a dev-dependency only).
//!
//! Golden reference data produced by the reference engine lives outside the repository, in
//! `../shared/golden` beside the workspace, or wherever `OXIBONSAI_GOLDEN` points. Every test reads
//! it through [`golden`], which fails loudly with the path it wanted when a file is missing: a test
//! that needs reference data is never silently skipped.

use std::path::PathBuf;

/// The running test's crate folder: `CARGO_MANIFEST_DIR` as cargo sets it when it runs the test,
/// else `compiled` (the caller's `env!("CARGO_MANIFEST_DIR")`). A test binary compiled in another
/// clone sharing one `CARGO_TARGET_DIR` (cargo reuses it: its hash does not hold the clone's path)
/// would otherwise read the other clone's files, or none once that clone is gone.
pub fn crate_dir(compiled: &str) -> PathBuf {
    std::env::var_os("CARGO_MANIFEST_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(compiled))
}

/// The workspace root (the folder holding the top `Cargo.toml`).
///
/// Found from the running test's `CARGO_MANIFEST_DIR` (cargo sets it when it runs a test), not
/// from this crate's compile-time one: two clones sharing one `CARGO_TARGET_DIR` may share this
/// crate's compiled form, which would then point at the other clone.
pub fn workspace_root() -> PathBuf {
    let start = std::env::var_os("CARGO_MANIFEST_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")));
    let found = start.ancestors().find(|dir| {
        std::fs::read_to_string(dir.join("Cargo.toml"))
            .is_ok_and(|manifest| manifest.contains("[workspace]"))
    });
    found
        .unwrap_or_else(|| panic!("no workspace Cargo.toml above {}", start.display()))
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
    assert!(text.len().is_multiple_of(2), "odd-length hex string");
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

/// The parity criterion of `golden/README.md`: centred logits compared position by position.
pub mod parity {
    /// Per-file bounds from `logits/tolerance.json`.
    #[derive(Clone, Copy, Debug)]
    pub struct Bounds {
        pub max_sigma: f64,
        pub mean_sigma: f64,
    }

    /// Reads the bounds of one reference file (`key` as in tolerance.json, e.g. `logits/qwen3-f16.f32`).
    pub fn bounds(key: &str) -> Bounds {
        let text = std::fs::read_to_string(super::golden("logits/tolerance.json"))
            .expect("tolerance.json readable");
        parse_bounds(&text, key)
            .unwrap_or_else(|| panic!("no bounds for {key} in logits/tolerance.json"))
    }

    // A tiny reader for the two numbers we need, so testkit stays dependency-free.
    fn parse_bounds(text: &str, key: &str) -> Option<Bounds> {
        let start = text.find(&format!("\"{key}\""))?;
        let block = &text[start..];
        let block = &block[..block.find('}')?];
        let number = |field: &str| -> Option<f64> {
            let at = block.find(&format!("\"{field}\""))? + field.len() + 2;
            let rest = block[at..].trim_start_matches([' ', ':']);
            let end = rest.find([',', '\n', '}']).unwrap_or(rest.len());
            rest[..end].trim().parse().ok()
        };
        Some(Bounds {
            max_sigma: number("max_sigma")?,
            mean_sigma: number("mean_sigma")?,
        })
    }

    #[derive(Clone, Debug, Default)]
    pub struct Report {
        /// Worst over positions of max |Δ| / σ.
        pub worst_max_sigma: f64,
        /// Worst over positions of mean |Δ| / σ.
        pub worst_mean_sigma: f64,
        /// Positions where the top-1 differs although the reference's top-2 gap exceeds 0.5 σ.
        pub top1_mismatches: Vec<usize>,
        pub positions: usize,
    }

    impl Report {
        pub fn passes(&self, bounds: Bounds) -> bool {
            self.worst_max_sigma <= bounds.max_sigma
                && self.worst_mean_sigma <= bounds.mean_sigma
                && self.top1_mismatches.is_empty()
        }
    }

    fn argmax(row: &[f32]) -> usize {
        let mut best = 0;
        for (i, &v) in row.iter().enumerate() {
            if v > row[best] {
                best = i;
            }
        }
        best
    }

    /// Compares `ours` with `reference`, both `[positions][n_vocab]`.
    pub fn compare(ours: &[f32], reference: &[f32], n_vocab: usize) -> Report {
        assert_eq!(ours.len(), reference.len(), "logit arrays differ in length");
        assert_eq!(reference.len() % n_vocab, 0);
        let mut report = Report {
            positions: reference.len() / n_vocab,
            ..Report::default()
        };
        for (pos, (a, r)) in ours
            .chunks(n_vocab)
            .zip(reference.chunks(n_vocab))
            .enumerate()
        {
            let n = n_vocab as f64;
            let mean_a = a.iter().map(|&v| f64::from(v)).sum::<f64>() / n;
            let mean_r = r.iter().map(|&v| f64::from(v)).sum::<f64>() / n;
            let var_r = r
                .iter()
                .map(|&v| (f64::from(v) - mean_r).powi(2))
                .sum::<f64>()
                / n;
            let sigma = var_r.sqrt().max(f64::MIN_POSITIVE);
            let (mut max_d, mut sum_d) = (0.0f64, 0.0f64);
            for (&x, &y) in a.iter().zip(r) {
                let d = ((f64::from(x) - mean_a) - (f64::from(y) - mean_r)).abs();
                assert!(d.is_finite(), "non-finite logit at position {pos}");
                max_d = max_d.max(d);
                sum_d += d;
            }
            report.worst_max_sigma = report.worst_max_sigma.max(max_d / sigma);
            report.worst_mean_sigma = report.worst_mean_sigma.max(sum_d / n / sigma);
            let top = argmax(r);
            let mut second = f32::NEG_INFINITY;
            for (i, &v) in r.iter().enumerate() {
                if i != top && v > second {
                    second = v;
                }
            }
            let gap = f64::from(r[top] - second) / sigma;
            if gap > 0.5 && argmax(a) != top {
                report.top1_mismatches.push(pos);
            }
        }
        report
    }

    /// Reads a raw f32 little-endian logits file.
    pub fn read_logits(relative: &str) -> Vec<f32> {
        super::read_golden(relative)
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect()
    }
}

/// The kernel tiers named by `OXIBONSAI_REQUIRE_ISA` (comma-separated, e.g. `neon,dotprod`):
/// the tiers a test run must cover. Empty when the variable is unset.
pub fn required_tiers() -> Vec<String> {
    std::env::var("OXIBONSAI_REQUIRE_ISA")
        .unwrap_or_default()
        .split(',')
        .map(str::trim)
        .filter(|name| !name.is_empty())
        .map(str::to_owned)
        .collect()
}

/// Panics naming each tier of `OXIBONSAI_REQUIRE_ISA` missing from `covered` (the tiers a test
/// is about to run on, by name): on a CPU without a required tier the test fails instead of
/// passing having tested only what the CPU had.
pub fn assert_required_tiers(covered: &[&str]) {
    for name in required_tiers() {
        assert!(
            covered.contains(&name.as_str()),
            "OXIBONSAI_REQUIRE_ISA names {name}, but this run covers only [{}]: that tier would go \
             untested (the CPU lacks it, or it is no tier)",
            covered.join(", ")
        );
    }
}
