//! OxiBonsai's GPU compute through wgpu: WGSL compute shaders that run on Metal (macOS / iOS),
//! Vulkan (Linux / Windows / Android) and DX12 (Windows), and on Mesa's software Vulkan device
//! (lavapipe), where CI proves every shader against the CPU's scalar kernels.
//!
//! What exists: the device (adapter choice, its report, errors) and the first weight kernel, the
//! Q1_0 × Q8_0 matrix-vector product, with weights repacked at upload. The engine's GPU backend
//! (issue 28) is built on these pieces; see ARCHITECTURE.md.

mod device;
mod q1_0;

pub use device::{AdapterReport, Gpu, GpuError};
pub use q1_0::{Product, Q1Kernel, Q1Matrix, Q8Activation};
