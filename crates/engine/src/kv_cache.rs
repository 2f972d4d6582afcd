//! The KV cache of one attention layer of one sequence: keys and values of every position so far,
//! each in its cache type (`f16` by default, as the reference engine's; `-ctk` / `-ctv` choose
//! another). Sized once to the requested context.

use std::ops::Range;
use std::sync::{Arc, Weak};

use half::f16;
use oxibonsai_formats::{format, Format, FormatKind};

use crate::error::EngineError;

/// The cache types llama.cpp offers for `--cache-type-k` / `--cache-type-v`, by its names.
pub const CACHE_TYPES: [FormatKind; 9] = [
    FormatKind::F32,
    FormatKind::F16,
    FormatKind::BF16,
    FormatKind::Q8_0,
    FormatKind::Q4_0,
    FormatKind::Q4_1,
    FormatKind::Q5_0,
    FormatKind::Q5_1,
    FormatKind::IQ4_NL,
];

/// The types of a model's keys and values in its caches.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CacheTypes {
    pub k: FormatKind,
    pub v: FormatKind,
}

impl Default for CacheTypes {
    fn default() -> CacheTypes {
        CacheTypes {
            k: FormatKind::F16,
            v: FormatKind::F16,
        }
    }
}

/// The cache type named `name` (llama.cpp's spelling), or an error naming `flag` and the types
/// there are.
pub fn cache_type_by_name(flag: &str, name: &str) -> Result<FormatKind, EngineError> {
    CACHE_TYPES
        .into_iter()
        .find(|&k| format(k).name.eq_ignore_ascii_case(name))
        .ok_or_else(|| EngineError::BadCacheType {
            flag: flag.to_string(),
            reason: format!(
                "'{name}' is not a cache type (one of {})",
                CACHE_TYPES.map(|k| format(k).name).join(", ")
            ),
        })
}

/// Bytes of one cached row of `dim` values of `kind`, or an error naming `flag` when the row
/// is not whole blocks (llama.cpp refuses such a cache too).
pub fn cache_row_bytes(flag: &str, kind: FormatKind, dim: usize) -> Result<usize, EngineError> {
    let f = format(kind);
    if !CACHE_TYPES.contains(&kind) {
        return Err(EngineError::BadCacheType {
            flag: flag.to_string(),
            reason: format!("{} is not a cache type", f.name),
        });
    }
    if !dim.is_multiple_of(f.block_elems) {
        return Err(EngineError::BadCacheType {
            flag: flag.to_string(),
            reason: format!(
                "{} stores blocks of {} values; the model's head dimension {dim} is not a multiple",
                f.name, f.block_elems
            ),
        });
    }
    Ok(dim / f.block_elems * f.block_bytes)
}

/// The Walsh–Hadamard block the reference rotates keys by before a block-quantized cache stores
/// them (and queries by before they meet them), as llama.cpp's `attn_rot_k` does since its
/// quantized caches spread outliers that way: the largest power of two (64 or more) dividing the
/// head; `None` for a float cache or a head that is not a multiple of 64.
pub fn key_rotation(kind: FormatKind, head_dim: usize) -> Option<usize> {
    (is_block_type(kind) && head_dim > 0 && head_dim.is_multiple_of(64))
        .then(|| 1usize << head_dim.trailing_zeros())
}

/// The block values are rotated by before a block-quantized cache stores them (and attention's
/// result by after, the transform being its own inverse): 64, as llama.cpp's `attn_rot_v`.
pub fn value_rotation(kind: FormatKind, head_dim_v: usize) -> Option<usize> {
    (is_block_type(kind) && head_dim_v > 0 && head_dim_v.is_multiple_of(64)).then_some(64)
}

fn is_block_type(kind: FormatKind) -> bool {
    !matches!(kind, FormatKind::F32 | FormatKind::F16 | FormatKind::BF16)
}

/// Head-major, so that attention reads each head's keys and values as contiguous rows. The rows
/// are stored in 16-bit units (every cache type's row is an even number of bytes), so an f16
/// cache is read as `f16` values and a block-quantized one as the registry's block bytes.
///
/// Each cache has an identity (new at creation and at every clone) and a revision counter that
/// every write bumps, so a backend keeping a device copy of it ([`CacheIdentity`]) can tell
/// whether the rows changed since it last saw them.
pub struct LayerCache {
    /// `[n_head_kv][n_ctx][k_row]`
    k: Vec<u16>,
    /// `[n_head_kv][n_ctx][v_row]`
    v: Vec<u16>,
    pub n_head_kv: usize,
    pub n_ctx: usize,
    pub head_dim: usize,
    pub head_dim_v: usize,
    pub types: CacheTypes,
    /// Bytes of one key row / one value row.
    pub k_row: usize,
    pub v_row: usize,
    /// [`key_rotation`] / [`value_rotation`] of this cache.
    pub k_rotation: Option<usize>,
    pub v_rotation: Option<usize>,
    /// This cache's identity: a mirror holds a [`Weak`] of it and is freed once it is gone.
    identity: Arc<()>,
    /// Bumped by every write of rows (see [`LayerCache::revision`]).
    revision: u64,
}

/// Who a [`LayerCache`] is, for a backend's device copy of it: the same value as long as the cache
/// lives (a clone gets its own), and a handle that says when it is dropped.
#[derive(Clone, Debug)]
pub struct CacheIdentity(Weak<()>);

impl CacheIdentity {
    /// A number that is this cache's alone while the cache, or this handle, lives.
    pub fn key(&self) -> usize {
        self.0.as_ptr() as usize
    }

    /// Whether the cache is gone.
    pub fn dropped(&self) -> bool {
        self.0.strong_count() == 0
    }
}

impl Clone for LayerCache {
    fn clone(&self) -> LayerCache {
        LayerCache {
            k: self.k.clone(),
            v: self.v.clone(),
            identity: Arc::new(()),
            revision: 0,
            ..*self
        }
    }
}

impl LayerCache {
    /// A zeroed f16 cache (the caller has checked that the total size is reasonable).
    pub fn new(n_ctx: usize, n_head_kv: usize, head_dim: usize, head_dim_v: usize) -> LayerCache {
        LayerCache::with_types(
            n_ctx,
            n_head_kv,
            head_dim,
            head_dim_v,
            CacheTypes::default(),
        )
        .expect("an f16 cache takes any head dimension")
    }

    /// A zeroed cache of `types` (the caller has checked that the total size is reasonable);
    /// refused when a head is not whole blocks of its type.
    pub fn with_types(
        n_ctx: usize,
        n_head_kv: usize,
        head_dim: usize,
        head_dim_v: usize,
        types: CacheTypes,
    ) -> Result<LayerCache, EngineError> {
        let k_row = cache_row_bytes("--cache-type-k", types.k, head_dim)?;
        let v_row = cache_row_bytes("--cache-type-v", types.v, head_dim_v)?;
        debug_assert!(k_row.is_multiple_of(2) && v_row.is_multiple_of(2));
        Ok(LayerCache {
            k: vec![0; n_ctx * n_head_kv * k_row / 2],
            v: vec![0; n_ctx * n_head_kv * v_row / 2],
            n_head_kv,
            n_ctx,
            head_dim,
            head_dim_v,
            types,
            k_row,
            v_row,
            k_rotation: key_rotation(types.k, head_dim),
            v_rotation: value_rotation(types.v, head_dim_v),
            identity: Arc::new(()),
            revision: 0,
        })
    }

    /// [`CacheIdentity::key`] of this cache's identity, without making a handle.
    pub fn identity_key(&self) -> usize {
        Arc::as_ptr(&self.identity) as usize
    }

    /// This cache's identity (see [`CacheIdentity`]).
    pub fn identity(&self) -> CacheIdentity {
        CacheIdentity(Arc::downgrade(&self.identity))
    }

    /// Changes whenever rows are written ([`Self::key_row_mut`], [`Self::value_row_mut`],
    /// [`Self::copy_positions`]): a device copy made at one revision holds the
    /// same rows as long as the revision is the same.
    pub fn revision(&self) -> u64 {
        self.revision
    }

    /// Every key and every value as stored (`[n_head_kv][n_ctx][row]` each, in 16-bit units).
    pub fn raw(&self) -> (&[u16], &[u16]) {
        (&self.k, &self.v)
    }

    /// The registry rows of the key and value types.
    pub fn formats(&self) -> (&'static Format, &'static Format) {
        (format(self.types.k), format(self.types.v))
    }

    /// (KV heads, key dim, value dim, types): two caches can exchange positions when these agree.
    pub fn shape(&self) -> (usize, usize, usize, CacheTypes) {
        (self.n_head_kv, self.head_dim, self.head_dim_v, self.types)
    }

    /// Key head `g`'s rows of every position, as bytes of the key type.
    pub fn key_bytes(&self, g: usize) -> &[u8] {
        head(bytemuck::cast_slice(&self.k), g, self.n_ctx * self.k_row)
    }

    /// Value head `g`'s rows of every position, as bytes of the value type.
    pub fn value_bytes(&self, g: usize) -> &[u8] {
        head(bytemuck::cast_slice(&self.v), g, self.n_ctx * self.v_row)
    }

    /// Key head `g`'s rows of an f16 key cache.
    pub fn keys_f16(&self, g: usize) -> &[f16] {
        assert_eq!(self.types.k, FormatKind::F16, "keys_f16 of a non-f16 cache");
        head(bytemuck::cast_slice(&self.k), g, self.n_ctx * self.head_dim)
    }

    /// Value head `g`'s rows of an f16 value cache.
    pub fn values_f16(&self, g: usize) -> &[f16] {
        assert_eq!(
            self.types.v,
            FormatKind::F16,
            "values_f16 of a non-f16 cache"
        );
        head(
            bytemuck::cast_slice(&self.v),
            g,
            self.n_ctx * self.head_dim_v,
        )
    }

    /// The key row of head `g` at `pos`, to be written.
    pub fn key_row_mut(&mut self, g: usize, pos: usize) -> &mut [u8] {
        self.revision += 1;
        let at = (g * self.n_ctx + pos) * self.k_row;
        &mut bytemuck::cast_slice_mut(&mut self.k)[at..at + self.k_row]
    }

    /// The value row of head `g` at `pos`, to be written.
    pub fn value_row_mut(&mut self, g: usize, pos: usize) -> &mut [u8] {
        self.revision += 1;
        let at = (g * self.n_ctx + pos) * self.v_row;
        &mut bytemuck::cast_slice_mut(&mut self.v)[at..at + self.v_row]
    }

    /// Copies the keys and values of `positions` from `src` into the same positions here. The
    /// caller has checked the shapes (types included) and that both caches hold the positions.
    pub(crate) fn copy_positions(&mut self, src: &LayerCache, positions: Range<usize>) {
        self.revision += 1;
        let (start, end) = (positions.start, positions.end);
        // Head-major: each head's run of positions is contiguous in both caches.
        let copy = |dst: &mut [u16], dst_ctx: usize, src: &[u16], src_ctx: usize, row: usize| {
            let units = row / 2;
            if units == 0 {
                return; // nothing stored (and no chunks of length 0)
            }
            for (d, s) in dst
                .chunks_mut(dst_ctx * units)
                .zip(src.chunks(src_ctx * units))
            {
                d[start * units..end * units].copy_from_slice(&s[start * units..end * units]);
            }
        };
        copy(&mut self.k, self.n_ctx, &src.k, src.n_ctx, self.k_row);
        copy(&mut self.v, self.n_ctx, &src.v, src.n_ctx, self.v_row);
    }

    pub fn bytes(&self) -> usize {
        (self.k.len() + self.v.len()) * 2
    }
}

/// Head `g`'s run of `len` elements.
fn head<T>(all: &[T], g: usize, len: usize) -> &[T] {
    &all[g * len..(g + 1) * len]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_write_changes_the_revision_and_a_clone_is_another_cache() {
        let mut a = LayerCache::new(4, 2, 8, 8);
        let r0 = a.revision();
        a.key_row_mut(1, 2)[0] = 1;
        let r1 = a.revision();
        assert_ne!(r1, r0);
        a.value_row_mut(0, 3)[0] = 1;
        let r2 = a.revision();
        assert_ne!(r2, r1);
        let b = a.clone();
        a.copy_positions(&b, 0..2);
        assert_ne!(a.revision(), r2);
        // Reads leave it alone.
        let r3 = a.revision();
        let _ = (a.key_bytes(0), a.raw());
        assert_eq!(a.revision(), r3);

        let (ia, ib) = (a.identity(), b.identity());
        assert_ne!(ia.key(), ib.key());
        assert_eq!(ia.key(), a.identity_key());
        assert!(!ib.dropped());
        drop(b);
        assert!(ib.dropped());
        assert!(!ia.dropped());
    }
}
