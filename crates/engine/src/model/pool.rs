//! The output stage of an embedding pass: llama.cpp's `build_pooling` on the states after the
//! output norm (`result_norm`), written to the workspace's output buffer in place of logits.

use oxibonsai_gguf::GgufFile;

use super::block::{load_optional_vector, Loader};
use super::{BatchEntry, Buffers, Logits, Model, Workspace};
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
        let floats = self.run_batch(entries, work, |segments, tokens, _, work| {
            self.trunk(segments, tokens, work);
            self.pool(segments, 0, pooling, work)
        })?;
        Ok(&work.buffers.pooled[..floats])
    }

    /// [`Model::forward_batch`] and [`Model::embed_batch`] in one pass, so that embeddings share
    /// each weight read with running generations: `generate`'s entries come first in the batch,
    /// `embed`'s after. Returns the last-token logits of `generate` (`[entries][n_vocab]`) and the
    /// pooled rows of `embed`; either list may be empty, not both.
    pub fn forward_batch_embedding<'w, 'e>(
        &self,
        generate: &mut [BatchEntry<'e, B>],
        embed: &mut [BatchEntry<'e, B>],
        pooling: Pooling,
        work: &'w mut Workspace<B>,
    ) -> Result<(&'w mut [f32], &'w [f32]), EngineError> {
        if !embed.is_empty() {
            self.embedding_width(pooling)?;
        }
        let n_generate = generate.len();
        let first_embedded: usize = generate.iter().map(|e| e.tokens.len()).sum();
        let mut all: Vec<BatchEntry<'_, B>> = generate
            .iter_mut()
            .chain(embed.iter_mut())
            .map(|e| BatchEntry {
                seq: &mut *e.seq,
                tokens: e.tokens,
            })
            .collect();
        let (rows, floats) = self.run_batch(&mut all, work, |segments, tokens, _, work| {
            self.trunk(segments, tokens, work);
            let (generating, embedding) = segments.split_at(n_generate);
            let rows = if generating.is_empty() {
                0
            } else {
                self.head(generating, Logits::Last, work)
            };
            let floats = if embedding.is_empty() {
                0
            } else {
                self.pool(embedding, first_embedded, pooling, work)
            };
            (rows, floats)
        })?;
        let b = &mut work.buffers;
        Ok((
            &mut b.logits[..rows * self.config.n_vocab],
            &b.pooled[..floats],
        ))
    }

    /// Pools, per segment, the residual rows the trunk left in `b.x` from row `first_row` on;
    /// returns how many floats it wrote to `b.pooled`. Rank pooling needs the classifier
    /// ([`Model::embedding_width`] checked).
    pub(super) fn pool(
        &self,
        segments: &[Segment<'_>],
        first_row: usize,
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
        let n: usize = segments.iter().map(|s| s.len).sum();
        let Buffers {
            x,
            xn,
            pooled: logits,
            ..
        } = b;
        let x = &x[first_row * d..(first_row + n) * d];
        // Each segment's first row (from `first_row`) and length, in batch order.
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
