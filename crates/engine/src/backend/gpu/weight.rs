//! The GPU backend's weights: every matrix keeps its CPU form (the mmap view, never repacked, so
//! it costs no memory), and where the GPU crate has a product for its format, a device copy
//! uploaded once at load.

use std::sync::Arc;

use oxibonsai_formats::tq1_0::{to_tq2_0, BlockTQ1_0};
use oxibonsai_formats::{format, FormatKind};
use oxibonsai_gguf::{GgufFile, TensorInfo};
use oxibonsai_gpu::{Gpu, GpuError, Matrix, Q1Matrix};

use crate::backend::cpu::CpuWeight;
use crate::backend::Backend;
use crate::error::EngineError;

use super::GpuBackend;

/// A matrix on the device, with the activation format its product takes.
pub(super) enum DeviceMatrix {
    /// Q1_0: its own kernel, Q8_0 activations.
    Q1(Q1Matrix),
    /// The other formats of [`Matrix`]; `partner` `None`: the f32 activation itself.
    Rows {
        matrix: Matrix,
        partner: Option<FormatKind>,
    },
}

impl DeviceMatrix {
    pub(super) fn n_rows(&self) -> usize {
        match self {
            DeviceMatrix::Q1(m) => m.n_rows(),
            DeviceMatrix::Rows { matrix, .. } => matrix.n_rows(),
        }
    }

    /// The activation format the product reads (`None`: f32).
    pub(super) fn partner(&self) -> Option<FormatKind> {
        match self {
            DeviceMatrix::Q1(_) => Some(FormatKind::Q8_0),
            DeviceMatrix::Rows { partner, .. } => *partner,
        }
    }
}

/// A weight: its CPU form always (embedding rows, and products the GPU cannot run), its device
/// copy where the format has a GPU product.
pub struct GpuWeight {
    pub(super) cpu: CpuWeight,
    pub(super) device: Option<DeviceMatrix>,
    /// What a product with it is counted as when it runs on the CPU (`matmul FORMAT`), made once
    /// here rather than on every call.
    pub(super) cpu_op: Box<str>,
}

impl GpuWeight {
    /// Whether products with this weight run on the GPU.
    pub fn on_device(&self) -> bool {
        self.device.is_some()
    }
}

/// Uploads `rows` (`n_rows` rows of `n_in` values of `kind`, as in the GGUF file) for the GPU's
/// product; `Ok(None)` where the GPU crate has no product for the format.
fn upload(
    gpu: &Gpu,
    kind: FormatKind,
    rows: &[u8],
    n_rows: usize,
    n_in: usize,
) -> Result<Option<DeviceMatrix>, GpuError> {
    let partner = |k: FormatKind| match k {
        FormatKind::F32 | FormatKind::F16 | FormatKind::BF16 => None,
        k => Some(format(k).partner),
    };
    Ok(Some(match kind {
        FormatKind::Q1_0 => DeviceMatrix::Q1(Q1Matrix::upload(gpu, rows, n_rows, n_in)?),
        FormatKind::TQ1_0 => {
            // TQ2_0 holds the same values (a trit is a 2-bit code) and has a shader.
            let mut converted = Vec::with_capacity(rows.len() / size_of::<BlockTQ1_0>() * 66);
            for b in rows.chunks_exact(size_of::<BlockTQ1_0>()) {
                let b: BlockTQ1_0 = bytemuck::pod_read_unaligned(b);
                converted.extend_from_slice(bytemuck::bytes_of(&to_tq2_0(&b)));
            }
            DeviceMatrix::Rows {
                matrix: Matrix::upload(gpu, FormatKind::TQ2_0, &converted, n_rows, n_in)?,
                partner: partner(FormatKind::TQ2_0),
            }
        }
        FormatKind::F32
        | FormatKind::F16
        | FormatKind::BF16
        | FormatKind::Q8_0
        | FormatKind::Q4_0
        | FormatKind::Q4_1
        | FormatKind::Q5_0
        | FormatKind::Q5_1
        | FormatKind::IQ4_NL
        | FormatKind::PTQ1_0
        | FormatKind::Q2_K
        | FormatKind::Q3_K
        | FormatKind::Q4_K
        | FormatKind::Q5_K
        | FormatKind::Q6_K
        | FormatKind::TQ2_0
        | FormatKind::Q2_0
        | FormatKind::PQ2_0
        | FormatKind::Q2_0G128Legacy => DeviceMatrix::Rows {
            matrix: Matrix::upload(gpu, kind, rows, n_rows, n_in)?,
            partner: partner(kind),
        },
        _ => return Ok(None),
    }))
}

impl GpuBackend {
    /// [`crate::Backend::prepare`].
    pub(super) fn prepare_weight(
        &self,
        file: &Arc<GgufFile>,
        tensor: &TensorInfo,
    ) -> Result<GpuWeight, EngineError> {
        // The CPU form checks the shape and the format's blocks first.
        let cpu = self.cpu.prepare(file, tensor)?;
        let (n_in, n_rows) = (tensor.dims[0] as usize, tensor.dims[1] as usize);
        let device = upload(
            &self.gpu,
            tensor.format.kind,
            file.tensor_data(tensor),
            n_rows,
            n_in,
        )
        .map_err(|source| EngineError::GpuTensor {
            name: tensor.name.clone(),
            source,
        })?;
        if device.is_none() {
            self.count(&self.weights_on_cpu, tensor.format.name);
        }
        Ok(GpuWeight {
            cpu,
            device,
            cpu_op: format!("matmul {}", tensor.format.name).into(),
        })
    }
}
