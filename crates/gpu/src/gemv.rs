//! Matrix-vector products (one token: decode) for the float formats, Q8_0, Q4_0, TQ2_0 and the Q2_0
//! codec's three layouts (Q2_0, PQ2_0, legacy group-128 Q2_0), and the
//! activation's conversion to its partner format (Q8_0, Q8_K) on the device, which feeds them and
//! the Q1_0 product without a read-back.

use oxibonsai_formats::q4_0::{BlockQ4_0, QK4_0};
use oxibonsai_formats::q8_0::{BlockQ8_0, QK8_0};
use oxibonsai_formats::q8_k::QK_K;
use oxibonsai_formats::tq2_0::BlockTQ2_0;
use oxibonsai_formats::FormatKind;

use crate::device::{Gpu, GpuError};
use crate::ops::{count, holds, shader, shader_f16, Recorder, Tensor};
use crate::q1_0::{Q1Kernel, Q1Matrix};

/// Rows per workgroup of the float and Q8_0-partnered products (32 invocations a row).
const ROWS_PER_GROUP: usize = 8;

/// An activation quantized on the device to a weight format's partner, in the products' layout:
/// Q8_0 — each 32-value block's codes as 8 words, byte L of word i = code 8L + i; Q8_K — each
/// 256-value block's codes in order, 4 to a word; and per block (d as f32, Σ codes).
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

    /// Room for `n_in` values as `kind` (Q8_0 or Q8_K; a positive multiple of its block).
    pub fn with_kind(gpu: &Gpu, kind: FormatKind, n_in: usize) -> Result<Q8Tensor, GpuError> {
        let block = match kind {
            FormatKind::Q8_0 => QK8_0,
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
}

/// A weight matrix on the device for [`Recorder::gemv`]: F32 / F16 rows as stored (F16 rows padded
/// to an even count), Q8_0 / Q4_0 / the Q2_0 codec repacked to the activation's code order,
/// TQ2_0's codes as stored; the block scales apart as f16 pairs.
pub struct Matrix {
    format: FormatKind,
    qs: Tensor,
    scales: Option<Tensor>,
    n_rows: usize,
    n_in: usize,
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
            FormatKind::F16 => (1, 2),
            FormatKind::Q8_0 => (QK8_0, size_of::<BlockQ8_0>()),
            FormatKind::Q4_0 => (QK4_0, size_of::<BlockQ4_0>()),
            FormatKind::TQ2_0 => (QK_K, size_of::<BlockTQ2_0>()),
            FormatKind::Q2_0 | FormatKind::PQ2_0 | FormatKind::Q2_0G128Legacy => {
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
        let (qs, scales) = match format {
            FormatKind::F32 => (gpu.upload("f32 matrix", rows)?, None),
            FormatKind::F16 => {
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
            FormatKind::TQ2_0 => {
                let mut words = Vec::with_capacity(n_blocks * 16);
                let mut scales = Vec::with_capacity(n_blocks.next_multiple_of(2));
                for b in rows.chunks_exact(size_of::<BlockTQ2_0>()) {
                    let b: BlockTQ2_0 = bytemuck::pod_read_unaligned(b);
                    scales.push(b.d.to_bits());
                    words.extend(
                        b.qs.chunks_exact(4)
                            .map(|w| u32::from_le_bytes([w[0], w[1], w[2], w[3]])),
                    );
                }
                scales.resize(n_blocks.next_multiple_of(2), 0);
                (
                    gpu.upload("matrix codes", &words)?,
                    Some(gpu.upload("matrix scales", &scales)?),
                )
            }
            FormatKind::Q2_0 | FormatKind::PQ2_0 | FormatKind::Q2_0G128Legacy => {
                let (words, scales) = repack_q2(rows, block, bytes, n_blocks);
                (
                    gpu.upload("matrix codes", &words)?,
                    Some(gpu.upload("matrix scales", &scales)?),
                )
            }
            _ => {
                let (words, scales) = repack_q8_family(format, rows, n_blocks);
                (
                    gpu.upload("matrix codes", &words)?,
                    Some(gpu.upload("matrix scales", &scales)?),
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
        })
    }

    pub fn n_rows(&self) -> usize {
        self.n_rows
    }

    pub fn n_in(&self) -> usize {
        self.n_in
    }
}

/// Blocks of the Q2_0 codec (an f16 scale, then `elems / 4` bytes of 2-bit codes, lowest bits
/// first) to `gemv_q2.wgsl`'s words: per 32 values two, word c holding at byte L, bits 2s, the
/// code of value 8L + 4c + s.
fn repack_q2(rows: &[u8], elems: usize, bytes: usize, n_blocks: usize) -> (Vec<u32>, Vec<u16>) {
    let mut scales = Vec::with_capacity(n_blocks.next_multiple_of(2));
    let mut words = Vec::with_capacity(n_blocks * elems / 16);
    for b in rows.chunks_exact(bytes) {
        scales.push(u16::from_le_bytes([b[0], b[1]]));
        let code = |j: usize| u32::from((b[2 + j / 4] >> (2 * (j % 4))) & 3);
        for k in 0..elems / QK8_0 {
            for c in 0..2 {
                let mut w = 0u32;
                for l in 0..4 {
                    for s in 0..4 {
                        w |= code(32 * k + 8 * l + 4 * c + s) << (8 * l + 2 * s);
                    }
                }
                words.push(w);
            }
        }
    }
    scales.resize(n_blocks.next_multiple_of(2), 0);
    (words, scales)
}

/// Q8_0 / Q4_0 blocks to the shader's words (see `gemv_q8.wgsl`) and f16 scale pairs.
fn repack_q8_family(format: FormatKind, rows: &[u8], n_blocks: usize) -> (Vec<u32>, Vec<u16>) {
    let mut scales = Vec::with_capacity(n_blocks.next_multiple_of(2));
    let mut words = Vec::new();
    if format == FormatKind::Q8_0 {
        words.reserve(n_blocks * 8);
        for b in rows.chunks_exact(size_of::<BlockQ8_0>()) {
            let b: BlockQ8_0 = bytemuck::pod_read_unaligned(b);
            scales.push(b.d.to_bits());
            for i in 0..8 {
                words.push(u32::from_le_bytes(
                    [0, 1, 2, 3].map(|l| b.qs[8 * l + i] as u8),
                ));
            }
        }
    } else {
        words.reserve(n_blocks * 4);
        for b in rows.chunks_exact(size_of::<BlockQ4_0>()) {
            let b: BlockQ4_0 = bytemuck::pod_read_unaligned(b);
            scales.push(b.d.to_bits());
            let code = |v: usize| {
                if v < 16 {
                    b.qs[v] & 0x0F
                } else {
                    b.qs[v - 16] >> 4
                }
            };
            for m in 0..4 {
                let bytes =
                    [0, 1, 2, 3].map(|l| code(8 * l + 2 * m) | code(8 * l + 2 * m + 1) << 4);
                words.push(u32::from_le_bytes(bytes));
            }
        }
    }
    scales.resize(n_blocks.next_multiple_of(2), 0);
    (words, scales)
}

impl Recorder<'_> {
    /// Quantizes the first `q.n_in()` values of `x` into `q` (its format).
    pub fn quantize(&mut self, x: &Tensor, q: &Q8Tensor) -> Result<(), GpuError> {
        holds("quantize input", x, q.n_in)?;
        let (shader, block) = if q.kind == FormatKind::Q8_K {
            (shader!("quantize_q8_k"), QK_K)
        } else {
            (shader!("quantize_q8_0", with "q8_0_block"), QK8_0)
        };
        let n_blocks = q.n_in / block;
        self.dispatch(
            &shader,
            &[("N_BLOCKS", count("quantize blocks", n_blocks)?)],
            &[&x.buffer, &q.words.buffer, &q.meta.buffer],
            count("quantize blocks", n_blocks.div_ceil(64))? as u32,
        )
    }

    /// `out = m · x` for one token.
    pub fn gemv(&mut self, m: &Matrix, x: Input<'_>, out: &Tensor) -> Result<(), GpuError> {
        holds("product output", out, m.n_rows)?;
        let groups = count("product rows", m.n_rows.div_ceil(ROWS_PER_GROUP))? as u32;
        let n_rows = count("product rows", m.n_rows)?;
        let mismatch = |what: &str| GpuError::Shape {
            what: format!("{:?} product", m.format),
            reason: format!("takes {what}"),
        };
        match (m.format, x, &m.scales) {
            (FormatKind::F32 | FormatKind::F16, Input::F32(x), _) => {
                holds("product input", x, m.n_in)?;
                let width = count("product width", m.n_in)?;
                let buffers = [&m.qs.buffer, &x.buffer, &out.buffer];
                if m.format == FormatKind::F16 && self.gpu.native_f16 {
                    let constants = [("N_ROWS", n_rows), ("N_IN", width)];
                    let shader = shader_f16!("gemv_f16_native");
                    return self.dispatch(&shader, &constants, &buffers, groups);
                }
                let f16 = f64::from(u8::from(m.format == FormatKind::F16));
                let constants = [("N_ROWS", n_rows), ("N_IN", width), ("F16", f16)];
                self.dispatch(&shader!("gemv_float"), &constants, &buffers, groups)
            }
            (FormatKind::F32 | FormatKind::F16, Input::Quantized(_), _) => {
                Err(mismatch("an f32 activation"))
            }
            (_, Input::Quantized(x), Some(scales)) => {
                let partner = oxibonsai_formats::format(m.format).partner;
                if x.kind != partner {
                    return Err(mismatch(&format!(
                        "a {partner:?} activation, not {:?}",
                        x.kind
                    )));
                }
                if x.n_in != m.n_in {
                    return Err(GpuError::Shape {
                        what: format!("{:?} product", m.format),
                        reason: format!("activation of {}, rows of {}", x.n_in, m.n_in),
                    });
                }
                let elems = oxibonsai_formats::format(m.format).block_elems;
                let blocks = count("product blocks", m.n_in / elems)?;
                let (shader, constants) = if m.format == FormatKind::TQ2_0 {
                    (
                        shader!("gemv_tq2_0"),
                        vec![("N_ROWS", n_rows), ("N_BLOCKS", blocks)],
                    )
                } else if elems != QK8_0 {
                    // The Q2_0 codec: 2 or 4 Q8_0 blocks a block.
                    let subs = f64::from((elems / QK8_0) as u32);
                    (
                        shader!("gemv_q2"),
                        vec![("N_ROWS", n_rows), ("N_BLOCKS", blocks), ("SUBS", subs)],
                    )
                } else {
                    let q4 = f64::from(u8::from(m.format == FormatKind::Q4_0));
                    (
                        shader!("gemv_q8"),
                        vec![("N_ROWS", n_rows), ("N_BLOCKS", blocks), ("Q4", q4)],
                    )
                };
                self.dispatch(
                    &shader,
                    &constants,
                    &[
                        &m.qs.buffer,
                        &scales.buffer,
                        &x.words.buffer,
                        &x.meta.buffer,
                        &out.buffer,
                    ],
                    groups,
                )
            }
            (_, _, _) => Err(mismatch(&format!(
                "a {:?} activation",
                oxibonsai_formats::format(m.format).partner
            ))),
        }
    }

    /// `out = m · x` for a Q1_0 matrix (the compiled default split).
    pub fn q1_0_gemv(&mut self, m: &Q1Matrix, x: &Q8Tensor, out: &Tensor) -> Result<(), GpuError> {
        let kernel = self.gpu.q1_0.clone().ok_or_else(|| GpuError::Shape {
            what: "Q1_0 product".to_owned(),
            reason: "the kernel is not compiled".to_owned(),
        })?;
        let (buffers, groups) = self.q1_0_binding(m, x, out)?;
        self.dispatch_pipeline(&kernel.pipeline, &buffers, groups)
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
        let rows_per_group = Q1Kernel::DEFAULT_ROWS * (256 / Q1Kernel::DEFAULT_LANES);
        let groups = count(
            "Q1_0 product rows",
            m.n_rows().div_ceil(rows_per_group as usize),
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
