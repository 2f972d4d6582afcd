//! Matrix-vector products (one token: decode) for the float formats (F32, F16, BF16), Q8_0, Q4_0, Q4_1, Q5_0,
//! Q5_1, IQ4_NL, the K-quants (Q2_K … Q6_K), TQ2_0, the Q2_0 codec's three layouts (Q2_0, PQ2_0,
//! legacy group-128 Q2_0) and PTQ1_0 (as PQ2_0), and the activation's conversion to its partner format (Q8_0, Q8_1, Q8_K) on the device,
//! which feeds them and the Q1_0 product without a read-back; and their matrix-matrix products
//! (several tokens: a prompt), `Recorder::gemm` / `Recorder::q1_0_gemm`.

use oxibonsai_formats::q8_0::QK8_0;
use oxibonsai_formats::q8_k::QK_K;
use oxibonsai_formats::FormatKind;

use crate::device::{Gpu, GpuError};
use crate::ops::{count, holds, q1_0_shader, shader, shader_f16, Recorder, Shader, Tensor};
use crate::q1_0::Q1Matrix;
use crate::repack::{repack, tq2_0_quarters};
use crate::tq2_0::Tq2Kernel;

/// Rows per workgroup of the float and Q8_0-partnered products (32 invocations a row).
const ROWS_PER_GROUP: usize = 8;

/// Tokens a workgroup of a gemm takes ([`Recorder::gemm`], [`Recorder::q1_0_gemm`] without a
/// register tile).
pub const GEMM_TILE: u32 = 8;

/// A gemv_rows-family shader with the gemm walk (`gemm_rows.wgsl`) or the gemv one.
macro_rules! walked {
    ($gemm:expr, $name:literal) => {
        if $gemm {
            shader!($name, with "gemm_rows")
        } else {
            shader!($name, with "gemv_rows")
        }
    };
}

/// An activation quantized on the device to a weight format's partner, in the products' layout:
/// Q8_0 / Q8_1 — each 32-value block's codes as 8 words, byte L of word i = code 8L + i; Q8_K —
/// each 256-value block's codes in order, 4 to a word; and per block (d as f32, Σ codes — for
/// Q8_1 its s, the f16 d · Σ codes, as f32).
pub struct Q8Tensor {
    pub words: Tensor,
    pub meta: Tensor,
    kind: FormatKind,
    n_in: usize,
}

impl Q8Tensor {
    /// Room for `n_in` values as Q8_0 (a positive multiple of 32).
    pub fn new(gpu: &Gpu, n_in: usize) -> Result<Q8Tensor, GpuError> {
        Q8Tensor::with_kind(gpu, FormatKind::Q8_0, n_in)
    }

    /// Room for `n_in` values as `kind` (Q8_0, Q8_1 or Q8_K; a positive multiple of its block).
    pub fn with_kind(gpu: &Gpu, kind: FormatKind, n_in: usize) -> Result<Q8Tensor, GpuError> {
        let block = match kind {
            FormatKind::Q8_0 | FormatKind::Q8_1 => QK8_0,
            FormatKind::Q8_K => QK_K,
            other => {
                return Err(GpuError::Shape {
                    what: "quantized activation".to_owned(),
                    reason: format!("{other:?} is not an activation format here"),
                })
            }
        };
        if n_in == 0 || !n_in.is_multiple_of(block) {
            return Err(GpuError::Shape {
                what: format!("{kind:?} activation"),
                reason: format!("length {n_in} is not a positive multiple of {block}"),
            });
        }
        Ok(Q8Tensor {
            words: gpu.tensor("activation codes", n_in / 4)?,
            meta: gpu.tensor("activation scales", n_in / block * 2)?,
            kind,
            n_in,
        })
    }

    pub fn n_in(&self) -> usize {
        self.n_in
    }

    pub fn kind(&self) -> FormatKind {
        self.kind
    }

    /// Values a block of the format.
    pub fn block(&self) -> usize {
        match self.kind {
            FormatKind::Q8_K => QK_K,
            _ => QK8_0,
        }
    }
}

/// A weight matrix on the device for [`Recorder::gemv`]: F32 / F16 / BF16 rows as stored (16-bit
/// rows padded to an even count), the quantized formats' codes repacked to the activation's code order where
/// the file's is not already (`repack.rs`), their block scales apart.
pub struct Matrix {
    format: FormatKind,
    pub(crate) qs: Tensor,
    scales: Option<Tensor>,
    pub(crate) n_rows: usize,
    pub(crate) n_in: usize,
    /// A TQ2_0 matrix in `tq2_0_gemv.wgsl`'s quarters (else the file's layout, `Tq2Kernel::Old`).
    tq2_quarters: bool,
}

/// What a product multiplies: the f32 activation (F32 / F16 weights) or its quantized form in the
/// weight format's partner (the registry's `partner`).
#[derive(Clone, Copy)]
pub enum Input<'a> {
    F32(&'a Tensor),
    Quantized(&'a Q8Tensor),
}

fn shape(reason: String) -> GpuError {
    GpuError::Shape {
        what: "weight matrix".to_owned(),
        reason,
    }
}

impl Matrix {
    /// Uploads `n_rows` rows of `n_in` values of `format` (`rows` as in the GGUF file).
    pub fn upload(
        gpu: &Gpu,
        format: FormatKind,
        rows: &[u8],
        n_rows: usize,
        n_in: usize,
    ) -> Result<Matrix, GpuError> {
        let (block, bytes) = match format {
            FormatKind::F32 => (1, 4),
            FormatKind::F16 | FormatKind::BF16 => (1, 2),
            FormatKind::Q8_0
            | FormatKind::Q4_0
            | FormatKind::Q4_1
            | FormatKind::Q5_0
            | FormatKind::Q5_1
            | FormatKind::IQ4_NL
            | FormatKind::PTQ1_0
            | FormatKind::Q2_K
            | FormatKind::Q3_K
            | FormatKind::Q4_K
            | FormatKind::Q5_K
            | FormatKind::Q6_K
            | FormatKind::TQ2_0
            | FormatKind::Q2_0
            | FormatKind::PQ2_0
            | FormatKind::Q2_0G128Legacy => {
                let f = oxibonsai_formats::format(format);
                (f.block_elems, f.block_bytes)
            }
            other => {
                return Err(GpuError::Unsupported {
                    adapter: gpu.report().name.clone(),
                    what: format!("a {other:?} matrix product (not written yet)"),
                })
            }
        };
        if n_in == 0 || !n_in.is_multiple_of(block) {
            return Err(shape(format!(
                "{format:?} row length {n_in} is not a positive multiple of {block}"
            )));
        }
        let n_blocks = n_rows
            .checked_mul(n_in / block)
            .ok_or_else(|| shape(format!("{n_rows} rows of {n_in} overflow")))?;
        if n_blocks.checked_mul(bytes) != Some(rows.len()) {
            return Err(shape(format!(
                "{n_rows} {format:?} rows of {n_in} need {} bytes, got {}",
                n_blocks.saturating_mul(bytes),
                rows.len()
            )));
        }
        let tq2_quarters = format == FormatKind::TQ2_0 && gpu.tq2_kernel() != Tq2Kernel::Old;
        let (qs, scales) = match format {
            FormatKind::TQ2_0 if tq2_quarters => {
                let r = tq2_0_quarters(rows, n_in / block);
                (
                    gpu.upload("tq2_0 quarters", &r.words)?,
                    Some(gpu.upload("matrix scales", &r.scales)?),
                )
            }
            FormatKind::F32 => (gpu.upload("f32 matrix", rows)?, None),
            FormatKind::F16 | FormatKind::BF16 => {
                let stride = n_in.next_multiple_of(2) * 2;
                let mut padded = vec![0u8; n_rows * stride];
                for (dst, src) in padded
                    .chunks_exact_mut(stride)
                    .zip(rows.chunks_exact(n_in * 2))
                {
                    dst[..src.len()].copy_from_slice(src);
                }
                (gpu.upload("f16 matrix", &padded)?, None)
            }
            _ => {
                // Every format past the match above has a repacking.
                let r = repack(format, rows, bytes).ok_or_else(|| GpuError::Unsupported {
                    adapter: gpu.report().name.clone(),
                    what: format!("a {format:?} matrix product"),
                })?;
                (
                    gpu.upload("matrix codes", &r.words)?,
                    Some(gpu.upload("matrix scales", &r.scales)?),
                )
            }
        };
        gpu.check("uploading a matrix")?;
        Ok(Matrix {
            format,
            qs,
            scales,
            n_rows,
            n_in,
            tq2_quarters,
        })
    }

    pub fn n_rows(&self) -> usize {
        self.n_rows
    }

    pub fn n_in(&self) -> usize {
        self.n_in
    }
}

impl Gpu {
    /// The Q1_0 gemm's loop order: the tile's tokens outermost, each token over the row's blocks
    /// (`true`), or the blocks outermost with an accumulator a token (`false`, the default) — the
    /// same bits; which is faster on a device is for `op_cost` to say.
    pub fn set_gemm_tokens_outer(&self, on: bool) {
        self.cache
            .gemm_tokens_outer
            .store(on, std::sync::atomic::Ordering::Relaxed);
    }
}

impl Recorder<'_> {
    /// Quantizes the first `q.n_in()` values of `x` into `q` (its format).
    pub fn quantize(&mut self, x: &Tensor, q: &Q8Tensor) -> Result<(), GpuError> {
        self.quantize_first(x, q, q.n_in)
    }

    /// Quantizes the first `n` values of `x` into the start of `q` (`n` a multiple of its
    /// block, at most `q.n_in()`): the first tokens of a gemm's activation.
    pub fn quantize_first(&mut self, x: &Tensor, q: &Q8Tensor, n: usize) -> Result<(), GpuError> {
        holds("quantize input", x, n)?;
        if n > q.n_in {
            return Err(GpuError::Shape {
                what: "quantize".to_owned(),
                reason: format!("{n} values into an activation of {}", q.n_in),
            });
        }
        let block = q.block();
        if n == 0 || !n.is_multiple_of(block) {
            return Err(GpuError::Shape {
                what: "quantize".to_owned(),
                reason: format!("{n} values are not whole {block}-value blocks"),
            });
        }
        let n_blocks = n / block;
        let buffers = [&x.buffer, &q.words.buffer, &q.meta.buffer];
        let shader = match q.kind {
            // A workgroup a block (the fused ops' block quantization).
            FormatKind::Q8_K => {
                return self.dispatch(
                    &shader!("quantize_wg", with "q8_k_block_wg"),
                    &[("N", count("quantize values", n)?)],
                    &buffers,
                    count("quantize blocks", n_blocks)? as u32,
                );
            }
            FormatKind::Q8_1 => shader!("quantize_q8_0", with "q8_1_meta", "q8_0_block"),
            _ => shader!("quantize_q8_0", with "q8_0_meta", "q8_0_block"),
        };
        self.dispatch(
            &shader,
            &[("N_BLOCKS", count("quantize blocks", n_blocks)?)],
            &buffers,
            count("quantize blocks", n_blocks.div_ceil(64))? as u32,
        )
    }

    /// `out = m · x` for one token.
    pub fn gemv(&mut self, m: &Matrix, x: Input<'_>, out: &Tensor) -> Result<(), GpuError> {
        self.product(m, x, out, None, false)
    }

    /// `out += m · x` for one token: [`Recorder::gemv`] with the residual add as its epilogue
    /// (`gemv_rows.wgsl`'s `ACCUM`), [`Recorder::gemv`] then [`Recorder::add`] in one dispatch,
    /// the same bits.
    pub fn gemv_add(&mut self, m: &Matrix, x: Input<'_>, out: &Tensor) -> Result<(), GpuError> {
        self.product(m, x, out, None, true)
    }

    /// `out[t] = m · x[t]` for `n_tok` tokens (token-major: `x` holds at least `n_tok · m.n_in()`
    /// values — a `Q8Tensor` at least that long — and `out` `n_tok · m.n_rows()`), for every
    /// format [`Recorder::gemv`] takes, none by falling back to gemvs. The 32-value Q8_0 /
    /// Q8_1-partnered formats (Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL) run the register tile
    /// ([`Gpu::set_gemm_tile`], the default: `gemm_q8_tile.wgsl`, each weight read once for a
    /// tile of up to 64 tokens, each token's result the gemv's within rounding); a TQ2_0 matrix
    /// in quarters its own tile (`tq2_0_gemv.wgsl`: each block's weights read and held once for
    /// the tile's tokens, each token's result the gemv's to the bit); without the tile, and for
    /// the other formats, `gemm_rows.wgsl` runs each format's gemv share over a tile of
    /// [`GEMM_TILE`] tokens a workgroup, so the weights come from memory once a tile (each token
    /// still decodes them: the tile's later tokens read them from cache), each token's result
    /// the gemv's to the bit (same shares, same tree).
    pub fn gemm(
        &mut self,
        m: &Matrix,
        x: Input<'_>,
        out: &Tensor,
        n_tok: usize,
    ) -> Result<(), GpuError> {
        if n_tok == 0 {
            return Err(GpuError::Shape {
                what: format!("{:?} gemm", m.format),
                reason: "takes at least one token".to_owned(),
            });
        }
        self.product(m, x, out, Some(n_tok), false)
    }

    /// The gemv (`tokens` None) or the gemm over `tokens` tokens; `accum`: the gemv adds its
    /// result to `out`.
    fn product(
        &mut self,
        m: &Matrix,
        x: Input<'_>,
        out: &Tensor,
        tokens: Option<usize>,
        accum: bool,
    ) -> Result<(), GpuError> {
        let n_tok = tokens.unwrap_or(1);
        let gemm = tokens.is_some();
        let out_len = m
            .n_rows
            .checked_mul(n_tok)
            .ok_or_else(|| shape(format!("{n_tok} tokens of {} rows overflow", m.n_rows)))?;
        holds("product output", out, out_len)?;
        let row_groups = m.n_rows.div_ceil(ROWS_PER_GROUP);
        let groups = count(
            "product rows",
            row_groups * n_tok.div_ceil(GEMM_TILE as usize),
        )? as u32;
        let n_rows = count("product rows", m.n_rows)?;
        let walk = [
            ("N_TOK", count("gemm tokens", n_tok)?),
            ("TILE", f64::from(GEMM_TILE)),
        ];
        let walk: &[(&'static str, f64)] = match (gemm, accum) {
            (true, _) => &walk,
            (false, true) => &[("ACCUM", 1.0)],
            (false, false) => &[],
        };
        let mismatch = |what: &str| GpuError::Shape {
            what: format!("{:?} product", m.format),
            reason: format!("takes {what}"),
        };
        match (m.format, x, &m.scales) {
            (FormatKind::F32 | FormatKind::F16 | FormatKind::BF16, Input::F32(x), _) => {
                holds("product input", x, m.n_in * n_tok)?;
                let width = count("product width", m.n_in)?;
                let buffers = [&m.qs.buffer, &x.buffer, &out.buffer];
                if m.format == FormatKind::F16 && self.gpu.native_f16 {
                    let mut constants = vec![("N_ROWS", n_rows), ("N_IN", width)];
                    constants.extend_from_slice(walk);
                    let shader = if gemm {
                        shader_f16!("gemv_f16_native", with "gemm_rows")
                    } else {
                        shader_f16!("gemv_f16_native", with "gemv_rows")
                    };
                    return self.dispatch(&shader, &constants, &buffers, groups);
                }
                let f16 = f64::from(u8::from(m.format == FormatKind::F16));
                let bf16 = f64::from(u8::from(m.format == FormatKind::BF16));
                let mut constants = vec![
                    ("N_ROWS", n_rows),
                    ("N_IN", width),
                    ("F16", f16),
                    ("BF16", bf16),
                ];
                constants.extend_from_slice(walk);
                self.dispatch(&walked!(gemm, "gemv_float"), &constants, &buffers, groups)
            }
            (FormatKind::F32 | FormatKind::F16 | FormatKind::BF16, Input::Quantized(_), _) => {
                Err(mismatch("an f32 activation"))
            }
            (_, Input::Quantized(x), Some(scales)) => {
                let buffers = [
                    &m.qs.buffer,
                    &scales.buffer,
                    &x.words.buffer,
                    &x.meta.buffer,
                    &out.buffer,
                ];
                let partner = oxibonsai_formats::format(m.format).partner;
                if x.kind != partner {
                    return Err(mismatch(&format!(
                        "a {partner:?} activation, not {:?}",
                        x.kind
                    )));
                }
                let fits = m.n_in.checked_mul(n_tok).is_some_and(|need| {
                    if gemm {
                        x.n_in >= need
                    } else {
                        x.n_in == need
                    }
                });
                if !fits {
                    return Err(GpuError::Shape {
                        what: format!("{:?} product", m.format),
                        reason: if gemm {
                            format!(
                                "activation of {}, {n_tok} tokens of rows of {}",
                                x.n_in, m.n_in
                            )
                        } else {
                            format!("activation of {}, rows of {}", x.n_in, m.n_in)
                        },
                    });
                }
                let elems = oxibonsai_formats::format(m.format).block_elems;
                let blocks = count("product blocks", m.n_in / elems)?;
                let mut constants = vec![("N_ROWS", n_rows), ("N_BLOCKS", blocks)];
                constants.extend_from_slice(walk);
                if m.tq2_quarters {
                    return self.tq2_0_product(m, x, scales, out, n_tok, accum);
                }
                let shader = match m.format {
                    FormatKind::TQ2_0 => walked!(gemm, "gemv_tq2_0"),
                    FormatKind::Q2_K | FormatKind::Q3_K => {
                        let three = f64::from(u8::from(m.format == FormatKind::Q3_K));
                        constants.push(("THREE", three));
                        walked!(gemm, "gemv_q2_k")
                    }
                    FormatKind::Q4_K | FormatKind::Q5_K => {
                        let five = f64::from(u8::from(m.format == FormatKind::Q5_K));
                        constants.push(("FIVE", five));
                        walked!(gemm, "gemv_q4_k")
                    }
                    FormatKind::Q6_K => walked!(gemm, "gemv_q6_k"),
                    FormatKind::Q2_0
                    | FormatKind::PQ2_0
                    | FormatKind::Q2_0G128Legacy
                    | FormatKind::PTQ1_0 => {
                        // 2 or 4 Q8_0 blocks a block.
                        constants.push(("SUBS", f64::from((elems / QK8_0) as u32)));
                        walked!(gemm, "gemv_q2")
                    }
                    // `gemv_q8.wgsl`'s FORM (upload takes no other format; IQ4_NL's levels are
                    // Q8_0 codes).
                    other => {
                        let form = match other {
                            FormatKind::Q4_0 => 1,
                            FormatKind::Q4_1 => 2,
                            FormatKind::Q5_0 => 3,
                            FormatKind::Q5_1 => 4,
                            _ => 0,
                        };
                        constants.push(("FORM", f64::from(form)));
                        // A gemm by the register tile (`Gpu::set_gemm_tile`, its staged form).
                        if let (true, Some(tile)) = (gemm, self.gpu.gemm_tile_for(n_tok)) {
                            constants.retain(|&(name, _)| name != "TILE");
                            constants.push(("ROWS", f64::from(tile.rows)));
                            constants.push(("TOKENS", f64::from(tile.tokens)));
                            let groups = count(
                                "gemm workgroups",
                                m.n_rows.div_ceil(tile.rows as usize)
                                    * n_tok.div_ceil(tile.tokens as usize),
                            )? as u32;
                            return self.dispatch(
                                &shader!("gemm_q8_tile"),
                                &constants,
                                &buffers,
                                groups,
                            );
                        }
                        walked!(gemm, "gemv_q8")
                    }
                };
                self.dispatch(&shader, &constants, &buffers, groups)
            }
            (_, _, _) => Err(mismatch(&format!(
                "a {:?} activation",
                oxibonsai_formats::format(m.format).partner
            ))),
        }
    }

    /// `out = m · x` for a Q1_0 matrix (the split [`Gpu::q1_0_lanes`] picks for its rows).
    pub fn q1_0_gemv(&mut self, m: &Q1Matrix, x: &Q8Tensor, out: &Tensor) -> Result<(), GpuError> {
        self.q1_0_gemv_with(m, x, out, false)
    }

    /// [`Recorder::q1_0_gemv`], with `accum` adding the product to `out` (the residual epilogue).
    pub(crate) fn q1_0_gemv_with(
        &mut self,
        m: &Q1Matrix,
        x: &Q8Tensor,
        out: &Tensor,
        accum: bool,
    ) -> Result<(), GpuError> {
        let (buffers, groups) = self.q1_0_binding(m, x, out)?;
        let mut constants = self.gpu.q1_0_split(m.n_in());
        constants.push(("ACCUM", f64::from(u8::from(accum))));
        let shader = q1_0_shader!(
            self.gpu,
            "q1_0_gemv",
            with "q1_0_sum",
            "q1_0_act_storage",
            "q1_0_out_rows"
        );
        self.dispatch(&shader, &constants, &buffers, groups)
    }

    /// `out[t] = m · x[t]` for `n_tok` tokens of a Q1_0 matrix (token-major, as
    /// [`Recorder::gemm`]). With a register tile ([`Gpu::set_gemm_tile`], the default):
    /// `q1_0_gemm_tile.wgsl`, each weight read once for a tile of up to 64 tokens, the sums in
    /// registers — each token's result [`Recorder::q1_0_gemv`]'s within rounding (its blocks added
    /// in order). Without: `q1_0_gemm.wgsl`, the default split's rows with a tile of
    /// [`GEMM_TILE`] tokens a workgroup, each block's weights read and unpacked once a tile, each
    /// token's result [`Recorder::q1_0_gemv`]'s to the bit.
    pub fn q1_0_gemm(
        &mut self,
        m: &Q1Matrix,
        x: &Q8Tensor,
        out: &Tensor,
        n_tok: usize,
    ) -> Result<(), GpuError> {
        self.q1_0_gemm_with(m, x, out, n_tok, false)
    }

    /// As [`Recorder::q1_0_gemm`], adding the products to `out` (the residual epilogue of
    /// `q1_0_gemv_add`: one f32 addition).
    pub fn q1_0_gemm_add(
        &mut self,
        m: &Q1Matrix,
        x: &Q8Tensor,
        out: &Tensor,
        n_tok: usize,
    ) -> Result<(), GpuError> {
        self.q1_0_gemm_with(m, x, out, n_tok, true)
    }

    fn q1_0_gemm_with(
        &mut self,
        m: &Q1Matrix,
        x: &Q8Tensor,
        out: &Tensor,
        n_tok: usize,
        accum: bool,
    ) -> Result<(), GpuError> {
        let fail = |reason: String| GpuError::Shape {
            what: "Q1_0 gemm".to_owned(),
            reason,
        };
        if n_tok == 0 {
            return Err(fail("takes at least one token".to_owned()));
        }
        let fits = m
            .n_in()
            .checked_mul(n_tok)
            .is_some_and(|need| x.n_in >= need);
        if x.kind != FormatKind::Q8_0 || !fits {
            return Err(fail(format!(
                "a {:?} activation of {}, {n_tok} token(s) of rows of {} (takes Q8_0)",
                x.kind,
                x.n_in,
                m.n_in()
            )));
        }
        let out_len = m
            .n_rows()
            .checked_mul(n_tok)
            .ok_or_else(|| fail(format!("{n_tok} tokens of {} rows overflow", m.n_rows())))?;
        holds("Q1_0 gemm output", out, out_len)?;
        let buffers = [
            &m.bits,
            &m.scales,
            &x.words.buffer,
            &x.meta.buffer,
            &out.buffer,
            &m.dims,
        ];
        if let Some(tile) = self.gpu.gemm_tile_for(n_tok) {
            let groups = count(
                "Q1_0 gemm workgroups",
                m.n_rows().div_ceil(tile.rows as usize) * n_tok.div_ceil(tile.tokens as usize),
            )? as u32;
            let shader = Shader {
                name: "q1_0_gemm_tile",
                source: include_str!("../shaders/q1_0_gemm_tile.wgsl"),
            };
            let constants = [
                ("ACCUM", f64::from(u8::from(accum))),
                ("N_TOK", count("gemm tokens", n_tok)?),
                ("ROWS", f64::from(tile.rows)),
                ("TOKENS", f64::from(tile.tokens)),
                ("DIRECT", f64::from(u8::from(tile.direct))),
            ];
            return self.dispatch(&shader, &constants, &buffers, groups);
        }
        let rows_per_group = self.gpu.q1_0_tile_rows(m.n_in());
        let groups = count(
            "Q1_0 gemm workgroups",
            m.n_rows().div_ceil(rows_per_group) * n_tok.div_ceil(GEMM_TILE as usize),
        )? as u32;
        let shader = q1_0_shader!(self.gpu, "q1_0_gemm", with "q1_0_sum");
        let mut constants = self.gpu.q1_0_split(m.n_in());
        constants.extend([
            ("ACCUM", f64::from(u8::from(accum))),
            ("N_TOK", count("gemm tokens", n_tok)?),
            ("TILE", f64::from(GEMM_TILE)),
            (
                "TOKENS_OUTER",
                f64::from(u8::from(
                    self.gpu
                        .cache
                        .gemm_tokens_outer
                        .load(std::sync::atomic::Ordering::Relaxed),
                )),
            ),
        ]);
        self.dispatch(&shader, &constants, &buffers, groups)
    }

    /// The checked buffers of a Q1_0 product and its workgroups (the default split's).
    pub(crate) fn q1_0_binding<'b>(
        &self,
        m: &'b Q1Matrix,
        x: &'b Q8Tensor,
        out: &'b Tensor,
    ) -> Result<([&'b wgpu::Buffer; 6], u32), GpuError> {
        if x.kind != FormatKind::Q8_0 || x.n_in != m.n_in() {
            return Err(GpuError::Shape {
                what: "Q1_0 product".to_owned(),
                reason: format!(
                    "a {:?} activation of {}, rows of {} (takes Q8_0)",
                    x.kind,
                    x.n_in,
                    m.n_in()
                ),
            });
        }
        holds("Q1_0 product output", out, m.n_rows())?;
        let groups = count(
            "Q1_0 product rows",
            m.n_rows().div_ceil(self.gpu.q1_0_tile_rows(m.n_in())),
        )?;
        Ok((
            [
                &m.bits,
                &m.scales,
                &x.words.buffer,
                &x.meta.buffer,
                &out.buffer,
                &m.dims,
            ],
            groups as u32,
        ))
    }
}
