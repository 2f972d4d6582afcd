//! The KV cache on the device and attention over it: for decode (one token, all heads), split
//! over positions — several workgroups a head, each an online softmax over a chunk of positions,
//! the last to finish combining them (see `shaders/attention_decode.wgsl`); for a run of a
//! prompt's tokens, their rows stored in one dispatch and a causal tiled attention over them in
//! one more (`store_kv_rows`, `chunk_attention`, `shaders/attention_chunk.wgsl`).

use std::sync::atomic::Ordering;

use crate::device::{Gpu, GpuError};
use oxibonsai_formats::q8_0::QK8_0;
use oxibonsai_formats::q8_k::QK_K;
use oxibonsai_formats::FormatKind;

use crate::gemv::Q8Tensor;
use crate::ops::{count, holds, shader, Recorder, Shader, Tensor};

/// Keys and values of one layer on the device: key head g's row for position t at [g][t],
/// `n_ctx` rows a head, f32 or f16 (stored as pairs).
pub struct KvCache {
    pub k: Tensor,
    pub v: Tensor,
    pub(crate) n_head_kv: usize,
    pub(crate) head_dim: usize,
    pub(crate) head_dim_v: usize,
    pub(crate) n_ctx: usize,
    pub(crate) f16: bool,
}

/// The largest head dimension the attention shader takes (4 output values per invocation).
pub const MAX_HEAD_DIM_V: usize = 1024;

/// The most chunks decode attention splits a head's positions into (the shader's `MAX_SPLITS`).
pub const MAX_ATTENTION_SPLITS: usize = 32;

/// The most query heads attention takes: the partials buffer starts with a done-counter a head,
/// at the same words for every shape.
pub const MAX_ATTENTION_HEADS: usize = 1024;

/// The most 256-value blocks a Q8_K attention output holds: a done-counter a block follows the
/// heads' (`attention_out_q8_k.wgsl`).
const MAX_ATTENTION_BLOCKS: usize = 1024;

/// Words of the partials buffer before the first partial (the shader's `COUNTERS`).
const ATTENTION_COUNTERS: usize = MAX_ATTENTION_HEADS + MAX_ATTENTION_BLOCKS;

/// Decode attention's kernel settings (`shaders/attention_decode.wgsl`'s override constants;
/// `Gpu::set_attention_kernel`, or `OXIBONSAI_GPU_ATTN` when the device opens): the default is
/// the kernel as it was before the settings existed, bit for bit. Each setting's bits are a
/// function of n_past and the shape alone, as the default's.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AttentionKernel {
    /// Positions a tile, 64 or 32: 256 / `tile` invocations score each position (each a share of
    /// the dot product: a shorter serial chain at 32).
    pub tile: u32,
    /// The fewest tiles a chunk holds, 1 or 2: with 1, a context of 65 positions is split over 2
    /// chunks of 64 (3 of 32 at `tile` 32), more workgroups a head at short contexts.
    pub min_tiles: u32,
    /// The key pass's loads issued 4 at a time before their products (the same products in the
    /// same order: the same bits as without).
    pub key_unroll: bool,
    /// The tile's maximum by a tree (8 invocations' partial maxima, then theirs) instead of every
    /// invocation scanning the tile's scores (a maximum is exact: the same bits).
    pub tree_max: bool,
    /// GQA packing: a workgroup takes one (chunk, KV head) and all its query heads (at most
    /// [`MAX_GQA_PACK`]), loading each key and value word once for them, each head's sums in the
    /// unpacked kernel's order (the same bits). Larger groups, and in the fused RoPE + store
    /// dispatch groups whose query heads exceed 512 values, run the unpacked kernel.
    pub gqa_pack: bool,
}

/// The most query heads a KV head has for [`AttentionKernel::gqa_pack`] to pack them (the
/// shader's `MAX_GROUP`).
pub const MAX_GQA_PACK: usize = 8;

impl AttentionKernel {
    /// The kernel as it was: tiles of 64, at least 2 a chunk, a plain key loop, every invocation
    /// scanning the scores for the maximum.
    pub const DEFAULT: AttentionKernel = AttentionKernel {
        tile: 64,
        min_tiles: 2,
        key_unroll: false,
        tree_max: false,
        gqa_pack: false,
    };

    /// `default`, or a `,`-separated list of changes to it: `tile32` (or `tile64`), `min1` (or
    /// `min2`), `unroll`, `tree`, `gqa` — e.g. `tile32,min1,unroll,tree,gqa`.
    pub fn parse(text: &str) -> Result<AttentionKernel, GpuError> {
        let mut kernel = AttentionKernel::DEFAULT;
        for word in text.split(',').map(str::trim) {
            match word {
                "default" => {}
                "tile64" => kernel.tile = 64,
                "tile32" => kernel.tile = 32,
                "min2" => kernel.min_tiles = 2,
                "min1" => kernel.min_tiles = 1,
                "unroll" => kernel.key_unroll = true,
                "tree" => kernel.tree_max = true,
                "gqa" => kernel.gqa_pack = true,
                _ => {
                    return Err(GpuError::Shape {
                        what: "attention kernel (OXIBONSAI_GPU_ATTN)".to_owned(),
                        reason: format!(
                            "{word:?} in {text:?} is not `default`, `tile32`, `tile64`, `min1`, \
                             `min2`, `unroll`, `tree` or `gqa` (a `,`-separated list)"
                        ),
                    })
                }
            }
        }
        Ok(kernel)
    }

    /// Positions a chunk holds at least: a context this short is one chunk, which emits its head
    /// directly.
    fn min_chunk(self) -> usize {
        (self.tile * self.min_tiles) as usize
    }

    /// The setting as one word (0 the default): what [`Gpu::set_attention_kernel`] stores.
    fn code(self) -> u32 {
        u32::from(self.tile == 32)
            | u32::from(self.min_tiles == 1) << 1
            | u32::from(self.key_unroll) << 2
            | u32::from(self.tree_max) << 3
            | u32::from(self.gqa_pack) << 4
    }

    fn from_code(code: u32) -> AttentionKernel {
        AttentionKernel {
            tile: if code & 1 != 0 { 32 } else { 64 },
            min_tiles: if code & 2 != 0 { 1 } else { 2 },
            key_unroll: code & 4 != 0,
            tree_max: code & 8 != 0,
            gqa_pack: code & 16 != 0,
        }
    }

    /// The shader's override constants for the setting (`pack`: whether this dispatch packs a
    /// KV head's query heads, [`AttentionKernel::gqa_pack`] where the input and group allow).
    fn constants(self, pack: bool) -> [(&'static str, f64); 5] {
        [
            ("TILE", f64::from(self.tile)),
            ("MIN_TILES", f64::from(self.min_tiles)),
            ("KEY_UNROLL", f64::from(u8::from(self.key_unroll))),
            ("TREE_MAX", f64::from(u8::from(self.tree_max))),
            ("GQA_PACK", f64::from(u8::from(pack))),
        ]
    }
}

impl Default for AttentionKernel {
    fn default() -> AttentionKernel {
        AttentionKernel::DEFAULT
    }
}

impl std::fmt::Display for AttentionKernel {
    /// The setting as [`AttentionKernel::parse`] reads it (`default` for the default).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut words = Vec::new();
        if self.tile == 32 {
            words.push("tile32");
        }
        if self.min_tiles == 1 {
            words.push("min1");
        }
        if self.key_unroll {
            words.push("unroll");
        }
        if self.tree_max {
            words.push("tree");
        }
        if self.gqa_pack {
            words.push("gqa");
        }
        if words.is_empty() {
            words.push("default");
        }
        f.write_str(&words.join(","))
    }
}

impl Gpu {
    /// Sets decode attention's kernel ([`AttentionKernel`]) for dispatches recorded from here on
    /// (those recorded before keep theirs). Read by every attention dispatch: an atomic.
    pub fn set_attention_kernel(&self, kernel: AttentionKernel) {
        self.cache
            .attention_kernel
            .store(kernel.code(), Ordering::Relaxed);
    }

    /// Decode attention's kernel setting ([`Gpu::set_attention_kernel`]).
    pub fn attention_kernel(&self) -> AttentionKernel {
        AttentionKernel::from_code(self.cache.attention_kernel.load(Ordering::Relaxed))
    }

    /// Caps the chunks decode attention splits a head into (1 ..= [`MAX_ATTENTION_SPLITS`], the
    /// default): 1 is one workgroup a head over every position, for measuring what the split
    /// buys. Dispatches recorded before the call keep the cap they were recorded with.
    pub fn set_max_attention_splits(&self, most: usize) {
        self.cache
            .attention_splits
            .store(most.clamp(1, MAX_ATTENTION_SPLITS), Ordering::Relaxed);
    }

    /// Chunk slots a head is dispatched with when at most `n_ctx` positions are read by
    /// `kernel`: enough for them at its fewest positions a chunk, at most the cap. The shader's
    /// chunks are MIN_TILES tiles whenever the slots suffice for that, so up to 32 × that many
    /// positions (4096 by default) the chunking (and the bits) depend on n_past alone, not on
    /// this count; past it, or with fewer slots, chunks grow to fit the slots (never more chunks
    /// than slots).
    fn attention_splits(&self, n_ctx: usize, kernel: AttentionKernel) -> usize {
        let most = match self.cache.attention_splits.load(Ordering::Relaxed) {
            0 => MAX_ATTENTION_SPLITS,
            n => n,
        };
        n_ctx.div_ceil(kernel.min_chunk()).clamp(1, most)
    }

    /// The attention partials' buffer (the done-counters, then a partial a chunk), at least
    /// `words` long: shared by every attention dispatch (wgpu orders dispatches that write one
    /// buffer), grown and never shrunk. Its counters start at zero and every dispatch leaves
    /// them there (the combining workgroup resets its head's).
    fn attention_partials(&self, words: usize) -> Result<wgpu::Buffer, GpuError> {
        let mut held = self.cache.attention_partials.lock().map_err(|_| {
            self.run_error(
                "the attention partials",
                "a thread panicked holding them".to_owned(),
            )
        })?;
        if let Some(t) = held.as_ref() {
            if t.len() >= words {
                return Ok(t.buffer.clone());
            }
        }
        let t = self.tensor("attention partials", words)?;
        let buffer = t.buffer.clone();
        *held = Some(t);
        Ok(buffer)
    }
}

impl KvCache {
    /// A zeroed cache. F16 needs even head dimensions (values are stored in pairs).
    pub fn new(
        gpu: &Gpu,
        n_head_kv: usize,
        head_dim: usize,
        head_dim_v: usize,
        n_ctx: usize,
        f16: bool,
    ) -> Result<KvCache, GpuError> {
        let shape = |reason: String| GpuError::Shape {
            what: "KV cache".to_owned(),
            reason,
        };
        if n_head_kv == 0 || head_dim == 0 || n_ctx == 0 || head_dim_v == 0 {
            return Err(shape(format!(
                "{n_head_kv} heads of {head_dim} / {head_dim_v} values, {n_ctx} positions"
            )));
        }
        if head_dim_v > MAX_HEAD_DIM_V {
            return Err(shape(format!(
                "value head dimension {head_dim_v} exceeds {MAX_HEAD_DIM_V}"
            )));
        }
        if f16 && (head_dim % 2 == 1 || head_dim_v % 2 == 1) {
            return Err(shape(format!(
                "an f16 cache needs even head dimensions, not {head_dim} / {head_dim_v}"
            )));
        }
        let words = |dim: usize| {
            let per_row = if f16 { dim / 2 } else { dim };
            n_head_kv
                .checked_mul(n_ctx)
                .and_then(|r| r.checked_mul(per_row))
                .ok_or_else(|| shape(format!("{n_head_kv} × {n_ctx} rows of {dim} overflow")))
        };
        Ok(KvCache {
            k: gpu.tensor("key cache", words(head_dim)?)?,
            v: gpu.tensor("value cache", words(head_dim_v)?)?,
            n_head_kv,
            head_dim,
            head_dim_v,
            n_ctx,
            f16,
        })
    }

    fn constants(&self, head_dim: usize) -> Result<[(&'static str, f64); 4], GpuError> {
        Ok([
            ("N_HEAD_KV", count("KV heads", self.n_head_kv)?),
            ("HEAD_DIM", count("head dimension", head_dim)?),
            ("N_CTX", count("KV positions", self.n_ctx)?),
            ("KV_F16", f64::from(u8::from(self.f16))),
        ])
    }

    /// The constants an attention shader over this cache takes for `n_head` query heads at
    /// `scale` (the decode and the chunk attention alike).
    fn attention_constants(
        &self,
        n_head: usize,
        scale: f32,
    ) -> Result<[(&'static str, f64); 7], GpuError> {
        let [kv, hd, ctx, f16] = self.constants(self.head_dim)?;
        Ok([
            ("N_HEAD", count("query heads", n_head)?),
            kv,
            hd,
            (
                "HEAD_DIM_V",
                count("value head dimension", self.head_dim_v)?,
            ),
            ctx,
            ("SCALE", f64::from(scale)),
            f16,
        ])
    }
}

impl Recorder<'_> {
    /// Says that attention recorded from here on reads at most `n` positions (`step[0] + 1`):
    /// the dispatch then holds only the chunk slots those need, instead of slots for the whole
    /// cache, most of which a short context leaves idle. Up to 4096 positions the result's bits
    /// are the same with or without it; a count below the real one still gives the right
    /// attention, in bigger chunks (other bits).
    pub fn set_attention_positions(&mut self, n: usize) {
        self.attention_positions = Some(n);
    }

    /// Stores one token's keys `k` and values `v` (`n_head_kv` heads each) at the position
    /// `step[0]` (a position past the cache is not stored: the caller checks it first).
    pub fn store_kv(
        &mut self,
        cache: &KvCache,
        k: &Tensor,
        v: &Tensor,
        step: &Tensor,
    ) -> Result<(), GpuError> {
        holds("store_kv step", step, 1)?;
        for (src, dst, dim) in [
            (k, &cache.k, cache.head_dim),
            (v, &cache.v, cache.head_dim_v),
        ] {
            holds("store_kv row", src, cache.n_head_kv * dim)?;
            let per_row = if cache.f16 { dim / 2 } else { dim };
            let groups = count("store_kv", (cache.n_head_kv * per_row).div_ceil(256))? as u32;
            self.dispatch(
                &shader!("kv_store"),
                &cache.constants(dim)?,
                &[&src.buffer, &step.buffer, &dst.buffer],
                groups,
            )?;
        }
        Ok(())
    }

    /// `out` (`n_head` heads of `head_dim_v`) = attention of `q` (`n_head` heads of `head_dim`)
    /// over the cache's positions 0 ..= `step[0]`, scores scaled by `scale`.
    pub fn attention(
        &mut self,
        q: &Tensor,
        cache: &KvCache,
        step: &Tensor,
        n_head: usize,
        scale: f32,
        out: &Tensor,
    ) -> Result<(), GpuError> {
        holds("attention output", out, n_head * cache.head_dim_v)?;
        self.attention_to(
            q,
            cache,
            step,
            n_head,
            scale,
            &shader!("attention_decode", with "attention_in_cache", "attention_out_f32"),
            &[],
            &[Some(&out.buffer)],
            true,
        )
    }

    /// [`Recorder::attention`] with its output quantized to `out`'s format, Q8_0 or Q8_1
    /// (`head_dim_v` a multiple of 32) or Q8_K (the heads' values whole 256-value blocks, at most
    /// 1024), [`Recorder::quantize`]'s bits, in the same dispatch, for the output product.
    pub fn attention_quantized(
        &mut self,
        q: &Tensor,
        cache: &KvCache,
        step: &Tensor,
        n_head: usize,
        scale: f32,
        out: &Q8Tensor,
    ) -> Result<(), GpuError> {
        let shader = match quantized_heads("attention_quantized", cache, n_head, out)? {
            FormatKind::Q8_K => shader!(
                "attention_decode",
                with "q8_k_block_wg", "attention_in_cache", "attention_out_q8_k"
            ),
            FormatKind::Q8_1 => shader!(
                "attention_decode",
                with "q8_1_meta", "q8_0_block", "attention_in_cache", "attention_out_q8_0"
            ),
            _ => shader!(
                "attention_decode",
                with "q8_0_meta", "q8_0_block", "attention_in_cache", "attention_out_q8_0"
            ),
        };
        self.attention_to(
            q,
            cache,
            step,
            n_head,
            scale,
            &shader,
            &[],
            &[Some(&out.words.buffer), Some(&out.meta.buffer)],
            true,
        )
    }

    /// Attention through `shader` (attention_decode.wgsl with an input and an output piece),
    /// `extra` constants and `out` buffers after the query, the cache and the step (from binding
    /// 5; `None` where the pieces leave a binding out). `packable`: the input piece's `prepare` is
    /// empty and its `query` reads any head, so [`AttentionKernel::gqa_pack`] may pack heads.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn attention_to(
        &mut self,
        q: &Tensor,
        cache: &KvCache,
        step: &Tensor,
        n_head: usize,
        scale: f32,
        shader: &Shader,
        extra: &[(&'static str, f64)],
        out: &[Option<&wgpu::Buffer>],
        packable: bool,
    ) -> Result<(), GpuError> {
        if n_head == 0 || !n_head.is_multiple_of(cache.n_head_kv) || n_head > MAX_ATTENTION_HEADS {
            return Err(GpuError::Shape {
                what: "attention".to_owned(),
                reason: format!(
                    "{n_head} query heads: not 1 ..= {MAX_ATTENTION_HEADS} groups of {} key heads",
                    cache.n_head_kv
                ),
            });
        }
        holds("attention query", q, n_head * cache.head_dim)?;
        holds("attention step", step, 1)?;
        let in_use = self
            .attention_positions
            .map_or(cache.n_ctx, |n| n.clamp(1, cache.n_ctx));
        let kernel = self.gpu.attention_kernel();
        let splits = self.gpu.attention_splits(in_use, kernel);
        // Value dimensions side by side, 4 an invocation; the rest of the 256 sum shares of a
        // tile's positions side by side.
        let dv_lanes = cache.head_dim_v.div_ceil(4).next_power_of_two().max(16);
        // The counters, the partials, then room to stage the heads' output (a Q8_K output's).
        let partial_words = n_head
            .checked_mul(splits * (cache.head_dim_v + 2) + cache.head_dim_v)
            .and_then(|w| w.checked_add(ATTENTION_COUNTERS))
            .ok_or_else(|| GpuError::Shape {
                what: "attention partials".to_owned(),
                reason: format!("{n_head} heads of {} values overflow", cache.head_dim_v),
            })?;
        let partials = self.gpu.attention_partials(partial_words)?;
        let mut buffers = vec![
            Some(&q.buffer),
            Some(&cache.k.buffer),
            Some(&cache.v.buffer),
            Some(&step.buffer),
            Some(&partials),
        ];
        buffers.extend_from_slice(out);
        let mut constants = cache.attention_constants(n_head, scale)?.to_vec();
        constants.extend([
            ("SPLITS", count("attention chunks", splits)?),
            ("DV_LANES", count("value lanes", dv_lanes)?),
        ]);
        // GQA packing where the input allows it and the group fits (else the unpacked kernel).
        let pack = kernel.gqa_pack && packable && n_head / cache.n_head_kv <= MAX_GQA_PACK;
        constants.extend(kernel.constants(pack));
        constants.extend_from_slice(extra);
        let heads = if pack { cache.n_head_kv } else { n_head };
        self.dispatch_sparse(
            shader,
            &constants,
            &buffers,
            count("attention workgroups", heads * splits)? as u32,
        )
    }
}

/// Refuses a quantized attention output unless it holds `n_head` value heads: Q8_0 or Q8_1 with
/// heads of whole 32-value blocks, or Q8_K with the heads' values whole 256-value blocks (which
/// span heads), at most [`MAX_ATTENTION_BLOCKS`]; its format otherwise.
pub(crate) fn quantized_heads(
    what: &str,
    cache: &KvCache,
    n_head: usize,
    out: &Q8Tensor,
) -> Result<FormatKind, GpuError> {
    let n = n_head * cache.head_dim_v;
    let fits = match out.kind() {
        FormatKind::Q8_0 | FormatKind::Q8_1 => cache.head_dim_v.is_multiple_of(QK8_0),
        FormatKind::Q8_K => n.is_multiple_of(QK_K) && n / QK_K <= MAX_ATTENTION_BLOCKS,
        _ => false,
    };
    if !fits || out.n_in() != n {
        return Err(GpuError::Shape {
            what: what.to_owned(),
            reason: format!(
                "{n_head} heads of {} values into a {:?} activation of {} (Q8_0 or Q8_1: heads of whole {QK8_0}-value blocks; Q8_K: at most {MAX_ATTENTION_BLOCKS} whole {QK_K}-value blocks)",
                cache.head_dim_v,
                out.kind(),
                out.n_in()
            ),
        });
    }
    Ok(out.kind())
}

/// The largest value head dimension [`Recorder::chunk_attention`] takes (16 output values an
/// invocation, 16 invocations a query).
pub const MAX_CHUNK_HEAD_DIM_V: usize = 256;

/// Tokens a workgroup of [`Recorder::chunk_attention`] attends for (the shader's `TQ`).
const CHUNK_TILE: usize = 16;

/// A run of tokens of one sequence at consecutive positions, held as rows of a chunk's
/// token-major tensors: its first position, its first row and its length, in the device words
/// [`Recorder::store_kv_rows`] and [`Recorder::chunk_attention`] read, and the host's copy they
/// are checked against. The words are written at [`ChunkRun::set`], so a submission reads the
/// values set last: one run a `ChunkRun` a submission.
pub struct ChunkRun {
    words: Tensor,
    first_position: usize,
    first_row: usize,
    len: usize,
}

impl ChunkRun {
    /// An empty run (recording with it is refused until it is set).
    pub fn new(gpu: &Gpu) -> Result<ChunkRun, GpuError> {
        Ok(ChunkRun {
            words: gpu.tensor("chunk run", 3)?,
            first_position: 0,
            first_row: 0,
            len: 0,
        })
    }

    /// The run of `len` tokens at positions `first_position ..` in rows `first_row ..`.
    pub fn set(
        &mut self,
        gpu: &Gpu,
        first_position: usize,
        first_row: usize,
        len: usize,
    ) -> Result<(), GpuError> {
        let word = |what: &str, n: usize| {
            u32::try_from(n).map_err(|_| GpuError::Shape {
                what: "chunk run".to_owned(),
                reason: format!("{what} {n} exceeds a 32-bit count"),
            })
        };
        let end = first_position.saturating_add(len);
        let words = [
            word("first position", first_position)?,
            word("first row", first_row)?,
            word("length", len)?,
        ];
        word("last position", end)?;
        gpu.write(&self.words, &words)?;
        (self.first_position, self.first_row, self.len) = (first_position, first_row, len);
        Ok(())
    }

    /// Refuses the run for `cache` unless it has tokens and its positions are in the cache.
    fn check(&self, what: &str, cache: &KvCache) -> Result<(), GpuError> {
        if self.len == 0 || self.first_position + self.len > cache.n_ctx {
            return Err(GpuError::Shape {
                what: what.to_owned(),
                reason: format!(
                    "{} tokens at positions {} .. in a cache of {} positions",
                    self.len, self.first_position, cache.n_ctx
                ),
            });
        }
        Ok(())
    }

    /// Words a tensor of rows of `row` holds at least for the run.
    fn rows(&self, row: usize) -> usize {
        (self.first_row + self.len).saturating_mul(row)
    }
}

impl Recorder<'_> {
    /// Stores a run's keys and values, rows `run.first_row ..` of the token-major `k` and `v`
    /// (`n_head_kv` heads each), at its positions, in one dispatch: the bits `store_kv` stores a
    /// token at a time.
    pub fn store_kv_rows(
        &mut self,
        cache: &KvCache,
        k: &Tensor,
        v: &Tensor,
        run: &ChunkRun,
    ) -> Result<(), GpuError> {
        run.check("store_kv_rows", cache)?;
        holds(
            "store_kv_rows keys",
            k,
            run.rows(cache.n_head_kv * cache.head_dim),
        )?;
        holds(
            "store_kv_rows values",
            v,
            run.rows(cache.n_head_kv * cache.head_dim_v),
        )?;
        let per_row = |dim: usize| if cache.f16 { dim / 2 } else { dim };
        let words =
            run.len * cache.n_head_kv * (per_row(cache.head_dim) + per_row(cache.head_dim_v));
        let [kv, hd, ctx, f16] = cache.constants(cache.head_dim)?;
        self.dispatch(
            &shader!("kv_store_rows"),
            &[
                kv,
                hd,
                (
                    "HEAD_DIM_V",
                    count("value head dimension", cache.head_dim_v)?,
                ),
                ctx,
                f16,
            ],
            &[
                &k.buffer,
                &v.buffer,
                &run.words.buffer,
                &cache.k.buffer,
                &cache.v.buffer,
            ],
            count("store_kv_rows workgroups", words.div_ceil(256))? as u32,
        )
    }

    /// Causal attention of a run's tokens in one dispatch: row `run.first_row + t` of the
    /// token-major `q` (`n_head` heads of `head_dim`), at position `run.first_position + t`,
    /// attends over the cache's positions 0 ..= its own (the run's keys and values stored
    /// first, [`Recorder::store_kv_rows`]), scores scaled by `scale`, into the same row of the
    /// token-major `out` (`n_head` heads of `head_dim_v`, at most [`MAX_CHUNK_HEAD_DIM_V`]).
    /// Tiled: a workgroup a (query head, 16 tokens), each key and value row read once for them
    /// (see `shaders/attention_chunk.wgsl`): the same attention as [`Recorder::attention`] a
    /// token, summed in another order (not its bits). A run of one token (a sequence's step in a
    /// batch of several) is the decode attention itself, split over positions, reading and
    /// writing its row: [`Recorder::attention`]'s bits.
    pub fn chunk_attention(
        &mut self,
        q: &Tensor,
        cache: &KvCache,
        run: &ChunkRun,
        n_head: usize,
        scale: f32,
        out: &Tensor,
    ) -> Result<(), GpuError> {
        let shape = |reason: String| GpuError::Shape {
            what: "chunk_attention".to_owned(),
            reason,
        };
        if n_head == 0 || !n_head.is_multiple_of(cache.n_head_kv) {
            return Err(shape(format!(
                "{n_head} query heads: not groups of {} key heads",
                cache.n_head_kv
            )));
        }
        if cache.head_dim_v > MAX_CHUNK_HEAD_DIM_V {
            return Err(shape(format!(
                "value head dimension {} exceeds {MAX_CHUNK_HEAD_DIM_V}",
                cache.head_dim_v
            )));
        }
        run.check("chunk_attention", cache)?;
        holds(
            "chunk_attention query",
            q,
            run.rows(n_head * cache.head_dim),
        )?;
        holds(
            "chunk_attention output",
            out,
            run.rows(n_head * cache.head_dim_v),
        )?;
        if run.len == 1 {
            // The run's words start with its position, then its row: the decode shader's step.
            return self.attention_to(
                q,
                cache,
                &run.words,
                n_head,
                scale,
                &shader!("attention_decode", with "attention_in_rows", "attention_out_rows"),
                &[],
                &[Some(&out.buffer)],
                true,
            );
        }
        let groups = n_head
            .checked_mul(run.len.div_ceil(CHUNK_TILE))
            .ok_or_else(|| shape(format!("{n_head} heads of {} tokens overflow", run.len)))?;
        self.dispatch(
            &shader!("attention_chunk"),
            &cache.attention_constants(n_head, scale)?,
            &[
                &q.buffer,
                &cache.k.buffer,
                &cache.v.buffer,
                &run.words.buffer,
                &out.buffer,
            ],
            count("chunk_attention workgroups", groups)? as u32,
        )
    }
}
