//! The backend chosen at run time (`--device auto|cpu|gpu`, `--gpu-layers`): [`RuntimeBackend`] is
//! what the CLI and the server load models on — [`DeviceBackend`], the CPU or the GPU backend, in
//! a build with the `gpu` feature; the CPU backend itself in one without, where asking for the GPU
//! is an error.

use std::fmt;

use crate::backend::cpu::CpuBackend;
use crate::error::EngineError;
use crate::kv_cache::CacheTypes;

#[cfg(feature = "gpu")]
pub use self::runtime::{DeviceBackend, DeviceWeight};

/// The backend the CLI and the server run models on.
#[cfg(feature = "gpu")]
pub type RuntimeBackend = DeviceBackend;
/// The backend the CLI and the server run models on.
#[cfg(not(feature = "gpu"))]
pub type RuntimeBackend = CpuBackend;

/// Where to run a model.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Device {
    /// A hardware GPU if there is one (never a software one such as lavapipe: slower than the
    /// CPU backend), else the CPU.
    #[default]
    Auto,
    Cpu,
    /// Any adapter, software ones included (`OXIBONSAI_GPU_ADAPTER` picks by name).
    Gpu,
}

impl Device {
    pub fn parse(name: &str) -> Result<Device, String> {
        match name.to_ascii_lowercase().as_str() {
            "auto" => Ok(Device::Auto),
            "cpu" => Ok(Device::Cpu),
            "gpu" => Ok(Device::Gpu),
            other => Err(format!("unknown device '{other}' (auto, cpu or gpu)")),
        }
    }
}

/// The `--device` / `--gpu-layers` choice.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DeviceChoice {
    pub device: Device,
    /// The repeating layers whose matrices go to the GPU, the first N (llama.cpp's `-ngl`); the
    /// output and token embedding too only when N exceeds the layer count. `None`: all.
    pub gpu_layers: Option<usize>,
    /// Why the GPU backend would run the model op by op rather than in device-resident steps
    /// ([`DeviceChoice::for_model`]): `auto` then keeps it on the CPU, which is faster than a
    /// step made of a host round trip an op (measured: BENCHMARKS.md, the H100 tables).
    pub auto_refusal: Option<&'static str>,
}

impl DeviceChoice {
    /// This choice for the model in `file` with caches of `types`: notes why the GPU could not
    /// run it whole, which `auto` heeds (`gpu` does not: it asked for the GPU).
    #[cfg_attr(not(feature = "gpu"), allow(unused_mut))]
    pub fn for_model(mut self, file: &oxibonsai_gguf::GgufFile, types: CacheTypes) -> Self {
        #[cfg(feature = "gpu")]
        {
            // A file whose configuration does not parse is refused by the load that follows.
            self.auto_refusal = crate::config::ModelConfig::from_gguf(file)
                .ok()
                .and_then(|c| {
                    // -ngl N keeps the output matrix on the CPU unless N exceeds the layer count.
                    let partial = self.gpu_layers.is_some_and(|n| n <= c.n_layer);
                    partial
                        .then_some("-ngl below the layer count")
                        .or_else(|| crate::backend::gpu::model_refusal(file, &c, types))
                });
        }
        #[cfg(not(feature = "gpu"))]
        let _ = (file, types);
        self
    }
}

/// What `bench --json`, `devices` and the server's log say about the backend a model runs on.
#[derive(Clone, Debug)]
pub struct DeviceReport {
    /// `cpu` or `gpu`.
    pub device: &'static str,
    /// The backend's own description ([`crate::Backend::name`]).
    pub backend: String,
    /// Why `auto` (or a failed GPU) ended on the CPU, when it did.
    pub note: Option<String>,
    #[cfg(feature = "gpu")]
    pub gpu: Option<crate::backend::gpu::GpuStatus>,
}

impl DeviceReport {
    pub fn json(&self) -> serde_json::Value {
        #[allow(unused_mut)]
        let mut v = serde_json::json!({
            "device": self.device,
            "backend": self.backend,
            "note": self.note,
            "gpu": null,
        });
        #[cfg(feature = "gpu")]
        if let Some(g) = &self.gpu {
            let a = &g.adapter;
            let pairs = |items: &[(String, u64)]| {
                items
                    .iter()
                    .map(|(k, n)| serde_json::json!({"what": k, "count": n}))
                    .collect::<Vec<_>>()
            };
            v["gpu"] = serde_json::json!({
                "adapter": a.name,
                "api": a.backend,
                "device_type": a.device_type,
                "driver": a.driver,
                "max_buffer_bytes": a.max_buffer_bytes,
                "max_storage_binding_bytes": a.max_storage_binding_bytes,
                "shader_f16": a.shader_f16,
                "n_layer": g.n_layer,
                "layers_on_gpu": g.layers_on_gpu,
                "others_on_gpu": g.others_on_gpu,
                "kept_on_cpu": g.kept_on_cpu,
                "device_bytes": g.device_bytes,
                "out_of_memory_at": g.out_of_memory_at,
                "weights_on_cpu": pairs(&g.offload.weights_on_cpu),
                "ops_on_cpu": pairs(&g.offload.ops_on_cpu),
                "resident_steps": g.offload.resident_steps,
                "steps_not_resident": pairs(&g.offload.steps_not_resident),
                "profiled_passes": g.offload.profiled_passes.iter()
                    .map(|(k, n)| serde_json::json!({"pass": k, "count": n}))
                    .collect::<Vec<_>>(),
                "device_profile": g.offload.device_profile.iter()
                    .map(|l| serde_json::json!({
                        "pass": l.pass,
                        "op": l.op,
                        "dispatches": l.dispatches,
                        "device_us": l.seconds * 1e6,
                    }))
                    .collect::<Vec<_>>(),
            });
        }
        v
    }
}

impl fmt::Display for DeviceReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        #[cfg(feature = "gpu")]
        if let Some(g) = &self.gpu {
            return write!(f, "gpu: {g}");
        }
        write!(f, "{}: {}", self.device, self.backend)?;
        if let Some(note) = &self.note {
            write!(f, " ({note})")?;
        }
        Ok(())
    }
}

/// Opens the backend `choice` asks for, `threads` for the CPU's (0: the number of CPUs), and says
/// why it ended on the CPU when the GPU was possible (the report's `note`).
pub fn open_backend(
    choice: DeviceChoice,
    threads: usize,
) -> Result<(RuntimeBackend, Option<String>), EngineError> {
    #[cfg(feature = "gpu")]
    {
        runtime::open(choice, threads)
    }
    #[cfg(not(feature = "gpu"))]
    {
        match choice.device {
            Device::Gpu => Err(EngineError::NoGpuSupport),
            Device::Auto | Device::Cpu => Ok((
                CpuBackend::new(threads)?,
                (choice.device == Device::Auto).then(|| "built without GPU support".to_owned()),
            )),
        }
    }
}

/// The report of `backend` (`note`: what [`open_backend`] said).
pub fn device_report(backend: &RuntimeBackend, note: Option<String>) -> DeviceReport {
    use crate::Backend;
    #[cfg(feature = "gpu")]
    if let DeviceBackend::Gpu(g) = backend {
        return DeviceReport {
            device: "gpu",
            backend: g.name(),
            note,
            gpu: Some(g.status()),
        };
    }
    DeviceReport {
        device: "cpu",
        backend: backend.name(),
        note,
        #[cfg(feature = "gpu")]
        gpu: None,
    }
}

/// The GPU adapters found, the most capable first, each with whether `auto` may take it (a
/// hardware one); `None` in a build without GPU support.
pub fn gpu_adapters() -> Option<Vec<(String, bool)>> {
    #[cfg(feature = "gpu")]
    {
        Some(
            oxibonsai_gpu::adapters()
                .into_iter()
                .map(|a| (a.to_string(), a.hardware))
                .collect(),
        )
    }
    #[cfg(not(feature = "gpu"))]
    {
        None
    }
}

/// The CPU backend inside `backend` (a GPU backend's runs what the GPU does not): its ISA and
/// threads are what `bench` reports.
pub fn cpu_backend(backend: &RuntimeBackend) -> &CpuBackend {
    #[cfg(feature = "gpu")]
    {
        match backend {
            DeviceBackend::Cpu(c) => c,
            DeviceBackend::Gpu(g) => g.cpu(),
        }
    }
    #[cfg(not(feature = "gpu"))]
    {
        backend
    }
}

#[cfg(feature = "gpu")]
mod runtime;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn device_names_parse_and_others_are_refused() {
        assert_eq!(Device::parse("auto"), Ok(Device::Auto));
        assert_eq!(Device::parse("CPU"), Ok(Device::Cpu));
        assert_eq!(Device::parse("gpu"), Ok(Device::Gpu));
        assert!(Device::parse("tpu").unwrap_err().contains("'tpu'"));
    }

    #[cfg(not(feature = "gpu"))]
    #[test]
    fn without_the_gpu_feature_the_gpu_is_refused_and_auto_is_the_cpu() {
        let gpu = DeviceChoice {
            device: Device::Gpu,
            ..DeviceChoice::default()
        };
        let err = open_backend(gpu, 1).err().expect("no GPU in this build");
        assert!(
            err.to_string().contains("built without GPU support"),
            "{err}"
        );
        let (backend, note) = open_backend(DeviceChoice::default(), 1).unwrap();
        let report = device_report(&backend, note);
        assert_eq!(report.device, "cpu");
        assert_eq!(report.json()["gpu"], serde_json::Value::Null);
    }
}
