//! Embedding entries in the generations' forward pass (`Model::forward_batch_embedding`, what the
//! server's scheduler runs) give, on every tier, bit for bit the logits the generation entries get
//! from `forward_batch` without them and the pooled rows the embedding entries get from
//! `embed_batch` alone — each input alone too (the packed kernels' per-row summation order does
//! not depend on the batch, see `batch.rs`); and mean pooling is the mean of pooling none's rows.

use std::sync::Arc;

use oxibonsai_engine::{BatchEntry, CpuBackend, Model, Pooling, Workspace};
use oxibonsai_formats::kernels::Isa;
use oxibonsai_gguf::GgufFile;
use oxibonsai_testkit::golden;

mod common;

fn load(isa: Isa) -> Model<CpuBackend> {
    let file = Arc::new(GgufFile::open(golden("models/qwen3-q1_0.gguf")).unwrap());
    Model::load(file, CpuBackend::with_isa(2, isa).unwrap()).unwrap()
}

const PROMPTS: [&[u32]; 2] = [&[1, 5, 9, 200, 31], &[7, 7, 7]];
const INPUTS: [&[u32]; 3] = [&[400, 3, 12, 99, 8, 1, 2, 55], &[42], &[9, 8, 7, 6]];

fn embed_alone(model: &Model<CpuBackend>, inputs: &[&[u32]], pooling: Pooling) -> Vec<f32> {
    let mut seqs: Vec<_> = inputs
        .iter()
        .map(|ids| model.new_sequence(ids.len()).unwrap())
        .collect();
    let mut entries: Vec<BatchEntry<'_, CpuBackend>> = seqs
        .iter_mut()
        .zip(inputs)
        .map(|(seq, tokens)| BatchEntry { seq, tokens })
        .collect();
    model
        .embed_batch(&mut entries, pooling, &mut Workspace::default())
        .unwrap()
        .to_vec()
}

#[test]
fn embeddings_in_the_generation_pass_equal_both_passes_apart() {
    let tiers = common::tiers();
    for isa in tiers {
        let model = load(isa);
        let n_vocab = model.config.n_vocab;
        let d = model.config.n_embd;
        let generate = |extra: Option<Pooling>| -> (Vec<f32>, Vec<f32>) {
            let mut gen_seqs: Vec<_> = (0..2).map(|_| model.new_sequence(64).unwrap()).collect();
            let mut emb_seqs: Vec<_> = INPUTS
                .iter()
                .map(|ids| model.new_sequence(ids.len()).unwrap())
                .collect();
            let mut gen: Vec<BatchEntry<'_, CpuBackend>> = gen_seqs
                .iter_mut()
                .zip(PROMPTS)
                .map(|(seq, tokens)| BatchEntry { seq, tokens })
                .collect();
            let mut work = Workspace::default();
            match extra {
                None => (
                    model.forward_batch(&mut gen, &mut work).unwrap().to_vec(),
                    Vec::new(),
                ),
                Some(pooling) => {
                    let mut emb: Vec<BatchEntry<'_, CpuBackend>> = emb_seqs
                        .iter_mut()
                        .zip(INPUTS)
                        .map(|(seq, tokens)| BatchEntry { seq, tokens })
                        .collect();
                    let (logits, pooled) = model
                        .forward_batch_embedding(&mut gen, &mut emb, pooling, &mut work)
                        .unwrap();
                    (logits.to_vec(), pooled.to_vec())
                }
            }
        };
        let (logits_alone, _) = generate(None);
        assert_eq!(logits_alone.len(), 2 * n_vocab);
        for pooling in [Pooling::None, Pooling::Mean, Pooling::Cls, Pooling::Last] {
            let (logits, pooled) = generate(Some(pooling));
            assert_eq!(
                logits, logits_alone,
                "{isa:?} {pooling:?}: the generations' logits"
            );
            let alone = embed_alone(&model, &INPUTS, pooling);
            assert_eq!(pooled, alone, "{isa:?} {pooling:?}: the pooled rows");
            let rows = if pooling == Pooling::None { 13 } else { 3 };
            assert_eq!(pooled.len(), rows * d);
            // Each input by itself: the same rows.
            let mut one_by_one = Vec::new();
            for ids in INPUTS {
                one_by_one.extend(embed_alone(&model, &[ids], pooling));
            }
            assert_eq!(pooled, one_by_one, "{isa:?} {pooling:?}: inputs alone");
        }
        // Mean, cls and last are the mean, first and last of pooling none's rows.
        let none = embed_alone(&model, &[INPUTS[0]], Pooling::None);
        let rows: Vec<&[f32]> = none.chunks_exact(d).collect();
        let mean = embed_alone(&model, &[INPUTS[0]], Pooling::Mean);
        for (j, m) in mean.iter().enumerate() {
            let want: f32 = rows.iter().map(|r| r[j] / rows.len() as f32).sum();
            assert!(
                (m - want).abs() <= 1e-5 * want.abs().max(1.0),
                "{isa:?}: mean {m} vs {want}"
            );
        }
        assert_eq!(embed_alone(&model, &[INPUTS[0]], Pooling::Cls), rows[0]);
        assert_eq!(
            embed_alone(&model, &[INPUTS[0]], Pooling::Last),
            rows[rows.len() - 1]
        );
        assert!(
            model.embedding_width(Pooling::Rank).is_err(),
            "a generation-only model has no rank pooling"
        );
    }
}
