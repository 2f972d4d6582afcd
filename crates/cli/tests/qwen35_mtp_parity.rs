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

use common::qwen35_fixture::{bounds, check, tiers, Manifest};
use oxibonsai_engine::{CpuBackend, Logits, Model};
use oxibonsai_gguf::GgufFile;
use oxibonsai_testkit::parity::compare;

#[test]
fn the_mtp_head_matches_the_reference_mtp_context() {
    let manifest = Manifest::read("qwen35-mtp", "scripts/qwen35-mtp-reference.py");
    let tokens = &manifest.tokens;
    assert!(
        manifest.models.len() >= 3,
        "only {} MTP fixtures",
        manifest.models.len()
    );
    let dir = tempfile::tempdir().unwrap();
    let mut failures = Vec::new();
    for (name, entry) in &manifest.models {
        let path = manifest.model(name, entry, dir.path());
        let bounds = bounds(entry);
        for isa in tiers() {
            let tier = isa.name();
            let file = Arc::new(GgufFile::open(&path).unwrap());
            let mut model = Model::load(file, CpuBackend::with_isa(2, isa).unwrap()).unwrap();
            model.load_mtp().unwrap();
            let (n_vocab, d) = (model.config.n_vocab, model.config.n_embd);
            let (prefill, decode) = manifest.logits(name, entry, n_vocab);

            let mut seq = model.new_sequence(tokens.len()).unwrap();
            seq.keep_hidden();
            model.forward(&mut seq, tokens, Logits::Last).unwrap();
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
            for (path_name, want) in [
                ("one position per pass", &decode),
                ("vs the batch", &prefill),
            ] {
                let report = compare(&ours, want, n_vocab);
                failures.extend(check(
                    &format!("{name} [{tier}] {path_name}"),
                    &report,
                    bounds,
                ));
            }
            // One batch: its last row.
            let mut head = model.new_mtp_sequence(tokens.len()).unwrap();
            let last = model.forward_mtp(&mut head, tokens, &fed).unwrap();
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
