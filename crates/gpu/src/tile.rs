//! The matrix-matrix products' register tile ([`GemmTile`], `Gpu::set_gemm_tile`): its shapes,
//! their spelling in `OXIBONSAI_GPU_GEMM_TILE`, and the device's choice. The products that run it
//! are `gemv.rs`'s (`Recorder::q1_0_gemm`, `Recorder::gemm`).

use crate::device::{Gpu, GpuError};

/// The gemm's register tile — Q1_0's (`shaders/q1_0_gemm_tile.wgsl`) and the 32-value Q8_0 /
/// Q8_1-partnered formats' (`shaders/gemm_q8_tile.wgsl`: Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL; the
/// staged form only): a workgroup takes `rows` rows (one an invocation) × `tokens` tokens, reads
/// each weight once for them all and keeps the (row, token) sums in registers; its sums are the
/// gemv's within rounding, not its bits.
/// `direct`: each warp reads its tokens' codes from the activation (from cache) instead of a copy
/// staged in workgroup memory (no barriers). `from_tokens`: the fewest tokens a gemm must have to
/// run the tile (0: any); a shorter one runs the gemv-exact kernel — a tile that pays only on long
/// chunks (the `128x16` tile on an H200 from 64 tokens) without slowing the short ones.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GemmTile {
    pub rows: u32,
    pub tokens: u32,
    pub direct: bool,
    pub from_tokens: u32,
}

impl GemmTile {
    /// The tile an engine told to run one takes unless told which (`Gpu::set_gemm_tile`); none
    /// runs by default: on an H200 (BENCHMARKS.md, session 19) the tiles were no faster than the
    /// gemv-exact kernels at the engine's 32-token chunks (the Q1_0 products of an 8B layer 27.5
    /// against 26.5 µs a token) and slower at 2–8 tokens, the Q8_0-partnered one slower than
    /// `gemm_rows.wgsl` at every size; only from 64–128 tokens a tile did the Q1_0 gemm faster.
    pub const DEFAULT: GemmTile = GemmTile {
        rows: 32,
        tokens: 32,
        direct: false,
        from_tokens: 0,
    };

    /// The most `from_tokens` a tile may have.
    pub const MOST_FROM_TOKENS: u32 = 255;

    /// A tile the shader takes: `rows` 32, 64, 128 or 256; `tokens` a power of two ≤ 64 with
    /// 1 ≤ rows · tokens / 256 ≤ 16 (the tokens an invocation owns).
    pub fn new(rows: u32, tokens: u32) -> Result<GemmTile, GpuError> {
        // Checked in this order, the product cannot overflow.
        let fits = [32, 64, 128, 256].contains(&rows)
            && tokens.is_power_of_two()
            && tokens <= 64
            && (rows * tokens).is_multiple_of(256)
            && (1..=16).contains(&(rows * tokens / 256));
        if !fits {
            return Err(GpuError::Shape {
                what: "gemm tile".to_owned(),
                reason: format!(
                    "{rows} rows × {tokens} tokens is not a tile it has (rows 32, 64, 128 or 256; \
                     tokens a power of two ≤ 64, 1 to 16 of them an invocation)"
                ),
            });
        }
        Ok(GemmTile {
            rows,
            tokens,
            direct: false,
            from_tokens: 0,
        })
    }

    /// This tile reading the activation directly (`direct`) or staged.
    pub fn with_direct(self, direct: bool) -> GemmTile {
        GemmTile { direct, ..self }
    }

    /// This tile run only by gemms of at least `n` tokens (0: any; at most
    /// [`GemmTile::MOST_FROM_TOKENS`]).
    pub fn with_from_tokens(self, n: u32) -> Result<GemmTile, GpuError> {
        if n > Self::MOST_FROM_TOKENS {
            return Err(GpuError::Shape {
                what: "gemm tile".to_owned(),
                reason: format!(
                    "from {n} tokens: at most {} (a longer chunk always runs the tile)",
                    Self::MOST_FROM_TOKENS
                ),
            });
        }
        Ok(GemmTile {
            from_tokens: n,
            ..self
        })
    }

    /// `ROWSxTOKENS`, `d` after it for a direct tile, `@N` after that for a tile run from N
    /// tokens (e.g. `64x32`, `32x32d`, `128x16@64`), as `OXIBONSAI_GPU_GEMM_TILE` spells a tile.
    pub fn parse(text: &str) -> Result<GemmTile, GpuError> {
        let bad = || GpuError::Shape {
            what: "gemm tile".to_owned(),
            reason: format!("{text:?} is not ROWSxTOKENS[d][@N] (e.g. 32x32, 32x32d, 128x16@64)"),
        };
        let text = text.trim();
        let (text, from_tokens) = match text.split_once('@') {
            Some((t, n)) => (t.trim(), n.trim().parse().map_err(|_| bad())?),
            None => (text, 0),
        };
        let (text, direct) = match text.strip_suffix('d') {
            Some(t) => (t, true),
            None => (text, false),
        };
        let (rows, tokens) = split_pair(text).ok_or_else(bad)?;
        GemmTile::new(rows, tokens)?
            .with_direct(direct)
            .with_from_tokens(from_tokens)
    }

    /// The tile a gemm of `n_tok` tokens runs: no more tokens than the gemm's (rounded up to a
    /// power of two) while each invocation keeps at least one.
    pub(crate) fn for_tokens(self, n_tok: usize) -> GemmTile {
        let fewest = 256 / self.rows;
        let need = u32::try_from(n_tok.next_power_of_two()).unwrap_or(u32::MAX);
        GemmTile {
            tokens: self.tokens.min(need.max(fewest)),
            ..self
        }
    }
}

impl Gpu {
    /// The gemm's kernel for Q1_0 and the 32-value Q8_0 / Q8_1-partnered formats: a register
    /// tile (`Some`), or `None` (the default) — `q1_0_gemm.wgsl` / `gemm_rows.wgsl`, each token's
    /// result the gemv's to the bit.
    pub fn set_gemm_tile(&self, tile: Option<GemmTile>) {
        // rows << 16 | direct << 15 | from_tokens << 7 | tokens (tokens ≤ 64, from_tokens ≤ 255:
        // `GemmTile::new` / `with_from_tokens` checked them).
        let code = tile.map_or(u32::MAX, |t| {
            (t.rows << 16) | (u32::from(t.direct) << 15) | (t.from_tokens << 7) | t.tokens
        });
        self.cache
            .gemm_tile
            .store(code, std::sync::atomic::Ordering::Relaxed);
    }

    /// The gemm's kernel ([`Gpu::set_gemm_tile`]).
    pub fn gemm_tile(&self) -> Option<GemmTile> {
        match self
            .cache
            .gemm_tile
            .load(std::sync::atomic::Ordering::Relaxed)
        {
            0 | u32::MAX => None,
            code => Some(GemmTile {
                rows: code >> 16,
                tokens: code & 0x7f,
                direct: code & 0x8000 != 0,
                from_tokens: (code >> 7) & 0xff,
            }),
        }
    }

    /// The tile a gemm of `n_tok` tokens runs ([`GemmTile::for_tokens`]), or `None`: the
    /// gemv-exact kernel (no tile set, or fewer tokens than the tile's `from_tokens`).
    pub(crate) fn gemm_tile_for(&self, n_tok: usize) -> Option<GemmTile> {
        self.gemm_tile()
            .filter(|t| n_tok >= t.from_tokens as usize)
            .map(|t| t.for_tokens(n_tok))
    }
}

/// `AxB` (two counts around an `x`, spaces allowed around them): a gemm tile's `ROWSxTOKENS`, a
/// TQ2_0 split's `LANESxROWS`.
pub(crate) fn split_pair(text: &str) -> Option<(u32, u32)> {
    let (a, b) = text.split_once('x')?;
    Some((a.trim().parse().ok()?, b.trim().parse().ok()?))
}
