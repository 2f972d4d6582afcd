//! The KV cache of one sequence: per layer, keys and values of every position so far, in f16
//! (as the reference engine's default cache type). Sized once to the requested context.

use half::f16;

use crate::error::EngineError;

pub struct LayerCache {
    /// `[n_ctx][n_head_kv * head_dim]`
    pub k: Vec<f16>,
    /// `[n_ctx][n_head_kv * head_dim_v]`
    pub v: Vec<f16>,
    pub k_row: usize,
    pub v_row: usize,
}

pub struct KvCache {
    pub layers: Vec<LayerCache>,
    pub n_ctx: usize,
}

impl KvCache {
    pub fn new(
        n_layer: usize,
        n_ctx: usize,
        k_row: usize,
        v_row: usize,
    ) -> Result<KvCache, EngineError> {
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
                k_row,
                v_row,
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
