//! The device copies of the host KV caches the resident step attends over: one per (sequence
//! cache, layer), found by the cache's identity, f32 or f16 as the host's, in the host's layout
//! (`[n_head_kv][n_ctx][row]`).
//!
//! The host's `LayerCache` stays the source of truth (the prefix cache, rewinds, state files and
//! speculative decoding all work on it). The step's shaders store each new row in the mirror
//! (rounded to f16 to nearest even, as the CPU's conversion does) and the host gets the same rows
//! from the read-back; a mirror then remembers the host cache's revision. Any other write to the
//! host cache (a prefix copy, a state file, a pass that ran op by op) changes the revision, and
//! the mirror is written again from the host's rows `0..start` before the next step reads it. A
//! rewind writes nothing: the positions past it are overwritten by the next step, and attention
//! reads only up to its own position. The mirror of a dropped cache is freed at the next step.

use std::collections::HashMap;

use oxibonsai_formats::FormatKind;
use oxibonsai_gpu::{Gpu, GpuError, KvCache};

use crate::backend::Segment;
use crate::kv_cache::{CacheIdentity, LayerCache};
use crate::state::LayerState;

struct Mirror {
    identity: CacheIdentity,
    cache: KvCache,
    /// The host cache's revision the mirror's rows agree with (up to the last step's position).
    revision: u64,
}

/// The mirrors, by [`CacheIdentity::key`].
#[derive(Default)]
pub(super) struct Mirrors(HashMap<usize, Mirror>);

impl Mirrors {
    /// How many mirrors are held.
    pub(super) fn len(&self) -> usize {
        self.0.len()
    }

    /// The mirror of `host` (after [`Mirrors::sync`]).
    pub(super) fn of(&self, host: &LayerCache) -> Option<&KvCache> {
        self.0.get(&host.identity_key()).map(|m| &m.cache)
    }

    /// Frees the mirrors of dropped caches, makes one for each new cache of `segments` and writes
    /// the host's rows `0..start` to each mirror whose cache changed since it last agreed.
    pub(super) fn sync(&mut self, gpu: &Gpu, segments: &[Segment<'_>]) -> Result<(), GpuError> {
        self.0.retain(|_, m| {
            let keep = !m.identity.dropped();
            if !keep {
                // The cached bind groups hold the buffers: forget them, or nothing is freed.
                gpu.forget_bindings_of(&[&m.cache.k, &m.cache.v]);
            }
            keep
        });
        for s in segments {
            for layer in s.layers.iter() {
                let LayerState::Kv(host) = layer else {
                    continue;
                };
                let key = host.identity_key();
                let stale = match self.0.get(&key) {
                    Some(m) => m.revision != host.revision(),
                    None => {
                        let cache = KvCache::new(
                            gpu,
                            host.n_head_kv,
                            host.head_dim,
                            host.head_dim_v,
                            host.n_ctx,
                            host.types.k == FormatKind::F16,
                        )?;
                        gpu.settle("allocating a KV cache mirror")?;
                        self.0.insert(
                            key,
                            Mirror {
                                identity: host.identity(),
                                cache,
                                revision: host.revision(),
                            },
                        );
                        true
                    }
                };
                let Some(m) = self.0.get_mut(&key) else {
                    continue;
                };
                if stale && s.start > 0 {
                    let (k, v) = host.raw();
                    for (rows, dst, row) in
                        [(k, &m.cache.k, host.k_row), (v, &m.cache.v, host.v_row)]
                    {
                        // Head-major on both sides: head g's rows 0..start in one write (rows are
                        // whole 32-bit words: f32, or an even count of f16 values).
                        let units = row / 2;
                        for g in 0..host.n_head_kv {
                            let from = g * host.n_ctx * units;
                            gpu.write_at(dst, from / 2, &rows[from..from + s.start * units])?;
                        }
                    }
                }
                m.revision = host.revision();
            }
        }
        Ok(())
    }

    /// After a step stored its rows in both the host caches and the mirrors: they agree again.
    pub(super) fn settled(&mut self, segments: &[Segment<'_>]) {
        for s in segments {
            for layer in s.layers.iter() {
                if let LayerState::Kv(host) = layer {
                    if let Some(m) = self.0.get_mut(&host.identity_key()) {
                        m.revision = host.revision();
                    }
                }
            }
        }
    }
}
