//! The qwen35 reference fixtures (`tests/fixtures/qwen35`, `tests/fixtures/qwen35-mtp`, written by
//! `scripts/qwen35-reference.py` / `scripts/qwen35-mtp-reference.py`): a manifest of small models
//! (the `oxibonsai synth` arguments that make each one, its SHA-256, the reference's logits and
//! the reference's variation against itself), and the parity criterion both tests apply.

use std::path::{Path, PathBuf};

use oxibonsai_formats::kernels::Isa;
use oxibonsai_testkit::fixture;
use oxibonsai_testkit::parity::{Bounds, Report};
use serde_json::Value;
use sha2::{Digest, Sha256};

use super::{oxibonsai, path_str};

/// The least bounds, in σ of the reference's logits, for models whose matrices are F32 / F16
/// (activations never quantized): the reference agrees with itself (prompt vs one token at a
/// time) to a few thousandths of a σ on them, and a wrong rotation, norm, gate, scale or state
/// update is off by a tenth of a σ or more.
pub const FLOAT_FLOOR: Bounds = Bounds {
    max_sigma: 0.02,
    mean_sigma: 0.005,
};

/// For quantized matrices the activations are quantized to Q8_0 before each product, as the
/// reference does, and a value rounded to the neighbouring code by a last-bit difference upstream
/// moves the logits by a few hundredths of a σ (here up to 0.14 σ on the Q8_0 model with two
/// attention layers): the golden files' criterion (golden/README.md), whose floors an independent
/// float64 implementation meets.
pub const QUANTIZED_FLOOR: Bounds = Bounds {
    max_sigma: 0.35,
    mean_sigma: 0.05,
};

/// One fixture directory's manifest.
pub struct Manifest {
    /// The directory under `tests/fixtures`.
    dir: &'static str,
    /// The script that writes it (named when a model no longer matches).
    script: &'static str,
    pub tokens: Vec<u32>,
    /// Model name → its manifest entry.
    pub models: Vec<(String, Value)>,
}

impl Manifest {
    pub fn read(dir: &'static str, script: &'static str) -> Self {
        let text = std::fs::read_to_string(fixture(&format!("{dir}/manifest.json")))
            .unwrap_or_else(|e| panic!("{dir}/manifest.json: {e}"));
        let value: Value = serde_json::from_str(&text).unwrap();
        let tokens = value["tokens"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t.as_u64().unwrap() as u32)
            .collect();
        let models = value["models"]
            .as_object()
            .unwrap()
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        Self {
            dir,
            script,
            tokens,
            models,
        }
    }

    /// Synthesises `name`'s model into `out_dir` (once) and checks it hashes to the manifest's
    /// SHA-256, so model and logits belong together.
    pub fn model(&self, name: &str, entry: &Value, out_dir: &Path) -> PathBuf {
        let path = out_dir.join(format!("{name}.gguf"));
        if path.exists() {
            return path;
        }
        let mut args = vec!["synth", "--arch", "qwen35"];
        args.extend(synth_args(entry));
        args.extend(["-o", path_str(&path)]);
        let run = oxibonsai(args);
        assert_eq!(run.code, 0, "{name}: synth fails: {}", run.stderr);
        let sha = hex(&Sha256::digest(std::fs::read(&path).unwrap()));
        assert_eq!(
            sha,
            entry["sha256"].as_str().unwrap(),
            "{name}: synth no longer writes the model of the fixture (run {})",
            self.script
        );
        path
    }

    /// The reference's logits for `entry`: `[2][tokens][n_vocab]` — one batch, then one token
    /// per pass (the MTP fixtures: the head's, the same two ways).
    pub fn logits(&self, name: &str, entry: &Value, n_vocab: usize) -> (Vec<f32>, Vec<f32>) {
        let file = entry["logits"].as_str().unwrap();
        let mut logits = read_f32(&fixture(&format!("{}/{file}", self.dir)));
        let half = self.tokens.len() * n_vocab;
        assert_eq!(logits.len(), 2 * half, "{name}: fixture size");
        let decode = logits.split_off(half);
        (logits, decode)
    }
}

/// The `oxibonsai synth` arguments (after `--arch qwen35`) that make the entry's model.
pub fn synth_args(entry: &Value) -> Vec<&str> {
    entry["synth_args"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap())
        .collect()
}

/// The bounds for one model: 1.5 × the reference's variation against itself, never under the
/// floor of its weight format.
pub fn bounds(entry: &Value) -> Bounds {
    let args = synth_args(entry);
    let format = args
        .iter()
        .position(|&a| a == "--format")
        .map(|i| args[i + 1])
        .expect("synth_args names --format");
    let floor = match format {
        "f32" | "f16" => FLOAT_FLOOR,
        _ => QUANTIZED_FLOOR,
    };
    let derived = |key: &str, floor: f64| (1.5 * entry[key].as_f64().unwrap()).max(floor);
    Bounds {
        max_sigma: derived("self_max_sigma", floor.max_sigma),
        mean_sigma: derived("self_mean_sigma", floor.mean_sigma),
    }
}

pub fn read_f32(path: &Path) -> Vec<f32> {
    std::fs::read(path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Prints the comparison; returns it as a failure when it misses the bounds (every model and
/// tier is still compared and printed before the test fails).
pub fn check(what: &str, report: &Report, bounds: Bounds) -> Option<String> {
    let line = format!(
        "{what}: max {:.5} σ (bound {:.4}), mean {:.5} σ (bound {:.4}), top-1 mismatches {:?}",
        report.worst_max_sigma,
        bounds.max_sigma,
        report.worst_mean_sigma,
        bounds.mean_sigma,
        report.top1_mismatches
    );
    println!("{line}");
    (!report.passes(bounds)).then_some(line)
}

/// Every kernel tier this CPU has (failing when `OXIBONSAI_REQUIRE_ISA` names one it lacks).
pub fn tiers() -> Vec<Isa> {
    let tiers: Vec<Isa> = Isa::ALL.into_iter().filter(|i| i.available()).collect();
    let names: Vec<&str> = tiers.iter().map(|i| i.name()).collect();
    oxibonsai_testkit::assert_required_tiers(&names);
    tiers
}
