//! The KV cache of one sequence: per layer, keys and values of every position so far, in f16
//! (as the reference engine's default cache type). Sized once to the requested context.

use std::ops::Range;

use half::f16;

use crate::error::EngineError;

/// Head-major, so that attention reads each head's keys and values as contiguous f16 rows.
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

pub struct KvCache {
    pub layers: Vec<LayerCache>,
    pub n_ctx: usize,
}

impl KvCache {
    pub fn new(
        n_layer: usize,
        n_ctx: usize,
        n_head_kv: usize,
        head_dim: usize,
        head_dim_v: usize,
    ) -> Result<KvCache, EngineError> {
        let (k_row, v_row) = (n_head_kv * head_dim, n_head_kv * head_dim_v);
        let bytes = n_layer as u128 * n_ctx as u128 * (k_row + v_row) as u128 * 2;
        // A context that cannot be held is refused here, not by an allocation failure.
        if n_ctx == 0 || bytes > (1u128 << 40) {
            return Err(EngineError::BadContext {
                requested: n_ctx,
                reason: format!("the KV cache would take {bytes} bytes"),
            });
        }
        let layers = (0..n_layer)
            .map(|_| LayerCache {
                k: vec![f16::ZERO; n_ctx * k_row],
                v: vec![f16::ZERO; n_ctx * v_row],
                n_head_kv,
                n_ctx,
                head_dim,
                head_dim_v,
            })
            .collect();
        Ok(KvCache { layers, n_ctx })
    }

    /// Copies the keys and values of `positions` from `src`, a cache of the same model, into the
    /// same positions here.
    pub fn copy_positions(
        &mut self,
        src: &KvCache,
        positions: Range<usize>,
    ) -> Result<(), EngineError> {
        let (start, end) = (positions.start, positions.end);
        let refuse = |reason: String| EngineError::KvCopy { start, end, reason };
        if start > end || end > self.n_ctx.min(src.n_ctx) {
            return Err(refuse(format!(
                "the caches hold {} and {} positions",
                src.n_ctx, self.n_ctx
            )));
        }
        if self.layers.len() != src.layers.len() {
            return Err(refuse(format!(
                "the caches have {} and {} layers",
                src.layers.len(),
                self.layers.len()
            )));
        }
        let shape = |l: &LayerCache| (l.n_head_kv, l.head_dim, l.head_dim_v);
        if let Some((i, (dst, src))) = (self.layers.iter().zip(&src.layers).enumerate())
            .find(|(_, (dst, src))| shape(dst) != shape(src))
        {
            return Err(refuse(format!(
                "layer {i} has (KV heads, key dim, value dim) {:?} in the source and {:?} here",
                shape(src),
                shape(dst)
            )));
        }
        // Head-major: each head's run of positions is contiguous in both caches.
        let copy = |dst: &mut [f16], dst_ctx: usize, src: &[f16], src_ctx: usize, dim: usize| {
            if dim == 0 {
                return; // nothing stored (and no chunks of length 0)
            }
            for (d, s) in dst.chunks_mut(dst_ctx * dim).zip(src.chunks(src_ctx * dim)) {
                d[start * dim..end * dim].copy_from_slice(&s[start * dim..end * dim]);
            }
        };
        for (dst, src) in self.layers.iter_mut().zip(&src.layers) {
            copy(&mut dst.k, dst.n_ctx, &src.k, src.n_ctx, dst.head_dim);
            copy(&mut dst.v, dst.n_ctx, &src.v, src.n_ctx, dst.head_dim_v);
        }
        Ok(())
    }

    pub fn bytes(&self) -> usize {
        self.layers
            .iter()
            .map(|l| (l.k.len() + l.v.len()) * 2)
            .sum()
    }
}
