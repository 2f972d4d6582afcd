//! The GPU backend's operations as round trips: the host's activations written to device tensors
//! kept between calls (grown, never shrunk, so the bind groups built for them are reused), the
//! op's dispatches recorded into one submission, its results read back in one copy. Activations
//! do not stay on the device between operations yet (ARCHITECTURE.md: the device-resident step).

use std::collections::HashMap;

use oxibonsai_formats::FormatKind;
use oxibonsai_gpu::{Gpu, GpuError, Input, Q8Tensor, Rope, Tensor};

use crate::config::RopeStyle;

use super::weight::DeviceMatrix;

/// Tokens whose products go into one submission (the per-token tensors kept for them).
const TOKENS_PER_SUBMIT: usize = 64;

/// Which device tensor: an op's argument or a product's input / output, by token.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
enum Slot {
    Arg(u8),
    /// A norm's weight: exactly its length (the shader's width is the tensor's).
    NormWeight(usize),
    Input(usize),
    Output {
        product: usize,
        token: usize,
    },
}

/// The device tensors the round trips reuse.
#[derive(Default)]
pub(super) struct Slots {
    tensors: HashMap<Slot, Tensor>,
    /// Quantized activations by (format, length, token).
    quantized: HashMap<(FormatKind, usize, usize), Q8Tensor>,
}

impl Slots {
    /// Makes `slot` hold at least `len` words.
    fn ensure(&mut self, gpu: &Gpu, slot: Slot, len: usize) -> Result<(), GpuError> {
        if self.tensors.get(&slot).is_none_or(|t| t.len() < len) {
            self.tensors.insert(slot, gpu.tensor("activation", len)?);
        }
        Ok(())
    }

    fn get(&self, slot: Slot) -> &Tensor {
        // Every slot read is ensured first in the same call.
        &self.tensors[&slot]
    }

    /// `ensure`, then `data` written to the slot (before the next submission).
    fn put(&mut self, gpu: &Gpu, slot: Slot, data: &[f32]) -> Result<(), GpuError> {
        self.ensure(gpu, slot, data.len())?;
        gpu.write(self.get(slot), data)
    }

    fn ensure_quantized(
        &mut self,
        gpu: &Gpu,
        kind: FormatKind,
        n_in: usize,
        token: usize,
    ) -> Result<(), GpuError> {
        if let std::collections::hash_map::Entry::Vacant(slot) =
            self.quantized.entry((kind, n_in, token))
        {
            slot.insert(Q8Tensor::with_kind(gpu, kind, n_in)?);
        }
        Ok(())
    }

    /// `out[p][t] = W_p · x[t]` for `n_tokens` rows of `x` (rows of `n_in`), `products` all of
    /// rows of `n_in`: per submission up to [`TOKENS_PER_SUBMIT`] tokens, each activation
    /// quantized once per partner format the products need; the parts of one stacked matrix
    /// computed by one product of it, each reading back its rows.
    pub(super) fn products(
        &mut self,
        gpu: &Gpu,
        products: &mut [(&DeviceMatrix, &mut [f32])],
        x: &[f32],
        n_tokens: usize,
    ) -> Result<(), GpuError> {
        let n_in = x.len() / n_tokens.max(1);
        // The matrices run (a stack once), and each product's (matrix, rows of its output).
        let mut wholes: Vec<&DeviceMatrix> = Vec::new();
        let mut rows_of: Vec<(usize, std::ops::Range<usize>)> = Vec::new();
        for (m, _) in products.iter() {
            let (whole, rows) = m.whole();
            let i = match wholes.iter().position(|w| std::ptr::eq(*w, whole)) {
                Some(i) => i,
                None => {
                    wholes.push(whole);
                    wholes.len() - 1
                }
            };
            rows_of.push((i, rows));
        }
        let mut partners: Vec<FormatKind> =
            products.iter().filter_map(|(m, _)| m.partner()).collect();
        partners.sort_unstable_by_key(|&k| k as u32);
        partners.dedup();
        for start in (0..n_tokens).step_by(TOKENS_PER_SUBMIT) {
            let n = TOKENS_PER_SUBMIT.min(n_tokens - start);
            for t in 0..n {
                self.put(gpu, Slot::Input(t), &x[(start + t) * n_in..][..n_in])?;
                for &kind in &partners {
                    self.ensure_quantized(gpu, kind, n_in, t)?;
                }
                for (p, m) in wholes.iter().enumerate() {
                    let slot = Slot::Output {
                        product: p,
                        token: t,
                    };
                    self.ensure(gpu, slot, m.n_rows())?;
                }
            }
            let mut rec = gpu.recorder();
            for t in 0..n {
                let input = self.get(Slot::Input(t));
                for &kind in &partners {
                    rec.quantize(input, &self.quantized[&(kind, n_in, t)])?;
                }
                for (p, &m) in wholes.iter().enumerate() {
                    let out = self.get(Slot::Output {
                        product: p,
                        token: t,
                    });
                    let q = m.partner().map(|k| &self.quantized[&(k, n_in, t)]);
                    match (m, q) {
                        (DeviceMatrix::Q1(m), Some(q)) => rec.q1_0_gemv(m, q, out)?,
                        (DeviceMatrix::Rows { matrix, .. }, Some(q)) => {
                            rec.gemv(matrix, Input::Quantized(q), out)?
                        }
                        (DeviceMatrix::Rows { matrix, .. }, None) => {
                            rec.gemv(matrix, Input::F32(input), out)?
                        }
                        (DeviceMatrix::Q1(_), None) | (DeviceMatrix::Part { .. }, _) => {
                            return Err(GpuError::Shape {
                                what: "matrix product".to_owned(),
                                reason: "a Q1_0 matrix without its Q8_0 activation, or a part \
                                         of a stack as a stack"
                                    .to_owned(),
                            })
                        }
                    }
                }
            }
            rec.submit()?;
            for ((_, out), (p, range)) in products.iter_mut().zip(&rows_of) {
                let rows = range.len();
                let parts: Vec<(&Tensor, usize, usize)> = (0..n)
                    .map(|t| {
                        (
                            self.get(Slot::Output {
                                product: *p,
                                token: t,
                            }),
                            range.start,
                            rows,
                        )
                    })
                    .collect();
                gpu.read_into_at(&parts, &mut out[start * rows..(start + n) * rows])?;
            }
        }
        Ok(())
    }

    /// RMS norm of the rows of `x` (rows of `weight.len()`) into `out`.
    pub(super) fn rms_norm(
        &mut self,
        gpu: &Gpu,
        x: &[f32],
        weight: &[f32],
        eps: f32,
        out: &mut [f32],
    ) -> Result<(), GpuError> {
        self.put(gpu, Slot::Arg(0), x)?;
        self.ensure(gpu, Slot::Arg(2), x.len())?;
        // Keyed by length, so the slot is never grown past it.
        self.put(gpu, Slot::NormWeight(weight.len()), weight)?;
        let mut rec = gpu.recorder();
        let rows = x.len() / weight.len().max(1);
        rec.rms_norm(
            self.get(Slot::Arg(0)),
            self.get(Slot::NormWeight(weight.len())),
            eps,
            rows,
            self.get(Slot::Arg(2)),
        )?;
        rec.submit()?;
        gpu.read_into(&[(self.get(Slot::Arg(2)), out.len())], out)
    }

    /// RoPE in place on the rows of `x` by `cos_sin` (`rope_angles`'s pairs).
    pub(super) fn rope(
        &mut self,
        gpu: &Gpu,
        x: &mut [f32],
        n_heads: usize,
        head_dim: usize,
        cos_sin: &[(f32, f32)],
        style: RopeStyle,
    ) -> Result<(), GpuError> {
        let tokens = x.len() / (n_heads * head_dim).max(1);
        let n_rot = 2 * cos_sin.len() / tokens.max(1);
        let angles: Vec<f32> = cos_sin.iter().flat_map(|&(c, s)| [c, s]).collect();
        self.put(gpu, Slot::Arg(0), x)?;
        self.put(gpu, Slot::Arg(1), &angles)?;
        let style = match style {
            RopeStyle::Adjacent => Rope::Normal,
            RopeStyle::NeoX => Rope::Neox,
        };
        let mut rec = gpu.recorder();
        rec.rope(
            self.get(Slot::Arg(0)),
            self.get(Slot::Arg(1)),
            tokens,
            n_heads,
            head_dim,
            n_rot,
            style,
        )?;
        rec.submit()?;
        let len = x.len();
        gpu.read_into(&[(self.get(Slot::Arg(0)), len)], x)
    }

    /// `x = op(x, y)` element-wise: `swiglu` (`silu(x) · y`) or the add.
    pub(super) fn binary(
        &mut self,
        gpu: &Gpu,
        swiglu: bool,
        x: &mut [f32],
        y: &[f32],
    ) -> Result<(), GpuError> {
        self.put(gpu, Slot::Arg(0), x)?;
        self.put(gpu, Slot::Arg(1), y)?;
        let (a, b) = (self.get(Slot::Arg(0)), self.get(Slot::Arg(1)));
        let mut rec = gpu.recorder();
        if swiglu {
            rec.swiglu(a, b, x.len())?;
        } else {
            rec.add(a, b, x.len())?;
        }
        rec.submit()?;
        let len = x.len();
        gpu.read_into(&[(a, len)], x)
    }
}
