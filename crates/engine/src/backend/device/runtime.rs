//! [`DeviceBackend`]: the CPU or the GPU backend behind one type, each operation one `match` that
//! hands its arguments through unchanged (no copy), so a model, its sequences and the server's
//! scheduler are typed once whatever the device.

use std::sync::Arc;

use oxibonsai_gguf::{GgufFile, TensorInfo};
use oxibonsai_gpu::{Gpu, GpuError};

use super::{Device, DeviceChoice};
use crate::backend::cpu::{CpuBackend, CpuScratch, CpuWeight};
use crate::backend::gpu::{GpuBackend, GpuWeight};
use crate::backend::{AttentionShape, Backend, DeltaShape, Segment, StepView};
use crate::config::{ModelConfig, RopeStyle};
use crate::error::EngineError;
use crate::kv_cache::LayerCache;

// One value a model, made once at load and never moved on a hot path: the variants' sizes do
// not matter, and an unboxed variant saves the GPU ops a pointer hop.
#[allow(clippy::large_enum_variant)]
pub enum DeviceBackend {
    Cpu(CpuBackend),
    Gpu(GpuBackend),
}

/// A weight prepared by a [`DeviceBackend`]: its variant is its backend's.
pub enum DeviceWeight {
    Cpu(CpuWeight),
    Gpu(GpuWeight),
}

// A model's weights are all prepared by its own backend, so a weight of the other variant is a
// bug in the engine, not a bad input.
const MIXED: &str = "a weight prepared by the other backend";

impl DeviceWeight {
    fn cpu(&self) -> &CpuWeight {
        match self {
            DeviceWeight::Cpu(w) => w,
            DeviceWeight::Gpu(_) => unreachable!("{MIXED}"),
        }
    }

    fn gpu(&self) -> &GpuWeight {
        match self {
            DeviceWeight::Gpu(w) => w,
            DeviceWeight::Cpu(_) => unreachable!("{MIXED}"),
        }
    }
}

/// `f` on `products` with each weight unwrapped by `pick`: on the stack for the usual one to
/// three products (Q / K / V, gate / up), so the hot path does not allocate.
fn unwrapped<'w, W: 'w>(
    products: &mut [(&'w DeviceWeight, &mut [f32])],
    pick: impl Fn(&'w DeviceWeight) -> &'w W,
    f: impl FnOnce(&mut [(&'w W, &mut [f32])]),
) {
    match products {
        [(a, x)] => f(&mut [(pick(a), &mut **x)]),
        [(a, x), (b, y)] => f(&mut [(pick(a), &mut **x), (pick(b), &mut **y)]),
        [(a, x), (b, y), (c, z)] => f(&mut [
            (pick(a), &mut **x),
            (pick(b), &mut **y),
            (pick(c), &mut **z),
        ]),
        _ => f(&mut products
            .iter_mut()
            .map(|(w, out)| (pick(w), &mut **out))
            .collect::<Vec<_>>()),
    }
}

/// `$body` with `$b` bound to the backend inside `$self`.
macro_rules! each {
    ($self:expr, $b:ident => $body:expr) => {
        match $self {
            DeviceBackend::Cpu($b) => $body,
            DeviceBackend::Gpu($b) => $body,
        }
    };
}

impl Backend for DeviceBackend {
    type Weight = DeviceWeight;
    type Scratch = CpuScratch;

    fn name(&self) -> String {
        each!(self, b => b.name())
    }

    fn check_config(&self, config: &ModelConfig) -> Result<(), EngineError> {
        each!(self, b => b.check_config(config))
    }

    fn run<R: Send>(&self, work: impl FnOnce() -> R + Send) -> R {
        each!(self, b => b.run(work))
    }

    fn forward_step(
        &self,
        step: &StepView<'_, DeviceWeight>,
        segments: &mut [Segment<'_>],
        tokens: &[u32],
        logits: &mut Vec<f32>,
    ) -> Option<usize> {
        match self {
            DeviceBackend::Cpu(_) => None,
            DeviceBackend::Gpu(b) => b.step_with(step, DeviceWeight::gpu, segments, tokens, logits),
        }
    }

    fn prepare(
        &self,
        file: &Arc<GgufFile>,
        tensor: &TensorInfo,
    ) -> Result<DeviceWeight, EngineError> {
        Ok(match self {
            DeviceBackend::Cpu(b) => DeviceWeight::Cpu(b.prepare(file, tensor)?),
            DeviceBackend::Gpu(b) => DeviceWeight::Gpu(b.prepare(file, tensor)?),
        })
    }

    fn embed(&self, table: &DeviceWeight, ids: &[u32], out: &mut [f32]) {
        match self {
            DeviceBackend::Cpu(b) => b.embed(table.cpu(), ids, out),
            DeviceBackend::Gpu(b) => b.embed(table.gpu(), ids, out),
        }
    }

    fn matmul(
        &self,
        weight: &DeviceWeight,
        x: &[f32],
        n_tokens: usize,
        out: &mut [f32],
        scratch: &mut CpuScratch,
    ) {
        match self {
            DeviceBackend::Cpu(b) => b.matmul(weight.cpu(), x, n_tokens, out, scratch),
            DeviceBackend::Gpu(b) => b.matmul(weight.gpu(), x, n_tokens, out, scratch),
        }
    }

    fn matmuls(
        &self,
        products: &mut [(&DeviceWeight, &mut [f32])],
        x: &[f32],
        n_tokens: usize,
        scratch: &mut CpuScratch,
    ) {
        match self {
            DeviceBackend::Cpu(b) => unwrapped(products, DeviceWeight::cpu, |p| {
                b.matmuls(p, x, n_tokens, scratch)
            }),
            DeviceBackend::Gpu(b) => unwrapped(products, DeviceWeight::gpu, |p| {
                b.matmuls(p, x, n_tokens, scratch)
            }),
        }
    }

    fn rms_norm(&self, x: &[f32], weight: &[f32], eps: f32, out: &mut [f32]) {
        each!(self, b => b.rms_norm(x, weight, eps, out))
    }

    fn rope(
        &self,
        x: &mut [f32],
        n_heads: usize,
        head_dim: usize,
        cos_sin: &[(f32, f32)],
        style: RopeStyle,
    ) {
        each!(self, b => b.rope(x, n_heads, head_dim, cos_sin, style))
    }

    fn store_kv(&self, cache: &mut LayerCache, k: &[f32], v: &[f32], positions: &[usize]) {
        each!(self, b => b.store_kv(cache, k, v, positions))
    }

    fn attention(
        &self,
        q: &[f32],
        segments: &[Segment<'_>],
        layer: usize,
        positions: &[usize],
        shape: AttentionShape,
        out: &mut [f32],
        scratch: &mut CpuScratch,
    ) {
        each!(self, b => b.attention(q, segments, layer, positions, shape, out, scratch))
    }

    fn conv1d_silu(&self, x: &mut [f32], history: &mut [f32], kernel: &[f32], d_conv: usize) {
        each!(self, b => b.conv1d_silu(x, history, kernel, d_conv))
    }

    fn gdn_gates(&self, alpha: &mut [f32], beta: &mut [f32], dt_bias: &[f32], ssm_a: &[f32]) {
        each!(self, b => b.gdn_gates(alpha, beta, dt_bias, ssm_a))
    }

    fn delta_rule(
        &self,
        ssm: &mut [f32],
        qkv: &[f32],
        log_decay: &[f32],
        beta: &[f32],
        shape: DeltaShape,
        out: &mut [f32],
    ) {
        each!(self, b => b.delta_rule(ssm, qkv, log_decay, beta, shape, out))
    }

    fn sigmoid_mul(&self, x: &mut [f32], gate: &[f32]) {
        each!(self, b => b.sigmoid_mul(x, gate))
    }

    fn scale(&self, x: &mut [f32], by: f32) {
        each!(self, b => b.scale(x, by))
    }

    fn swiglu(&self, gate: &mut [f32], up: &[f32]) {
        each!(self, b => b.swiglu(gate, up))
    }

    fn add(&self, x: &mut [f32], y: &[f32]) {
        each!(self, b => b.add(x, y))
    }
}

/// [`super::open_backend`] with the GPU built in.
pub(super) fn open(
    choice: DeviceChoice,
    threads: usize,
) -> Result<(DeviceBackend, Option<String>), EngineError> {
    let cpu = |note: Option<String>| -> Result<(DeviceBackend, Option<String>), EngineError> {
        Ok((DeviceBackend::Cpu(CpuBackend::new(threads)?), note))
    };
    let wanted = std::env::var("OXIBONSAI_GPU_ADAPTER")
        .ok()
        .filter(|w| !w.is_empty());
    let gpu = match choice.device {
        Device::Cpu => return cpu(None),
        Device::Gpu => match Gpu::with_adapter(wanted.as_deref()) {
            Ok(gpu) => gpu,
            // A driver that cannot compile the shaders: the CPU runs the model instead.
            Err(e @ GpuError::Shader { .. }) => {
                eprintln!("warning: {e}; running on the CPU");
                return cpu(Some(format!("GPU unusable: {e}")));
            }
            Err(e) => return Err(e.into()),
        },
        Device::Auto => {
            let found = oxibonsai_gpu::adapters();
            let hardware = found.iter().find(|a| {
                a.hardware
                    && wanted
                        .as_ref()
                        .is_none_or(|w| a.name.to_lowercase().contains(&w.to_lowercase()))
            });
            let Some(pick) = hardware else {
                let seen: Vec<String> = found.iter().map(|a| a.to_string()).collect();
                return cpu(Some(format!(
                    "auto: no hardware GPU adapter{}",
                    if seen.is_empty() {
                        String::new()
                    } else {
                        format!(" (found: {})", seen.join("; "))
                    }
                )));
            };
            if let Some(why) = choice.auto_refusal {
                return cpu(Some(format!(
                    "auto: {} would run this model op by op ({why}), slower than the CPU; \
                     --device gpu runs it there",
                    pick.name
                )));
            }
            match Gpu::with_adapter(Some(&pick.name)) {
                Ok(gpu) => gpu,
                Err(e) => {
                    eprintln!("warning: {e}; running on the CPU");
                    return cpu(Some(format!("GPU unusable: {e}")));
                }
            }
        }
    };
    let backend = GpuBackend::with_gpu(gpu, threads)?.with_gpu_layers(choice.gpu_layers);
    Ok((DeviceBackend::Gpu(backend), None))
}
