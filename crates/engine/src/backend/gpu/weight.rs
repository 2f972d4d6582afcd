//! The GPU backend's weights: every matrix keeps its CPU form (the mmap view, never repacked, so
//! it costs no memory), and where the GPU crate has a product for its format, a device copy
//! uploaded once at load. A layer's Q / K / V and gate / up go up stacked (one matrix, their rows
//! one after another) where the resident step runs them as one product: each weight then holds
//! its rows of the shared copy ([`DeviceMatrix::Part`]), so nothing is on the device twice.

use std::ops::Range;
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
    /// Rows `rows` of a stacked matrix (Q|K|V or gate|up; never itself a part): a product
    /// computes the whole matrix and takes these rows.
    Part {
        whole: Arc<DeviceMatrix>,
        rows: Range<usize>,
    },
}

impl DeviceMatrix {
    pub(super) fn n_rows(&self) -> usize {
        match self {
            DeviceMatrix::Q1(m) => m.n_rows(),
            DeviceMatrix::Rows { matrix, .. } => matrix.n_rows(),
            DeviceMatrix::Part { rows, .. } => rows.len(),
        }
    }

    /// The matrix a product runs (the whole of a part) and the rows of it that are this one's.
    pub(super) fn whole(&self) -> (&DeviceMatrix, Range<usize>) {
        match self {
            DeviceMatrix::Part { whole, rows } => (whole, rows.clone()),
            m => (m, 0..m.n_rows()),
        }
    }

    /// The activation format the product reads (`None`: f32).
    pub(super) fn partner(&self) -> Option<FormatKind> {
        match self {
            DeviceMatrix::Q1(_) => Some(FormatKind::Q8_0),
            DeviceMatrix::Rows { partner, .. } => *partner,
            DeviceMatrix::Part { whole, .. } => whole.partner(),
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

/// The activation format a product with a `kind` matrix reads on the device (`None`: f32).
fn device_partner(kind: FormatKind) -> Option<FormatKind> {
    match kind {
        FormatKind::F32 | FormatKind::F16 | FormatKind::BF16 => None,
        FormatKind::Q1_0 => Some(FormatKind::Q8_0),
        FormatKind::TQ1_0 => Some(format(FormatKind::TQ2_0).partner),
        k => Some(format(k).partner),
    }
}

/// The stacks the resident step runs as one product: Q / K / V (their output then takes the fused
/// RoPE + KV store + attention, which writes the attention output's activation in the output
/// product's partner format — Q8_0, Q8_1 or Q8_K, in the dispatch), gate / up (the fused
/// SwiGLU writes the down product's activation in its partner format), and the matrix that reads
/// the fused op's output.
const STACKS: [(&[&str], &str); 2] = [
    (&["attn_q", "attn_k", "attn_v"], "attn_output"),
    (&["ffn_gate", "ffn_up"], "ffn_down"),
];

/// The tensors stacked with `name` (itself among them, in row order), when the layer's are all
/// there, of one format with a device product and one row length, and the matrix after the fused
/// op reads a quantized activation (Q8_0, Q8_1 or Q8_K, whichever: the fused ops write each);
/// `heads` (the head dimensions) must suit the fused attention.
pub(super) fn stack_of<'f>(
    file: &'f GgufFile,
    name: &str,
    heads: (usize, usize),
) -> Option<Vec<&'f TensorInfo>> {
    let (layer, rest) = name.strip_prefix("blk.")?.split_once('.')?;
    let (base, suffix) = rest.split_once('.')?;
    let (members, reader) = STACKS.iter().find(|(m, _)| m.contains(&base))?;
    let tensor = |b: &str| file.tensor(&format!("blk.{layer}.{b}.{suffix}"));
    let parts: Vec<&TensorInfo> = members.iter().map(|b| tensor(b)).collect::<Option<_>>()?;
    let first = parts[0];
    let same = parts.iter().all(|t| {
        t.dims.len() == 2 && t.format.kind == first.format.kind && t.dims[0] == first.dims[0]
    });
    let reads_quantized = device_partner(tensor(reader)?.format.kind).is_some();
    let (hd, hdv) = heads;
    let attention = *reader != "attn_output" || oxibonsai_gpu::fused_attention_fits(hd, hdv);
    let has_product = !matches!(first.format.kind, FormatKind::Q8_1 | FormatKind::Q8_K);
    (same && reads_quantized && attention && has_product).then_some(parts)
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
    let partner = device_partner;
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
        let (n_in, mut n_rows) = (tensor.dims[0] as usize, tensor.dims[1] as usize);
        let mut stacked = self
            .stack_heads()
            .and_then(|heads| stack_of(file, &tensor.name, heads));
        let data: std::borrow::Cow<'_, [u8]> = match &stacked {
            Some(parts) => {
                n_rows = parts.iter().map(|t| t.dims[1] as usize).sum();
                parts
                    .iter()
                    .flat_map(|t| file.tensor_data(t).iter().copied())
                    .collect::<Vec<u8>>()
                    .into()
            }
            None => file.tensor_data(tensor).into(),
        };
        let device = match upload(&self.gpu, tensor.format.kind, &data, n_rows, n_in) {
            // A stack past a buffer's limit: its matrices go up apart.
            Err(GpuError::TooLarge { .. }) if stacked.is_some() => {
                stacked = None;
                let n_rows = tensor.dims[1] as usize;
                upload(
                    &self.gpu,
                    tensor.format.kind,
                    file.tensor_data(tensor),
                    n_rows,
                    n_in,
                )
            }
            result => result,
        }
        .map_err(|source| EngineError::GpuTensor {
            name: tensor.name.clone(),
            source,
        })?;
        let device = match (device, stacked) {
            (Some(whole), Some(parts)) => {
                // Each part's rows of the one copy: this tensor's now, the others' when they
                // are prepared.
                let whole = Arc::new(whole);
                let mut start = 0;
                let mut own = None;
                let mut pending = self.pending.lock().unwrap_or_else(|e| e.into_inner());
                for part in parts {
                    let rows = start..start + part.dims[1] as usize;
                    start = rows.end;
                    let m = DeviceMatrix::Part {
                        whole: Arc::clone(&whole),
                        rows,
                    };
                    if part.name == tensor.name {
                        own = Some(m);
                    } else {
                        pending.insert(part.name.clone(), m);
                    }
                }
                own
            }
            (device, _) => device,
        };
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
