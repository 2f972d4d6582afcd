//! The resident step's batched pass: a chunk of T ≥ 2 tokens (a prompt, or several sequences'
//! tokens) recorded layer by layer with each matrix read once for the chunk — the matrix-matrix
//! products (`Recorder::gemm`, `Recorder::q1_0_gemm`) on token-major tensors — where `run_chunk`
//! records one matrix-vector product a token. Per layer: the norm of the T rows, their activation
//! quantized, the Q / K / V products and their biases, the q / k norms and RoPE of the T rows (keys
//! and values into the layer's own chunk tensors, read back to the host caches after the
//! submission); then per run of the chunk (tokens of one sequence at consecutive positions) its
//! keys and values stored into its sequence's cache mirror in one dispatch and its tokens' causal
//! attention in one more (`Recorder::store_kv_rows`, `Recorder::chunk_attention`: the queries read
//! from the chunk's rows, the outputs written into them); then the output product with the
//! residual, the FFN norm, gate / up, SwiGLU and the down product with the residual, T rows at a
//! time. The tiled attention sums in another order than the decode attention, and the gemms'
//! register tile (the default, `GemmTile`: Q1_0 and the 32-value Q8_0 / Q8_1-partnered formats)
//! their products, so the logits are close to `run_chunk`'s, not its bits
//! (`tests/gpu_resident.rs`); the other formats' gemms, and all with `OXIBONSAI_GPU_GEMM_TILE=0`,
//! are each token's gemv to the bit.
//!
//! `OXIBONSAI_GPU_GEMM=0` keeps every chunk on `run_chunk` (an A/B switch). Q / K / V biases are
//! one row added to each token's (`Recorder::add_rows`).

use std::collections::HashMap;

use oxibonsai_formats::FormatKind;
use oxibonsai_gpu::{ChunkRun, Gpu, GpuError, Input, Q8Tensor, Recorder, Tensor};

use super::step::{
    device, internal, layer_matrices, norm_for, product, Dims, PassConsts, Resident,
};
use super::weight::{DeviceMatrix, GpuWeight};
use super::GpuBackend;
use crate::backend::{Backend, Segment, StepView};

/// A chunk's token-major tensors (room for the backend's chunk of tokens,
/// `GpuBackend::chunk_tokens`): token t's row of a tensor of rows of n at t · n.
pub(super) struct Batch {
    x: Tensor,
    xn: Tensor,
    q: Tensor,
    q_pre: Tensor,
    /// Each layer's keys (after RoPE) and values of the chunk's tokens: stored into the mirrors
    /// from here and read back to the host caches from here.
    k: Vec<Tensor>,
    k_pre: Tensor,
    v: Vec<Tensor>,
    att: Tensor,
    o: Tensor,
    gate: Tensor,
    up: Tensor,
    /// A stacked matrix's (Q|K|V, gate|up) token-major output, split into its parts' tensors.
    stacked: Tensor,
    cos_sin: Tensor,
    /// The activation in each partner format, by (format, row length).
    quantized: HashMap<(FormatKind, usize), Q8Tensor>,
    /// The chunk's runs (tokens of one sequence at consecutive positions): the first `n_runs`,
    /// each with its sequence's segment.
    runs: Vec<(ChunkRun, usize)>,
    n_runs: usize,
    /// What it was made for: (n_embd, n_ff, q_len, k_len, v_len, att_len, n_rot, n_layer,
    /// tokens of room) and the partners.
    shape: BatchShape,
}

type BatchShape = ([usize; 9], Vec<(FormatKind, usize)>);

fn shape_of(d: &Dims, partners: &[(FormatKind, usize)], tokens: usize) -> BatchShape {
    (
        [
            d.n_embd, d.n_ff, d.q_len, d.k_len, d.v_len, d.att_len, d.n_rot, d.n_layer, tokens,
        ],
        partners.to_vec(),
    )
}

impl Batch {
    fn new(
        gpu: &Gpu,
        d: &Dims,
        partners: &[(FormatKind, usize)],
        n: usize,
    ) -> Result<Batch, GpuError> {
        let t = |what: &str, len: usize| gpu.tensor(what, n * len);
        let mut quantized = HashMap::new();
        for &(kind, n_in) in partners {
            quantized.insert((kind, n_in), Q8Tensor::with_kind(gpu, kind, n * n_in)?);
        }
        Ok(Batch {
            x: t("chunk x", d.n_embd)?,
            xn: t("chunk xn", d.n_embd)?,
            q: t("chunk q", d.q_len)?,
            q_pre: t("chunk q before its norm", d.q_len)?,
            k: (0..d.n_layer)
                .map(|_| t("chunk k", d.k_len))
                .collect::<Result<_, _>>()?,
            k_pre: t("chunk k before its norm", d.k_len)?,
            v: (0..d.n_layer)
                .map(|_| t("chunk v", d.v_len))
                .collect::<Result<_, _>>()?,
            att: t("chunk attention", d.att_len)?,
            o: t("chunk projection", d.n_embd)?,
            gate: t("chunk gate", d.n_ff)?,
            up: t("chunk up", d.n_ff)?,
            stacked: t("chunk stacked output", d.qkv_len().max(2 * d.n_ff))?,
            cos_sin: t("chunk rope angles", d.n_rot.max(2))?,
            quantized,
            runs: (0..n)
                .map(|_| Ok((ChunkRun::new(gpu)?, 0)))
                .collect::<Result<_, GpuError>>()?,
            n_runs: 0,
            shape: shape_of(d, partners, n),
        })
    }

    /// `input`'s first `n` rows of `n_in` quantized to each partner format `matrices` read.
    fn quantize_for(
        &self,
        rec: &mut Recorder<'_>,
        input: &Tensor,
        n: usize,
        n_in: usize,
        matrices: &[&DeviceMatrix],
    ) -> Result<(), GpuError> {
        // Once a format (no allocation: a layer's products read at most three).
        let mut done: [Option<FormatKind>; 3] = [None; 3];
        for (i, m) in matrices.iter().enumerate() {
            if let Some(kind) = m.partner() {
                if !done.contains(&Some(kind)) {
                    *done
                        .get_mut(i)
                        .ok_or_else(|| internal("more than three products"))? = Some(kind);
                    rec.quantize_first(input, &self.quantized[&(kind, n_in)], n * n_in)?;
                }
            }
        }
        Ok(())
    }

    /// `out = m · input` for `n` rows for each `(m, out)` of `products`: a part of a stacked
    /// matrix (Q|K|V, gate|up) runs the whole stack once for all its parts in `products` into
    /// `stacked`, then each part's rows are copied out of it (`Recorder::copy_rows`).
    fn products(
        &self,
        rec: &mut Recorder<'_>,
        products: &[(&DeviceMatrix, &Tensor)],
        input: &Tensor,
        n: usize,
        n_in: usize,
    ) -> Result<(), GpuError> {
        for (i, &(m, out)) in products.iter().enumerate() {
            let DeviceMatrix::Part { .. } = m else {
                self.product(rec, m, input, n, n_in, out)?;
                continue;
            };
            let (whole, _) = m.whole();
            // A stack runs once: at its first part in `products` (nothing allocated a step).
            if products[..i]
                .iter()
                .any(|(earlier, _)| std::ptr::eq(earlier.whole().0, whole))
            {
                continue;
            }
            let width = whole.n_rows();
            self.product(rec, whole, input, n, n_in, &self.stacked)?;
            for &(part, out) in products {
                let (w, rows) = part.whole();
                if std::ptr::eq(w, whole) {
                    rec.copy_rows(
                        &self.stacked,
                        width,
                        rows.start,
                        out,
                        rows.len(),
                        0,
                        rows.len(),
                        n,
                    )?;
                }
            }
        }
        Ok(())
    }

    /// `out = m · input` for `n` rows (from the partner format `quantize_for` made).
    fn product(
        &self,
        rec: &mut Recorder<'_>,
        m: &DeviceMatrix,
        input: &Tensor,
        n: usize,
        n_in: usize,
        out: &Tensor,
    ) -> Result<(), GpuError> {
        let q = m.partner().map(|k| &self.quantized[&(k, n_in)]);
        match (m, q) {
            (DeviceMatrix::Q1(m), Some(q)) => rec.q1_0_gemm(m, q, out, n),
            (DeviceMatrix::Rows { matrix, .. }, Some(q)) => {
                rec.gemm(matrix, Input::Quantized(q), out, n)
            }
            (DeviceMatrix::Rows { matrix, .. }, None) => {
                rec.gemm(matrix, Input::F32(input), out, n)
            }
            (DeviceMatrix::Q1(_), None) => Err(internal("a Q1_0 product without Q8_0")),
            (DeviceMatrix::Part { .. }, _) => Err(internal("a stack's part alone")),
        }
    }

    /// `x += m · input` for `n` rows of `n_embd`: the residual as the Q1_0 product's epilogue
    /// (the same bits), else the product into `o` and the add.
    #[allow(clippy::too_many_arguments)]
    fn product_add(
        &self,
        rec: &mut Recorder<'_>,
        m: &DeviceMatrix,
        input: &Tensor,
        n: usize,
        n_in: usize,
        n_embd: usize,
    ) -> Result<(), GpuError> {
        if let DeviceMatrix::Q1(q1) = m {
            let q = &self.quantized[&(FormatKind::Q8_0, n_in)];
            return rec.q1_0_gemm_add(q1, q, &self.x, n);
        }
        self.product(rec, m, input, n, n_in, &self.o)?;
        rec.add(&self.x, &self.o, n * n_embd)
    }

    /// Cuts the chunk's tokens `range` (their segments `seg_of`, positions `positions`) into
    /// runs of one sequence at consecutive positions and sets `runs` to them.
    fn set_runs(
        &mut self,
        gpu: &Gpu,
        seg_of: &[usize],
        positions: &[usize],
        range: std::ops::Range<usize>,
    ) -> Result<(), GpuError> {
        self.n_runs = 0;
        let mut first = range.start;
        for t in range.clone() {
            let last = t + 1 == range.end;
            if last || seg_of[t + 1] != seg_of[t] || positions[t + 1] != positions[t] + 1 {
                let (run, seg) = self
                    .runs
                    .get_mut(self.n_runs)
                    .ok_or_else(|| internal("more runs than tokens"))?;
                run.set(gpu, positions[first], first - range.start, t + 1 - first)?;
                *seg = seg_of[first];
                self.n_runs += 1;
                first = t + 1;
            }
        }
        Ok(())
    }
}

/// `len` values from `src` at `src_at` to `dst` at `dst_at`, as a dispatch (`copy_rows`: no
/// break of the compute pass, which `Recorder::copy` needs).
fn move_row(
    rec: &mut Recorder<'_>,
    src: &Tensor,
    src_at: usize,
    dst: &Tensor,
    dst_at: usize,
    len: usize,
) -> Result<(), GpuError> {
    rec.copy_rows(src, len, src_at, dst, len, dst_at, len, 1)
}

impl GpuBackend {
    /// `run_chunk` for a chunk of two or more tokens, batched (see the module's comment): the
    /// same read-back into `r.read` (the logits of `wanted`, then each layer's keys and values of
    /// the chunk's tokens).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn run_batch<'w, W>(
        &self,
        step: &StepView<'w, W>,
        pick: &impl Fn(&'w W) -> &'w GpuWeight,
        r: &mut Resident,
        segments: &[Segment<'_>],
        seg_of: &[usize],
        tokens: &[u32],
        range: std::ops::Range<usize>,
        wanted: &[(usize, usize)],
    ) -> Result<(), GpuError> {
        let c = step.config;
        let d = Dims::of(c);
        let gpu = &self.gpu;
        let n = range.len();
        let room = self.chunk_tokens;
        if n > room || n > r.slots.len() {
            return Err(internal("a chunk larger than its slots"));
        }
        if r.batch
            .as_ref()
            .is_none_or(|b| b.shape != shape_of(&d, &r.partners, room))
        {
            r.batch = None;
            r.batch = Some(Batch::new(gpu, &d, &r.partners, room)?);
        }
        r.batch
            .as_mut()
            .ok_or_else(|| internal("no batch"))?
            .set_runs(gpu, seg_of, step.positions, range.clone())?;
        let b = r.batch.as_ref().ok_or_else(|| internal("no batch"))?;
        let pairs = c.n_rot / 2;
        // The chunk's inputs: embedding rows and RoPE angles token-major, each token's position.
        let host_x = crate::backend::grown(&mut r.host_x, n * d.n_embd);
        self.cpu
            .embed(&pick(step.token_embd).cpu, &tokens[range.clone()], host_x);
        gpu.write(&b.x, host_x)?;
        r.angles.clear();
        for t in range.clone() {
            for &(cos, sin) in &step.rope[t * pairs..(t + 1) * pairs] {
                r.angles.extend([cos, sin]);
            }
        }
        gpu.write(&b.cos_sin, &r.angles)?;
        let PassConsts {
            style,
            eps,
            scale,
            reach,
        } = PassConsts::of(step, range.clone());
        let vectors = &r.vectors;
        let vector = |v: &[f32]| -> &Tensor { &vectors[&(v.as_ptr() as usize, v.len())] };
        let mut rec = super::profile::recorder(gpu, self.profile.as_ref())?;
        // A run of one token attends through the decode attention (split over positions).
        rec.set_attention_positions(reach);
        for (li, block) in step.blocks.iter().enumerate() {
            self.flush_between(&mut rec, li)?;
            let (a, [wq, wk, wv, wo, wg, wu, wd]) = layer_matrices(block, pick)?;
            rec.rms_norm(&b.x, vector(&block.attn_norm[..]), eps, n, &b.xn)?;
            b.quantize_for(&mut rec, &b.xn, n, d.n_embd, &[wq, wk, wv])?;
            let q_out = if a.q_norm.is_some() { &b.q_pre } else { &b.q };
            let (k, v) = (&b.k[li], &b.v[li]);
            let k_out = if a.k_norm.is_some() { &b.k_pre } else { k };
            let qkv = [(wq, q_out), (wk, k_out), (wv, v)];
            b.products(&mut rec, &qkv, &b.xn, n, d.n_embd)?;
            for (out, bias) in [(q_out, &a.bq), (k_out, &a.bk), (v, &a.bv)] {
                if let Some(bias) = bias {
                    rec.add_rows(out, vector(&bias[..]), n)?;
                }
            }
            if let Some(w) = &a.q_norm {
                rec.rms_norm(&b.q_pre, vector(&w[..]), eps, n * c.n_head, &b.q)?;
            }
            if let Some(w) = &a.k_norm {
                rec.rms_norm(&b.k_pre, vector(&w[..]), eps, n * c.n_head_kv, k)?;
            }
            let (hd, nr) = (c.head_dim, c.n_rot);
            rec.rope(&b.q, &b.cos_sin, n, c.n_head, hd, nr, style)?;
            rec.rope(k, &b.cos_sin, n, c.n_head_kv, hd, nr, style)?;
            // Each run's key and value rows into its sequence's mirror, then its tokens'
            // attention, each at its own position: two dispatches a run.
            for (run, seg) in &b.runs[..b.n_runs] {
                let host = segments[*seg].layers[li].kv();
                let cache = r.mirrors.of(host).ok_or_else(|| internal("no mirror"))?;
                rec.store_kv_rows(cache, k, v, run)?;
                rec.chunk_attention(&b.q, cache, run, c.n_head, scale, &b.att)?;
            }
            b.quantize_for(&mut rec, &b.att, n, d.att_len, &[wo])?;
            b.product_add(&mut rec, wo, &b.att, n, d.att_len, d.n_embd)?;
            rec.rms_norm(&b.x, vector(&block.ffn_norm[..]), eps, n, &b.xn)?;
            b.quantize_for(&mut rec, &b.xn, n, d.n_embd, &[wg, wu])?;
            let gate_up = [(wg, &b.gate), (wu, &b.up)];
            b.products(&mut rec, &gate_up, &b.xn, n, d.n_embd)?;
            rec.swiglu(&b.gate, &b.up, n * d.n_ff)?;
            b.quantize_for(&mut rec, &b.gate, n, d.n_ff, &[wd])?;
            b.product_add(&mut rec, wd, &b.gate, n, d.n_ff, d.n_embd)?;
        }
        // The wanted rows' heads, each from its token's row (run_chunk's ops).
        let head = device(step.output, pick).ok_or_else(|| internal("the output on the CPU"))?;
        for &(j, i) in wanted {
            let slot = &r.slots[i];
            move_row(&mut rec, &b.x, i * d.n_embd, &slot.x, 0, d.n_embd)?;
            norm_for(
                &mut rec,
                slot,
                vector(step.output_norm),
                eps,
                d.n_embd,
                &[head],
            )?;
            product(&mut rec, slot, head, &slot.xn, d.n_embd, &r.logits[j])?;
        }
        self.step_dispatches
            .store(rec.dispatches(), std::sync::atomic::Ordering::Relaxed);
        let mut parts: Vec<(&Tensor, usize, usize)> = wanted
            .iter()
            .map(|&(j, _)| (&r.logits[j], 0, c.n_vocab))
            .collect();
        for (k, v) in b.k.iter().zip(&b.v) {
            parts.extend([(k, 0, n * d.k_len), (v, 0, n * d.v_len)]);
        }
        let total = wanted.len() * c.n_vocab + n * d.n_layer * (d.k_len + d.v_len);
        let read = crate::backend::grown(&mut r.read, total);
        super::profile::submit_read(gpu, rec, self.profile.as_ref(), "batch", &parts, read)
    }
}
