//! Several sequences in one forward pass (continuous batching) give each sequence the logits it
//! gets alone, bit for bit on every tier: on the scalar tier the same kernels run; on AVX2 /
//! AVX-512 every matrix of this model is repacked at load and one packed kernel serves any number
//! of tokens with a per-row summation order that does not depend on them. (With `OXIBONSAI_PACK=0`
//! the matrix-matrix and matrix-vector kernels sum in different orders: then only the parity
//! criterion holds.) Sequences at different positions, one
//! prefilling while others decode, and refusal of a bad entry without touching any sequence.

use std::sync::Arc;

use oxibonsai_engine::{BatchEntry, CpuBackend, EngineError, Logits, Model, Workspace};
use oxibonsai_formats::kernels::Isa;
use oxibonsai_gguf::GgufFile;
use oxibonsai_testkit::golden;
use oxibonsai_testkit::parity::{bounds, compare};

mod common;

fn load(isa: Isa) -> Model<CpuBackend> {
    let file = Arc::new(GgufFile::open(golden("models/qwen3-q1_0.gguf")).unwrap());
    Model::load(file, CpuBackend::with_isa(2, isa).unwrap()).unwrap()
}

#[test]
fn a_batch_of_sequences_matches_each_sequence_alone() {
    let prompts: [&[u32]; 3] = [
        &[1, 5, 9, 200, 31],
        &[7, 7, 7],
        &[400, 3, 12, 99, 8, 1, 2, 55],
    ];
    let steps: [&[u32]; 3] = [&[17], &[23, 24, 25, 26], &[1000]];
    for isa in common::tiers() {
        let model = load(isa);
        let n_vocab = model.config.n_vocab;
        let exact =
            isa == Isa::Scalar || std::env::var("OXIBONSAI_PACK").map_or(true, |v| v.trim() != "0");
        // Alone: each prompt, then its step.
        let mut alone = Vec::new();
        for (p, s) in prompts.iter().zip(&steps) {
            let mut seq = model.new_sequence(64).unwrap();
            let first = model.forward(&mut seq, p, Logits::Last).unwrap().to_vec();
            let second = model.forward(&mut seq, s, Logits::Last).unwrap().to_vec();
            alone.push((first, second));
        }
        // Together: all prompts in one batch; then all steps in another.
        let mut seqs: Vec<_> = (0..3).map(|_| model.new_sequence(64).unwrap()).collect();
        let mut work = Workspace::default();
        let mut batched = [Vec::new(), Vec::new()];
        for (round, inputs) in [prompts, steps].iter().enumerate() {
            let mut entries: Vec<BatchEntry<'_, CpuBackend>> = seqs
                .iter_mut()
                .zip(inputs.iter())
                .map(|(seq, tokens)| BatchEntry { seq, tokens })
                .collect();
            let logits = model.forward_batch(&mut entries, &mut work).unwrap();
            assert_eq!(logits.len(), 3 * n_vocab);
            batched[round] = logits.to_vec();
        }
        for (i, (first, second)) in alone.iter().enumerate() {
            for (round, want) in [first, second].into_iter().enumerate() {
                let got = &batched[round][i * n_vocab..(i + 1) * n_vocab];
                let what = format!("{} sequence {i} round {round}", isa.name());
                if exact {
                    assert_eq!(got, &want[..], "{what}: not bit-identical");
                } else {
                    let report = compare(got, want, n_vocab);
                    assert!(
                        report.passes(bounds("logits/qwen3-q1_0.f32")),
                        "{what}: {report:?}"
                    );
                }
            }
        }
        assert_eq!(seqs[1].n_past(), 7);
    }
}

#[test]
fn a_bad_entry_refuses_the_whole_batch_and_moves_no_sequence() {
    let model = load(Isa::best());
    let mut a = model.new_sequence(8).unwrap();
    let mut b = model.new_sequence(8).unwrap();
    let mut work = Workspace::default();
    let too_long = [1u32; 9];
    let mut entries = [
        BatchEntry {
            seq: &mut a,
            tokens: &[1, 2],
        },
        BatchEntry {
            seq: &mut b,
            tokens: &too_long,
        },
    ];
    let err = model.forward_batch(&mut entries, &mut work).unwrap_err();
    assert!(matches!(err, EngineError::ContextExceeded { .. }), "{err}");
    let oov = [model.config.n_vocab as u32];
    let mut entries = [BatchEntry {
        seq: &mut a,
        tokens: &oov,
    }];
    let err = model.forward_batch(&mut entries, &mut work).unwrap_err();
    assert!(matches!(err, EngineError::TokenOutOfRange { .. }), "{err}");
    assert!(matches!(
        model.forward_batch(&mut [], &mut work).unwrap_err(),
        EngineError::EmptyPrompt
    ));
    assert_eq!((a.n_past(), b.n_past()), (0, 0));
}

/// A long prompt in one pass (its attention in tiles of rows, its products in chunks of
/// tokens) against the same tokens fed one at a time: every row's logits bit for bit on every
/// tier, for one sequence and for two prompts sharing a pass (tiles that straddle them).
#[test]
fn a_long_prompt_in_one_pass_matches_feeding_it_token_by_token() {
    let tokens: Vec<u32> = (0..150u32).map(|i| (i * 37 + 11) % 2000).collect();
    for isa in common::tiers() {
        if isa != Isa::Scalar && std::env::var("OXIBONSAI_PACK").is_ok_and(|v| v.trim() == "0") {
            continue; // other summation orders for other token counts: parity only (above).
        }
        let model = load(isa);
        let n_vocab = model.config.n_vocab;
        let mut one_by_one = Vec::new();
        let mut seq = model.new_sequence(256).unwrap();
        for t in &tokens {
            one_by_one.extend_from_slice(model.forward(&mut seq, &[*t], Logits::Last).unwrap());
        }
        let mut seq = model.new_sequence(256).unwrap();
        let all = model
            .forward(&mut seq, &tokens, Logits::All)
            .unwrap()
            .to_vec();
        for (t, (got, want)) in all
            .chunks(n_vocab)
            .zip(one_by_one.chunks(n_vocab))
            .enumerate()
        {
            assert_eq!(
                got,
                want,
                "{} row {t}: one pass vs token by token",
                isa.name()
            );
        }
        // Logits from a row on (what perplexity asks for): the same rows as all of them.
        for k in [0, 1, 75, 149, 150] {
            let mut seq = model.new_sequence(256).unwrap();
            let from = model
                .forward(&mut seq, &tokens, Logits::From(k))
                .unwrap()
                .to_vec();
            assert_eq!(seq.n_past(), tokens.len());
            assert_eq!(
                &from[..],
                &all[k * n_vocab..],
                "{} logits from row {k} vs the same rows of all",
                isa.name()
            );
        }
        // Two prompts (42 and 108 tokens) in one pass: the last rows as each alone.
        let (a, b) = tokens.split_at(42);
        let mut seqs: Vec<_> = (0..2).map(|_| model.new_sequence(256).unwrap()).collect();
        let mut work = Workspace::default();
        let mut entries: Vec<BatchEntry<'_, CpuBackend>> = seqs
            .iter_mut()
            .zip([a, b])
            .map(|(seq, tokens)| BatchEntry { seq, tokens })
            .collect();
        let logits = model
            .forward_batch(&mut entries, &mut work)
            .unwrap()
            .to_vec();
        for (i, p) in [a, b].into_iter().enumerate() {
            let mut seq = model.new_sequence(256).unwrap();
            let want = model.forward(&mut seq, p, Logits::Last).unwrap();
            assert_eq!(
                &logits[i * n_vocab..(i + 1) * n_vocab],
                want,
                "{} prompt {i} of a shared pass vs alone",
                isa.name()
            );
        }
    }
}

/// Several rows per entry (speculative verification in the server): each entry's last `rows`
/// rows equal the same rows of that entry's tokens run alone with logits for every token, bit
/// for bit; a row count per entry is required.
#[test]
fn a_batch_with_several_rows_per_entry_matches_each_sequence_alone() {
    let model = load(Isa::best());
    let n_vocab = model.config.n_vocab;
    let prompts: [&[u32]; 3] = [&[1, 5, 9], &[7, 7, 7, 7], &[400, 3]];
    let steps: [&[u32]; 3] = [&[17, 18, 19, 20], &[23], &[1000, 1001, 1002]];
    let rows = [4usize, 1, 2];
    let mut alone = Vec::new();
    for (p, s) in prompts.iter().zip(&steps) {
        let mut seq = model.new_sequence(64).unwrap();
        model.forward(&mut seq, p, Logits::Last).unwrap();
        alone.push(model.forward(&mut seq, s, Logits::All).unwrap().to_vec());
    }
    let mut seqs: Vec<_> = (0..3).map(|_| model.new_sequence(64).unwrap()).collect();
    let mut work = Workspace::default();
    for (round, inputs) in [prompts, steps].iter().enumerate() {
        let mut entries: Vec<BatchEntry<'_, CpuBackend>> = seqs
            .iter_mut()
            .zip(inputs.iter())
            .map(|(seq, tokens)| BatchEntry { seq, tokens })
            .collect();
        if round == 0 {
            model.forward_batch(&mut entries, &mut work).unwrap();
            let err = model
                .forward_batch_rows(&mut entries[..2], &rows, &mut work)
                .unwrap_err();
            assert!(matches!(err, EngineError::BatchRows { .. }), "{err}");
            continue;
        }
        let logits = model
            .forward_batch_rows(&mut entries, &rows, &mut work)
            .unwrap()
            .to_vec();
        assert_eq!(logits.len(), rows.iter().sum::<usize>() * n_vocab);
        let mut at = 0;
        for (i, (&r, all)) in rows.iter().zip(&alone).enumerate() {
            let want = &all[all.len() - r * n_vocab..];
            assert_eq!(&logits[at..at + r * n_vocab], want, "entry {i}");
            at += r * n_vocab;
        }
    }
}
