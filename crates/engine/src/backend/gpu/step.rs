//! The GPU backend's device-resident forward step ([`crate::Backend::forward_step`]): a whole
//! pass — every layer of every token of every segment, the output norm and the LM head — recorded
//! into one `Recorder` (a prompt longer than a chunk — [`TOKENS_PER_SUBMIT`] tokens unless
//! `OXIBONSAI_GPU_CHUNK` says — one per chunk),
//! submitted every [`SUBMIT_LAYERS`] layers without waiting (the device starts while the host
//! records the rest), with one read-back in the last submission and one wait: the logits rows
//! wanted and each token's new key and value rows.
//!
//! The host's `LayerCache` stays the source of truth; the device reads its mirror of it
//! (`mirror.rs`). The keys and values a step computes are read back as f32 rows and stored in the
//! host cache by the CPU backend's `store_kv` (the bits the op path stores).

use std::collections::HashMap;

use oxibonsai_formats::q8_0::QK8_0;
use oxibonsai_formats::FormatKind;
use oxibonsai_gguf::GgufFile;
use oxibonsai_gpu::{Gpu, GpuError, Input, Q8Tensor, Recorder, Rope, Tensor, MAX_HEAD_DIM_V};

use super::mirror::Mirrors;
use super::weight::{DeviceMatrix, GpuWeight};
use super::GpuBackend;
use crate::backend::{Backend, Segment, StepView};
use crate::config::{Architecture, LayerKind, ModelConfig, RopeStyle};
use crate::kv_cache::CacheTypes;
use crate::model::Mixer;
use crate::state::LayerState;

/// Tokens recorded into one submission by default (the per-token device tensors kept for them;
/// `GpuBackend::with_chunk_tokens`, `OXIBONSAI_GPU_CHUNK`).
pub(super) const TOKENS_PER_SUBMIT: usize = 32;

/// The most tokens a chunk may be set to hold.
pub(super) const MOST_TOKENS_PER_SUBMIT: usize = 256;

/// The device state of the resident step, kept between steps: nothing is allocated per token in
/// steady state, so the bind groups built for these tensors are reused.
#[derive(Default)]
pub(super) struct Resident {
    /// The model's norm weights and biases on the device, by the host vector's address and
    /// length: the model owns both its vectors and this backend, so an address names one vector
    /// for the backend's whole life.
    pub(super) vectors: HashMap<(usize, usize), Tensor>,
    /// The model the two fields below were read from (its blocks' address and count), so a step
    /// walks the model's layers only when the model is new.
    model: Option<(usize, usize)>,
    /// Every (partner format, input length) a product of the model reads.
    pub(super) partners: Vec<(FormatKind, usize)>,
    /// Whether some layer's Q / K / V are stacked (each slot then keeps a stacked output a
    /// layer), and each layer's stacked Q / K / V biases (a missing one as zeros).
    pub(super) stacked: bool,
    pub(super) stacked_biases: Vec<Option<Tensor>>,
    /// The tensors of the i-th token of a submission.
    pub(super) slots: Vec<Slot>,
    /// A chunk's token-major tensors for the batched pass (`batch.rs`).
    pub(super) batch: Option<super::batch::Batch>,
    /// Logits of the j-th wanted row of a submission.
    pub(super) logits: Vec<Tensor>,
    /// A device copy of each host cache.
    pub(super) mirrors: Mirrors,
    /// Host scratch: embedding rows, a token's RoPE angles, the read-back.
    pub(super) host_x: Vec<f32>,
    pub(super) angles: Vec<f32>,
    pub(super) read: Vec<f32>,
}

/// One token's activations.
pub(super) struct Slot {
    pub(super) x: Tensor,
    pub(super) xn: Tensor,
    pub(super) q: Tensor,
    /// Q / K before the per-head norm (qwen3).
    q_pre: Tensor,
    k_pre: Tensor,
    pub(super) att: Tensor,
    o: Tensor,
    gate: Tensor,
    up: Tensor,
    /// A stacked Q / K / V product's output before the q / k norms; a stacked gate / up's.
    qkv_pre: Tensor,
    gate_up: Tensor,
    /// The token's position (one word) and RoPE angles.
    pub(super) step: Tensor,
    cos_sin: Tensor,
    /// The activation in each partner format, by (format, length).
    quantized: HashMap<(FormatKind, usize), Q8Tensor>,
    /// Each layer's key and value rows of this token (f32, read back to the host cache), and
    /// where Q / K / V are stacked, the layer's stacked output: the keys are then the fused
    /// attention's rotated keys and the values read back from the stacked output.
    pub(super) kv: Vec<(Tensor, Tensor, Option<Tensor>)>,
}

/// Why a step is not run resident (counted by reason), or a GPU error to report.
enum NotResident {
    Reason(&'static str),
    Gpu(&'static str, GpuError),
}

impl From<&'static str> for NotResident {
    fn from(reason: &'static str) -> Self {
        NotResident::Reason(reason)
    }
}

/// The sizes of a model's activations.
pub(super) struct Dims {
    pub(super) n_embd: usize,
    pub(super) n_ff: usize,
    pub(super) q_len: usize,
    pub(super) k_len: usize,
    pub(super) v_len: usize,
    pub(super) att_len: usize,
    pub(super) n_rot: usize,
    pub(super) n_layer: usize,
}

impl Dims {
    pub(super) fn qkv_len(&self) -> usize {
        self.q_len + self.k_len + self.v_len
    }

    pub(super) fn of(c: &ModelConfig) -> Dims {
        Dims {
            n_embd: c.n_embd,
            n_ff: c.n_ff,
            q_len: c.n_head * c.head_dim,
            k_len: c.n_head_kv * c.head_dim,
            v_len: c.n_head_kv * c.head_dim_v,
            att_len: c.n_head * c.head_dim_v,
            n_rot: c.n_rot,
            n_layer: c.n_layer,
        }
    }
}

impl Slot {
    fn new(
        gpu: &Gpu,
        d: &Dims,
        partners: &[(FormatKind, usize)],
        stacked: bool,
    ) -> Result<Slot, GpuError> {
        let t = |what: &str, len: usize| gpu.tensor(what, len);
        let mut quantized = HashMap::new();
        for &(kind, n_in) in partners {
            quantized.insert((kind, n_in), Q8Tensor::with_kind(gpu, kind, n_in)?);
        }
        Ok(Slot {
            x: t("x", d.n_embd)?,
            xn: t("xn", d.n_embd)?,
            q: t("q", d.q_len)?,
            q_pre: t("q before its norm", d.q_len)?,
            k_pre: t("k before its norm", d.k_len)?,
            att: t("attention", d.att_len)?,
            o: t("projection", d.n_embd)?,
            gate: t("gate", d.n_ff)?,
            up: t("up", d.n_ff)?,
            qkv_pre: t("q/k/v before the norms", d.qkv_len())?,
            gate_up: t("gate/up", 2 * d.n_ff)?,
            step: t("position", 1)?,
            cos_sin: t("rope angles", d.n_rot.max(2))?,
            quantized,
            kv: (0..d.n_layer)
                .map(|_| {
                    let qkv = stacked.then(|| t("q/k/v", d.qkv_len())).transpose()?;
                    Ok((t("k", d.k_len)?, t("v", d.v_len)?, qkv))
                })
                .collect::<Result<_, GpuError>>()?,
        })
    }

    fn fits(&self, d: &Dims, partners: &[(FormatKind, usize)], stacked: bool) -> bool {
        self.x.len() == d.n_embd
            && self.gate.len() == d.n_ff
            && self.q.len() == d.q_len
            && self.att.len() == d.att_len
            && self.kv.len() == d.n_layer
            && self.kv.first().is_none_or(|(k, v, qkv)| {
                k.len() == d.k_len && v.len() == d.v_len && qkv.is_some() == stacked
            })
            && partners.iter().all(|p| self.quantized.contains_key(p))
    }
}

/// The matrices of a pass on the device, or why not.
pub(super) fn device<'w, W>(
    w: &'w W,
    pick: &impl Fn(&'w W) -> &'w GpuWeight,
) -> Option<&'w DeviceMatrix> {
    pick(w).device.as_ref()
}

/// `input` quantized to each partner format `matrices` read (once a format).
fn quantize_for(
    rec: &mut Recorder<'_>,
    slot: &Slot,
    input: &Tensor,
    n_in: usize,
    matrices: &[&DeviceMatrix],
) -> Result<(), GpuError> {
    let mut done: [Option<FormatKind>; 4] = [None; 4];
    for (i, m) in matrices.iter().enumerate() {
        if let Some(kind) = m.partner() {
            if done[..i].contains(&Some(kind)) {
                continue;
            }
            done[i] = Some(kind);
            rec.quantize(input, &slot.quantized[&(kind, n_in)])?;
        }
    }
    Ok(())
}

/// `out = m · input`, from the partner format [`quantize_for`] made (or the f32 input).
pub(super) fn product(
    rec: &mut Recorder<'_>,
    slot: &Slot,
    m: &DeviceMatrix,
    input: &Tensor,
    n_in: usize,
    out: &Tensor,
) -> Result<(), GpuError> {
    let q = m.partner().map(|k| &slot.quantized[&(k, n_in)]);
    match (m, q) {
        (DeviceMatrix::Q1(m), Some(q)) => rec.q1_0_gemv(m, q, out),
        (DeviceMatrix::Rows { matrix, .. }, Some(q)) => rec.gemv(matrix, Input::Quantized(q), out),
        (DeviceMatrix::Rows { matrix, .. }, None) => rec.gemv(matrix, Input::F32(input), out),
        (DeviceMatrix::Q1(_), None) => Err(GpuError::Shape {
            what: "Q1_0 product".to_owned(),
            reason: "takes a Q8_0 activation".to_owned(),
        }),
        (DeviceMatrix::Part { .. }, _) => Err(internal("a part of a stack run apart")),
    }
}

/// The stacked matrix `parts` are the rows of, in order and whole (Q|K|V, gate|up).
fn stack_of<'m>(parts: &[&'m DeviceMatrix]) -> Option<&'m DeviceMatrix> {
    let mut whole: Option<&DeviceMatrix> = None;
    let mut next = 0;
    for part in parts {
        let DeviceMatrix::Part { whole: w, rows } = part else {
            return None;
        };
        if whole.is_some_and(|x| !std::ptr::eq(x, &**w)) || rows.start != next {
            return None;
        }
        whole = Some(w);
        next = rows.end;
    }
    whole.filter(|w| w.n_rows() == next)
}

/// The partner format every one of `matrices` reads, where they share one (a quantized one).
fn shared_partner(matrices: &[&DeviceMatrix]) -> Option<FormatKind> {
    let first = matrices.first()?.partner()?;
    matrices
        .iter()
        .all(|m| m.partner() == Some(first))
        .then_some(first)
}

/// `rms_norm(slot.x) · weight` for the products of `matrices` (rows of `n`): straight into their
/// activation in one dispatch where they all read one partner format, Q8_0, Q8_1 or Q8_K (the
/// same bits), else into `slot.xn` and from there into each partner format they read.
pub(super) fn norm_for(
    rec: &mut Recorder<'_>,
    slot: &Slot,
    weight: &Tensor,
    eps: f32,
    n: usize,
    matrices: &[&DeviceMatrix],
) -> Result<(), GpuError> {
    if let Some(kind) = shared_partner(matrices) {
        return rec.rms_norm_quantize(&slot.x, weight, eps, &slot.quantized[&(kind, n)]);
    }
    rec.rms_norm(&slot.x, weight, eps, 1, &slot.xn)?;
    quantize_for(rec, slot, &slot.xn, n, matrices)
}

/// `out = m · rms_norm(slot.x) · weight` (rows of `n`): one dispatch where `prologue` (the
/// device takes rows of `n` so) and `m` is a Q1_0 matrix — each workgroup of the product norms
/// and quantizes `slot.x` itself (`rms_norm_q1_0_gemv`, the same bits) — else [`norm_for`] then
/// [`product`].
#[allow(clippy::too_many_arguments)]
fn norm_product(
    rec: &mut Recorder<'_>,
    slot: &Slot,
    weight: &Tensor,
    eps: f32,
    n: usize,
    m: &DeviceMatrix,
    out: &Tensor,
    prologue: bool,
) -> Result<(), GpuError> {
    match m {
        DeviceMatrix::Q1(q1) if prologue => rec.rms_norm_q1_0_gemv(&slot.x, weight, eps, q1, out),
        _ => {
            norm_for(rec, slot, weight, eps, n, &[m])?;
            product(rec, slot, m, &slot.xn, n, out)
        }
    }
}

/// Which of a Q1_0 product's prologue (the norm) and epilogue (SwiGLU) the step fuses into it.
#[derive(Clone, Copy)]
struct Fuse {
    prologue: bool,
    epilogue: bool,
    /// Both in one product (the device's workgroup memory holds both).
    both: bool,
    /// The norm is done: the previous product's tail wrote the activation (the norm tail; never
    /// with the prologue).
    normed: bool,
}

/// `h = quantize(swiglu(m · rms_norm(slot.x) · weight))` for a stacked gate|up matrix `m` (rows
/// of `n`) into `h`, the down product's activation: where `m` is Q1_0 and `h` Q8_0 / Q8_1, SwiGLU
/// is the product's epilogue (`q1_0_gemv_swiglu`) — with the norm as its prologue too where
/// [`Fuse::both`] — else [`norm_product`] into `slot.gate_up` then `swiglu_quantize`: the same
/// bits. Without the norm where [`Fuse::normed`] (O's tail wrote the activation).
#[allow(clippy::too_many_arguments)]
fn gate_up_swiglu(
    rec: &mut Recorder<'_>,
    slot: &Slot,
    weight: &Tensor,
    eps: f32,
    n: usize,
    m: &DeviceMatrix,
    h: &Q8Tensor,
    fuse: Fuse,
) -> Result<(), GpuError> {
    let q8 = matches!(h.kind(), FormatKind::Q8_0 | FormatKind::Q8_1);
    match m {
        DeviceMatrix::Q1(q1) if fuse.epilogue && q8 && h.n_in().is_multiple_of(QK8_0) => {
            if fuse.both && !fuse.normed {
                return rec.rms_norm_q1_0_gemv_swiglu(&slot.x, weight, eps, q1, h);
            }
            if !fuse.normed {
                norm_for(rec, slot, weight, eps, n, &[m])?;
            }
            rec.q1_0_gemv_swiglu(q1, &slot.quantized[&(FormatKind::Q8_0, n)], h)
        }
        _ => {
            if fuse.normed {
                product(rec, slot, m, &slot.xn, n, &slot.gate_up)?;
            } else {
                norm_product(rec, slot, weight, eps, n, m, &slot.gate_up, fuse.prologue)?;
            }
            rec.swiglu_quantize(&slot.gate_up, h)
        }
    }
}

/// `slot.x += m · input` (rows of `n_embd`): the residual add as the product's epilogue (the
/// same bits), from the partner format [`quantize_for`] made or the f32 input. With `tail` (a
/// norm weight and the partner format the next products read, [`norm_tail_kind`]) and a Q1_0
/// matrix, the RMS norm [`norm_for`] would record next goes in the product's tail
/// (`q1_0_gemv_add_norm`: the same bits in one dispatch); returns whether it did (the caller
/// then records the next products without their norm).
fn product_add(
    rec: &mut Recorder<'_>,
    slot: &Slot,
    m: &DeviceMatrix,
    input: &Tensor,
    n_in: usize,
    tail: Option<(&Tensor, FormatKind, f32)>,
) -> Result<bool, GpuError> {
    let q = m.partner().map(|k| &slot.quantized[&(k, n_in)]);
    match (m, q) {
        (DeviceMatrix::Q1(q1), Some(q)) => match tail {
            Some((weight, kind, eps)) => {
                let next = slot
                    .quantized
                    .get(&(kind, slot.x.len()))
                    .ok_or_else(|| internal("no activation for a norm tail"))?;
                rec.q1_0_gemv_add_norm(q1, q, &slot.x, weight, eps, next)?;
                return Ok(true);
            }
            None => rec.q1_0_gemv_add(q1, q, &slot.x)?,
        },
        (DeviceMatrix::Rows { matrix, .. }, Some(q)) => {
            rec.gemv_add(matrix, Input::Quantized(q), &slot.x)?
        }
        (DeviceMatrix::Rows { matrix, .. }, None) => {
            rec.gemv_add(matrix, Input::F32(input), &slot.x)?
        }
        // A Q1_0 matrix without its Q8_0 or a stack's part alone: `product`'s errors.
        _ => product(rec, slot, m, input, n_in, &slot.o)?,
    }
    Ok(false)
}

/// The partner format the RMS norm before `matrices` writes in one dispatch ([`norm_for`]'s
/// shared partner: Q8_0, Q8_1 or Q8_K) — what a residual product's norm tail writes instead —
/// where the step runs norm tails (`on`).
fn norm_tail_kind(on: bool, matrices: &[&DeviceMatrix]) -> Option<FormatKind> {
    on.then(|| shared_partner(matrices)).flatten()
}

/// The stacks a layer runs fused: Q|K|V with the attention output's partner format (where the
/// matrix after the fused attention reads a quantized activation, which the fused attention
/// writes in its format — Q8_0, Q8_1 or Q8_K — and the head dimensions suit it: weight.rs checks
/// both), gate|up with down's.
type Stacks<'m> = (
    Option<(&'m DeviceMatrix, FormatKind)>,
    Option<(&'m DeviceMatrix, FormatKind)>,
);

fn stacks<'m>(c: &ModelConfig, [wq, wk, wv, wo, wg, wu, wd]: [&'m DeviceMatrix; 7]) -> Stacks<'m> {
    let att_partner = wo
        .partner()
        .filter(|_| oxibonsai_gpu::fused_attention_fits(c.head_dim, c.head_dim_v));
    (
        stack_of(&[wq, wk, wv]).zip(att_partner),
        stack_of(&[wg, wu]).zip(wd.partner()),
    )
}

/// The partner format a layer's attention norm writes in one dispatch (the stacked Q|K|V's,
/// where the step runs it fused: `stacked`, slots with a stacked output), for a norm tail.
fn attention_norm_kind(
    on: bool,
    c: &ModelConfig,
    ms: [&DeviceMatrix; 7],
    stacked: bool,
) -> Option<FormatKind> {
    match stacks(c, ms).0 {
        Some((whole, _)) if stacked => norm_tail_kind(on, &[whole]),
        _ => norm_tail_kind(on, &ms[..3]),
    }
}

/// A broken invariant of the step (what `refusal` checked), as an error rather than a panic.
/// What a recorded pass shares, whichever way it records its layers: the RoPE style, the
/// attention scale, and the positions its attention reads (up to the furthest token of the
/// submission: its dispatches hold chunk slots for those, not for the whole cache — the same
/// bits).
pub(super) struct PassConsts {
    pub style: Rope,
    pub eps: f32,
    pub scale: f32,
    pub reach: usize,
}

impl PassConsts {
    pub(super) fn of<W>(step: &StepView<'_, W>, range: std::ops::Range<usize>) -> PassConsts {
        let c = step.config;
        PassConsts {
            style: match c.arch.rope_style() {
                RopeStyle::Adjacent => Rope::Normal,
                RopeStyle::NeoX => Rope::Neox,
            },
            eps: c.rms_norm_eps,
            scale: 1.0 / (c.head_dim as f32).sqrt(),
            reach: range.map(|t| step.positions[t] + 1).max().unwrap_or(1),
        }
    }
}

/// An attention layer's seven matrices on the device: Q, K, V, O, gate, up, down.
pub(super) fn layer_matrices<'w, W>(
    block: &'w crate::model::Block<W>,
    pick: &impl Fn(&'w W) -> &'w GpuWeight,
) -> Result<(&'w crate::model::AttentionWeights<W>, [&'w DeviceMatrix; 7]), GpuError> {
    let Mixer::Attention(a) = &block.mixer else {
        return Err(internal("a layer that is not attention"));
    };
    let m = |w: &'w W| device(w, pick).ok_or_else(|| internal("a matrix on the CPU"));
    let f = &block.ffn;
    Ok((
        a,
        [
            m(&a.wq)?,
            m(&a.wk)?,
            m(&a.wv)?,
            m(&a.wo)?,
            m(&f.w_gate)?,
            m(&f.w_up)?,
            m(&f.w_down)?,
        ],
    ))
}

pub(super) fn internal(what: &str) -> GpuError {
    GpuError::Shape {
        what: "resident step".to_owned(),
        reason: what.to_owned(),
    }
}

/// Why a model of `config` cannot run resident whatever its weights and caches: its rotary
/// dimension.
fn rotary_refusal(c: &ModelConfig) -> Option<&'static str> {
    (c.n_rot == 0 || c.n_rot > c.head_dim || !c.n_rot.is_multiple_of(2))
        .then_some("the rotary dimension")
}

/// Why a KV cache of `types` and these head dimensions cannot be mirrored on the device.
fn cache_refusal(types: CacheTypes, head_dim: usize, head_dim_v: usize) -> Option<&'static str> {
    let float = |k: FormatKind| matches!(k, FormatKind::F32 | FormatKind::F16);
    if types.k != types.v || !float(types.k) {
        return Some("a cache type other than f16 / f32 for both");
    }
    let odd = head_dim % 2 == 1 || head_dim_v % 2 == 1;
    if (types.k == FormatKind::F16 && odd) || head_dim_v > MAX_HEAD_DIM_V {
        return Some("a head dimension the device cache does not take");
    }
    None
}

/// Why the GPU backend would run a model of `config` in `file`, with caches of `types`, op by op
/// rather than in resident steps — what its own check finds once the weights are loaded, read
/// from the file beforehand (`--device auto` keeps such a model on the CPU).
pub(crate) fn model_refusal(
    file: &GgufFile,
    config: &ModelConfig,
    types: CacheTypes,
) -> Option<&'static str> {
    if config.layers.iter().any(|k| *k != LayerKind::Attention) {
        return Some("a layer that is not attention");
    }
    if config.arch == Architecture::Qwen35 {
        return Some("gated attention");
    }
    if file.tensors().iter().any(|t| t.name.ends_with(".scale")) {
        return Some("per-tensor scales");
    }
    if file
        .metadata()
        .iter()
        .any(|(k, _)| k.starts_with("prism.hadamard."))
    {
        return Some("a rotated model");
    }
    rotary_refusal(config).or_else(|| cache_refusal(types, config.head_dim, config.head_dim_v))
}

/// Layers a pass records between two submissions (`OXIBONSAI_GPU_SUBMIT_LAYERS`; 0: one
/// submission a pass): the device runs the first layers while the host records the next.
pub(super) const SUBMIT_LAYERS: usize = 8;

impl GpuBackend {
    /// Submits the layers recorded so far before layer `li` where a submission's share of layers
    /// is full (`submit_layers`), without waiting.
    pub(super) fn flush_between(&self, rec: &mut Recorder<'_>, li: usize) -> Result<(), GpuError> {
        if self.submit_layers > 0 && li > 0 && li.is_multiple_of(self.submit_layers) {
            rec.flush()?;
        }
        Ok(())
    }

    /// KV cache mirrors held on the device (one per live sequence cache of each layer a resident
    /// step has read; a dropped cache's is freed at the next step).
    pub fn kv_mirrors(&self) -> usize {
        let r = self.resident.lock().unwrap_or_else(|e| e.into_inner());
        r.mirrors.len()
    }

    /// [`crate::Backend::forward_step`] for a model whose weights `pick` finds in `W` (this
    /// backend's own, or a [`crate::DeviceBackend`]'s): counted as resident, or not resident and
    /// why.
    pub fn step_with<'w, W>(
        &self,
        step: &StepView<'w, W>,
        pick: impl Fn(&'w W) -> &'w GpuWeight,
        segments: &mut [Segment<'_>],
        tokens: &[u32],
        logits: &mut Vec<f32>,
    ) -> Option<usize> {
        match self.try_step(step, &pick, segments, tokens, logits) {
            Ok(rows) => {
                self.resident_steps
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                Some(rows)
            }
            Err(NotResident::Reason(why)) => {
                self.count(&self.not_resident, why);
                None
            }
            Err(NotResident::Gpu(what, e)) => {
                if !self
                    .step_failed
                    .swap(true, std::sync::atomic::Ordering::Relaxed)
                {
                    tracing::warn!(error = %e, "a resident GPU step failed; running it op by op");
                    eprintln!(
                        "warning: GPU resident step: {what} failed ({e}); such steps run op by op"
                    );
                }
                self.count(&self.not_resident, what);
                None
            }
        }
    }

    /// Why this pass cannot run resident, if so (nothing changed yet).
    fn refusal<'w, W>(
        &self,
        step: &StepView<'w, W>,
        pick: &impl Fn(&'w W) -> &'w GpuWeight,
        segments: &[Segment<'_>],
    ) -> Option<&'static str> {
        if !self.resident_on {
            return Some("resident steps off");
        }
        if let Some(why) = step.refused {
            return Some(why);
        }
        let c = step.config;
        if device(step.output, pick).is_none() {
            return Some("a matrix on the CPU");
        }
        for block in step.blocks {
            let Mixer::Attention(a) = &block.mixer else {
                return Some("a layer that is not attention");
            };
            if a.output_gate {
                return Some("gated attention");
            }
            if a.scales.iter().any(Option::is_some) || block.ffn.scales.iter().any(Option::is_some)
            {
                return Some("per-tensor scales");
            }
            let f = &block.ffn;
            if [&a.wq, &a.wk, &a.wv, &a.wo, &f.w_gate, &f.w_up, &f.w_down]
                .iter()
                .any(|w| device(*w, pick).is_none())
            {
                return Some("a matrix on the CPU");
            }
        }
        if let Some(why) = rotary_refusal(c) {
            return Some(why);
        }
        for s in segments {
            for layer in s.layers.iter() {
                let LayerState::Kv(cache) = layer else {
                    return Some("a layer that is not attention");
                };
                if let Some(why) = cache_refusal(cache.types, cache.head_dim, cache.head_dim_v) {
                    return Some(why);
                }
                // Only block-quantized caches are rotated, which the types refuse already.
                if cache.k_rotation.is_some() || cache.v_rotation.is_some() {
                    return Some("a rotated cache");
                }
            }
        }
        None
    }

    /// Reads what a model's steps need once: the (partner format, input length) of every
    /// product, and its norm weights and biases uploaded.
    fn read_model<'w, W>(
        &self,
        step: &StepView<'w, W>,
        pick: &impl Fn(&'w W) -> &'w GpuWeight,
        r: &mut Resident,
    ) -> Result<(), GpuError> {
        let d = Dims::of(step.config);
        let partners = &mut r.partners;
        partners.clear();
        let mut need = |w: &'w W, n_in: usize| {
            if let Some(kind) = device(w, pick).and_then(DeviceMatrix::partner) {
                if !partners.contains(&(kind, n_in)) {
                    partners.push((kind, n_in));
                }
            }
        };
        need(step.output, d.n_embd);
        for block in step.blocks {
            if let Mixer::Attention(a) = &block.mixer {
                for w in [&a.wq, &a.wk, &a.wv] {
                    need(w, d.n_embd);
                }
                need(&a.wo, d.att_len);
            }
            need(&block.ffn.w_gate, d.n_embd);
            need(&block.ffn.w_up, d.n_embd);
            need(&block.ffn.w_down, d.n_ff);
        }
        r.stacked = false;
        r.stacked_biases.clear();
        for block in step.blocks {
            let mut bias = None;
            if let Mixer::Attention(a) = &block.mixer {
                let m = |w: &'w W| device(w, pick);
                if let (Some(q), Some(k), Some(v)) = (m(&a.wq), m(&a.wk), m(&a.wv)) {
                    if stack_of(&[q, k, v]).is_some() {
                        r.stacked = true;
                        let biases = [(&a.bq, d.q_len), (&a.bk, d.k_len), (&a.bv, d.v_len)];
                        if biases.iter().any(|(b, _)| b.is_some()) {
                            let mut all = Vec::with_capacity(d.qkv_len());
                            for (b, len) in biases {
                                match b {
                                    Some(b) => all.extend_from_slice(b),
                                    None => all.resize(all.len() + len, 0.0),
                                }
                            }
                            bias = Some(self.gpu.upload("stacked q/k/v bias", &all)?);
                        }
                    }
                }
            }
            r.stacked_biases.push(bias);
        }
        let mut vectors: Vec<&[f32]> = vec![step.output_norm];
        for block in step.blocks {
            vectors.push(&block.attn_norm);
            vectors.push(&block.ffn_norm);
            if let Mixer::Attention(a) = &block.mixer {
                for v in [&a.bq, &a.bk, &a.bv, &a.q_norm, &a.k_norm]
                    .into_iter()
                    .flatten()
                {
                    vectors.push(v);
                }
            }
        }
        for v in vectors {
            let key = (v.as_ptr() as usize, v.len());
            if let std::collections::hash_map::Entry::Vacant(slot) = r.vectors.entry(key) {
                slot.insert(self.gpu.upload("norm weight or bias", v)?);
            }
        }
        Ok(())
    }

    fn try_step<'w, W>(
        &self,
        step: &StepView<'w, W>,
        pick: &impl Fn(&'w W) -> &'w GpuWeight,
        segments: &mut [Segment<'_>],
        tokens: &[u32],
        logits: &mut Vec<f32>,
    ) -> Result<usize, NotResident> {
        if let Some(why) = self.refusal(step, pick, segments) {
            return Err(why.into());
        }
        let c = step.config;
        let d = Dims::of(c);
        let gpu = &self.gpu;
        let mut guard = self.resident.lock().unwrap_or_else(|e| e.into_inner());
        let r = &mut *guard;
        let alloc = |e| NotResident::Gpu("a device allocation", e);

        let model = (step.blocks.as_ptr() as usize, step.blocks.len());
        if r.model != Some(model) {
            self.read_model(step, pick, r).map_err(alloc)?;
            r.model = Some(model);
        }
        let partners = &r.partners;
        if r.slots
            .first()
            .is_some_and(|s| !s.fits(&d, partners, r.stacked))
        {
            r.slots.clear();
            r.logits.clear();
        }
        let chunk = self.chunk_tokens;
        let per_submit = tokens.len().min(chunk);
        while r.slots.len() < per_submit {
            r.slots
                .push(Slot::new(gpu, &d, &r.partners, r.stacked).map_err(alloc)?);
        }
        let wanted_per_submit = per_submit.min(step.rows.len());
        while r.logits.len() < wanted_per_submit {
            r.logits
                .push(gpu.tensor("logits", c.n_vocab).map_err(alloc)?);
        }
        r.mirrors.sync(gpu, segments).map_err(alloc)?;

        // The segment of each token.
        let mut first = 0;
        let mut seg_of = Vec::with_capacity(tokens.len());
        for (i, s) in segments.iter().enumerate() {
            seg_of.extend(std::iter::repeat_n(i, s.len));
            first += s.len;
        }
        debug_assert_eq!(first, tokens.len());
        let rows = step.rows.len();
        crate::backend::grown(logits, rows * c.n_vocab);
        let mut row = 0;
        for start in (0..tokens.len()).step_by(chunk) {
            let end = (start + chunk).min(tokens.len());
            let wanted: Vec<(usize, usize)> = step.rows[row..]
                .iter()
                .take_while(|&&t| t < end)
                .enumerate()
                .map(|(j, &t)| (j, t - start))
                .collect();
            // The batched pass's chunk attention holds value heads up to its limit.
            let batched = self.gemm_on
                && end - start >= 2
                && c.head_dim_v <= oxibonsai_gpu::MAX_CHUNK_HEAD_DIM_V;
            if batched {
                self.batched_chunks
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                self.run_batch(
                    step,
                    pick,
                    r,
                    segments,
                    &seg_of,
                    tokens,
                    start..end,
                    &wanted,
                )
            } else {
                self.run_chunk(
                    step,
                    pick,
                    r,
                    segments,
                    &seg_of,
                    tokens,
                    start..end,
                    &wanted,
                )
            }
            .map_err(|e| NotResident::Gpu("a recorded step", e))?;
            // The read-back: the wanted rows' logits, then each layer's keys and values.
            let n = end - start;
            let read = &r.read;
            let logit_floats = wanted.len() * c.n_vocab;
            logits[row * c.n_vocab..][..logit_floats].copy_from_slice(&read[..logit_floats]);
            row += wanted.len();
            let mut at = logit_floats;
            for li in 0..d.n_layer {
                let keys = &read[at..at + n * d.k_len];
                at += n * d.k_len;
                let values = &read[at..at + n * d.v_len];
                at += n * d.v_len;
                // Each segment's tokens of the chunk, stored as the op path's store_kv does.
                let mut seg_start = 0;
                for s in segments.iter_mut() {
                    let seg_end = seg_start + s.len;
                    let (a, b) = (seg_start.max(start), seg_end.min(end));
                    if a < b {
                        let (ta, tb) = (a - start, b - start);
                        self.cpu.store_kv(
                            s.layers[li].kv_mut(),
                            &keys[ta * d.k_len..tb * d.k_len],
                            &values[ta * d.v_len..tb * d.v_len],
                            &step.positions[a..b],
                        );
                    }
                    seg_start = seg_end;
                }
            }
        }
        r.mirrors.settled(segments);
        Ok(rows)
    }

    /// Records and submits the tokens `range` of the pass, then reads back the logits of
    /// `wanted` (index among the pass's rows, token within the chunk) and every layer's keys and
    /// values into `r.read`.
    #[allow(clippy::too_many_arguments)]
    fn run_chunk<'w, W>(
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
        let pairs = c.n_rot / 2;
        // Per-token inputs, written before the submission.
        let host_x = crate::backend::grown(&mut r.host_x, n * d.n_embd);
        self.cpu
            .embed(&pick(step.token_embd).cpu, &tokens[range.clone()], host_x);
        for (i, t) in range.clone().enumerate() {
            let slot = &r.slots[i];
            gpu.write(&slot.x, &host_x[i * d.n_embd..(i + 1) * d.n_embd])?;
            gpu.write(&slot.step, &[step.positions[t] as u32])?;
            r.angles.clear();
            for &(cos, sin) in &step.rope[t * pairs..(t + 1) * pairs] {
                r.angles.extend([cos, sin]);
            }
            gpu.write(&slot.cos_sin, &r.angles)?;
        }
        let PassConsts {
            style,
            eps,
            scale,
            reach,
        } = PassConsts::of(step, range.clone());
        let vectors = &r.vectors;
        let vector = |v: &[f32]| -> &Tensor { &vectors[&(v.as_ptr() as usize, v.len())] };
        // The norms before Q1_0 products as their prologue, SwiGLU after the gate|up product as
        // its epilogue: with the fused ops, where the device takes rows of n_embd so (the
        // epilogue: where the Q1_0 split's tile divides SwiGLU's 32-row blocks).
        let prologue = self.fused && self.prologue && gpu.norm_prologue_fits(d.n_embd);
        let fuse = Fuse {
            prologue,
            epilogue: self.fused && self.epilogue && gpu.q1_0_swiglu_fits(d.n_embd),
            both: prologue && gpu.norm_prologue_swiglu_fits(d.n_embd),
            normed: false,
        };
        // The norms after the residual Q1_0 products in those products' tails (`Gpu::set_norm_tail`;
        // not with the prologue, which takes them into the next products): the FFN's in O's, the
        // next layer's attention norm in down's (the first layer's apart), the output norm of a
        // wanted row in the last layer's down. `normed[i]`: token i's next norm is done.
        let tail = self.fused && !fuse.prologue && gpu.norm_tail() && gpu.norm_tail_fits();
        let mut normed = vec![false; n];
        let head = device(step.output, pick).ok_or_else(|| internal("the output on the CPU"))?;
        let stacked = r.stacked;
        let mut rec = super::profile::recorder(gpu, self.profile.as_ref())?;
        rec.set_attention_positions(reach);
        for (li, block) in step.blocks.iter().enumerate() {
            self.flush_between(&mut rec, li)?;
            let (a, ms) = layer_matrices(block, pick)?;
            let [wq, wk, wv, wo, wg, wu, wd] = ms;
            let (qkv_stack, gate_up_stack) = stacks(c, ms);
            // The norm tails' targets: the FFN norm's, and the next layer's attention norm's (the
            // output norm's after the last layer).
            let ffn_tail = match gate_up_stack {
                Some((whole, _)) => norm_tail_kind(tail, &[whole]),
                None => norm_tail_kind(tail, &[wg, wu]),
            };
            let next_tail = match step.blocks.get(li + 1) {
                _ if !tail => None,
                Some(next) => {
                    let kind = attention_norm_kind(tail, c, layer_matrices(next, pick)?.1, stacked);
                    kind.map(|k| (vector(&next.attn_norm[..]), k, eps))
                }
                None => norm_tail_kind(tail, &[head]).map(|k| (vector(step.output_norm), k, eps)),
            };
            for (i, t) in range.clone().enumerate() {
                let slot = &r.slots[i];
                let (k, v, stacked_out) = &slot.kv[li];
                let host = segments[seg_of[t]].layers[li].kv();
                let cache = r.mirrors.of(host).ok_or_else(|| internal("no mirror"))?;
                let attn_norm = vector(&block.attn_norm[..]);
                if let (Some((whole, att_partner)), Some(qkv)) = (qkv_stack, stacked_out) {
                    // One product (the norm as its prologue where `prologue`), the biases in one
                    // add, then RoPE + KV store + attention + its quantization (Q8_0, Q8_1 or
                    // Q8_K) in one dispatch (its rotated keys into `k`), the q / k norms in it too
                    // (`qk_fold`) or in one dispatch before it.
                    let norms = match (&a.q_norm, &a.k_norm) {
                        (Some(wqn), Some(wkn)) => Some(oxibonsai_gpu::QkNorms {
                            q: vector(&wqn[..]),
                            k: vector(&wkn[..]),
                            eps,
                        }),
                        (None, None) => None,
                        _ => {
                            return Err(internal("a query norm without a key norm, or the reverse"))
                        }
                    };
                    let apart = norms.filter(|_| !self.qk_fold);
                    let out = if apart.is_some() { &slot.qkv_pre } else { qkv };
                    if normed[i] {
                        product(&mut rec, slot, whole, &slot.xn, d.n_embd, out)?;
                    } else {
                        let prologue = fuse.prologue;
                        norm_product(
                            &mut rec, slot, attn_norm, eps, d.n_embd, whole, out, prologue,
                        )?;
                    }
                    if let Some(Some(bias)) = r.stacked_biases.get(li) {
                        rec.add(out, bias, d.qkv_len())?;
                    }
                    if let Some(n) = apart {
                        rec.rms_norm_qk(
                            &slot.qkv_pre,
                            n.q,
                            n.k,
                            n.eps,
                            c.n_head,
                            c.n_head_kv,
                            d.v_len,
                            qkv,
                        )?;
                    }
                    let att_q = &slot.quantized[&(att_partner, d.att_len)];
                    rec.rope_store_attention(
                        qkv,
                        &slot.cos_sin,
                        c.n_head,
                        c.n_rot,
                        style,
                        cache,
                        &slot.step,
                        scale,
                        Input::Quantized(att_q),
                        Some(k),
                        norms.filter(|_| self.qk_fold),
                    )?;
                } else {
                    if !normed[i] {
                        norm_for(&mut rec, slot, attn_norm, eps, d.n_embd, &[wq, wk, wv])?;
                    }
                    let q_out = if a.q_norm.is_some() {
                        &slot.q_pre
                    } else {
                        &slot.q
                    };
                    let k_out = if a.k_norm.is_some() { &slot.k_pre } else { k };
                    product(&mut rec, slot, wq, &slot.xn, d.n_embd, q_out)?;
                    product(&mut rec, slot, wk, &slot.xn, d.n_embd, k_out)?;
                    product(&mut rec, slot, wv, &slot.xn, d.n_embd, v)?;
                    for (out, bias, len) in [
                        (q_out, &a.bq, d.q_len),
                        (k_out, &a.bk, d.k_len),
                        (v, &a.bv, d.v_len),
                    ] {
                        if let Some(bias) = bias {
                            rec.add(out, vector(&bias[..]), len)?;
                        }
                    }
                    if let Some(w) = &a.q_norm {
                        rec.rms_norm(&slot.q_pre, vector(&w[..]), eps, c.n_head, &slot.q)?;
                    }
                    if let Some(w) = &a.k_norm {
                        rec.rms_norm(&slot.k_pre, vector(&w[..]), eps, c.n_head_kv, k)?;
                    }
                    let (hd, nr) = (c.head_dim, c.n_rot);
                    rec.rope(&slot.q, &slot.cos_sin, 1, c.n_head, hd, nr, style)?;
                    rec.rope(k, &slot.cos_sin, 1, c.n_head_kv, hd, nr, style)?;
                    rec.store_kv(cache, k, v, &slot.step)?;
                    // Q8_0 / Q8_1 quantized in the attention's dispatch (blocks within a head).
                    let att_q = wo
                        .partner()
                        .filter(|p| matches!(p, FormatKind::Q8_0 | FormatKind::Q8_1))
                        .filter(|_| c.head_dim_v.is_multiple_of(QK8_0))
                        .map(|p| &slot.quantized[&(p, d.att_len)]);
                    match att_q {
                        Some(q) => {
                            rec.attention_quantized(&slot.q, cache, &slot.step, c.n_head, scale, q)?
                        }
                        None => {
                            rec.attention(&slot.q, cache, &slot.step, c.n_head, scale, &slot.att)?;
                            quantize_for(&mut rec, slot, &slot.att, d.att_len, &[wo])?;
                        }
                    }
                }
                let ffn_norm = vector(&block.ffn_norm[..]);
                let ffn_tail = ffn_tail.map(|k| (ffn_norm, k, eps));
                let ffn_normed = product_add(&mut rec, slot, wo, &slot.att, d.att_len, ffn_tail)?;
                if let Some((whole, down_partner)) = gate_up_stack {
                    // One product, SwiGLU + the down product's quantization in one dispatch (or
                    // in the product's), the norm in its own, the product's or O's tail.
                    let h = &slot.quantized[&(down_partner, d.n_ff)];
                    let fuse = Fuse {
                        normed: ffn_normed,
                        ..fuse
                    };
                    gate_up_swiglu(&mut rec, slot, ffn_norm, eps, d.n_embd, whole, h, fuse)?;
                } else {
                    if !ffn_normed {
                        norm_for(&mut rec, slot, ffn_norm, eps, d.n_embd, &[wg, wu])?;
                    }
                    product(&mut rec, slot, wg, &slot.xn, d.n_embd, &slot.gate)?;
                    product(&mut rec, slot, wu, &slot.xn, d.n_embd, &slot.up)?;
                    rec.swiglu(&slot.gate, &slot.up, d.n_ff)?;
                    quantize_for(&mut rec, slot, &slot.gate, d.n_ff, &[wd])?;
                }
                // The last layer's tail only for a row whose logits are wanted.
                let last = li + 1 == step.blocks.len();
                let next_tail = next_tail.filter(|_| !last || wanted.iter().any(|&(_, w)| w == i));
                normed[i] = product_add(&mut rec, slot, wd, &slot.gate, d.n_ff, next_tail)?;
            }
        }
        for &(j, i) in wanted {
            let slot = &r.slots[i];
            let norm = vector(step.output_norm);
            let logits = &r.logits[j];
            if normed[i] {
                product(&mut rec, slot, head, &slot.xn, d.n_embd, logits)?;
                continue;
            }
            norm_product(
                &mut rec,
                slot,
                norm,
                eps,
                d.n_embd,
                head,
                logits,
                fuse.prologue,
            )?;
        }
        self.step_dispatches
            .store(rec.dispatches(), std::sync::atomic::Ordering::Relaxed);
        let mut parts: Vec<(&Tensor, usize, usize)> = wanted
            .iter()
            .map(|&(j, _)| (&r.logits[j], 0, c.n_vocab))
            .collect();
        for li in 0..d.n_layer {
            parts.extend(r.slots[..n].iter().map(|s| (&s.kv[li].0, 0, d.k_len)));
            // The values: apart, or in the stacked output after the queries and keys.
            parts.extend(r.slots[..n].iter().map(|s| match &s.kv[li] {
                (_, _, Some(qkv)) => (qkv, d.q_len + d.k_len, d.v_len),
                (_, v, None) => (v, 0, d.v_len),
            }));
        }
        let total = wanted.len() * c.n_vocab + n * d.n_layer * (d.k_len + d.v_len);
        let read = crate::backend::grown(&mut r.read, total);
        super::profile::submit_read(gpu, rec, self.profile.as_ref(), "decode", &parts, read)
    }
}
