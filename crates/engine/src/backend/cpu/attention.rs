//! The CPU backend's attention: keys and values stored in the cache's types, and causal attention
//! of each query row over its own sequence's cache, a key head's query heads together. Its limits
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
use oxibonsai_formats::kernels::{partner_of, Kernels};
use oxibonsai_formats::{Format, FormatKind};

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
    /// [`crate::Backend::store_kv`]: each row converted into the cache's type as it arrives (a
    /// block type through the conversion the reference engine's cache writes use: ggml's
    /// `from_float`, the activation conversion where the format has one).
    pub(super) fn store_kv_rows(
        &self,
        cache: &mut LayerCache,
        k: &[f32],
        v: &[f32],
        positions: &[usize],
    ) {
        let (hd, hdv) = (cache.head_dim, cache.head_dim_v);
        let (kr, vr) = (cache.n_head_kv * hd, cache.n_head_kv * hdv);
        let (kf, vf) = cache.formats();
        let (k_rot, v_rot) = (cache.k_rotation, cache.v_rotation);
        for (t, &pos) in positions.iter().enumerate() {
            for g in 0..cache.n_head_kv {
                let key = &k[t * kr + g * hd..][..hd];
                self.store_row(kf, key, k_rot, cache.key_row_mut(g, pos));
                let value = &v[t * vr + g * hdv..][..hdv];
                self.store_row(vf, value, v_rot, cache.value_row_mut(g, pos));
            }
        }
    }

    /// One row into a cache row of format `f`, rotated first by the Walsh–Hadamard transform of
    /// blocks of `rotation` values where the cache rotates (see [`crate::kv_cache::key_rotation`]).
    fn store_row(&self, f: &'static Format, src: &[f32], rotation: Option<usize>, dst: &mut [u8]) {
        let mut rotated = [0f32; MAX_HEAD_DIM];
        let src = match rotation {
            Some(block) => {
                let rotated = &mut rotated[..src.len()];
                rotated.copy_from_slice(src);
                self.kernels.fwht(rotated, src.len(), block, None);
                &*rotated
            }
            None => src,
        };
        match f.kind {
            // The slice conversion takes F16C where the CPU has it (a value at a time is a
            // software conversion).
            FormatKind::F16 => bytemuck::cast_slice_mut::<u8, f16>(dst).convert_from_f32_slice(src),
            _ if f.quantize_activation.is_some() => self.kernels.quantize_activation(f, src, dst),
            _ => (f.quantize)(src, dst),
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
        let f16_keys = usize::from(
            segments
                .first()
                .is_none_or(|s| s.layers[layer].kv().types.k == FormatKind::F16),
        );
        let attend = |(task, ((o, sc), qs)): AttentionTask<'_>| {
            let (g, t0) = (task / per_g, task % per_g * rows);
            let n_rows = rows.min(n - t0);
            // This task's queries, in f16 (each token's query heads of key head g are adjacent),
            // for an f16 key cache (a block-quantized one takes them in its partner format).
            for (r, dst) in qs.chunks_mut(block).take(n_rows * f16_keys).enumerate() {
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
                let n_q = (e - r) * n_group;
                let mut lens = [0usize; MAX_ATTENTION_QUERIES];
                for (i, len) in lens[..n_q].iter_mut().enumerate() {
                    *len = positions[t0 + r + i / n_group] + 1;
                }
                let lens = &lens[..n_q];
                let sc = &mut sc[r * n_group * len_max..e * n_group * len_max];
                if cache.types.k == FormatKind::F16 {
                    kernels.attention_scores(
                        cache.keys_f16(g),
                        &qs[r * block..e * block],
                        head_dim,
                        lens,
                        sc,
                        len_max,
                    );
                } else {
                    let first = (t0 + r) * n_head + g * n_group;
                    let queries = (0..n_q).map(|i| {
                        let row = first + i / n_group * n_head + i % n_group;
                        &q[row * head_dim..][..head_dim]
                    });
                    block_scores(kernels, cache, g, queries, lens, sc, len_max);
                }
                let mut sums = [0.0f32; MAX_ATTENTION_QUERIES];
                for ((s, sum), &len) in sc.chunks_mut(len_max).zip(&mut sums).zip(lens) {
                    *sum = kernels.softmax(&mut s[..len], scale);
                }
                let o = &mut o[r * n_group * head_dim_v..e * n_group * head_dim_v];
                if cache.types.v == FormatKind::F16 {
                    kernels.attention_values(sc, len_max, lens, cache.values_f16(g), o);
                } else {
                    // Read in place, each value row widened once for all of the call's queries.
                    kernels.attention_values_blocks(
                        cache.formats().1,
                        sc,
                        len_max,
                        lens,
                        cache.value_bytes(g),
                        cache.v_row,
                        o,
                    );
                }
                for (row, &sum) in o.chunks_mut(head_dim_v).zip(&sums) {
                    let inv = 1.0 / sum;
                    for acc in row.iter_mut() {
                        *acc *= inv;
                    }
                }
                if let Some(block) = cache.v_rotation {
                    // The values were stored rotated: rotating the sum back undoes it.
                    kernels.fwht(o, head_dim_v, block, None);
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

/// The scores of `queries` (f32 rows of the head dimension) against key head `g` of a
/// block-quantized (or f32 / bf16) key cache, as the reference engine's flash attention computes
/// them: each query converted once into the key type's partner format, then each score is the
/// format's dot product of a cached key row with it (this tier's matrix-vector kernel, which reads
/// the cache's blocks directly).
fn block_scores<'q>(
    kernels: &Kernels,
    cache: &LayerCache,
    g: usize,
    queries: impl Iterator<Item = &'q [f32]>,
    lens: &[usize],
    out: &mut [f32],
    out_stride: usize,
) {
    let (kf, _) = cache.formats();
    let partner = partner_of(kf.kind);
    let q_row = cache.head_dim / partner.block_elems * partner.block_bytes;
    // The widest partner row (f32 at the widest head) fits: `check_limits` bounds the head.
    let mut converted = [0u8; 4 * MAX_HEAD_DIM];
    let converted = &mut converted[..q_row];
    let keys = cache.key_bytes(g);
    let mut rotated = [0f32; MAX_HEAD_DIM];
    let rotated = &mut rotated[..cache.head_dim];
    for ((query, &len), o) in queries.zip(lens).zip(out.chunks_mut(out_stride)) {
        let query = match cache.k_rotation {
            // The keys were stored rotated: the same rotation of the query keeps every dot.
            Some(block) => {
                rotated.copy_from_slice(query);
                kernels.fwht(rotated, cache.head_dim, block, None);
                &*rotated
            }
            None => query,
        };
        kernels.quantize_activation(partner, query, converted);
        kernels.gemv(
            kf,
            &keys[..len * cache.k_row],
            cache.k_row,
            converted,
            &mut o[..len],
        );
    }
}
