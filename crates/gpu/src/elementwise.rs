//! The element-wise ops of the forward pass as recorded dispatches: RMS norm, RoPE, SwiGLU, the
//! residual add and the embedding lookup.

use crate::device::GpuError;
use crate::ops::{count, holds, shader, Recorder, Tensor};
use crate::q1_0::Q1Matrix;

/// Which pairs RoPE rotates (the engine's `RopeStyle`): adjacent values, or values half the
/// rotated span apart (NEOX).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Rope {
    Normal,
    Neox,
}

/// An embedding table on the device, rows of `n_in` values.
pub enum EmbeddingTable {
    /// F32 or F16 rows as stored (F16 rows padded to an even count).
    Float {
        table: Tensor,
        f16: bool,
        n_rows: usize,
        n_in: usize,
    },
    /// The Q1_0 matrix itself (a tied output projection serves as both).
    Q1_0(std::sync::Arc<Q1Matrix>),
}

impl EmbeddingTable {
    /// An F32 table of `n_rows` rows of `n_in` values.
    pub fn f32(
        gpu: &crate::Gpu,
        rows: &[f32],
        n_rows: usize,
        n_in: usize,
    ) -> Result<Self, GpuError> {
        check_table(rows.len(), n_rows, n_in)?;
        Ok(EmbeddingTable::Float {
            table: gpu.upload("embedding table", rows)?,
            f16: false,
            n_rows,
            n_in,
        })
    }

    /// An F16 table (`rows` the GGUF bytes' values).
    pub fn f16(
        gpu: &crate::Gpu,
        rows: &[half::f16],
        n_rows: usize,
        n_in: usize,
    ) -> Result<Self, GpuError> {
        check_table(rows.len(), n_rows, n_in)?;
        let stride = n_in.next_multiple_of(2);
        let mut padded = vec![half::f16::ZERO; n_rows * stride];
        for (dst, src) in padded.chunks_exact_mut(stride).zip(rows.chunks_exact(n_in)) {
            dst[..n_in].copy_from_slice(src);
        }
        Ok(EmbeddingTable::Float {
            table: gpu.upload("embedding table", &padded)?,
            f16: true,
            n_rows,
            n_in,
        })
    }

    fn n_in(&self) -> usize {
        match self {
            EmbeddingTable::Float { n_in, .. } => *n_in,
            EmbeddingTable::Q1_0(m) => m.n_in(),
        }
    }
}

fn check_table(values: usize, n_rows: usize, n_in: usize) -> Result<(), GpuError> {
    if n_in == 0 || n_rows.checked_mul(n_in) != Some(values) {
        return Err(GpuError::Shape {
            what: "embedding table".to_owned(),
            reason: format!("{values} values are not {n_rows} rows of {n_in}"),
        });
    }
    Ok(())
}

/// Workgroups of 256 invocations for `n` invocations.
fn groups(what: &str, n: usize) -> Result<u32, GpuError> {
    Ok(count(what, n.div_ceil(256))? as u32)
}

impl Recorder<'_> {
    /// `y = rms_norm(x) · weight` on each of the `x.len() / weight.len()` rows.
    pub fn rms_norm(
        &mut self,
        x: &Tensor,
        weight: &Tensor,
        eps: f32,
        rows: usize,
        y: &Tensor,
    ) -> Result<(), GpuError> {
        let n = weight.len();
        let need = rows.saturating_mul(n);
        holds("rms_norm input", x, need)?;
        holds("rms_norm output", y, need)?;
        let constants = [
            ("ROWS", count("rms_norm rows", rows)?),
            ("N", count("rms_norm width", n)?),
            ("EPS", f64::from(eps)),
        ];
        let groups = count("rms_norm rows", rows)? as u32;
        self.dispatch(
            &shader!("rms_norm", with "rms_scale"),
            &constants,
            &[&x.buffer, &weight.buffer, &y.buffer],
            groups,
        )
    }

    /// `x += y` over the first `n` values.
    pub fn add(&mut self, x: &Tensor, y: &Tensor, n: usize) -> Result<(), GpuError> {
        self.binary(&shader!("add"), "add", x, y, n)
    }

    /// `x[t] += row` on each of the first `rows` rows of `row.len()` values of `x` (a bias on
    /// token-major rows: the same f32 addition as [`Recorder::add`] a row at a time).
    pub fn add_rows(&mut self, x: &Tensor, row: &Tensor, rows: usize) -> Result<(), GpuError> {
        let width = row.len();
        let n = rows.saturating_mul(width);
        holds("add_rows", x, n)?;
        if width == 0 {
            return Err(GpuError::Shape {
                what: "add_rows".to_owned(),
                reason: "an empty row".to_owned(),
            });
        }
        let constants = [
            ("N", count("add_rows", n)?),
            ("Y_LEN", count("add_rows width", width)?),
        ];
        self.dispatch(
            &shader!("add"),
            &constants,
            &[&x.buffer, &row.buffer],
            groups("add_rows", n)?,
        )
    }

    /// Row `r < rows` of `width` values: `dst[r · dst_stride + dst_at ..] = src[r · src_stride +
    /// src_at ..]` — a strided copy as a dispatch (no pass break, unlike [`Recorder::copy`]): a
    /// stacked product's token-major rows split into its parts' tensors.
    #[allow(clippy::too_many_arguments)]
    pub fn copy_rows(
        &mut self,
        src: &Tensor,
        src_stride: usize,
        src_at: usize,
        dst: &Tensor,
        dst_stride: usize,
        dst_at: usize,
        width: usize,
        rows: usize,
    ) -> Result<(), GpuError> {
        if rows == 0 || width == 0 {
            return Ok(());
        }
        let end = |stride: usize, at: usize| {
            (rows - 1)
                .saturating_mul(stride)
                .saturating_add(at)
                .saturating_add(width)
        };
        if src_stride < width || dst_stride < width {
            return Err(GpuError::Shape {
                what: "copy_rows".to_owned(),
                reason: format!(
                    "rows of {width} values with strides {src_stride} / {dst_stride} overlap"
                ),
            });
        }
        holds("copy_rows source", src, end(src_stride, src_at))?;
        holds("copy_rows destination", dst, end(dst_stride, dst_at))?;
        let n = rows.saturating_mul(width);
        let constants = [
            ("ROWS", count("copy_rows rows", rows)?),
            ("WIDTH", count("copy_rows width", width)?),
            ("SRC_STRIDE", count("copy_rows source stride", src_stride)?),
            ("SRC_AT", count("copy_rows source offset", src_at)?),
            (
                "DST_STRIDE",
                count("copy_rows destination stride", dst_stride)?,
            ),
            ("DST_AT", count("copy_rows destination offset", dst_at)?),
        ];
        self.dispatch(
            &shader!("copy_rows"),
            &constants,
            &[&src.buffer, &dst.buffer],
            groups("copy_rows", n)?,
        )
    }

    /// `gate = silu(gate) · up` over the first `n` values.
    pub fn swiglu(&mut self, gate: &Tensor, up: &Tensor, n: usize) -> Result<(), GpuError> {
        self.binary(&shader!("swiglu"), "swiglu", gate, up, n)
    }

    fn binary(
        &mut self,
        shader: &crate::ops::Shader,
        what: &str,
        x: &Tensor,
        y: &Tensor,
        n: usize,
    ) -> Result<(), GpuError> {
        holds(what, x, n)?;
        holds(what, y, n)?;
        let constants = [("N", count(what, n)?)];
        self.dispatch(
            shader,
            &constants,
            &[&x.buffer, &y.buffer],
            groups(what, n)?,
        )
    }

    /// RoPE in place on `tokens` rows of `n_heads` heads of `head_dim` values, rotating the first
    /// `n_rot` of each head by `cos_sin` (`tokens × n_rot / 2` (cos, sin) pairs, f32, as the
    /// engine's `rope_angles` makes them: written per step with [`crate::Gpu::write`]).
    #[allow(clippy::too_many_arguments)]
    pub fn rope(
        &mut self,
        x: &Tensor,
        cos_sin: &Tensor,
        tokens: usize,
        n_heads: usize,
        head_dim: usize,
        n_rot: usize,
        style: Rope,
    ) -> Result<(), GpuError> {
        if n_rot == 0 || !n_rot.is_multiple_of(2) || n_rot > head_dim {
            return Err(GpuError::Shape {
                what: "rope".to_owned(),
                reason: format!("{n_rot} rotated values of a {head_dim}-value head"),
            });
        }
        let pairs = n_rot / 2;
        let n = tokens * n_heads * head_dim;
        holds("rope input", x, n)?;
        holds("rope angles", cos_sin, tokens * pairs * 2)?;
        let constants = [
            ("TOKENS", count("rope tokens", tokens)?),
            ("N_HEADS", count("rope heads", n_heads)?),
            ("HEAD_DIM", count("rope head_dim", head_dim)?),
            ("PAIRS", count("rope pairs", pairs)?),
            ("NEOX", f64::from(u8::from(style == Rope::Neox))),
        ];
        let g = groups("rope", tokens * n_heads * pairs)?;
        self.dispatch(
            &shader!("rope"),
            &constants,
            &[&x.buffer, &cos_sin.buffer],
            g,
        )
    }

    /// Rows `ids` (u32 words, `tokens` of them) of `table` into `out`. Ids are not checked on the
    /// device: the caller checks them against the vocabulary first.
    pub fn embed(
        &mut self,
        table: &EmbeddingTable,
        ids: &Tensor,
        tokens: usize,
        out: &Tensor,
    ) -> Result<(), GpuError> {
        let n = table.n_in();
        holds("embedding ids", ids, tokens)?;
        holds("embedding output", out, tokens * n)?;
        let g = groups("embedding", tokens * n)?;
        let tokens = count("embedding tokens", tokens)?;
        let width = count("embedding width", n)?;
        match table {
            EmbeddingTable::Float { table, f16, .. } => self.dispatch(
                &shader!("embed_float"),
                &[
                    ("TOKENS", tokens),
                    ("N", width),
                    ("F16", f64::from(u8::from(*f16))),
                ],
                &[&table.buffer, &ids.buffer, &out.buffer],
                g,
            ),
            EmbeddingTable::Q1_0(m) => self.dispatch(
                &shader!("embed_q1_0"),
                &[("TOKENS", tokens), ("N", width)],
                &[&m.bits, &m.scales, &ids.buffer, &out.buffer],
                g,
            ),
        }
    }
}

impl EmbeddingTable {
    /// Rows in the table (ids must be below it).
    pub fn n_rows(&self) -> usize {
        match self {
            EmbeddingTable::Float { n_rows, .. } => *n_rows,
            EmbeddingTable::Q1_0(m) => m.n_rows(),
        }
    }
}
