//! Embeddings as llama.cpp defines them: the hidden state of every token after the output norm
//! (`result_norm`), pooled per sequence (`LLAMA_POOLING_TYPE_*`), then normalized as llama.cpp's
//! `common_embd_normalize`. The forward pass that feeds them is [`crate::Model::embed_batch`]; the
//! classifier head of rank pooling is loaded with the model ([`ClassifierHead`]).

use oxibonsai_gguf::GgufFile;

use crate::backend::Backend;
use crate::error::EngineError;
use crate::model::{BatchEntry, Model, Sequence, Workspace};

/// How a sequence's token states become its embedding (llama.cpp's `llama_pooling_type`, with
/// its numbering in the `<arch>.pooling_type` key).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pooling {
    /// One vector per token.
    None,
    /// The average over the sequence's tokens.
    Mean,
    /// The first token's state.
    Cls,
    /// The last token's state.
    Last,
    /// A relevance score: the classifier head (`cls.output`) on the last token's state (causal
    /// models), softmaxed for qwen3 as llama.cpp does (Qwen3-Reranker's yes / no).
    Rank,
}

impl Pooling {
    pub const ALL: [Pooling; 5] = [
        Pooling::None,
        Pooling::Mean,
        Pooling::Cls,
        Pooling::Last,
        Pooling::Rank,
    ];

    /// llama.cpp's `LLAMA_POOLING_TYPE_*` value.
    pub fn id(self) -> u32 {
        match self {
            Pooling::None => 0,
            Pooling::Mean => 1,
            Pooling::Cls => 2,
            Pooling::Last => 3,
            Pooling::Rank => 4,
        }
    }

    pub fn from_id(id: u64) -> Option<Pooling> {
        Pooling::ALL.into_iter().find(|p| u64::from(p.id()) == id)
    }

    /// The name `--pooling` takes (llama.cpp's).
    pub fn name(self) -> &'static str {
        match self {
            Pooling::None => "none",
            Pooling::Mean => "mean",
            Pooling::Cls => "cls",
            Pooling::Last => "last",
            Pooling::Rank => "rank",
        }
    }

    pub fn from_name(name: &str) -> Option<Pooling> {
        Pooling::ALL.into_iter().find(|p| p.name() == name)
    }

    /// The file's `<arch>.pooling_type`, if it has one; a value llama.cpp does not define is an
    /// error naming the key.
    pub fn from_gguf(file: &GgufFile) -> Result<Option<Pooling>, EngineError> {
        let meta = file.metadata();
        let key = format!("{}.pooling_type", meta.get_str("general.architecture")?);
        let Some(id) = meta.opt_u64(&key)? else {
            return Ok(None);
        };
        Pooling::from_id(id)
            .map(Some)
            .ok_or_else(|| EngineError::BadHyperParameter {
                key,
                reason: format!(
                    "{id} is not a pooling type (0 none, 1 mean, 2 cls, 3 last, 4 rank)"
                ),
            })
    }
}

/// llama.cpp's classifier head for rank pooling: `cls.output.weight` (`[n_embd, n_cls_out]`) and
/// its optional bias; `n_cls_out` is the length of `<arch>.classifier.output_labels` when the file
/// names its labels.
pub struct ClassifierHead<W> {
    pub weight: W,
    pub bias: Option<Vec<f32>>,
    pub n_out: usize,
    /// qwen3 rerankers give the softmax of their yes / no logits (llama.cpp's `build_pooling`).
    pub softmax: bool,
}

/// llama.cpp's `common_embd_normalize`: -1 none, 0 max-abs scaled to the int16 range, 1 taxicab,
/// 2 euclidean, more: p-norm. Sums in f64 as it does; an all-zero vector stays zero.
pub fn normalize(v: &mut [f32], embd_normalize: i32) {
    let sum: f64 = match embd_normalize {
        -1 => 1.0,
        0 => v.iter().fold(0f64, |m, &x| m.max(f64::from(x.abs()))) / 32760.0,
        2 => v
            .iter()
            .map(|&x| f64::from(x) * f64::from(x))
            .sum::<f64>()
            .sqrt(),
        p => {
            let p = f64::from(p);
            v.iter()
                .map(|&x| f64::from(x.abs()).powf(p))
                .sum::<f64>()
                .powf(1.0 / p)
        }
    };
    let norm = if sum > 0.0 { (1.0 / sum) as f32 } else { 0.0 };
    for x in v {
        *x *= norm;
    }
}

/// Embeds each input (whole, from an empty sequence) in batches of about `batch_tokens` tokens,
/// one sequence per input through [`Model::embed_batch`], each result normalized as
/// [`normalize`] with `embd_normalize`. One vector per input, or for [`Pooling::None`] its tokens'
/// vectors one after another. An empty input is an error naming it; inputs must fit `n_ctx`.
pub fn embed_inputs<B: Backend, T: AsRef<[u32]>>(
    model: &Model<B>,
    inputs: &[T],
    pooling: Pooling,
    embd_normalize: i32,
    batch_tokens: usize,
    work: &mut Workspace<B>,
) -> Result<Vec<Vec<f32>>, EngineError> {
    let width = model.embedding_width(pooling)?;
    if let Some(i) = inputs.iter().position(|ids| ids.as_ref().is_empty()) {
        return Err(EngineError::EmptyInput { index: i });
    }
    let mut out = Vec::with_capacity(inputs.len());
    let mut next = 0;
    while next < inputs.len() {
        // At least one input per batch, however long.
        let mut end = next + 1;
        let mut tokens = inputs[next].as_ref().len();
        while end < inputs.len() && tokens + inputs[end].as_ref().len() <= batch_tokens {
            tokens += inputs[end].as_ref().len();
            end += 1;
        }
        let batch = &inputs[next..end];
        let mut seqs = batch
            .iter()
            .map(|ids| model.new_sequence(ids.as_ref().len()))
            .collect::<Result<Vec<Sequence<B>>, _>>()?;
        let mut entries: Vec<BatchEntry<'_, B>> = seqs
            .iter_mut()
            .zip(batch)
            .map(|(seq, ids)| BatchEntry {
                seq,
                tokens: ids.as_ref(),
            })
            .collect();
        let rows = model.embed_batch(&mut entries, pooling, work)?;
        let mut at = 0;
        for ids in batch {
            let len = if pooling == Pooling::None {
                ids.as_ref().len() * width
            } else {
                width
            };
            let mut v = rows[at..at + len].to_vec();
            for row in v.chunks_exact_mut(width) {
                normalize(row, embd_normalize);
            }
            out.push(v);
            at += len;
        }
        next = end;
    }
    Ok(out)
}

/// The cosine similarity of two vectors (f64 sums), 0 when one is zero.
pub fn cosine(a: &[f32], b: &[f32]) -> f64 {
    let (mut ab, mut aa, mut bb) = (0f64, 0f64, 0f64);
    for (&x, &y) in a.iter().zip(b) {
        let (x, y) = (f64::from(x), f64::from(y));
        ab += x * y;
        aa += x * x;
        bb += y * y;
    }
    if aa == 0.0 || bb == 0.0 {
        return 0.0;
    }
    ab / (aa.sqrt() * bb.sqrt())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normalize_matches_common_embd_normalize() {
        // Hand-computed: |(3, -4)| = 5 (euclidean), 7 (taxicab), 4 (max abs).
        let mut v = [3.0f32, -4.0];
        normalize(&mut v, 2);
        assert_eq!(v, [0.6, -0.8]);
        let mut v = [3.0f32, -4.0];
        normalize(&mut v, 1);
        assert!((v[0] - 3.0 / 7.0).abs() < 1e-7 && (v[1] + 4.0 / 7.0).abs() < 1e-7);
        let mut v = [3.0f32, -4.0];
        normalize(&mut v, 0);
        assert!((v[1] + 32760.0).abs() < 1e-3 && (v[0] - 24570.0).abs() < 1e-3);
        let mut v = [3.0f32, -4.0];
        normalize(&mut v, -1);
        assert_eq!(v, [3.0, -4.0]);
        // p = 3: (27 + 64)^(1/3).
        let mut v = [3.0f32, -4.0];
        normalize(&mut v, 3);
        let n = 91f64.powf(1.0 / 3.0);
        assert!((f64::from(v[0]) - 3.0 / n).abs() < 1e-6);
        let mut zero = [0.0f32; 4];
        normalize(&mut zero, 2);
        assert_eq!(zero, [0.0; 4]);
    }

    #[test]
    fn pooling_ids_and_names_round_trip() {
        for p in Pooling::ALL {
            assert_eq!(Pooling::from_id(u64::from(p.id())), Some(p));
            assert_eq!(Pooling::from_name(p.name()), Some(p));
        }
        assert_eq!(Pooling::from_id(5), None);
        assert_eq!(Pooling::from_name("max"), None);
    }
}
