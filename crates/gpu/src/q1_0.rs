//! The Q1_0 × Q8_0 matrix-vector product on the GPU (one token: decode).

use oxibonsai_formats::q1_0::{BlockQ1_0, QK1_0};
use oxibonsai_formats::q8_0::{self, BlockQ8_0, QK8_0};
use std::sync::Arc;

use wgpu::util::DeviceExt;

use crate::device::{Gpu, GpuError};

/// Workgroups per dimension of a dispatch (WebGPU's guaranteed limit).
const MAX_GROUPS: u32 = 65_535;
/// Invocations per workgroup, as the shader's `@workgroup_size`.
const GROUP_SIZE: u32 = 256;

/// The compiled product kernel for one work split: `lanes` invocations share each set of
/// `rows_per_thread` rows (every invocation takes all the set's rows, every `lanes`-th block).
pub struct Q1Kernel {
    pub(crate) pipeline: wgpu::ComputePipeline,
    lanes: u32,
    rows_per_thread: u32,
}

/// How a Q1_0 product sums the parts of a row set's lanes (every way the same additions in the
/// same order: the same bits).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Q1Reduce {
    /// By halves through workgroup memory, a barrier a step (`q1_0_reduce_tree.wgsl`).
    Tree,
    /// The steps inside a subgroup by subgroup shuffles, no barrier; the steps across subgroups
    /// as the tree's (`q1_0_reduce_subgroup.wgsl`). Needs the device's `subgroups`.
    Subgroup,
}

impl Q1Reduce {
    /// `tree` or `subgroup` (`OXIBONSAI_GPU_Q1_REDUCE`).
    pub fn parse(s: &str) -> Result<Q1Reduce, GpuError> {
        match s.trim() {
            "tree" => Ok(Q1Reduce::Tree),
            "subgroup" => Ok(Q1Reduce::Subgroup),
            other => Err(GpuError::Shape {
                what: "OXIBONSAI_GPU_Q1_REDUCE".to_owned(),
                reason: format!("{other:?} is not a Q1_0 lane sum (takes tree or subgroup)"),
            }),
        }
    }
}

impl Q1Kernel {
    /// The split of [`Q1Matrix::product`]'s compiled kernel (the host-side product API).
    pub const DEFAULT_LANES: u32 = 64;
    pub const DEFAULT_ROWS: u32 = 4;
    /// The lanes a recorded product's row set may have ([`Gpu::set_q1_0_lanes`]).
    pub const LANE_CHOICES: [u32; 5] = [8, 16, 32, 64, 128];
    /// The most rows an invocation takes ([`Gpu::set_q1_0_rows`]; the shaders' sums are two
    /// vec4s).
    pub const MAX_ROWS: u32 = 8;

    pub(crate) fn rows_per_group(&self) -> u32 {
        GROUP_SIZE / self.lanes * self.rows_per_thread
    }
}

impl Gpu {
    /// The lanes a recorded Q1_0 product of rows of `n_in` values runs with (every product of
    /// the matrix — the gemv, its residual, prologue and SwiGLU variants, the gemv-exact gemm —
    /// the same split and lane sum, so their bits agree): 32 where a row has at most 32 blocks
    /// (n_in ≤ 4096: with 64, half the lanes would have no block), else 64;
    /// [`Gpu::set_q1_0_lanes`] overrides it.
    pub fn q1_0_lanes(&self, n_in: usize) -> u32 {
        match self
            .cache
            .q1_0_lanes
            .load(std::sync::atomic::Ordering::Relaxed)
        {
            0 if n_in.div_ceil(QK1_0) <= 32 => 32,
            0 => 64,
            lanes => lanes,
        }
    }

    /// Every recorded Q1_0 product with `lanes` lanes a row set (one of
    /// [`Q1Kernel::LANE_CHOICES`]), or `None`: by the row's width ([`Gpu::q1_0_lanes`]).
    /// `OXIBONSAI_GPU_Q1_LANES` sets it when the device opens (an A/B switch).
    pub fn set_q1_0_lanes(&self, lanes: Option<u32>) -> Result<(), GpuError> {
        let lanes = match lanes {
            None => 0,
            Some(l) if Q1Kernel::LANE_CHOICES.contains(&l) => l,
            Some(l) => {
                return Err(GpuError::Shape {
                    what: "Q1_0 lanes".to_owned(),
                    reason: format!(
                        "{l} lanes a row set (takes one of {:?})",
                        Q1Kernel::LANE_CHOICES
                    ),
                })
            }
        };
        self.cache
            .q1_0_lanes
            .store(lanes, std::sync::atomic::Ordering::Relaxed);
        Ok(())
    }

    /// Rows an invocation of a recorded Q1_0 product takes: [`Q1Kernel::DEFAULT_ROWS`] unless
    /// [`Gpu::set_q1_0_rows`] set it.
    pub fn q1_0_rows(&self) -> u32 {
        match self
            .cache
            .q1_0_rows
            .load(std::sync::atomic::Ordering::Relaxed)
        {
            0 => Q1Kernel::DEFAULT_ROWS,
            rows => rows,
        }
    }

    /// Every recorded Q1_0 product with `rows` rows an invocation (1 ..= [`Q1Kernel::MAX_ROWS`]),
    /// or `None`: the default. `OXIBONSAI_GPU_Q1_ROWS` sets it when the device opens (an A/B
    /// switch). A split whose tile (`rows` · 256 / lanes rows a workgroup) does not divide 32
    /// has no SwiGLU epilogue ([`Gpu::q1_0_swiglu_fits`]).
    pub fn set_q1_0_rows(&self, rows: Option<u32>) -> Result<(), GpuError> {
        let rows = match rows {
            None => 0,
            Some(r) if (1..=Q1Kernel::MAX_ROWS).contains(&r) => r,
            Some(r) => {
                return Err(GpuError::Shape {
                    what: "Q1_0 rows".to_owned(),
                    reason: format!("{r} rows an invocation (takes 1 to {})", Q1Kernel::MAX_ROWS),
                })
            }
        };
        self.cache
            .q1_0_rows
            .store(rows, std::sync::atomic::Ordering::Relaxed);
        Ok(())
    }

    /// How the recorded Q1_0 products sum a row set's lanes ([`Gpu::set_q1_0_reduce`]; the
    /// tree unless set).
    pub fn q1_0_reduce(&self) -> Q1Reduce {
        if self
            .cache
            .q1_0_subgroup
            .load(std::sync::atomic::Ordering::Relaxed)
        {
            Q1Reduce::Subgroup
        } else {
            Q1Reduce::Tree
        }
    }

    /// Every recorded Q1_0 product's lane sum (the same bits either way). `Subgroup` needs the
    /// adapter's `subgroups` ([`AdapterReport::subgroup_sizes`](crate::AdapterReport)): refused
    /// without. `OXIBONSAI_GPU_Q1_REDUCE=tree|subgroup` sets it when the device opens (an A/B
    /// switch).
    pub fn set_q1_0_reduce(&self, reduce: Q1Reduce) -> Result<(), GpuError> {
        if reduce == Q1Reduce::Subgroup && self.report().subgroup_sizes.is_none() {
            return Err(GpuError::Shape {
                what: "Q1_0 lane sum".to_owned(),
                reason: format!(
                    "subgroup shuffles on {}, which has no `subgroups` feature",
                    self.report().name
                ),
            });
        }
        self.cache.q1_0_subgroup.store(
            reduce == Q1Reduce::Subgroup,
            std::sync::atomic::Ordering::Relaxed,
        );
        Ok(())
    }

    /// The override constants of a Q1_0 product's split: `LANES`, `R` and, with subgroup
    /// shuffles, `SG` (the adapter's smallest subgroup size, at most `lanes`).
    fn split_constants(&self, lanes: u32, rows: u32, reduce: Q1Reduce) -> Vec<(&'static str, f64)> {
        let mut constants = vec![("LANES", f64::from(lanes)), ("R", f64::from(rows))];
        if let (Q1Reduce::Subgroup, Some((min, _))) = (reduce, self.report().subgroup_sizes) {
            constants.push(("SG", f64::from(min.min(lanes))));
        }
        constants
    }

    /// The override constants of a recorded Q1_0 product's split for rows of `n_in` values:
    /// `LANES` ([`Gpu::q1_0_lanes`]), `R` ([`Gpu::q1_0_rows`]) and, with subgroup shuffles
    /// ([`Gpu::q1_0_reduce`]), `SG`.
    pub(crate) fn q1_0_split(&self, n_in: usize) -> Vec<(&'static str, f64)> {
        self.split_constants(self.q1_0_lanes(n_in), self.q1_0_rows(), self.q1_0_reduce())
    }

    /// Rows a workgroup tile of a recorded Q1_0 product of rows of `n_in` values covers.
    pub(crate) fn q1_0_tile_rows(&self, n_in: usize) -> usize {
        (self.q1_0_rows() * (GROUP_SIZE / self.q1_0_lanes(n_in))) as usize
    }

    /// Whether the SwiGLU epilogue ([`Recorder::q1_0_gemv_swiglu`](crate::Recorder)) takes rows
    /// of `n_in` values with this device's split: its workgroup takes a 32-row block of gate
    /// rows and of up rows in whole tiles, so a tile (rows · 256 / lanes) must divide 32 — not
    /// 8 lanes past 1 row an invocation, 16 past 2, 32 past 4. Where it does not, SwiGLU is a
    /// dispatch apart.
    pub fn q1_0_swiglu_fits(&self, n_in: usize) -> bool {
        let tile = self.q1_0_tile_rows(n_in);
        tile > 0 && 32 % tile == 0
    }
}

impl Gpu {
    /// Compiles the Q1_0 product for a work split (`lanes` a power of two ≤ 256, 1 ≤
    /// `rows_per_thread` ≤ 8) with the tree's lane sum; the default split serves
    /// [`Q1Matrix::product`].
    pub fn q1_0_kernel(&self, lanes: u32, rows_per_thread: u32) -> Result<Arc<Q1Kernel>, GpuError> {
        self.q1_0_kernel_with(lanes, rows_per_thread, Q1Reduce::Tree)
    }

    /// As [`Gpu::q1_0_kernel`], with the lane sum `reduce` (`Subgroup`: the adapter's
    /// `subgroups` needed).
    pub fn q1_0_kernel_with(
        &self,
        lanes: u32,
        rows_per_thread: u32,
        reduce: Q1Reduce,
    ) -> Result<Arc<Q1Kernel>, GpuError> {
        if !lanes.is_power_of_two()
            || lanes > GROUP_SIZE
            || !(1..=Q1Kernel::MAX_ROWS).contains(&rows_per_thread)
        {
            return Err(GpuError::Shape {
                what: "Q1_0 kernel".to_owned(),
                reason: format!("{lanes} lanes × {rows_per_thread} rows is not a split it has"),
            });
        }
        let source = match reduce {
            Q1Reduce::Tree => concat!(
                include_str!("../shaders/q1_0_sum.wgsl"),
                include_str!("../shaders/q1_0_act_storage.wgsl"),
                include_str!("../shaders/q1_0_out_rows.wgsl"),
                include_str!("../shaders/q1_0_reduce_tree.wgsl"),
                include_str!("../shaders/q1_0_gemv.wgsl")
            ),
            Q1Reduce::Subgroup => {
                if self.report().subgroup_sizes.is_none() {
                    return Err(GpuError::Shape {
                        what: "Q1_0 kernel".to_owned(),
                        reason: format!(
                            "subgroup shuffles on {}, which has none",
                            self.report().name
                        ),
                    });
                }
                concat!(
                    include_str!("../shaders/q1_0_sum.wgsl"),
                    include_str!("../shaders/q1_0_act_storage.wgsl"),
                    include_str!("../shaders/q1_0_out_rows.wgsl"),
                    include_str!("../shaders/q1_0_reduce_subgroup.wgsl"),
                    include_str!("../shaders/q1_0_gemv.wgsl")
                )
            }
        };
        let pipeline = crate::device::pipeline(
            &self.device,
            "q1_0_gemv",
            source,
            &self.split_constants(lanes, rows_per_thread, reduce),
        )
        .map_err(|reason| GpuError::Shader {
            shader: "q1_0_gemv".to_owned(),
            adapter: self.report().name.clone(),
            reason,
        })?;
        Ok(Arc::new(Q1Kernel {
            pipeline,
            lanes,
            rows_per_thread,
        }))
    }
}

/// A Q1_0 matrix on the device, repacked for the shader: the sign bits of each row as 16-byte
/// words (one per block), the block scales apart as f16 pairs.
pub struct Q1Matrix {
    pub(crate) bits: wgpu::Buffer,
    pub(crate) scales: wgpu::Buffer,
    /// The shader's `Dims` for this matrix (a recorded product binds it).
    pub(crate) dims: wgpu::Buffer,
    n_rows: usize,
    n_in: usize,
}

impl Q1Matrix {
    /// Uploads `n_rows` rows of `n_in` values stored as Q1_0 blocks (`rows` as in the GGUF file).
    pub fn upload(
        gpu: &Gpu,
        rows: &[u8],
        n_rows: usize,
        n_in: usize,
    ) -> Result<Q1Matrix, GpuError> {
        let shape = |reason: String| GpuError::Shape {
            what: "Q1_0 matrix".to_owned(),
            reason,
        };
        if n_in == 0 || !n_in.is_multiple_of(QK1_0) {
            return Err(shape(format!(
                "row length {n_in} is not a positive multiple of {QK1_0}"
            )));
        }
        let n_blocks = n_rows
            .checked_mul(n_in / QK1_0)
            .ok_or_else(|| shape(format!("{n_rows} rows of {n_in} overflow")))?;
        let want = n_blocks * size_of::<BlockQ1_0>();
        if rows.len() != want {
            return Err(shape(format!(
                "{n_rows} rows of {n_in} need {want} bytes, got {}",
                rows.len()
            )));
        }
        gpu.fits("the Q1_0 matrix's bits", n_blocks as u64 * 16)?;
        let mut bits = Vec::with_capacity(n_blocks * 16);
        // Scales as f16 pairs: one u32 holds blocks 2i and 2i + 1 (a zero pads an odd count).
        let mut scales = Vec::with_capacity(n_blocks.next_multiple_of(2) * 2);
        for block in rows.chunks_exact(size_of::<BlockQ1_0>()) {
            let block: BlockQ1_0 = bytemuck::pod_read_unaligned(block);
            bits.extend_from_slice(&block.qs);
            scales.extend_from_slice(&block.d.0);
        }
        scales.resize(n_blocks.next_multiple_of(2) * 2, 0);
        let init = |label, contents: &[u8], usage| {
            gpu.device
                .create_buffer_init(&wgpu::util::BufferInitDescriptor {
                    label: Some(label),
                    contents,
                    usage,
                })
        };
        let storage = wgpu::BufferUsages::STORAGE;
        let n_rows_u32 = u32::try_from(n_rows)
            .map_err(|_| shape(format!("{n_rows} rows exceed a 32-bit count")))?;
        let dims: [u32; 4] = [n_rows_u32, (n_in / QK1_0) as u32, 0, 0];
        let matrix = Q1Matrix {
            bits: init("q1_0 bits", &bits, storage),
            scales: init("q1_0 scales", &scales, storage),
            dims: init(
                "q1_0 dims",
                bytemuck::cast_slice(&dims),
                wgpu::BufferUsages::UNIFORM,
            ),
            n_rows,
            n_in,
        };
        gpu.check("uploading a Q1_0 matrix")?;
        Ok(matrix)
    }

    /// Several matrices of rows of `n_in` values sharing one input (Q / K / V, gate / up) as one,
    /// their rows one after another: one product computes them all, part i's outputs at the
    /// rows after parts 0 .. i. `parts` are Q1_0 rows as in the GGUF file.
    pub fn upload_stacked(gpu: &Gpu, parts: &[&[u8]], n_in: usize) -> Result<Q1Matrix, GpuError> {
        if n_in == 0 || !n_in.is_multiple_of(QK1_0) {
            // The plain upload names the bad row length.
            return Q1Matrix::upload(gpu, &[], 0, n_in);
        }
        let row_bytes = n_in / QK1_0 * size_of::<BlockQ1_0>();
        let mut rows = Vec::new();
        for (i, part) in parts.iter().enumerate() {
            if !part.len().is_multiple_of(row_bytes) {
                return Err(GpuError::Shape {
                    what: format!("stacked Q1_0 matrix, part {i}"),
                    reason: format!("{} bytes are not whole rows of {n_in}", part.len()),
                });
            }
            rows.extend_from_slice(part);
        }
        Q1Matrix::upload(gpu, &rows, rows.len() / row_bytes, n_in)
    }

    pub fn n_rows(&self) -> usize {
        self.n_rows
    }

    pub fn n_in(&self) -> usize {
        self.n_in
    }

    /// Bytes a product reads from the matrix (what bandwidth is measured against).
    pub fn bytes(&self) -> u64 {
        (self.n_rows * self.n_in / QK1_0 * size_of::<BlockQ1_0>()) as u64
    }
}

/// One token's activation quantized to Q8_0 (as the CPU backend does before a Q1_0 product),
/// codes permuted inside each block for the shader (byte L of word i = code 8L + i), with each
/// block's scale and code sum.
pub struct Q8Activation {
    words: Vec<u32>,
    meta: Vec<[u32; 2]>,
    n_in: usize,
}

impl Q8Activation {
    pub fn quantize(x: &[f32]) -> Result<Q8Activation, GpuError> {
        if x.is_empty() || !x.len().is_multiple_of(QK8_0) {
            return Err(GpuError::Shape {
                what: "activation".to_owned(),
                reason: format!("length {} is not a positive multiple of {QK8_0}", x.len()),
            });
        }
        let n = x.len() / QK8_0;
        let mut blocks = vec![0u8; n * size_of::<BlockQ8_0>()];
        q8_0::quantize_activation(x, &mut blocks);
        let mut words = Vec::with_capacity(n * 8);
        let mut meta = Vec::with_capacity(n);
        for block in blocks.chunks_exact(size_of::<BlockQ8_0>()) {
            let block: BlockQ8_0 = bytemuck::pod_read_unaligned(block);
            for i in 0..8 {
                let lanes = [0, 1, 2, 3].map(|l| block.qs[8 * l + i] as u8);
                words.push(u32::from_le_bytes(lanes));
            }
            let total: i32 = block.qs.iter().map(|&q| i32::from(q)).sum();
            meta.push([block.d.to_f32().to_bits(), total as u32]);
        }
        Ok(Q8Activation {
            words,
            meta,
            n_in: x.len(),
        })
    }

    pub fn n_in(&self) -> usize {
        self.n_in
    }
}

/// Device buffers of one product: the activation uploaded, the output and its read-back.
pub struct Product {
    kernel: Arc<Q1Kernel>,
    bind: wgpu::BindGroup,
    out: wgpu::Buffer,
    read: wgpu::Buffer,
    n_rows: usize,
    groups: (u32, u32),
}

impl Q1Matrix {
    /// Prepares `W · x` (the buffers and bindings), to run with [`Gpu::run_q1_0`].
    pub fn product(&self, gpu: &Gpu, x: &Q8Activation) -> Result<Product, GpuError> {
        let kernel = gpu.q1_0.clone().ok_or_else(|| GpuError::Shape {
            what: "Q1_0 product".to_owned(),
            reason: "the kernel is not compiled".to_owned(),
        })?;
        self.product_with(gpu, &kernel, x)
    }

    /// As [`Q1Matrix::product`], with the given kernel's work split.
    pub fn product_with(
        &self,
        gpu: &Gpu,
        kernel: &Arc<Q1Kernel>,
        x: &Q8Activation,
    ) -> Result<Product, GpuError> {
        if x.n_in != self.n_in {
            return Err(GpuError::Shape {
                what: "Q1_0 product".to_owned(),
                reason: format!(
                    "activation has {} values, the matrix's rows {}",
                    x.n_in, self.n_in
                ),
            });
        }
        let init = |label, contents: &[u8], usage| {
            gpu.device
                .create_buffer_init(&wgpu::util::BufferInitDescriptor {
                    label: Some(label),
                    contents,
                    usage,
                })
        };
        let act = init(
            "q8 activation",
            bytemuck::cast_slice(&x.words),
            wgpu::BufferUsages::STORAGE,
        );
        let meta = init(
            "q8 activation meta",
            bytemuck::cast_slice(&x.meta),
            wgpu::BufferUsages::STORAGE,
        );
        let n_rows = u32::try_from(self.n_rows).map_err(|_| GpuError::Shape {
            what: "Q1_0 product".to_owned(),
            reason: format!("{} rows exceed a 32-bit count", self.n_rows),
        })?;
        let dims: [u32; 4] = [n_rows, (self.n_in / QK1_0) as u32, 0, 0];
        let dims = init(
            "dims",
            bytemuck::cast_slice(&dims),
            wgpu::BufferUsages::UNIFORM,
        );
        let out_bytes = (self.n_rows * 4) as u64;
        let out = gpu.device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("q1_0 out"),
            size: out_bytes,
            usage: wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_SRC,
            mapped_at_creation: false,
        });
        let read = gpu.device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("q1_0 read-back"),
            size: out_bytes,
            usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        });
        let entries = [&self.bits, &self.scales, &act, &meta, &out, &dims];
        let entries: Vec<wgpu::BindGroupEntry> = entries
            .iter()
            .enumerate()
            .map(|(i, b)| wgpu::BindGroupEntry {
                binding: i as u32,
                resource: b.as_entire_binding(),
            })
            .collect();
        let bind = gpu.device.create_bind_group(&wgpu::BindGroupDescriptor {
            label: Some("q1_0 product"),
            layout: &kernel.pipeline.get_bind_group_layout(0),
            entries: &entries,
        });
        let groups = n_rows.div_ceil(kernel.rows_per_group());
        let x = groups.min(MAX_GROUPS);
        let y = groups.div_ceil(x);
        Ok(Product {
            kernel: Arc::clone(kernel),
            bind,
            out,
            read,
            n_rows: self.n_rows,
            groups: (x, y),
        })
    }
}

impl Gpu {
    /// Runs a prepared product `reps` times in one submission, then reads its result back.
    /// Returns the result and the seconds from submission to completion.
    pub fn run_q1_0(&self, p: &Product, reps: u32) -> Result<(Vec<f32>, f64), GpuError> {
        let mut enc = self.device.create_command_encoder(&Default::default());
        for _ in 0..reps.max(1) {
            let mut pass = enc.begin_compute_pass(&Default::default());
            pass.set_pipeline(&p.kernel.pipeline);
            pass.set_bind_group(0, &p.bind, &[]);
            pass.dispatch_workgroups(p.groups.0, p.groups.1, 1);
        }
        enc.copy_buffer_to_buffer(&p.out, 0, &p.read, 0, (p.n_rows * 4) as u64);
        let start = std::time::Instant::now();
        self.queue.submit([enc.finish()]);
        self.check("the Q1_0 product")?;
        let seconds = start.elapsed().as_secs_f64();
        let slice = p.read.slice(..);
        slice.map_async(wgpu::MapMode::Read, |_| {});
        self.check("reading the Q1_0 product back")?;
        let view = slice
            .get_mapped_range()
            .map_err(|e| self.run_error("reading the Q1_0 product back", e.to_string()))?;
        let out = bytemuck::cast_slice::<u8, f32>(&view).to_vec();
        drop(view);
        p.read.unmap();
        Ok((out, seconds))
    }

    /// Runs `passes` rounds over all `products` in turn, one submission, no read-back: seconds
    /// from submission to completion (a benchmark's figure; matrices several times the GPU's
    /// cache keep each round reading memory).
    pub fn time_q1_0(&self, products: &[&Product], passes: u32) -> Result<f64, GpuError> {
        let mut enc = self.device.create_command_encoder(&Default::default());
        {
            let mut pass = enc.begin_compute_pass(&Default::default());
            for _ in 0..passes {
                for p in products {
                    pass.set_pipeline(&p.kernel.pipeline);
                    pass.set_bind_group(0, &p.bind, &[]);
                    pass.dispatch_workgroups(p.groups.0, p.groups.1, 1);
                }
            }
        }
        let start = std::time::Instant::now();
        self.queue.submit([enc.finish()]);
        self.check("the Q1_0 products")?;
        Ok(start.elapsed().as_secs_f64())
    }
}
