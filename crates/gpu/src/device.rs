//! Choosing and opening the GPU.

use std::fmt;
use std::sync::{Arc, Mutex};

use thiserror::Error;

use crate::q1_0::Q1Kernel;

#[derive(Debug, Error)]
pub enum GpuError {
    #[error("no GPU adapter found{}", found_list(.found))]
    NoAdapter { found: Vec<String> },
    #[error("no GPU adapter matches OXIBONSAI_GPU_ADAPTER={wanted:?}{}", found_list(.found))]
    NoMatchingAdapter { wanted: String, found: Vec<String> },
    #[error("GPU adapter {adapter:?} lacks {what}")]
    Unsupported { adapter: String, what: String },
    #[error("opening GPU adapter {adapter:?}: {reason}")]
    Device { adapter: String, reason: String },
    #[error("{what} needs {bytes} bytes in one GPU buffer; adapter {adapter:?} allows {limit}")]
    TooLarge {
        what: String,
        bytes: u64,
        limit: u64,
        adapter: String,
    },
    #[error("shader {shader} does not compile on GPU adapter {adapter:?}: {reason}")]
    Shader {
        shader: String,
        adapter: String,
        reason: String,
    },
    #[error("{what}: {reason}")]
    Shape { what: String, reason: String },
    #[error("GPU {what} failed on adapter {adapter:?}: {reason}")]
    Run {
        what: String,
        adapter: String,
        reason: String,
    },
}

fn found_list(found: &[String]) -> String {
    if found.is_empty() {
        " (none: install a Vulkan driver, e.g. Debian's mesa-vulkan-drivers and libvulkan1)"
            .to_owned()
    } else {
        format!(" (found: {})", found.join("; "))
    }
}

/// What `info` and `bench --json` say about the device.
#[derive(Clone, Debug)]
pub struct AdapterReport {
    pub name: String,
    pub backend: String,
    pub device_type: String,
    pub driver: String,
    pub max_buffer_bytes: u64,
    pub max_storage_binding_bytes: u64,
    /// Whether the adapter has `shader-f16` (f16 in storage and arithmetic), requested when it does.
    pub shader_f16: bool,
    /// The adapter's subgroup sizes (smallest, largest) where it has `subgroups` (requested when
    /// it does: the Q1_0 products' subgroup reduction, `Gpu::set_q1_0_reduce`), else `None`.
    pub subgroup_sizes: Option<(u32, u32)>,
}

impl fmt::Display for AdapterReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} ({}, {}, driver {}; buffers up to {} MiB{})",
            self.name,
            self.backend,
            self.device_type,
            self.driver,
            self.max_storage_binding_bytes >> 20,
            if self.shader_f16 { "; shader-f16" } else { "" }
        )?;
        match self.subgroup_sizes {
            Some((lo, hi)) => write!(f, "; subgroups of {lo}..{hi}"),
            None => Ok(()),
        }
    }
}

fn describe(info: &wgpu::AdapterInfo) -> String {
    format!("{} [{:?}, {:?}]", info.name, info.backend, info.device_type)
}

/// Preference when nothing is asked for: a discrete GPU, then an integrated one, then the rest;
/// a software device (lavapipe) last.
fn rank(t: wgpu::DeviceType) -> u8 {
    match t {
        wgpu::DeviceType::DiscreteGpu => 0,
        wgpu::DeviceType::IntegratedGpu => 1,
        wgpu::DeviceType::VirtualGpu => 2,
        wgpu::DeviceType::Other => 3,
        wgpu::DeviceType::Cpu => 4,
    }
}

/// An adapter found on this machine, as listed before opening any (`oxibonsai devices`, and the
/// engine's `--device auto`, which takes only hardware ones).
#[derive(Clone, Debug)]
pub struct FoundAdapter {
    pub name: String,
    pub backend: String,
    pub device_type: String,
    /// A GPU (discrete, integrated or virtual), not a software rasterizer (lavapipe, llvmpipe:
    /// wgpu's `Cpu` type) nor an unknown kind.
    pub hardware: bool,
}

impl fmt::Display for FoundAdapter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} [{}, {}]", self.name, self.backend, self.device_type)
    }
}

fn instance() -> wgpu::Instance {
    wgpu::Instance::new(wgpu::InstanceDescriptor {
        backends: wgpu::Backends::PRIMARY,
        ..wgpu::InstanceDescriptor::new_without_display_handle_from_env()
    })
}

/// The adapters found, the most capable first (as [`Gpu::new`] ranks them).
pub fn adapters() -> Vec<FoundAdapter> {
    let mut found: Vec<wgpu::AdapterInfo> =
        pollster::block_on(instance().enumerate_adapters(wgpu::Backends::PRIMARY))
            .iter()
            .map(|a| a.get_info())
            .collect();
    found.sort_by_key(|i| rank(i.device_type));
    found
        .into_iter()
        .map(|i| FoundAdapter {
            hardware: rank(i.device_type) <= 2,
            name: i.name,
            backend: format!("{:?}", i.backend),
            device_type: format!("{:?}", i.device_type),
        })
        .collect()
}

/// An opened GPU: its device and queue, with the compiled pipelines of the kernels.
pub struct Gpu {
    pub(crate) device: wgpu::Device,
    pub(crate) queue: wgpu::Queue,
    report: AdapterReport,
    uncaptured: Arc<Mutex<Option<String>>>,
    pub(crate) q1_0: Option<Arc<Q1Kernel>>,
    pub(crate) read_bandwidth: wgpu::ComputePipeline,
    pub(crate) cache: crate::ops::Cache,
    /// Shaders read f16 data natively (`shader-f16`) instead of decoding it in integers.
    pub(crate) native_f16: bool,
    /// The device writes timestamps inside compute passes (`Gpu::timed_recorder`).
    pub(crate) timestamps: bool,
}

impl Gpu {
    /// Opens the adapter named by `OXIBONSAI_GPU_ADAPTER` (a case-insensitive part of its name),
    /// else the most capable one found.
    pub fn new() -> Result<Gpu, GpuError> {
        let wanted = std::env::var("OXIBONSAI_GPU_ADAPTER").ok();
        Gpu::with_adapter(wanted.as_deref())
    }

    pub fn with_adapter(wanted: Option<&str>) -> Result<Gpu, GpuError> {
        let adapters = pollster::block_on(instance().enumerate_adapters(wgpu::Backends::PRIMARY));
        let found: Vec<String> = adapters.iter().map(|a| describe(&a.get_info())).collect();
        let chosen = match wanted {
            Some(w) => {
                let w = w.to_lowercase();
                adapters
                    .into_iter()
                    .find(|a| a.get_info().name.to_lowercase().contains(&w))
                    .ok_or_else(|| GpuError::NoMatchingAdapter {
                        wanted: w.clone(),
                        found: found.clone(),
                    })?
            }
            None => adapters
                .into_iter()
                .min_by_key(|a| rank(a.get_info().device_type))
                .ok_or(GpuError::NoAdapter {
                    found: found.clone(),
                })?,
        };
        let info = chosen.get_info();
        let limits = chosen.limits();
        let report = AdapterReport {
            name: info.name.clone(),
            backend: format!("{:?}", info.backend),
            device_type: format!("{:?}", info.device_type),
            driver: format!("{} {}", info.driver, info.driver_info)
                .trim()
                .to_owned(),
            max_buffer_bytes: limits.max_buffer_size,
            max_storage_binding_bytes: limits.max_storage_buffer_binding_size,
            shader_f16: chosen.features().contains(wgpu::Features::SHADER_F16),
            subgroup_sizes: chosen
                .features()
                .contains(wgpu::Features::SUBGROUP)
                .then_some((info.subgroup_min_size, info.subgroup_max_size)),
        };
        let mut required_features = if report.shader_f16 {
            wgpu::Features::SHADER_F16
        } else {
            wgpu::Features::empty()
        };
        if report.subgroup_sizes.is_some() {
            required_features |= wgpu::Features::SUBGROUP;
        }
        // Timestamps between dispatches, for the timed recorder (measurement only).
        let timing =
            wgpu::Features::TIMESTAMP_QUERY | wgpu::Features::TIMESTAMP_QUERY_INSIDE_PASSES;
        let timestamps = chosen.features().contains(timing);
        if timestamps {
            required_features |= timing;
        }
        let (device, queue) = pollster::block_on(chosen.request_device(&wgpu::DeviceDescriptor {
            label: Some("oxibonsai"),
            required_features,
            // The adapter's own limits: weight matrices need its largest storage buffers.
            required_limits: limits,
            ..Default::default()
        }))
        .map_err(|e| GpuError::Device {
            adapter: report.name.clone(),
            reason: e.to_string(),
        })?;
        // An error outside a scope (a driver's late complaint) is kept for the next check instead
        // of wgpu's default handler, which panics.
        let uncaptured = Arc::new(Mutex::new(None::<String>));
        let sink = Arc::clone(&uncaptured);
        device.on_uncaptured_error(Arc::new(move |e: wgpu::Error| {
            if let Ok(mut first) = sink.lock() {
                first.get_or_insert_with(|| e.to_string());
            }
        }));
        let read_bandwidth = pipeline(
            &device,
            "read_bandwidth",
            include_str!("../shaders/read_bandwidth.wgsl"),
            &[],
        )
        .map_err(|reason| GpuError::Shader {
            shader: "read_bandwidth".to_owned(),
            adapter: report.name.clone(),
            reason,
        })?;
        let mut gpu = Gpu {
            device,
            queue,
            report,
            uncaptured,
            q1_0: None,
            read_bandwidth,
            cache: Default::default(),
            native_f16: false,
            timestamps,
        };
        gpu.native_f16 = gpu.report.shader_f16;
        gpu.q1_0 = Some(gpu.q1_0_kernel(Q1Kernel::DEFAULT_LANES, Q1Kernel::DEFAULT_ROWS)?);
        if let Ok(lanes) = std::env::var("OXIBONSAI_GPU_Q1_LANES") {
            let parsed = lanes.trim().parse().map_err(|_| GpuError::Shape {
                what: "OXIBONSAI_GPU_Q1_LANES".to_owned(),
                reason: format!("{lanes:?} is not a count of lanes"),
            })?;
            gpu.set_q1_0_lanes(Some(parsed))?;
        }
        if let Ok(rows) = std::env::var("OXIBONSAI_GPU_Q1_ROWS") {
            let parsed = rows.trim().parse().map_err(|_| GpuError::Shape {
                what: "OXIBONSAI_GPU_Q1_ROWS".to_owned(),
                reason: format!("{rows:?} is not a count of rows"),
            })?;
            gpu.set_q1_0_rows(Some(parsed))?;
        }
        if let Ok(reduce) = std::env::var("OXIBONSAI_GPU_Q1_REDUCE") {
            gpu.set_q1_0_reduce(crate::q1_0::Q1Reduce::parse(&reduce)?)?;
        }
        if let Ok(kernel) = std::env::var("OXIBONSAI_GPU_TQ2_KERNEL") {
            gpu.set_tq2_kernel(crate::tq2_0::Tq2Kernel::parse(&kernel)?);
        }
        // `OXIBONSAI_GPU_NORM_TAIL=1`: the engine's decode step norms in the residual products'
        // tails (off by default pending a measurement on a GPU; an A/B switch).
        if let Ok(on) = std::env::var("OXIBONSAI_GPU_NORM_TAIL") {
            gpu.set_norm_tail(match on.trim() {
                "1" => true,
                "0" => false,
                _ => {
                    return Err(GpuError::Shape {
                        what: "OXIBONSAI_GPU_NORM_TAIL".to_owned(),
                        reason: format!("{on:?} is not 0 or 1"),
                    })
                }
            });
        }
        if let Ok(kernel) = std::env::var("OXIBONSAI_GPU_ATTN") {
            gpu.set_attention_kernel(crate::attention::AttentionKernel::parse(&kernel)?);
        }
        gpu.check("compiling the shaders")?;
        Ok(gpu)
    }

    pub fn report(&self) -> &AdapterReport {
        &self.report
    }

    /// Chooses between the shaders that read f16 natively (where the adapter has `shader-f16`;
    /// the default there) and the portable ones that decode f16 in integers; returns the choice
    /// in effect. Both give the same bits: the tests run each.
    pub fn use_native_f16(&mut self, on: bool) -> bool {
        self.native_f16 = on && self.report.shader_f16;
        self.native_f16
    }

    /// Waits for the submitted work, then turns any validation error raised since the last check
    /// into a `GpuError` naming `what` and the adapter.
    pub(crate) fn check(&self, what: &str) -> Result<(), GpuError> {
        self.device
            .poll(wgpu::PollType::wait_indefinitely())
            .map_err(|e| self.run_error(what, e.to_string()))?;
        let late = self.uncaptured.lock().ok().and_then(|mut e| e.take());
        match late {
            Some(reason) => Err(self.run_error(what, reason)),
            None => Ok(()),
        }
    }

    pub(crate) fn run_error(&self, what: &str, reason: String) -> GpuError {
        GpuError::Run {
            what: what.to_owned(),
            adapter: self.report.name.clone(),
            reason,
        }
    }

    pub(crate) fn fits(&self, what: &str, bytes: u64) -> Result<(), GpuError> {
        if bytes > self.report.max_storage_binding_bytes {
            return Err(GpuError::TooLarge {
                what: what.to_owned(),
                bytes,
                limit: self.report.max_storage_binding_bytes,
                adapter: self.report.name.clone(),
            });
        }
        Ok(())
    }

    /// Reads the device's memory as fast as a plain shader can (`reps` passes over `bytes`
    /// bytes, one submission): the ceiling the matrix kernels are measured against. Returns
    /// bytes per second.
    pub fn read_bandwidth(&self, bytes: u64, reps: u32) -> Result<f64, GpuError> {
        use wgpu::util::DeviceExt;
        let words = (bytes / 16).max(1);
        self.fits("the bandwidth probe", words * 16)?;
        let data = self.device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("probe"),
            size: words * 16,
            usage: wgpu::BufferUsages::STORAGE,
            mapped_at_creation: false,
        });
        let groups = 4096u32;
        let out = self
            .device
            .create_buffer_init(&wgpu::util::BufferInitDescriptor {
                label: Some("probe out"),
                contents: &vec![0u8; groups as usize * 256 * 4],
                usage: wgpu::BufferUsages::STORAGE,
            });
        let bind = self.device.create_bind_group(&wgpu::BindGroupDescriptor {
            label: None,
            layout: &self.read_bandwidth.get_bind_group_layout(0),
            entries: &[
                wgpu::BindGroupEntry {
                    binding: 0,
                    resource: data.as_entire_binding(),
                },
                wgpu::BindGroupEntry {
                    binding: 1,
                    resource: out.as_entire_binding(),
                },
            ],
        });
        let run = |n: u32| -> Result<f64, GpuError> {
            let mut enc = self.device.create_command_encoder(&Default::default());
            for _ in 0..n {
                let mut pass = enc.begin_compute_pass(&Default::default());
                pass.set_pipeline(&self.read_bandwidth);
                pass.set_bind_group(0, &bind, &[]);
                pass.dispatch_workgroups(groups, 1, 1);
            }
            let start = std::time::Instant::now();
            self.queue.submit([enc.finish()]);
            self.check("the bandwidth probe")?;
            Ok(start.elapsed().as_secs_f64())
        };
        run(1)?;
        let t = run(reps)?;
        Ok((words * 16) as f64 * f64::from(reps) / t)
    }
}

/// Compiles one shader; a driver's refusal comes back as its message.
pub(crate) fn pipeline(
    device: &wgpu::Device,
    name: &str,
    source: &str,
    constants: &[(&str, f64)],
) -> Result<wgpu::ComputePipeline, String> {
    let scope = device.push_error_scope(wgpu::ErrorFilter::Validation);
    let module = device.create_shader_module(wgpu::ShaderModuleDescriptor {
        label: Some(name),
        source: wgpu::ShaderSource::Wgsl(source.into()),
    });
    let pipeline = device.create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
        label: Some(name),
        layout: None,
        module: &module,
        entry_point: Some("main"),
        compilation_options: wgpu::PipelineCompilationOptions {
            constants,
            ..Default::default()
        },
        cache: None,
    });
    match pollster::block_on(scope.pop()) {
        Some(e) => Err(e.to_string()),
        None => Ok(pipeline),
    }
}
