//! qwen35's multi-token-prediction head against the reference engine's MTP context, on the small
//! models of `tests/fixtures/qwen35-mtp` (written by `scripts/qwen35-mtp-reference.py`): each
//! model is synthesised again by `oxibonsai synth --arch qwen35 --nextn 1` and must hash to the
//! manifest's SHA-256, the trunk's kept hidden states feed the head as llama.cpp's draft-mtp
//! feeds its MTP context (token x_p with h_{p−1}, zeros at p = 0), and the head's logits at every
//! position — one position per pass, and the last of one batch — are compared with the
//! reference's on every kernel tier, within bounds derived from the reference's variation
//! against itself (golden/README.md's criterion, the floors of the qwen35 trunk's parity test).

mod common;

use std::sync::Arc;

use common::{oxibonsai, path_str};
use oxibonsai_engine::{CpuBackend, Logits, Model};
use oxibonsai_formats::kernels::Isa;
use oxibonsai_gguf::GgufFile;
use oxibonsai_testkit::fixture;
use oxibonsai_testkit::parity::{compare, Bounds, Report};
use serde_json::Value;
use sha2::{Digest, Sha256};

/// As the trunk's parity test (`qwen35_parity.rs`): float matrices agree to thousandths of a σ,
/// quantized activations move the logits by hundredths.
const FLOAT_FLOOR: Bounds = Bounds {
    max_sigma: 0.02,
    mean_sigma: 0.005,
};
const QUANTIZED_FLOOR: Bounds = Bounds {
    max_sigma: 0.35,
    mean_sigma: 0.05,
};

fn read_f32(path: &std::path::Path) -> Vec<f32> {
    std::fs::read(path)
        .unwrap()
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn check(what: &str, report: &Report, bounds: Bounds) -> Option<String> {
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

fn tiers() -> Vec<Isa> {
    let tiers: Vec<Isa> = Isa::ALL.into_iter().filter(|i| i.available()).collect();
    let names: Vec<&str> = tiers.iter().map(|i| i.name()).collect();
    oxibonsai_testkit::assert_required_tiers(&names);
    tiers
}

#[test]
fn the_mtp_head_matches_the_reference_mtp_context() {
    let text = std::fs::read_to_string(fixture("qwen35-mtp/manifest.json")).unwrap();
    let manifest: Value = serde_json::from_str(&text).unwrap();
    let tokens: Vec<u32> = manifest["tokens"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t.as_u64().unwrap() as u32)
        .collect();
    let models = manifest["models"].as_object().unwrap();
    assert!(models.len() >= 3, "only {} MTP fixtures", models.len());
    let dir = tempfile::tempdir().unwrap();
    let mut failures = Vec::new();
    for (name, entry) in models {
        let path = dir.path().join(format!("{name}.gguf"));
        let args: Vec<&str> = entry["synth_args"]
            .as_array()
            .unwrap()
            .iter()
            .map(|a| a.as_str().unwrap())
            .collect();
        let mut all = vec!["synth", "--arch", "qwen35"];
        all.extend(&args);
        all.extend(["-o", path_str(&path)]);
        let run = oxibonsai(all);
        assert_eq!(run.code, 0, "{name}: synth fails: {}", run.stderr);
        let sha = hex(&Sha256::digest(std::fs::read(&path).unwrap()));
        assert_eq!(
            sha,
            entry["sha256"].as_str().unwrap(),
            "{name}: synth no longer writes the model of the fixture (run scripts/qwen35-mtp-reference.py)"
        );
        let reference = read_f32(&fixture(&format!(
            "qwen35-mtp/{}",
            entry["logits"].as_str().unwrap()
        )));
        let format = args[args.iter().position(|&a| a == "--format").unwrap() + 1];
        let floor = match format {
            "f32" | "f16" => FLOAT_FLOOR,
            _ => QUANTIZED_FLOOR,
        };
        let derived = |key: &str, floor: f64| (1.5 * entry[key].as_f64().unwrap()).max(floor);
        let bounds = Bounds {
            max_sigma: derived("self_max_sigma", floor.max_sigma),
            mean_sigma: derived("self_mean_sigma", floor.mean_sigma),
        };
        for isa in tiers() {
            let tier = isa.name();
            let file = Arc::new(GgufFile::open(&path).unwrap());
            let mut model = Model::load(file, CpuBackend::with_isa(2, isa).unwrap()).unwrap();
            model.load_mtp().unwrap();
            let (n_vocab, d) = (model.config.n_vocab, model.config.n_embd);
            assert_eq!(
                reference.len(),
                2 * tokens.len() * n_vocab,
                "{name}: fixture size"
            );
            let (prefill, decode) = reference.split_at(tokens.len() * n_vocab);

            let mut seq = model.new_sequence(tokens.len()).unwrap();
            seq.keep_hidden();
            model.forward(&mut seq, &tokens, Logits::Last).unwrap();
            let (first, rows) = seq.hidden().unwrap();
            assert_eq!((first, rows.len()), (0, tokens.len() * d));
            // Token x_p with h_{p−1}.
            let mut fed = vec![0.0; d];
            fed.extend_from_slice(&rows[..(tokens.len() - 1) * d]);

            let mut head = model.new_mtp_sequence(tokens.len()).unwrap();
            let mut ours = Vec::new();
            for (p, &t) in tokens.iter().enumerate() {
                let out = model
                    .forward_mtp(&mut head, &[t], &fed[p * d..(p + 1) * d])
                    .unwrap();
                ours.extend_from_slice(out.logits);
            }
            for (path_name, want) in [("one position per pass", decode), ("vs the batch", prefill)]
            {
                let report = compare(&ours, want, n_vocab);
                failures.extend(check(
                    &format!("{name} [{tier}] {path_name}"),
                    &report,
                    bounds,
                ));
            }
            // One batch: its last row.
            let mut head = model.new_mtp_sequence(tokens.len()).unwrap();
            let last = model.forward_mtp(&mut head, &tokens, &fed).unwrap();
            let report = compare(
                last.logits,
                &prefill[(tokens.len() - 1) * n_vocab..],
                n_vocab,
            );
            failures.extend(check(
                &format!("{name} [{tier}] one batch, last row"),
                &report,
                bounds,
            ));
        }
    }
    assert!(
        failures.is_empty(),
        "parity fails:\n{}",
        failures.join("\n")
    );
}
