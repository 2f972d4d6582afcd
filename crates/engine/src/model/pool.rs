//! The output stage of an embedding pass: llama.cpp's `build_pooling` on the states after the
//! output norm (`result_norm`), written to the workspace's output buffer in place of logits.

use oxibonsai_gguf::GgufFile;

use super::block::{load_optional_vector, Loader};
use super::{BatchEntry, Buffers, Model, Workspace};
use crate::backend::{grown, Backend, Segment};
use crate::config::{Architecture, ModelConfig};
use crate::embed::{ClassifierHead, Pooling};
use crate::error::EngineError;

/// `cls.output` if the file has it (llama.cpp's `LLM_TENSOR_CLS_OUT`).
pub(super) fn load_classifier<B: Backend>(
    loader: &Loader<'_, B>,
    file: &GgufFile,
    c: &ModelConfig,
) -> Result<Option<ClassifierHead<B::Weight>>, EngineError> {
    let Some(t) = file.tensor("cls.output.weight") else {
        return Ok(None);
    };
    let labels = format!("{}.classifier.output_labels", c.arch.name());
    let n_out = match file.metadata().opt_str_array(&labels)? {
        Some(l) => l.len(),
        None => t.dims.get(1).copied().unwrap_or(0) as usize,
    };
    // The shape check comes before anything sized by `n_out` is allocated.
    let weight = loader.matrix("cls.output.weight", c.n_embd, n_out)?;
    Ok(Some(ClassifierHead {
        weight,
        bias: load_optional_vector(file, "cls.output.bias", n_out)?,
        n_out,
        softmax: c.arch == Architecture::Qwen3,
    }))
}

impl<B: Backend> Model<B> {
    /// Floats per input that [`Model::embed_batch`] gives for `pooling` (per token for
    /// [`Pooling::None`]): `n_embd`, or the classifier's outputs for [`Pooling::Rank`] — an error
    /// for a generation-only model, which has no classifier head.
    pub fn embedding_width(&self, pooling: Pooling) -> Result<usize, EngineError> {
        match (pooling, &self.classifier) {
            (Pooling::Rank, Some(head)) => Ok(head.n_out),
            (Pooling::Rank, None) => Err(EngineError::NoClassifierHead),
            _ => Ok(self.config.n_embd),
        }
    }

    /// Embeddings: each entry's tokens through the model in one batched pass, as
    /// [`Model::forward_batch`], then llama.cpp's pooling of the states after the output norm
    /// over each entry's tokens (an entry is a whole input: give it from an empty sequence). Rows
    /// of [`Model::embedding_width`] floats, in entry order — one per token for
    /// [`Pooling::None`], else one per entry — not normalized (see [`crate::embed::normalize`]).
    pub fn embed_batch<'w>(
        &self,
        entries: &mut [BatchEntry<'_, B>],
        pooling: Pooling,
        work: &'w mut Workspace<B>,
    ) -> Result<&'w [f32], EngineError> {
        self.embedding_width(pooling)?;
        let floats = self.run_batch(entries, work, |segments, tokens, work| {
            self.trunk(segments, tokens, work);
            self.pool(segments, pooling, work)
        })?;
        Ok(&work.buffers.logits[..floats])
    }

    /// Pools the residual rows the trunk left in `b.x`, per segment; returns how many floats it
    /// wrote to `b.logits`. Rank pooling needs the classifier ([`Model::embedding_width`] checked).
    pub(super) fn pool(
        &self,
        segments: &[Segment<'_>],
        pooling: Pooling,
        work: &mut Workspace<B>,
    ) -> usize {
        let c = &self.config;
        let be = &self.backend;
        let d = c.n_embd;
        let Workspace {
            scratch,
            buffers: b,
        } = work;
        let n = b.positions.len();
        let Buffers { x, xn, logits, .. } = b;
        let x = &x[..n * d];
        // Each segment's first row and length, in batch order.
        let spans = segments.iter().scan(0, |first, s| {
            let span = (*first, s.len);
            *first += s.len;
            Some(span)
        });
        match pooling {
            Pooling::None => {
                be.rms_norm(x, &self.output_norm, c.rms_norm_eps, grown(logits, n * d));
                n * d
            }
            Pooling::Mean => {
                let normed = grown(xn, n * d);
                be.rms_norm(x, &self.output_norm, c.rms_norm_eps, normed);
                let out = grown(logits, segments.len() * d);
                for ((first, len), dst) in spans.zip(out.chunks_exact_mut(d)) {
                    // llama.cpp multiplies each row by 1/len, then sums.
                    let inv = 1.0 / len as f32;
                    dst.fill(0.0);
                    for row in normed[first * d..(first + len) * d].chunks_exact(d) {
                        for (o, &v) in dst.iter_mut().zip(row) {
                            *o += v * inv;
                        }
                    }
                }
                segments.len() * d
            }
            Pooling::Cls | Pooling::Last => {
                let out = grown(logits, segments.len() * d);
                for ((first, len), dst) in spans.zip(out.chunks_exact_mut(d)) {
                    let row = if pooling == Pooling::Cls {
                        first
                    } else {
                        first + len - 1
                    };
                    be.rms_norm(
                        &x[row * d..(row + 1) * d],
                        &self.output_norm,
                        c.rms_norm_eps,
                        dst,
                    );
                }
                segments.len() * d
            }
            Pooling::Rank => {
                let Some(head) = &self.classifier else {
                    return 0;
                };
                // A causal model ranks on its last token (llama.cpp: RANK with causal attention).
                let last = grown(xn, segments.len() * d);
                for ((first, len), dst) in spans.zip(last.chunks_exact_mut(d)) {
                    let row = first + len - 1;
                    be.rms_norm(
                        &x[row * d..(row + 1) * d],
                        &self.output_norm,
                        c.rms_norm_eps,
                        dst,
                    );
                }
                let k = head.n_out;
                let out = grown(logits, segments.len() * k);
                be.matmul(&head.weight, last, segments.len(), out, scratch);
                for row in out.chunks_exact_mut(k) {
                    if let Some(bias) = &head.bias {
                        be.add(row, bias);
                    }
                    if head.softmax {
                        softmax(row);
                    }
                }
                segments.len() * k
            }
        }
    }
}

fn softmax(row: &mut [f32]) {
    let max = row.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let mut sum = 0.0f32;
    for v in row.iter_mut() {
        *v = (*v - max).exp();
        sum += *v;
    }
    for v in row.iter_mut() {
        *v /= sum;
    }
}
