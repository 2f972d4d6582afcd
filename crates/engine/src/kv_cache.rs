//! The KV cache of one sequence: per layer, keys and values of every position so far, in f16
//! (as the reference engine's default cache type). Sized once to the requested context.

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

    pub fn bytes(&self) -> usize {
        self.layers
            .iter()
            .map(|l| (l.k.len() + l.v.len()) * 2)
            .sum()
    }
}
