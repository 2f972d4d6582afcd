//! qwen35 (Gated DeltaNet hybrid) logits against the reference engine's, on the small models of
//! `tests/fixtures/qwen35` (written by `scripts/qwen35-reference.py`): each model is synthesised
//! again by `oxibonsai synth --arch qwen35` and must hash to the manifest's SHA-256 (so model and
//! logits belong together), then our prompt-processing logits (one batch) and one-token-at-a-time
//! logits are compared with the reference's, on every kernel tier, under the parity criterion of
//! golden/README.md with bounds derived from the reference's variation against itself.

mod common;

use std::sync::Arc;

use common::qwen35_fixture::{bounds, check, synth_args, tiers, Manifest};
use common::{oxibonsai, path_str};
use oxibonsai_engine::{BatchEntry, CpuBackend, Logits, Model, Workspace};
use oxibonsai_formats::kernels::Isa;
use oxibonsai_gguf::GgufFile;
use oxibonsai_testkit::parity::{compare, Bounds};
use serde_json::Value;

struct Case {
    name: String,
    model: Model<CpuBackend>,
    tokens: Vec<u32>,
    prefill: Vec<f32>,
    decode: Vec<f32>,
    bounds: Bounds,
    /// The model's manifest entry.
    entry: Value,
}

/// Every fixture's model synthesised again (checked against its hash) and loaded on `isa`.
fn cases(dir: &std::path::Path, isa: Isa) -> Vec<Case> {
    let manifest = Manifest::read("qwen35", "scripts/qwen35-reference.py");
    assert!(
        manifest.models.len() >= 7,
        "only {} qwen35 fixtures",
        manifest.models.len()
    );
    let mut out = Vec::new();
    for (name, entry) in &manifest.models {
        let path = manifest.model(name, entry, dir);
        let file = Arc::new(GgufFile::open(&path).unwrap());
        let model = Model::load(file, CpuBackend::with_isa(2, isa).unwrap())
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        let n_vocab = model.config.n_vocab;
        assert_eq!(n_vocab as u64, entry["n_vocab"].as_u64().unwrap());
        let (prefill, decode) = manifest.logits(name, entry, n_vocab);
        out.push(Case {
            name: name.clone(),
            model,
            tokens: manifest.tokens.clone(),
            prefill,
            decode,
            bounds: bounds(entry),
            entry: entry.clone(),
        });
    }
    out
}

#[test]
fn qwen35_logits_match_the_reference_in_one_batch_and_token_by_token() {
    let dir = tempfile::tempdir().unwrap();
    let mut failures = Vec::new();
    for isa in tiers() {
        for case in cases(dir.path(), isa) {
            let (model, tokens) = (&case.model, &case.tokens);
            let n_vocab = model.config.n_vocab;
            let tier = isa.name();

            let mut seq = model.new_sequence(tokens.len()).unwrap();
            let ours = model
                .forward(&mut seq, tokens, Logits::All)
                .unwrap()
                .to_vec();
            let report = compare(&ours, &case.prefill, n_vocab);
            failures.extend(check(
                &format!("{} [{tier}] prompt", case.name),
                &report,
                case.bounds,
            ));

            let mut seq = model.new_sequence(tokens.len()).unwrap();
            let mut ours = Vec::new();
            for &t in tokens {
                ours.extend_from_slice(model.forward(&mut seq, &[t], Logits::Last).unwrap());
            }
            let report = compare(&ours, &case.decode, n_vocab);
            failures.extend(check(
                &format!("{} [{tier}] token by token", case.name),
                &report,
                case.bounds,
            ));
        }
    }
    assert!(
        failures.is_empty(),
        "parity fails:\n{}",
        failures.join("\n")
    );
}

/// Two sequences at different positions in one pass (`forward_batch`): each segment runs through
/// its own recurrent states, and its last row is the reference's logits at that position.
#[test]
fn qwen35_sequences_batched_together_keep_their_own_state() {
    let dir = tempfile::tempdir().unwrap();
    let mut failures = Vec::new();
    for case in cases(dir.path(), Isa::best()) {
        let (model, tokens) = (&case.model, &case.tokens);
        let n_vocab = model.config.n_vocab;
        let mut a = model.new_sequence(tokens.len()).unwrap();
        let mut b = model.new_sequence(tokens.len()).unwrap();
        model.forward(&mut a, &tokens[..10], Logits::Last).unwrap();
        model.forward(&mut b, &tokens[..5], Logits::Last).unwrap();
        let mut work = Workspace::default();
        let mut entries = [
            BatchEntry {
                seq: &mut a,
                tokens: &tokens[10..13],
            },
            BatchEntry {
                seq: &mut b,
                tokens: &tokens[5..6],
            },
        ];
        let ours = model
            .forward_batch(&mut entries, &mut work)
            .unwrap()
            .to_vec();
        let mut want = case.prefill[12 * n_vocab..13 * n_vocab].to_vec();
        want.extend_from_slice(&case.prefill[5 * n_vocab..6 * n_vocab]);
        let report = compare(&ours, &want, n_vocab);
        failures.extend(check(
            &format!("{} batched", case.name),
            &report,
            case.bounds,
        ));
    }
    assert!(
        failures.is_empty(),
        "parity fails:\n{}",
        failures.join("\n")
    );
}

/// `info` on a hybrid file: the layer pattern, and the sequence state computed here from the
/// sizes (per Gated DeltaNet layer: (d_conv − 1)·conv_dim + S²·H_v floats; per attention layer
/// and position: H_kv·(key + value dim) f16 values).
#[test]
fn info_shows_the_layer_pattern_and_the_state_of_a_hybrid_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("h.gguf");
    let run = oxibonsai([
        "synth",
        "--arch",
        "qwen35",
        "--format",
        "f32",
        "--layers",
        "8",
        "-o",
        path_str(&path),
    ]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let run = oxibonsai(["info", "--json", path_str(&path)]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let info: Value = serde_json::from_str(&run.stdout).unwrap();
    assert_eq!(info["layer_pattern"], "2 × (GDN×3, attention)");
    // Defaults: d_conv 4, S 32, H_k 2, H_v 4 → conv_dim 2·64 + 128 = 256; 6 GDN layers.
    let per_gdn = (3 * 256 + 32 * 32 * 4) * 4;
    assert_eq!(info["recurrent_state_bytes"], 6 * per_gdn);
    // 2 attention layers, 2 KV heads of 64 + 64, f16.
    assert_eq!(info["kv_bytes_per_token"], 2 * 2 * 128 * 2);
    let text = oxibonsai(["info", path_str(&path)]).stdout;
    assert!(text.contains("2 × (GDN×3, attention)"), "{text}");
    assert_eq!(info["rotation"], Value::Null);

    // The same model with the rotation folded in: what the metadata says, as the engine reads it.
    let rotated = dir.path().join("r.gguf");
    let run = oxibonsai([
        "synth",
        "--from",
        path_str(&path),
        "--rotate",
        "64",
        "--sign-mode",
        "explicit",
        "--grouped",
        "-o",
        path_str(&rotated),
    ]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let run = oxibonsai(["info", "--json", path_str(&rotated)]);
    let info: Value = serde_json::from_str(&run.stdout).unwrap();
    let r = &info["rotation"];
    assert_eq!(r["block_size"], 64);
    assert_eq!(r["sign_mode"], "explicit");
    assert_eq!(r["gdn_v_grouped"], true);
    assert_eq!(r["error"], Value::Null);
    // n_embd 256, value_dim 128, n_ff 512, attention output 256.
    assert_eq!(r["sign_widths"], serde_json::json!([128, 256, 512]));
    assert!(r["folded_weights"].as_u64().unwrap() > 0);
    let text = oxibonsai(["info", path_str(&rotated)]).stdout;
    assert!(
        text.contains("prism.hadamard, block 64, explicit signs"),
        "{text}"
    );
}

/// The file at `path` with `key` replaced by `value` (or dropped when `None`).
fn with_key(path: &std::path::Path, key: &str, value: Option<oxibonsai_gguf::Value>) -> GgufFile {
    let file = GgufFile::open(path).unwrap();
    let mut w = oxibonsai_gguf::GgufWriter::new();
    for (k, v) in file.metadata().iter() {
        if k != key {
            w.add_kv(k, v.clone()).unwrap();
        }
    }
    if let Some(v) = value {
        w.add_kv(key, v).unwrap();
    }
    for t in file.tensors() {
        w.add_tensor(&t.name, &t.dims, t.format, file.tensor_data(t))
            .unwrap();
    }
    GgufFile::from_bytes(w.to_bytes().unwrap()).unwrap()
}

/// Each qwen35 key llama.cpp requires or constrains, broken in turn: the error names the key.
#[test]
fn qwen35_hyper_parameters_are_checked_naming_the_key() {
    use oxibonsai_engine::{LayerKind, ModelConfig};
    use oxibonsai_gguf::{Array, Value};
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("k.gguf");
    let run = oxibonsai([
        "synth",
        "--arch",
        "qwen35",
        "--format",
        "f32",
        "-o",
        path_str(&path),
    ]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let k = |s: &str| format!("qwen35.{s}");
    let cases: Vec<(String, Option<Value>, &str)> = vec![
        (
            k("rope.dimension_sections"),
            None,
            "rope.dimension_sections",
        ),
        (
            k("rope.dimension_sections"),
            Some(Value::Array(Array::I32(vec![3, 3, 2]))),
            "rope.dimension_sections",
        ),
        (k("ssm.conv_kernel"), None, "ssm.conv_kernel"),
        (k("ssm.state_size"), None, "ssm.state_size"),
        (k("ssm.inner_size"), Some(Value::U32(100)), "ssm.inner_size"),
        (
            k("ssm.group_count"),
            Some(Value::U32(3)),
            "ssm.time_step_rank",
        ),
        (
            k("attention.value_length"),
            Some(Value::U32(32)),
            "attention.value_length",
        ),
        (
            k("attention.layer_norm_rms_epsilon"),
            None,
            "layer_norm_rms_epsilon",
        ),
        (
            k("nextn_predict_layers"),
            Some(Value::U32(4)),
            "nextn_predict_layers",
        ),
        (
            k("attention.recurrent_layers"),
            Some(Value::Array(Array::Bool(vec![true, false]))),
            "recurrent_layers",
        ),
        (
            "general.architecture".into(),
            Some("qwen35moe".into()),
            "qwen35moe",
        ),
    ];
    for (key, value, named) in cases {
        let file = with_key(&path, &key, value.clone());
        let err = ModelConfig::from_gguf(&file)
            .err()
            .unwrap_or_else(|| panic!("{key} = {value:?} was accepted"));
        assert!(err.to_string().contains(named), "{key} = {value:?}: {err}");
    }
    // The per-layer array wins over the interval; prediction layers leave the trunk.
    let file = with_key(
        &path,
        &k("attention.recurrent_layers"),
        Some(Value::Array(Array::U32(vec![0, 1, 1, 0]))),
    );
    let c = ModelConfig::from_gguf(&file).unwrap();
    use LayerKind::{Attention as A, GatedDeltaNet as G};
    assert_eq!(c.layers, [A, G, G, A]);
    let file = with_key(&path, &k("nextn_predict_layers"), Some(Value::U32(1)));
    let c = ModelConfig::from_gguf(&file).unwrap();
    assert_eq!((c.n_layer, c.layers.clone()), (3, vec![G, G, G]));
    // Sections [3, 3, 2, 0] over 8 pairs: every pair turns; [2, 1, 1, 2]: sectors 4 and 5 of
    // each 6 are the e section (position 0).
    let file = with_key(
        &path,
        &k("rope.dimension_sections"),
        Some(Value::Array(Array::I32(vec![2, 1, 1, 2]))),
    );
    let c = ModelConfig::from_gguf(&file).unwrap();
    let turning: Vec<bool> = (0..8).map(|i| c.rope_pair_rotates(i)).collect();
    assert_eq!(turning, [true, true, true, true, false, false, true, true]);
}

/// PrismML's rotation folded into the float fixture models (`synth --rotate`, the export's fold
/// computed in f64, independent of the runtime's transform): our logits on the rotated file equal
/// the reference's on the unrotated one, with the GDN V-head permutation and explicit signs.
#[test]
fn rotated_qwen35_files_give_the_unrotated_models_reference_logits() {
    let dir = tempfile::tempdir().unwrap();
    let mut failures = Vec::new();
    let mut n = 0;
    for case in cases(dir.path(), Isa::best()) {
        let args = synth_args(&case.entry);
        if !args.windows(2).any(|w| w == ["--format", "f32"]) {
            continue;
        }
        n += 1;
        let path = dir.path().join(format!("{}-rotated.gguf", case.name));
        let mut synth = vec!["synth", "--arch", "qwen35"];
        synth.extend(&args);
        synth.extend([
            "--rotate",
            "32",
            "--sign-mode",
            "explicit",
            "--grouped",
            "-o",
            path_str(&path),
        ]);
        let run = oxibonsai(&synth);
        assert_eq!(run.code, 0, "{}: {}", case.name, run.stderr);
        let file = Arc::new(GgufFile::open(&path).unwrap());
        assert!(file.metadata().get("prism.hadamard.version").is_some());
        let model = Model::load(file, CpuBackend::with_isa(2, Isa::best()).unwrap())
            .unwrap_or_else(|e| panic!("{}: {e}", case.name));
        let mut seq = model.new_sequence(case.tokens.len()).unwrap();
        let ours = model
            .forward(&mut seq, &case.tokens, Logits::All)
            .unwrap()
            .to_vec();
        let report = compare(&ours, &case.prefill, model.config.n_vocab);
        failures.extend(check(
            &format!("{} rotated (block 32, explicit signs, grouped)", case.name),
            &report,
            case.bounds,
        ));
    }
    assert!(n >= 2, "only {n} float fixtures to rotate");
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// A hybrid sequence's past changes only through checkpoints: cut back, rewound exactly, or
/// continued from another sequence's state, its next logits are the reference's for the same
/// tokens — and it says how many positions it computed again.
#[test]
fn hybrid_rewinds_and_prefix_copies_continue_as_the_reference() {
    use oxibonsai_engine::CheckpointPolicy;
    let dir = tempfile::tempdir().unwrap();
    let cases = cases(dir.path(), Isa::best());
    let case = cases
        .iter()
        .find(|c| c.name == "f32-interval4-gqa")
        .expect("the f32-interval4-gqa fixture");
    let (model, tokens) = (&case.model, &case.tokens);
    assert!(model.config.has_recurrent_layers());
    let n_vocab = model.config.n_vocab;
    let n = tokens.len();
    assert!(n >= 20, "{n} fixture tokens");
    let policy = CheckpointPolicy {
        interval: 4,
        max: 8,
    };
    let rows = |from: usize| &case.prefill[from * n_vocab..];
    let mut failures = Vec::new();

    // Rewind: computed up to 18 (with other tokens after 14), back to exactly 14.
    let mut seq = model.new_sequence(n).unwrap();
    seq.set_checkpoint_policy(policy);
    model
        .forward(&mut seq, &tokens[..14], Logits::Last)
        .unwrap();
    model
        .forward(&mut seq, &[7, 7, 7, 7], Logits::Last)
        .unwrap();
    assert_eq!(seq.checkpoint_positions(), [4, 8, 12, 14, 16, 18]);
    let restore = seq.rewind(model, 14).unwrap();
    assert_eq!(
        (restore.position, restore.recomputed),
        (14, 0),
        "a checkpoint at 14"
    );
    let restore = seq.rewind(model, 11).unwrap();
    assert_eq!(
        (restore.position, restore.recomputed),
        (11, 3),
        "from the checkpoint at 8"
    );
    assert_eq!(seq.tokens(), &tokens[..11]);
    let ours = model
        .forward(&mut seq, &tokens[11..], Logits::All)
        .unwrap()
        .to_vec();
    failures.extend(check(
        "rewound to 11, then the rest",
        &compare(&ours, rows(11), n_vocab),
        case.bounds,
    ));

    // Truncate (nothing computed) and feed from there, as a chat turn or a server slot does.
    let mut seq = model.new_sequence(n).unwrap();
    seq.set_checkpoint_policy(policy);
    model
        .forward(&mut seq, &tokens[..10], Logits::Last)
        .unwrap();
    model.forward(&mut seq, &[3, 1, 4], Logits::Last).unwrap();
    let kept = seq.truncate(10);
    assert_eq!(kept, 10, "the prompt's end is a checkpoint");
    let ours = model
        .forward(&mut seq, &tokens[kept..], Logits::All)
        .unwrap()
        .to_vec();
    failures.extend(check(
        "truncated to a prompt end, then the rest",
        &compare(&ours, rows(kept), n_vocab),
        case.bounds,
    ));

    // Prefix copy from a donor: its state at a checkpoint, the rest fed by the receiver.
    let mut donor = model.new_sequence(n).unwrap();
    donor.set_checkpoint_policy(policy);
    model
        .forward(&mut donor, &tokens[..19], Logits::Last)
        .unwrap();
    let mut receiver = model.new_sequence(n).unwrap();
    receiver.set_checkpoint_policy(policy);
    model
        .forward(&mut receiver, &[9, 9, 9], Logits::Last)
        .unwrap();
    let reached = receiver.extend_from(&donor, 18).unwrap();
    assert_eq!(reached, 16, "the donor's latest checkpoint at or before 18");
    let ours = model
        .forward(&mut receiver, &tokens[reached..], Logits::All)
        .unwrap()
        .to_vec();
    failures.extend(check(
        "prefix copied from another sequence, then the rest",
        &compare(&ours, rows(reached), n_vocab),
        case.bounds,
    ));

    // Logits from row 6 on, the batch split at the checkpoints 4, 8, … (the first part asks for
    // none): the rows from 6 as the reference's.
    let mut seq = model.new_sequence(n).unwrap();
    seq.set_checkpoint_policy(policy);
    let ours = model
        .forward(&mut seq, tokens, Logits::From(6))
        .unwrap()
        .to_vec();
    assert_eq!(ours.len(), (n - 6) * n_vocab);
    failures.extend(check(
        "logits from row 6 in a batch split at checkpoints",
        &compare(&ours, rows(6), n_vocab),
        case.bounds,
    ));

    // fork_prefix: exactly n positions, the uncovered ones computed.
    let (mut fork, restore) = donor.fork_prefix(model, 13, n).unwrap();
    assert_eq!((restore.position, restore.recomputed), (13, 1));
    let ours = model
        .forward(&mut fork, &tokens[13..], Logits::All)
        .unwrap()
        .to_vec();
    failures.extend(check(
        "forked at 13, then the rest",
        &compare(&ours, rows(13), n_vocab),
        case.bounds,
    ));
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
