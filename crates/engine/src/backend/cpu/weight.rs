//! The CPU backend's weights: each matrix prepared once at load (kept in the mmap, or repacked for
//! the tier's packed kernel, which then replaces the mapped rows), and embedding rows read from it.

use std::sync::Arc;

use oxibonsai_formats::kernels::Packed;
use oxibonsai_formats::{format, Format};
use oxibonsai_gguf::{GgufFile, TensorInfo};
use rayon::prelude::*;

use super::matmul::ROWS_PER_TASK;
use super::CpuBackend;
use crate::error::EngineError;

/// A weight matrix: read in place from the mapped file, or repacked for the tier's kernel.
pub struct CpuWeight {
    pub(super) file: Arc<GgufFile>,
    pub(super) tensor: TensorInfo,
    pub(super) format: &'static Format,
    pub(super) partner: &'static Format,
    pub(super) n_in: usize,
    pub(super) n_out: usize,
    pub(super) row_bytes: usize,
    pub(super) partner_row_bytes: usize,
    /// The repacked rows, which replace the mapped ones (never read once this is set).
    pub(super) packed: Option<Packed>,
}

impl CpuWeight {
    /// Whether the rows were repacked at load.
    pub fn is_packed(&self) -> bool {
        self.packed.is_some()
    }

    pub(super) fn data(&self) -> &[u8] {
        self.file.tensor_data(&self.tensor)
    }
    fn row(&self, r: usize) -> &[u8] {
        &self.data()[r * self.row_bytes..(r + 1) * self.row_bytes]
    }
}

impl CpuBackend {
    /// [`crate::Backend::prepare`].
    pub(super) fn prepare_weight(
        &self,
        file: &Arc<GgufFile>,
        tensor: &TensorInfo,
    ) -> Result<CpuWeight, EngineError> {
        if tensor.dims.len() != 2 {
            return Err(EngineError::TensorShape {
                name: tensor.name.clone(),
                expected: vec![0, 0],
                found: tensor.dims.clone(),
            });
        }
        let (n_in, n_out) = (tensor.dims[0] as usize, tensor.dims[1] as usize);
        let fmt = tensor.format;
        let partner = format(fmt.partner);
        let unusable = |role| EngineError::TensorFormat {
            name: tensor.name.clone(),
            format: fmt.name,
            role,
        };
        let row_bytes = fmt
            .bytes_for(n_in as u64)
            .ok_or_else(|| unusable("a matrix (its rows are not whole blocks)"))?
            as usize;
        let partner_row_bytes = partner
            .bytes_for(n_in as u64)
            .ok_or_else(|| unusable("a matrix (its rows do not fit the partner format's blocks)"))?
            as usize;
        if partner.quantize_activation.is_none() {
            return Err(unusable(
                "a matrix (its partner format has no activation conversion)",
            ));
        }
        let plan = self
            .pack
            .then(|| self.kernels.pack_plan(fmt, n_in, n_out))
            .flatten()
            // `matmul`'s bands must be whole groups.
            .filter(|plan| ROWS_PER_TASK.is_multiple_of(plan.group_rows()));
        let packed = plan.map(|plan| {
            let rows = file.tensor_data(tensor);
            let mut packed = Packed::zeroed(plan);
            let gb = plan.group_bytes();
            self.pool.install(|| {
                packed
                    .storage_mut()
                    .par_chunks_mut(gb)
                    .enumerate()
                    .for_each(|(g, dst)| plan.pack_group(g, rows, dst));
            });
            // The packed copy replaces the rows: let their pages go (only a hint; a failure
            // costs memory, not correctness).
            if let Err(e) = file.release_tensor_data(tensor) {
                tracing::debug!(tensor = %tensor.name, error = %e, "madvise failed");
            }
            packed
        });
        Ok(CpuWeight {
            file: Arc::clone(file),
            tensor: tensor.clone(),
            format: fmt,
            partner,
            n_in,
            n_out,
            row_bytes,
            partner_row_bytes,
            packed,
        })
    }

    /// [`crate::Backend::embed`].
    pub(super) fn embed_rows(&self, table: &CpuWeight, ids: &[u32], out: &mut [f32]) {
        match &table.packed {
            None => {
                for (row_out, &id) in out.chunks_exact_mut(table.n_in).zip(ids) {
                    (table.format.dequantize)(table.row(id as usize), row_out);
                }
            }
            Some(packed) => {
                // Block by block through a stack buffer: the packed formats' blocks are small.
                let (bb, be) = (table.format.block_bytes, table.format.block_elems);
                let mut block = [0u8; 128];
                assert!(
                    bb <= block.len(),
                    "a packed format with blocks over 128 bytes"
                );
                for (row_out, &id) in out.chunks_exact_mut(table.n_in).zip(ids) {
                    for (b, values) in row_out.chunks_exact_mut(be).enumerate() {
                        packed.unpack_block(id as usize, b, &mut block[..bb]);
                        (table.format.dequantize)(&block[..bb], values);
                    }
                }
            }
        }
    }
}
