//! The TQ2_0 × Q8_K product's own kernel (`shaders/tq2_0_gemv.wgsl`: gemv and gemm) on the
//! quarter-block layout `repack::tq2_0_quarters` makes at upload, its work splits, and the switch
//! that keeps the old kernel (`gemv_tq2_0.wgsl` through the shared gemv_rows walk, the file's
//! layout) for an A/B. `Recorder::gemv` / `gemv_add` / `gemm` (`gemv.rs`) pick it by the matrix.

use crate::device::{Gpu, GpuError};
use crate::gemv::{Matrix, Q8Tensor, GEMM_TILE};
use crate::ops::{count, shader, Recorder, Tensor};

/// The (lanes, rows) split [`Tq2Kernel::ByShape`] runs a matrix with unless it is tall enough for
/// [`TALL_SPLIT`]: the fastest end to end on an H200 (BENCHMARKS.md, session 19), and per product
/// for the 8B shape's Q/K/V, O and down (24.1 · 18.4 · 33.0 µs against 8 × 4's 28.9 · 29.0 · 67.7).
const DEFAULT_SPLIT: (u32, u32) = (16, 2);

/// The split for a matrix that still fills [`TALL_GROUPS`] workgroups of its 128 rows: twice the
/// blocks an invocation and twice the rows sharing each activation load. On the H200 the 8B
/// shape's stacked gate|up (24,576 rows: 192 such workgroups) ran in 49.6 µs against 16 × 2's 64.5;
/// the 4096- and 6144-row products (32 and 48 workgroups, a fraction of the card's 132
/// multiprocessors) ran slower with it.
const TALL_SPLIT: (u32, u32) = (8, 4);

/// The fewest workgroups of [`TALL_SPLIT`] a matrix must fill to run it.
const TALL_GROUPS: usize = 192;

/// The TQ2_0 product's kernel: which one [`Matrix::upload`] lays a TQ2_0 matrix out for, and
/// the work split its products run with (`Gpu::set_tq2_kernel`; `OXIBONSAI_GPU_TQ2_KERNEL` sets
/// it when the device opens: `old`, `new` (the split by shape) or `LANESxROWS`, e.g. `16x2`,
/// for every matrix).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Tq2Kernel {
    /// `gemv_tq2_0.wgsl` through `gemv_rows.wgsl` / `gemm_rows.wgsl` on the file's layout: eight
    /// rows a workgroup, 32 invocations a row, 4-byte loads, a token at a time.
    Old,
    /// `tq2_0_gemv.wgsl` on the quarters' layout, each matrix with the split for its shape
    /// ([`Tq2Kernel::split_for`]): the default.
    ByShape,
    /// `tq2_0_gemv.wgsl` on the quarters' layout (`repack::tq2_0_quarters`): `lanes`
    /// invocations (a power of two ≤ 256) share `rows` rows (1 ..= 4), each taking every
    /// `lanes`-th block, one 16-byte load a quarter block, a gemm's weights read once a tile.
    Split { lanes: u32, rows: u32 },
}

impl Tq2Kernel {
    /// The kernel a new device runs.
    pub const DEFAULT: Tq2Kernel = Tq2Kernel::ByShape;

    /// The (lanes, rows) split a product of a matrix of `n_rows` rows runs with under this
    /// setting (the `Old` setting's matrices in quarters: as `ByShape`'s). Every product of a
    /// matrix — gemv, residual, gemm — runs the same split, so their bits agree.
    pub fn split_for(self, n_rows: usize) -> (u32, u32) {
        match self {
            Tq2Kernel::Split { lanes, rows } => (lanes, rows),
            Tq2Kernel::Old | Tq2Kernel::ByShape => {
                let tall_rows = (256 / TALL_SPLIT.0 * TALL_SPLIT.1) as usize;
                if n_rows >= TALL_GROUPS * tall_rows {
                    TALL_SPLIT
                } else {
                    DEFAULT_SPLIT
                }
            }
        }
    }

    /// `old`, `new` (the split by shape) or `LANESxROWS`.
    pub fn parse(text: &str) -> Result<Tq2Kernel, GpuError> {
        let bad = |reason: String| GpuError::Shape {
            what: "TQ2_0 kernel".to_owned(),
            reason,
        };
        let kernel = match text.trim() {
            "old" => Tq2Kernel::Old,
            "new" => Tq2Kernel::DEFAULT,
            split => {
                let parsed = crate::tile::split_pair(split)
                    .map(|(lanes, rows)| Tq2Kernel::Split { lanes, rows });
                parsed.ok_or_else(|| {
                    bad(format!(
                        "{split:?} is not `old`, `new` or LANESxROWS (e.g. 16x2)"
                    ))
                })?
            }
        };
        if let Tq2Kernel::Split { lanes, rows } = kernel {
            if !lanes.is_power_of_two() || lanes > 256 || !(1..=4).contains(&rows) {
                return Err(bad(format!(
                    "{lanes} lanes × {rows} rows is not a split it has (lanes a power of two \
                     ≤ 256, 1 ..= 4 rows)"
                )));
            }
        }
        Ok(kernel)
    }
}

impl Default for Tq2Kernel {
    fn default() -> Tq2Kernel {
        Tq2Kernel::DEFAULT
    }
}

impl Gpu {
    /// Which TQ2_0 kernel later [`Matrix::upload`]s lay TQ2_0 matrices out for, and the split
    /// products of matrices in the quarters' layout run with (a matrix uploaded for
    /// [`Tq2Kernel::Old`] keeps the old kernel; one in quarters runs the split by shape while the
    /// setting is `Old`). Splits give different roundings (each its own order of the same block
    /// terms); which is fastest on a device is for `op_cost` to say.
    pub fn set_tq2_kernel(&self, kernel: Tq2Kernel) {
        // 0 the split by shape, `u32::MAX` the old kernel, else lanes << 16 | rows (read by
        // every product: an atomic, not a lock).
        let code = match kernel {
            Tq2Kernel::ByShape => 0,
            Tq2Kernel::Old => u32::MAX,
            Tq2Kernel::Split { lanes, rows } => (lanes << 16) | rows,
        };
        self.cache
            .tq2_kernel
            .store(code, std::sync::atomic::Ordering::Relaxed);
    }

    /// The TQ2_0 kernel setting ([`Gpu::set_tq2_kernel`]).
    pub fn tq2_kernel(&self) -> Tq2Kernel {
        match self
            .cache
            .tq2_kernel
            .load(std::sync::atomic::Ordering::Relaxed)
        {
            0 => Tq2Kernel::ByShape,
            u32::MAX => Tq2Kernel::Old,
            code => Tq2Kernel::Split {
                lanes: code >> 16,
                rows: code & 0xffff,
            },
        }
    }
}

impl Recorder<'_> {
    /// A TQ2_0 matrix in quarters times `n_tok` tokens of its Q8_K activation (checked by
    /// `product`): `tq2_0_gemv.wgsl` with the set split, a gemv (`N_TOK` = `TILE` = 1) or a gemm
    /// with a tile of [`GEMM_TILE`] tokens a workgroup.
    pub(crate) fn tq2_0_product(
        &mut self,
        m: &Matrix,
        x: &Q8Tensor,
        scales: &Tensor,
        out: &Tensor,
        n_tok: usize,
        accum: bool,
    ) -> Result<(), GpuError> {
        let (lanes, rows) = self.gpu.tq2_kernel().split_for(m.n_rows);
        let tile = if n_tok > 1 { GEMM_TILE } else { 1 };
        let rows_per_group = (256 / lanes * rows) as usize;
        let groups = count(
            "TQ2_0 product workgroups",
            m.n_rows.div_ceil(rows_per_group) * n_tok.div_ceil(tile as usize),
        )? as u32;
        let constants = [
            ("N_ROWS", count("product rows", m.n_rows)?),
            (
                "N_BLOCKS",
                count("product blocks", m.n_in / oxibonsai_formats::q8_k::QK_K)?,
            ),
            ("LANES", f64::from(lanes)),
            ("R", f64::from(rows)),
            ("ACCUM", f64::from(u8::from(accum))),
            ("N_TOK", count("gemm tokens", n_tok)?),
            ("TILE", f64::from(tile)),
        ];
        self.dispatch(
            &shader!("tq2_0_gemv"),
            &constants,
            &[
                &m.qs.buffer,
                &scales.buffer,
                &x.words.buffer,
                &x.meta.buffer,
                &out.buffer,
            ],
            groups,
        )
    }
}
