//! A sequence that takes a shared prompt prefix's KV from another sequence (`extend_from`, the
//! server's prefix cache across slots) continues exactly as if it had computed the prefix itself:
//! its logits equal those of one pass over the whole prompt in a fresh sequence — bit for bit
//! where a row's result does not depend on the tokens beside it (as `batch.rs` states), else
//! within the parity bounds. Stale positions of the receiving sequence are overwritten, and bad
//! copies are refused naming the positions. Only the tokens both sequences share are kept: a
//! receiver's own positions past the shared prefix are replaced by the donor's.

use std::sync::Arc;

use oxibonsai_engine::{CpuBackend, EngineError, Logits, Model};
use oxibonsai_formats::kernels::Isa;
use oxibonsai_gguf::GgufFile;
use oxibonsai_testkit::golden;
use oxibonsai_testkit::parity::{bounds, compare};

mod common;

fn load(name: &str, isa: Isa) -> Model<CpuBackend> {
    let file = Arc::new(GgufFile::open(golden(&format!("models/{name}.gguf"))).unwrap());
    Model::load(file, CpuBackend::with_isa(2, isa).unwrap()).unwrap()
}

#[test]
fn a_copied_prefix_gives_the_logits_of_computing_it() {
    // A 23-token shared prefix; the donor continues it one way, the receiver another.
    let prefix: Vec<u32> = (0..23).map(|i| (i * 37 + 11) % 1000).collect();
    let donor_tail = [5, 6, 7, 8];
    let own_tail = [900, 901, 17, 4, 250];
    for name in ["qwen3-q1_0", "qwen3-ternary-tq2_0", "qwen3-f16"] {
        for isa in common::tiers() {
            let model = load(name, isa);
            let n_vocab = model.config.n_vocab;
            let exact = isa == Isa::Scalar
                || std::env::var("OXIBONSAI_PACK").map_or(true, |v| v.trim() != "0");
            let whole: Vec<u32> = prefix.iter().chain(&own_tail).copied().collect();

            // Reference: the whole prompt in one pass.
            let mut fresh = model.new_sequence(64).unwrap();
            let want = model
                .forward(&mut fresh, &whole, Logits::All)
                .unwrap()
                .to_vec();

            // The donor computed the prefix and went on with other tokens.
            let mut donor = model.new_sequence(64).unwrap();
            let donor_prompt: Vec<u32> = prefix.iter().chain(&donor_tail).copied().collect();
            model
                .forward(&mut donor, &donor_prompt, Logits::Last)
                .unwrap();

            // The receiver shares the first 6 tokens of its own earlier prompt, whose other
            // positions hold stale keys and values of different tokens.
            let mut receiver = model.new_sequence(64).unwrap();
            let earlier: Vec<u32> = prefix[..6].iter().chain(&[3u32; 20]).copied().collect();
            model
                .forward(&mut receiver, &earlier, Logits::Last)
                .unwrap();
            assert_eq!(receiver.truncate(6), 6);
            assert_eq!(
                receiver.extend_from(&donor, prefix.len()).unwrap(),
                prefix.len()
            );
            assert_eq!(receiver.n_past(), prefix.len());
            assert_eq!(receiver.tokens(), &prefix[..]);
            let got = model
                .forward(&mut receiver, &own_tail, Logits::All)
                .unwrap();

            let tail_rows = &want[prefix.len() * n_vocab..];
            assert_eq!(got.len(), tail_rows.len());
            for (row, (g, w)) in got
                .chunks(n_vocab)
                .zip(tail_rows.chunks(n_vocab))
                .enumerate()
            {
                let what = format!("{name} {} tail row {row}", isa.name());
                if exact {
                    assert_eq!(g, w, "{what}: not bit-identical");
                } else {
                    let report = compare(g, w, n_vocab);
                    assert!(
                        report.passes(bounds(&format!("logits/{name}.f32"))),
                        "{what}: {report:?}"
                    );
                }
            }
        }
    }
}

/// The positions a refused copy names.
fn copied_range(err: &EngineError) -> Option<(usize, usize)> {
    match err {
        EngineError::KvCopy { start, end, .. } => Some((*start, *end)),
        _ => None,
    }
}

#[test]
fn bad_copies_are_refused_and_move_nothing() {
    let model = load("qwen3-q1_0", Isa::best());
    let mut donor = model.new_sequence(32).unwrap();
    model
        .forward(&mut donor, &[1, 2, 3, 4, 5], Logits::Last)
        .unwrap();
    let mut receiver = model.new_sequence(32).unwrap();
    model.forward(&mut receiver, &[1, 2], Logits::Last).unwrap();

    // More positions than the donor holds.
    let err = receiver.extend_from(&donor, 6).unwrap_err();
    assert_eq!(copied_range(&err), Some((2, 6)), "{err}");
    assert!(err.to_string().contains("holds 5 positions"), "{err}");
    assert_eq!(receiver.n_past(), 2);

    // More positions than the receiver's context.
    let mut small = model.new_sequence(3).unwrap();
    let err = small.extend_from(&donor, 5).unwrap_err();
    assert_eq!(copied_range(&err), Some((0, 5)), "{err}");
    assert_eq!(small.n_past(), 0);

    // Sequences of another model shape are refused in `state::tests` (no golden model differs).

    // Fewer positions than the receiver holds: it keeps its first n and continues there.
    assert_eq!(receiver.extend_from(&donor, 1).unwrap(), 1);
    assert_eq!(receiver.n_past(), 1);
}
