//! The KV cache of one attention layer of one sequence: keys and values of every position so far,
//! in f16 (as the reference engine's default cache type). Sized once to the requested context.

use std::ops::Range;

use half::f16;

/// Head-major, so that attention reads each head's keys and values as contiguous f16 rows.
#[derive(Clone)]
pub struct LayerCache {
    /// `[n_head_kv][n_ctx][head_dim]`
    pub k: Vec<f16>,
    /// `[n_head_kv][n_ctx][head_dim_v]`
    pub v: Vec<f16>,
    pub n_head_kv: usize,
    pub n_ctx: usize,
    pub head_dim: usize,
    pub head_dim_v: usize,
}

impl LayerCache {
    /// A zeroed cache (the caller has checked that the total size is reasonable).
    pub fn new(n_ctx: usize, n_head_kv: usize, head_dim: usize, head_dim_v: usize) -> LayerCache {
        LayerCache {
            k: vec![f16::ZERO; n_ctx * n_head_kv * head_dim],
            v: vec![f16::ZERO; n_ctx * n_head_kv * head_dim_v],
            n_head_kv,
            n_ctx,
            head_dim,
            head_dim_v,
        }
    }

    /// (KV heads, key dim, value dim): two caches can exchange positions when these agree.
    pub fn shape(&self) -> (usize, usize, usize) {
        (self.n_head_kv, self.head_dim, self.head_dim_v)
    }

    /// Copies the keys and values of `positions` from `src` into the same positions here. The
    /// caller has checked the shapes and that both caches hold the positions.
    pub(crate) fn copy_positions(&mut self, src: &LayerCache, positions: Range<usize>) {
        let (start, end) = (positions.start, positions.end);
        // Head-major: each head's run of positions is contiguous in both caches.
        let copy = |dst: &mut [f16], dst_ctx: usize, src: &[f16], src_ctx: usize, dim: usize| {
            if dim == 0 {
                return; // nothing stored (and no chunks of length 0)
            }
            for (d, s) in dst.chunks_mut(dst_ctx * dim).zip(src.chunks(src_ctx * dim)) {
                d[start * dim..end * dim].copy_from_slice(&s[start * dim..end * dim]);
            }
        };
        copy(&mut self.k, self.n_ctx, &src.k, src.n_ctx, self.head_dim);
        copy(&mut self.v, self.n_ctx, &src.v, src.n_ctx, self.head_dim_v);
    }

    pub fn bytes(&self) -> usize {
        (self.k.len() + self.v.len()) * 2
    }
}
