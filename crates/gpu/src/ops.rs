//! The op layer a device-resident forward pass is recorded with: activations in device buffers
//! ([`Tensor`]), many dispatches recorded into one command buffer and one submission
//! ([`Recorder`]), each pipeline compiled once per (shader, override constants) and each bind group
//! built once per (pipeline, buffers).
//!
//! Shapes (row lengths, head counts, eps) are pipeline-override constants: a model's shapes are
//! fixed, so a pipeline per shape is compiled once and no per-dispatch uniform buffer is needed,
//! which keeps the bind groups of a forward step the same from one token to the next. What changes
//! per token (the position) lives in a small device buffer the host writes before submitting.

use std::collections::HashMap;
use std::sync::atomic::AtomicUsize;
use std::sync::Mutex;

use wgpu::util::DeviceExt;

use crate::device::{Gpu, GpuError};

/// Workgroups per dimension of a dispatch (WebGPU's guaranteed limit).
pub(crate) const MAX_GROUPS: u32 = 65_535;

/// A WGSL source and the name its errors carry.
pub(crate) struct Shader {
    pub name: &'static str,
    pub source: &'static str,
}

macro_rules! shader {
    ($name:literal) => {
        $crate::ops::shader!($name, with)
    };
    // `with` names the shared pieces (shaders/NAME.wgsl) the shader calls, after common.wgsl.
    // The pieces are part of the name: the pipeline cache tells the variants apart by it.
    ($name:literal, with $($part:literal),*) => {
        $crate::ops::Shader {
            name: concat!($name $(, "+", $part)*),
            source: concat!(
                include_str!("../shaders/common.wgsl"),
                $(include_str!(concat!("../shaders/", $part, ".wgsl")),)*
                include_str!(concat!("../shaders/", $name, ".wgsl"))
            ),
        }
    };
}
pub(crate) use shader;

/// A recorded Q1_0 product's shader (pieces as in `shader!`) with the device's lane sum
/// ([`Gpu::q1_0_reduce`]): `q1_0_reduce_tree` or `q1_0_reduce_subgroup` (naga 30 takes the
/// subgroup functions with the device's `subgroups` and no `enable`), joined last before the
/// product's file.
macro_rules! q1_0_shader {
    ($gpu:expr, $name:literal, with $($part:literal),*) => {
        if $gpu.q1_0_reduce() == $crate::q1_0::Q1Reduce::Subgroup {
            $crate::ops::shader!($name, with $($part,)* "q1_0_reduce_subgroup")
        } else {
            $crate::ops::shader!($name, with $($part,)* "q1_0_reduce_tree")
        }
    };
}
pub(crate) use q1_0_shader;

/// A shader that reads f16 natively: `enable f16;` must come before the shared helpers.
macro_rules! shader_f16 {
    ($name:literal) => {
        $crate::ops::shader_f16!($name, with)
    };
    // Pieces as in `shader!`.
    ($name:literal, with $($part:literal),*) => {
        $crate::ops::Shader {
            name: concat!($name $(, "+", $part)*),
            source: concat!(
                "enable f16;\n",
                include_str!("../shaders/common.wgsl"),
                $(include_str!(concat!("../shaders/", $part, ".wgsl")),)*
                include_str!(concat!("../shaders/", $name, ".wgsl"))
            ),
        }
    };
}
pub(crate) use shader_f16;

type PipelineKey = (&'static str, Vec<(&'static str, u64)>);

/// A bind group's pipeline and its buffers by binding (`None`: a binding the shader leaves out).
type BindKey = (wgpu::ComputePipeline, Vec<Option<wgpu::Buffer>>);

/// Pipelines and bind groups built so far, kept for the device's life.
#[derive(Default)]
pub(crate) struct Cache {
    pipelines: Mutex<HashMap<PipelineKey, wgpu::ComputePipeline>>,
    binds: Mutex<HashMap<BindKey, wgpu::BindGroup>>,
    /// Decode attention's partials (see `attention.rs`).
    pub(crate) attention_partials: Mutex<Option<Tensor>>,
    /// The cap on decode attention's chunks a head (0: the default).
    pub(crate) attention_splits: AtomicUsize,
    /// Decode attention's kernel settings (`Gpu::set_attention_kernel`; 0: the default).
    pub(crate) attention_kernel: std::sync::atomic::AtomicU32,
    /// The Q1_0 gemm's loop order (`Gpu::set_gemm_tokens_outer`).
    pub(crate) gemm_tokens_outer: std::sync::atomic::AtomicBool,
    /// The mappable buffer results come back through, kept (grown as needed) instead of made
    /// for each read-back.
    read_back: Mutex<Option<wgpu::Buffer>>,
    /// Lanes of the recorded Q1_0 products (`Gpu::set_q1_0_lanes`; 0: by the row's width).
    pub(crate) q1_0_lanes: std::sync::atomic::AtomicU32,
    /// Rows an invocation of the recorded Q1_0 products (`Gpu::set_q1_0_rows`; 0: the default).
    pub(crate) q1_0_rows: std::sync::atomic::AtomicU32,
    /// The recorded Q1_0 products sum a row set's lanes with subgroup shuffles
    /// (`Gpu::set_q1_0_reduce`).
    pub(crate) q1_0_subgroup: std::sync::atomic::AtomicBool,
    /// The TQ2_0 kernel (`Gpu::set_tq2_kernel`).
    pub(crate) tq2_kernel: std::sync::atomic::AtomicU32,
    /// The gemm's register tile (`Gpu::set_gemm_tile`): 0 the default, `u32::MAX` none
    /// (the gemv-exact kernel), else rows << 16 | tokens.
    pub(crate) gemm_tile: std::sync::atomic::AtomicU32,
    /// The workgroups a product with the norm as its prologue aims at
    /// (`Gpu::set_prologue_workgroups`; 0: the default).
    pub(crate) prologue_workgroups: AtomicUsize,
    /// Whether the engine's decode step runs the RMS norm after a residual Q1_0 product in that
    /// product's tail (`Gpu::set_norm_tail`, `OXIBONSAI_GPU_NORM_TAIL`).
    pub(crate) norm_tail: std::sync::atomic::AtomicBool,
    /// The norm tail's done count (`Recorder::q1_0_gemv_add_norm`): one word, zero between
    /// dispatches.
    pub(crate) norm_tail_done: Mutex<Option<Tensor>>,
}

/// A device buffer of 32-bit words: f32 activations, or u32 data (ids, packed f16 pairs, quantized
/// codes), `len` words long.
pub struct Tensor {
    pub(crate) buffer: wgpu::Buffer,
    len: usize,
}

impl Tensor {
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

const TENSOR_USAGE: wgpu::BufferUsages = wgpu::BufferUsages::STORAGE
    .union(wgpu::BufferUsages::COPY_SRC)
    .union(wgpu::BufferUsages::COPY_DST);

impl Gpu {
    /// A zeroed tensor of `len` words (at least one: a binding is never empty).
    pub fn tensor(&self, what: &str, len: usize) -> Result<Tensor, GpuError> {
        let bytes = (len.max(1) as u64).saturating_mul(4);
        self.fits(what, bytes)?;
        let buffer = self.device.create_buffer(&wgpu::BufferDescriptor {
            label: Some(what),
            size: bytes,
            usage: TENSOR_USAGE,
            mapped_at_creation: false,
        });
        Ok(Tensor { buffer, len })
    }

    /// A tensor holding `data` (f32 or u32 words).
    pub fn upload<T: bytemuck::Pod>(&self, what: &str, data: &[T]) -> Result<Tensor, GpuError> {
        let bytes: &[u8] = bytemuck::cast_slice(data);
        if !bytes.len().is_multiple_of(4) {
            return Err(GpuError::Shape {
                what: what.to_owned(),
                reason: format!("{} bytes are not whole 32-bit words", bytes.len()),
            });
        }
        self.fits(what, bytes.len() as u64)?;
        let contents = if bytes.is_empty() {
            &[0u8; 4][..]
        } else {
            bytes
        };
        let buffer = self
            .device
            .create_buffer_init(&wgpu::util::BufferInitDescriptor {
                label: Some(what),
                contents,
                usage: TENSOR_USAGE,
            });
        Ok(Tensor {
            buffer,
            len: bytes.len() / 4,
        })
    }

    /// Overwrites the start of `t` with `data` before the next submission (the per-token inputs:
    /// positions, ids, RoPE angles).
    pub fn write<T: bytemuck::Pod>(&self, t: &Tensor, data: &[T]) -> Result<(), GpuError> {
        let bytes: &[u8] = bytemuck::cast_slice(data);
        if bytes.len() > t.len * 4 || !bytes.len().is_multiple_of(4) {
            return Err(GpuError::Shape {
                what: "tensor write".to_owned(),
                reason: format!("{} bytes into a tensor of {} words", bytes.len(), t.len),
            });
        }
        self.queue.write_buffer(&t.buffer, 0, bytes);
        Ok(())
    }

    /// Overwrites `t` from word `offset` on with `data` before the next submission (a part of a
    /// KV cache mirrored from the host).
    pub fn write_at<T: bytemuck::Pod>(
        &self,
        t: &Tensor,
        offset: usize,
        data: &[T],
    ) -> Result<(), GpuError> {
        let bytes: &[u8] = bytemuck::cast_slice(data);
        let end = offset.checked_add(bytes.len() / 4);
        if end.is_none_or(|end| end > t.len) || !bytes.len().is_multiple_of(4) {
            return Err(GpuError::Shape {
                what: "tensor write".to_owned(),
                reason: format!(
                    "{} bytes at word {offset} into a tensor of {} words",
                    bytes.len(),
                    t.len
                ),
            });
        }
        if !bytes.is_empty() {
            self.queue
                .write_buffer(&t.buffer, (offset as u64) * 4, bytes);
        }
        Ok(())
    }

    /// Waits for the device and reports an error raised since the last check (a buffer the
    /// device could not allocate: wgpu reports it late, not from `create_buffer`).
    pub fn settle(&self, what: &str) -> Result<(), GpuError> {
        self.check(what)
    }

    /// Copies `t` back to the host (waits for the work submitted before).
    pub fn read<T: bytemuck::Pod>(&self, t: &Tensor) -> Result<Vec<T>, GpuError> {
        let bytes = (t.len.max(1) * 4) as u64;
        let read = self.device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("read-back"),
            size: bytes,
            usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        });
        let mut enc = self.device.create_command_encoder(&Default::default());
        enc.copy_buffer_to_buffer(&t.buffer, 0, &read, 0, bytes);
        self.queue.submit([enc.finish()]);
        let slice = read.slice(..);
        slice.map_async(wgpu::MapMode::Read, |_| {});
        self.check("reading a tensor back")?;
        let view = slice
            .get_mapped_range()
            .map_err(|e| self.run_error("reading a tensor back", e.to_string()))?;
        let words: &[u8] = &view[..t.len * 4];
        let out = bytemuck::pod_collect_to_vec(words);
        drop(view);
        read.unmap();
        Ok(out)
    }

    /// Copies the first `len` words of each tensor back to the host, one after another into
    /// `out` (f32 words), in one copy submission: a step's results without a wait per tensor.
    pub fn read_into(&self, parts: &[(&Tensor, usize)], out: &mut [f32]) -> Result<(), GpuError> {
        let parts: Vec<(&Tensor, usize, usize)> = parts.iter().map(|&(t, n)| (t, 0, n)).collect();
        self.read_into_at(&parts, out)
    }

    /// [`Gpu::read_into`] of the `len` words of each tensor from word `at`: `(tensor, at, len)`.
    pub fn read_into_at(
        &self,
        parts: &[(&Tensor, usize, usize)],
        out: &mut [f32],
    ) -> Result<(), GpuError> {
        let enc = self.device.create_command_encoder(&Default::default());
        self.copy_back(enc, parts, out)
    }

    /// Appends to `enc` the copies of `parts` into the read-back buffer, submits it, waits, and
    /// copies the words into `out`: the work recorded in `enc` and the read-back in one
    /// submission and one wait.
    fn copy_back(
        &self,
        mut enc: wgpu::CommandEncoder,
        parts: &[(&Tensor, usize, usize)],
        out: &mut [f32],
    ) -> Result<(), GpuError> {
        let total: usize = parts.iter().map(|&(_, _, len)| len).sum();
        if total != out.len() {
            return Err(GpuError::Shape {
                what: "read-back".to_owned(),
                reason: format!("{total} words into {} values", out.len()),
            });
        }
        for &(t, at, len) in parts {
            holds("read-back", t, at.saturating_add(len))?;
        }
        let bytes = (total.max(1) * 4) as u64;
        let mut kept = self.cache.read_back.lock().map_err(|_| self.poisoned())?;
        let read = match kept.take() {
            Some(b) if b.size() >= bytes => b,
            _ => self.device.create_buffer(&wgpu::BufferDescriptor {
                label: Some("read-back"),
                // Room to grow a little without a new buffer each time the need rises.
                size: bytes.next_power_of_two(),
                usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
                mapped_at_creation: false,
            }),
        };
        let mut at = 0u64;
        for &(t, from, len) in parts {
            enc.copy_buffer_to_buffer(&t.buffer, (from * 4) as u64, &read, at, (len * 4) as u64);
            at += (len * 4) as u64;
        }
        self.queue.submit([enc.finish()]);
        let slice = read.slice(..bytes);
        slice.map_async(wgpu::MapMode::Read, |_| {});
        self.check("reading tensors back")?;
        let view = slice
            .get_mapped_range()
            .map_err(|e| self.run_error("reading tensors back", e.to_string()))?;
        out.copy_from_slice(bytemuck::cast_slice(&view[..total * 4]));
        drop(view);
        read.unmap();
        *kept = Some(read);
        Ok(())
    }

    /// The pipeline of `shader` with `constants`, compiled on first use.
    pub(crate) fn kernel(
        &self,
        shader: &Shader,
        constants: &[(&'static str, f64)],
    ) -> Result<wgpu::ComputePipeline, GpuError> {
        let key = (
            shader.name,
            constants.iter().map(|&(k, v)| (k, v.to_bits())).collect(),
        );
        let mut pipelines = self.cache.pipelines.lock().map_err(|_| self.poisoned())?;
        if let Some(p) = pipelines.get(&key) {
            return Ok(p.clone());
        }
        let p = crate::device::pipeline(&self.device, shader.name, shader.source, constants)
            .map_err(|reason| GpuError::Shader {
                shader: shader.name.to_owned(),
                adapter: self.report().name.clone(),
                reason,
            })?;
        pipelines.insert(key, p.clone());
        Ok(p)
    }

    fn bind_group(
        &self,
        pipeline: &wgpu::ComputePipeline,
        buffers: &[Option<&wgpu::Buffer>],
    ) -> Result<wgpu::BindGroup, GpuError> {
        let key = (
            pipeline.clone(),
            buffers.iter().map(|b| b.cloned()).collect::<Vec<_>>(),
        );
        let mut binds = self.cache.binds.lock().map_err(|_| self.poisoned())?;
        if let Some(b) = binds.get(&key) {
            return Ok(b.clone());
        }
        let entries: Vec<wgpu::BindGroupEntry> = buffers
            .iter()
            .enumerate()
            .filter_map(|(i, b)| {
                b.map(|b| wgpu::BindGroupEntry {
                    binding: i as u32,
                    resource: b.as_entire_binding(),
                })
            })
            .collect();
        let bind = self.device.create_bind_group(&wgpu::BindGroupDescriptor {
            label: None,
            layout: &pipeline.get_bind_group_layout(0),
            entries: &entries,
        });
        binds.insert(key, bind.clone());
        Ok(bind)
    }

    /// Drops the cached bind groups (they keep their buffers alive): for a caller that frees its
    /// tensors, e.g. when a model is unloaded.
    pub fn forget_bindings(&self) {
        if let Ok(mut b) = self.cache.binds.lock() {
            b.clear();
        }
    }

    /// Drops the cached bind groups that hold any of `tensors`, so their memory is freed once the
    /// caller drops them (a KV cache mirror whose host cache is gone).
    pub fn forget_bindings_of(&self, tensors: &[&Tensor]) {
        if let Ok(mut b) = self.cache.binds.lock() {
            b.retain(|(_, buffers), _| {
                !buffers
                    .iter()
                    .any(|held| tensors.iter().any(|t| held.as_ref() == Some(&t.buffer)))
            });
        }
    }

    fn poisoned(&self) -> GpuError {
        self.run_error(
            "the pipeline cache",
            "a thread panicked holding it".to_owned(),
        )
    }

    /// Starts recording a step: every op recorded goes into one command buffer, submitted once.
    pub fn recorder(&self) -> Recorder<'_> {
        let mut encoder = self.device.create_command_encoder(&Default::default());
        let pass = encoder
            .begin_compute_pass(&Default::default())
            .forget_lifetime();
        Recorder {
            gpu: self,
            encoder,
            pass: Some(pass),
            dispatches: 0,
            flushed_at: 0,
            timing: None,
            attention_positions: None,
        }
    }

    /// Whether the device writes timestamps between dispatches (wgpu's `TIMESTAMP_QUERY` and
    /// `TIMESTAMP_QUERY_INSIDE_PASSES`, requested where the adapter has them).
    pub fn has_timestamps(&self) -> bool {
        self.timestamps
    }

    /// A recorder that also writes a device timestamp before its first dispatch and after each
    /// (up to `max_dispatches`), for [`Recorder::submit_timed`]: where a step's time goes on the
    /// device, dispatch by dispatch, without timing each op alone. The interval of a dispatch
    /// includes the barrier wgpu puts before it.
    pub fn timed_recorder(&self, max_dispatches: usize) -> Result<Recorder<'_>, GpuError> {
        if !self.timestamps {
            return Err(GpuError::Unsupported {
                adapter: self.report().name.clone(),
                what: "timestamp queries inside compute passes".to_owned(),
            });
        }
        let capacity = max_dispatches
            .checked_add(1)
            .and_then(|n| u32::try_from(n).ok())
            .filter(|&n| n <= wgpu::QUERY_SET_MAX_QUERIES)
            .ok_or_else(|| GpuError::Shape {
                what: "timed recorder".to_owned(),
                reason: format!(
                    "{max_dispatches} dispatches need more than {} timestamps",
                    wgpu::QUERY_SET_MAX_QUERIES
                ),
            })?;
        let set = self.device.create_query_set(&wgpu::QuerySetDescriptor {
            label: Some("dispatch timestamps"),
            ty: wgpu::QueryType::Timestamp,
            count: capacity,
        });
        let mut rec = self.recorder();
        if let Some(pass) = rec.pass.as_mut() {
            pass.write_timestamp(&set, 0);
        }
        rec.timing = Some(Timing {
            set,
            names: Vec::new(),
            capacity,
        });
        Ok(rec)
    }
}

/// The timestamps of a [`Gpu::timed_recorder`]: slot 0 before the first dispatch, slot i after
/// dispatch i (its shader's name in `names[i - 1]`).
struct Timing {
    set: wgpu::QuerySet,
    names: Vec<&'static str>,
    capacity: u32,
}

/// One submission's worth of ops. Dispatches share one compute pass: wgpu orders them (each
/// dispatch is its own usage scope), so an op reads what the op before it wrote.
pub struct Recorder<'g> {
    pub(crate) gpu: &'g Gpu,
    encoder: wgpu::CommandEncoder,
    pass: Option<wgpu::ComputePass<'static>>,
    dispatches: usize,
    /// `dispatches` at the last [`Recorder::flush`].
    flushed_at: usize,
    timing: Option<Timing>,
    /// The most positions an attention recorded from here reads (`set_attention_positions`).
    pub(crate) attention_positions: Option<usize>,
}

impl Recorder<'_> {
    /// Records one dispatch of `shader` over `groups` workgroups (split across two dimensions past
    /// 65,535; shaders take their index as `wid.x + wid.y · nwg.x` and ignore the excess).
    pub(crate) fn dispatch(
        &mut self,
        shader: &Shader,
        constants: &[(&'static str, f64)],
        buffers: &[&wgpu::Buffer],
        groups: u32,
    ) -> Result<(), GpuError> {
        let buffers: Vec<Option<&wgpu::Buffer>> = buffers.iter().map(|&b| Some(b)).collect();
        self.dispatch_sparse(shader, constants, &buffers, groups)
    }

    /// [`Recorder::dispatch`] with buffer `i` bound at binding `i` where it is `Some`, and the
    /// `None` bindings left out (a shader assembled from pieces that declare bindings apart,
    /// where one variant has no use for one of them).
    pub(crate) fn dispatch_sparse(
        &mut self,
        shader: &Shader,
        constants: &[(&'static str, f64)],
        buffers: &[Option<&wgpu::Buffer>],
        groups: u32,
    ) -> Result<(), GpuError> {
        let pipeline = self.gpu.kernel(shader, constants)?;
        self.dispatch_pipeline(shader.name, &pipeline, buffers, groups)
    }

    /// Records one dispatch of a compiled pipeline; `name` labels it in a timed recorder's
    /// report.
    pub(crate) fn dispatch_pipeline(
        &mut self,
        name: &'static str,
        pipeline: &wgpu::ComputePipeline,
        buffers: &[Option<&wgpu::Buffer>],
        groups: u32,
    ) -> Result<(), GpuError> {
        if let Some(t) = &self.timing {
            if t.names.len() + 1 >= t.capacity as usize {
                return Err(GpuError::Shape {
                    what: "timed recorder".to_owned(),
                    reason: format!(
                        "more than the {} dispatches it was made for",
                        t.capacity - 1
                    ),
                });
            }
        }
        let bind = self.gpu.bind_group(pipeline, buffers)?;
        let x = groups.clamp(1, MAX_GROUPS);
        let y = groups.max(1).div_ceil(x);
        let pass = self.pass.as_mut().ok_or_else(|| {
            self.gpu
                .run_error("recording", "a dispatch after the pass ended".to_owned())
        })?;
        pass.set_pipeline(pipeline);
        pass.set_bind_group(0, &bind, &[]);
        pass.dispatch_workgroups(x, y, 1);
        if let Some(t) = self.timing.as_mut() {
            t.names.push(name);
            pass.write_timestamp(&t.set, t.names.len() as u32);
        }
        self.dispatches += 1;
        Ok(())
    }

    /// Copies `len` words of `src` from word `src_at` into `dst` at word `dst_at` (a token's row
    /// of a token-major tensor to a one-token tensor and back). The copy ends the compute pass and
    /// the next dispatch starts another.
    pub fn copy(
        &mut self,
        src: &Tensor,
        src_at: usize,
        dst: &Tensor,
        dst_at: usize,
        len: usize,
    ) -> Result<(), GpuError> {
        holds("copy source", src, src_at.saturating_add(len))?;
        holds("copy destination", dst, dst_at.saturating_add(len))?;
        if len == 0 {
            return Ok(());
        }
        drop(self.pass.take());
        self.encoder.copy_buffer_to_buffer(
            &src.buffer,
            src_at as u64 * 4,
            &dst.buffer,
            dst_at as u64 * 4,
            len as u64 * 4,
        );
        self.pass = Some(
            self.encoder
                .begin_compute_pass(&Default::default())
                .forget_lifetime(),
        );
        Ok(())
    }

    /// Dispatches recorded so far.
    pub fn dispatches(&self) -> usize {
        self.dispatches
    }

    /// Submits everything recorded, waits for it and reports any error it raised.
    pub fn submit(mut self) -> Result<(), GpuError> {
        drop(self.pass.take());
        self.gpu.queue.submit([self.encoder.finish()]);
        self.gpu.check("a recorded step")
    }

    /// Submits what is recorded so far without waiting and goes on recording into a new command
    /// buffer: the device starts on a step's first layers while the host records the rest. A
    /// timed recorder keeps one submission (its timestamps are one query set): there it does
    /// nothing.
    pub fn flush(&mut self) -> Result<(), GpuError> {
        if self.timing.is_some() || self.dispatches == self.flushed_at {
            return Ok(());
        }
        drop(self.pass.take());
        let mut next = self.gpu.device.create_command_encoder(&Default::default());
        self.pass = Some(
            next.begin_compute_pass(&Default::default())
                .forget_lifetime(),
        );
        let done = std::mem::replace(&mut self.encoder, next);
        self.gpu.queue.submit([done.finish()]);
        self.flushed_at = self.dispatches;
        Ok(())
    }

    /// [`Recorder::submit`], then [`Gpu::read_into_at`] of `parts` — the copies in the same
    /// command buffer, one submission and one wait for the step and its results.
    pub fn submit_read(
        mut self,
        parts: &[(&Tensor, usize, usize)],
        out: &mut [f32],
    ) -> Result<(), GpuError> {
        drop(self.pass.take());
        self.gpu.copy_back(self.encoder, parts, out)
    }

    /// [`Recorder::submit`] for a [`Gpu::timed_recorder`]: each dispatch's shader name (with its
    /// pieces) and its seconds on the device, in recording order.
    pub fn submit_timed(mut self) -> Result<Vec<(&'static str, f64)>, GpuError> {
        let gpu = self.gpu;
        let timing = self.timing.take().ok_or_else(|| {
            gpu.run_error(
                "timing a step",
                "the recorder was not made by timed_recorder".to_owned(),
            )
        })?;
        drop(self.pass.take());
        let n = timing.names.len() as u32 + 1;
        let bytes = u64::from(n) * u64::from(wgpu::QUERY_SIZE);
        let buffer = |usage, label| {
            gpu.device.create_buffer(&wgpu::BufferDescriptor {
                label: Some(label),
                size: bytes,
                usage,
                mapped_at_creation: false,
            })
        };
        let resolved = buffer(
            wgpu::BufferUsages::QUERY_RESOLVE | wgpu::BufferUsages::COPY_SRC,
            "timestamps",
        );
        let read = buffer(
            wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
            "timestamps read-back",
        );
        self.encoder
            .resolve_query_set(&timing.set, 0..n, &resolved, 0);
        self.encoder
            .copy_buffer_to_buffer(&resolved, 0, &read, 0, bytes);
        gpu.queue.submit([self.encoder.finish()]);
        let slice = read.slice(..);
        slice.map_async(wgpu::MapMode::Read, |_| {});
        gpu.check("a timed step")?;
        let view = slice
            .get_mapped_range()
            .map_err(|e| gpu.run_error("reading timestamps back", e.to_string()))?;
        let ticks: Vec<u64> = bytemuck::pod_collect_to_vec(&view[..]);
        drop(view);
        read.unmap();
        let seconds_a_tick = f64::from(gpu.queue.get_timestamp_period()) * 1e-9;
        Ok(timing
            .names
            .iter()
            .zip(ticks.windows(2))
            .map(|(&name, w)| (name, w[1].saturating_sub(w[0]) as f64 * seconds_a_tick))
            .collect())
    }
}

/// `n` as a u32 override constant, or an error naming `what`.
pub(crate) fn count(what: &str, n: usize) -> Result<f64, GpuError> {
    u32::try_from(n)
        .map(f64::from)
        .map_err(|_| GpuError::Shape {
            what: what.to_owned(),
            reason: format!("{n} exceeds a 32-bit count"),
        })
}

/// Refuses `t` unless it holds at least `need` words.
pub(crate) fn holds(what: &str, t: &Tensor, need: usize) -> Result<(), GpuError> {
    if t.len < need {
        return Err(GpuError::Shape {
            what: what.to_owned(),
            reason: format!("needs {need} words, the tensor has {}", t.len),
        });
    }
    Ok(())
}
