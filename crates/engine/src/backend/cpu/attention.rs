//! The CPU backend's attention: keys and values stored in the f16 cache, and causal attention of
//! each query row over its own sequence's cache, a key head's query heads together. Its limits
//! (the group and head sizes its scratch is sized for) are checked when a model is loaded.

use half::f16;
use half::slice::HalfFloatSliceExt;
use rayon::prelude::*;

use super::pool::rows_each;
use super::{CpuBackend, CpuScratch};
use crate::backend::{grown, AttentionShape, Segment};
use crate::config::ModelConfig;
use crate::error::EngineError;
use crate::kv_cache::LayerCache;

/// The largest head dimension (`check_config` refuses more; RoPE rotates at most the head): a
/// bound on the attention scratch a file can ask for.
pub const MAX_HEAD_DIM: usize = 1024;

/// Rows of a prompt per attention task (each key and value row is widened once for all of their
/// query heads of one key head).
const ATTENTION_ROWS: usize = 4;

/// One attention task as the parallel pass hands it out: its index, then its results, scores and
/// queries.
type AttentionTask<'a> = (usize, ((&'a mut [f32], &'a mut [f32]), &'a mut [f16]));

/// The most query heads per key head (`check_config` refuses more).
pub const MAX_GROUP: usize = 64;

/// The most queries of one attention kernel call: `ATTENTION_ROWS` rows × a key head's group.
const MAX_ATTENTION_QUERIES: usize = ATTENTION_ROWS * MAX_GROUP;

/// [`crate::Backend::check_config`]: refuses a model whose key heads group more query heads, or
/// whose heads are larger, than the attention takes, naming the GGUF key.
pub(super) fn check_limits(c: &ModelConfig) -> Result<(), EngineError> {
    let key = |suffix: &str| format!("{}.{suffix}", c.arch.name());
    if c.n_group() > MAX_GROUP {
        return Err(EngineError::BadHyperParameter {
            key: key("attention.head_count_kv"),
            reason: format!(
                "{} query heads per key head exceed {MAX_GROUP}",
                c.n_group()
            ),
        });
    }
    for (k, d) in [
        ("attention.key_length", c.head_dim),
        ("attention.value_length", c.head_dim_v),
    ] {
        if d > MAX_HEAD_DIM {
            return Err(EngineError::BadHyperParameter {
                key: key(k),
                reason: format!("head dimension {d} exceeds {MAX_HEAD_DIM}"),
            });
        }
    }
    Ok(())
}

impl CpuBackend {
    /// [`crate::Backend::store_kv`].
    pub(super) fn store_kv_rows(
        &self,
        cache: &mut LayerCache,
        k: &[f32],
        v: &[f32],
        positions: &[usize],
    ) {
        let (hd, hdv, n_ctx) = (cache.head_dim, cache.head_dim_v, cache.n_ctx);
        let (kr, vr) = (cache.n_head_kv * hd, cache.n_head_kv * hdv);
        for (t, &pos) in positions.iter().enumerate() {
            for g in 0..cache.n_head_kv {
                // The slice conversion takes F16C where the CPU has it (a value at a time is
                // a software conversion).
                cache.k[(g * n_ctx + pos) * hd..][..hd]
                    .convert_from_f32_slice(&k[t * kr + g * hd..][..hd]);
                cache.v[(g * n_ctx + pos) * hdv..][..hdv]
                    .convert_from_f32_slice(&v[t * vr + g * hdv..][..hdv]);
            }
        }
    }

    /// [`crate::Backend::attention`].
    #[allow(clippy::too_many_arguments)]
    pub(super) fn attention_rows(
        &self,
        q: &[f32],
        segments: &[Segment<'_>],
        layer: usize,
        positions: &[usize],
        shape: AttentionShape,
        out: &mut [f32],
        scratch: &mut CpuScratch,
    ) {
        let AttentionShape {
            n_head,
            n_head_kv,
            head_dim,
            head_dim_v,
            scale,
        } = shape;
        let n = positions.len();
        let n_group = n_head / n_head_kv;
        let len_max = positions.iter().max().map_or(0, |&p| p + 1);
        let kernels = &self.kernels;
        let CpuScratch {
            scores,
            row_segment,
            queries,
            attended,
            ..
        } = scratch;
        // Which segment each row belongs to.
        row_segment.clear();
        for (i, s) in segments.iter().enumerate() {
            row_segment.extend(std::iter::repeat_n(i, s.len));
        }
        debug_assert_eq!(row_segment.len(), n);
        let row_segment = &*row_segment;
        // One task: `rows` rows × the query heads of one key head. A prompt's rows go a few at a
        // time (each key and value row is then widened once for all their queries); a decode
        // step's one by one (tasks over the key heads and sequences keep the threads busy).
        let rows = if n >= 8 * ATTENTION_ROWS {
            ATTENTION_ROWS
        } else {
            1
        };
        let per_g = n.div_ceil(rows);
        let n_pad = per_g * rows;
        // Queries, scores and results per key head, `[key head][row (padded to whole tasks)]
        // [query head of the group][…]`, so that each task's are one contiguous run. Queries
        // meet the f16 keys in f16, as the reference's attention does.
        let (q_task, s_task, o_task) = (
            rows * n_group * head_dim,
            rows * n_group * len_max,
            rows * n_group * head_dim_v,
        );
        let queries = grown(queries, n_head_kv * per_g * q_task);
        let scores = grown(scores, n_head_kv * per_g * s_task);
        let attended = grown(attended, n_head_kv * per_g * o_task);
        let block = n_group * head_dim;
        let attend = |(task, ((o, sc), qs)): AttentionTask<'_>| {
            let (g, t0) = (task / per_g, task % per_g * rows);
            let n_rows = rows.min(n - t0);
            // This task's queries, in f16 (each token's query heads of key head g are adjacent).
            for (r, dst) in qs.chunks_mut(block).take(n_rows).enumerate() {
                dst.convert_from_f32_slice(
                    &q[((t0 + r) * n_head + g * n_group) * head_dim..][..block],
                );
            }
            let qs = &*qs;
            // Runs of rows of one sequence: one kernel call each.
            let mut r = 0;
            while r < n_rows {
                let seg = row_segment[t0 + r];
                let mut e = r + 1;
                while e < n_rows && row_segment[t0 + e] == seg {
                    e += 1;
                }
                let cache = segments[seg].layers[layer].kv();
                let n_ctx = cache.n_ctx;
                let n_q = (e - r) * n_group;
                let mut lens = [0usize; MAX_ATTENTION_QUERIES];
                for (i, len) in lens[..n_q].iter_mut().enumerate() {
                    *len = positions[t0 + r + i / n_group] + 1;
                }
                let lens = &lens[..n_q];
                let keys = &cache.k[g * n_ctx * head_dim..(g + 1) * n_ctx * head_dim];
                let values = &cache.v[g * n_ctx * head_dim_v..(g + 1) * n_ctx * head_dim_v];
                let sc = &mut sc[r * n_group * len_max..e * n_group * len_max];
                kernels.attention_scores(
                    keys,
                    &qs[r * block..e * block],
                    head_dim,
                    lens,
                    sc,
                    len_max,
                );
                let mut sums = [0.0f32; MAX_ATTENTION_QUERIES];
                for ((s, sum), &len) in sc.chunks_mut(len_max).zip(&mut sums).zip(lens) {
                    *sum = kernels.softmax(&mut s[..len], scale);
                }
                let o = &mut o[r * n_group * head_dim_v..e * n_group * head_dim_v];
                kernels.attention_values(sc, len_max, lens, values, o);
                for (row, &sum) in o.chunks_mut(head_dim_v).zip(&sums) {
                    let inv = 1.0 / sum;
                    for acc in row.iter_mut() {
                        *acc *= inv;
                    }
                }
                r = e;
            }
        };
        self.pool.install(|| {
            attended
                .par_chunks_mut(o_task)
                .zip(scores.par_chunks_mut(s_task))
                .zip(queries.par_chunks_mut(q_task))
                .enumerate()
                .for_each(attend);
            let attended = &*attended;
            rows_each(out, n_head * head_dim_v, |t, row| {
                for (g, dst) in row.chunks_mut(n_group * head_dim_v).enumerate() {
                    dst.copy_from_slice(
                        &attended[(g * n_pad + t) * n_group * head_dim_v..][..dst.len()],
                    );
                }
            });
        });
    }
}
