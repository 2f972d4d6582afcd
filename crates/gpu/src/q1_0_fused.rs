//! The Q1_0 product with the ops around it in its own dispatch: the RMS norm and its Q8_0
//! quantization as its prologue (every workgroup norms and quantizes the row into workgroup
//! memory, `q1_0_act_norm.wgsl`) and, for a stacked gate / up matrix, SwiGLU with the down
//! product's quantization as its epilogue (a workgroup a block of h, `q1_0_out_swiglu.wgsl`) —
//! pieces `q1_0_gemv.wgsl` is assembled from — and the residual add with the next RMS norm and
//! its quantization in the product's tail (the workgroup that finishes last norms the whole row,
//! `q1_0_out_norm.wgsl`). Each gives the bits of the ops it replaces (`rms_norm_quantize`,
//! `q1_0_gemv`, `q1_0_gemv_add`, `swiglu_quantize`), which `tests/fused.rs` checks.

use oxibonsai_formats::q1_0::QK1_0;
use oxibonsai_formats::FormatKind;

use crate::device::{Gpu, GpuError};
use crate::gemv::Q8Tensor;
use crate::ops::{count, holds, q1_0_shader, Recorder, Tensor};
use crate::q1_0::Q1Matrix;

/// The workgroups a product with the norm as its prologue aims at by default: each workgroup
/// norms and quantizes the whole row before its rows' sums, so more workgroups repeat that work
/// and fewer leave the memory bus idle; a workgroup takes several tiles of rows past this count.
const PROLOGUE_WORKGROUPS: usize = 1024;

/// The widest row [`Recorder::rms_norm_q1_0_gemv`] takes (`q1_0_act_norm.wgsl`'s `MAX_N`: its
/// workgroup arrays have fixed sizes).
const PROLOGUE_MAX_N: usize = 7168;

/// Workgroup memory [`Recorder::rms_norm_q1_0_gemv`] takes: the activation built for
/// `PROLOGUE_MAX_N` values (1.5 bytes a value: codes, a block's d and Σ codes, its maximum and
/// sum while they are built), the norm's tree (256 f32) and the product's sums (256 × 4 f32).
const PROLOGUE_BYTES: u64 = PROLOGUE_MAX_N as u64 * 3 / 2 + 256 * 4 + 256 * 16;

/// Storage buffers [`Recorder::q1_0_gemv_add_norm`] binds where its output is not the product's
/// activation (the matrix's two, the activation's two, the residual, the norm weight, the
/// output's two, the done count): past WebGPU's guaranteed 8 ([`Gpu::norm_tail_fits`]).
const TAIL_STORAGE_BUFFERS: u32 = 9;

/// Workgroup memory the SwiGLU epilogue adds: the block quantization's two 256-word arrays
/// (`q8_0_block_wg.wgsl`) and the 64 gate|up sums.
const EPILOGUE_BYTES: u64 = 2 * 256 * 4 + 64 * 4;

impl Gpu {
    /// Whether [`Recorder::rms_norm_q1_0_gemv`] takes rows of `n` values on this device: whole
    /// Q1_0 blocks, at most 7168 of them (Qwen3 up to 32B: 5120), and its 15.5 KiB of workgroup
    /// memory within the device's (WebGPU guarantees 16 KiB). Where it does not, the norm and
    /// the product are two dispatches.
    pub fn norm_prologue_fits(&self, n: usize) -> bool {
        n > 0
            && n.is_multiple_of(QK1_0)
            && n <= PROLOGUE_MAX_N
            && PROLOGUE_BYTES <= u64::from(self.workgroup_storage_bytes())
    }

    /// Whether [`Recorder::rms_norm_q1_0_gemv_swiglu`] takes rows of `n` values on this device:
    /// [`Gpu::norm_prologue_fits`], and the SwiGLU epilogue's block quantization (2.25 KiB more:
    /// 17.75 KiB in all, past WebGPU's guaranteed 16 KiB — the norm is then a dispatch apart).
    pub fn norm_prologue_swiglu_fits(&self, n: usize) -> bool {
        self.norm_prologue_fits(n)
            && PROLOGUE_BYTES + EPILOGUE_BYTES <= u64::from(self.workgroup_storage_bytes())
    }

    /// Whether [`Recorder::q1_0_gemv_add_norm`] runs on this device: it binds nine storage
    /// buffers (the device is opened with the adapter's limits; WebGPU guarantees eight). Where
    /// it does not, the norm is a dispatch of its own.
    pub fn norm_tail_fits(&self) -> bool {
        self.device.limits().max_storage_buffers_per_shader_stage >= TAIL_STORAGE_BUFFERS
    }

    /// Whether the engine's decode step runs the RMS norm after a residual Q1_0 product in that
    /// product's tail ([`Recorder::q1_0_gemv_add_norm`]) — off by default, pending a measurement
    /// on a GPU; `OXIBONSAI_GPU_NORM_TAIL=1` when the device opens turns it on (an A/B switch).
    /// The bits do not depend on it.
    pub fn set_norm_tail(&self, on: bool) {
        self.cache
            .norm_tail
            .store(on, std::sync::atomic::Ordering::Relaxed);
    }

    /// [`Gpu::set_norm_tail`]'s setting.
    pub fn norm_tail(&self) -> bool {
        self.cache
            .norm_tail
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    /// The norm tail's done count: one zeroed word, shared by every tail dispatch (wgpu orders
    /// dispatches that write one buffer), left at zero by each (its last workgroup resets it).
    fn norm_tail_done(&self) -> Result<wgpu::Buffer, GpuError> {
        let mut held = self.cache.norm_tail_done.lock().map_err(|_| {
            self.run_error(
                "the norm tail's count",
                "a thread panicked holding it".to_owned(),
            )
        })?;
        if let Some(t) = held.as_ref() {
            return Ok(t.buffer.clone());
        }
        let t = self.tensor("norm tail count", 1)?;
        let buffer = t.buffer.clone();
        *held = Some(t);
        Ok(buffer)
    }

    /// The workgroup memory a shader may take on this device (the adapter's limit).
    pub fn workgroup_storage_bytes(&self) -> u32 {
        self.device.limits().max_compute_workgroup_storage_size
    }

    /// The workgroups a product with the norm as its prologue aims at (0: the default, 1024):
    /// for `op_cost` to find the device's best; the bits do not depend on it.
    pub fn set_prologue_workgroups(&self, n: usize) {
        self.cache
            .prologue_workgroups
            .store(n, std::sync::atomic::Ordering::Relaxed);
    }
}

impl Recorder<'_> {
    /// `out = m · quantize(rms_norm(x) · weight)` for a Q1_0 matrix in one dispatch, `x` one row
    /// of `m.n_in()` values: each workgroup norms and quantizes the row into workgroup memory
    /// before its rows' sums (`q1_0_act_norm.wgsl`), the bits of [`Recorder::rms_norm_quantize`]
    /// to Q8_0 then [`Recorder::q1_0_gemv`]. Rows the device's workgroup memory cannot hold
    /// ([`Gpu::norm_prologue_fits`]) are an error: record the two.
    pub fn rms_norm_q1_0_gemv(
        &mut self,
        x: &Tensor,
        weight: &Tensor,
        eps: f32,
        m: &Q1Matrix,
        out: &Tensor,
    ) -> Result<(), GpuError> {
        let n = m.n_in();
        if weight.len() != n || !self.gpu.norm_prologue_fits(n) {
            return Err(GpuError::Shape {
                what: "rms_norm_q1_0_gemv".to_owned(),
                reason: format!(
                    "a norm weight of {} for rows of {n} (whole Q1_0 blocks, at most \
                     {PROLOGUE_MAX_N}; {PROLOGUE_BYTES} bytes of workgroup memory, the device \
                     has {})",
                    weight.len(),
                    self.gpu.workgroup_storage_bytes()
                ),
            });
        }
        holds("rms_norm_q1_0_gemv input", x, n)?;
        holds("rms_norm_q1_0_gemv output", out, m.n_rows())?;
        let row_groups = m.n_rows().div_ceil(self.gpu.q1_0_tile_rows(n));
        let target = match self
            .gpu
            .cache
            .prologue_workgroups
            .load(std::sync::atomic::Ordering::Relaxed)
        {
            0 => PROLOGUE_WORKGROUPS,
            n => n,
        };
        let tiles = row_groups.div_ceil(target).max(1);
        let mut constants = self.gpu.q1_0_split(m.n_in());
        constants.extend([
            (
                "TILES",
                count("rms_norm_q1_0_gemv row tiles a workgroup", tiles)?,
            ),
            ("N", count("rms_norm_q1_0_gemv width", n)?),
            ("EPS", f64::from(eps)),
        ]);
        self.dispatch(
            &q1_0_shader!(
                self.gpu,
                "q1_0_gemv",
                with "q1_0_sum",
                "rms_scale",
                "q1_0_act_norm",
                "q1_0_out_rows"
            ),
            &constants,
            &[
                &m.bits,
                &m.scales,
                &x.buffer,
                &weight.buffer,
                &out.buffer,
                &m.dims,
            ],
            count("rms_norm_q1_0_gemv workgroups", row_groups.div_ceil(tiles))? as u32,
        )
    }

    /// `x += m · xq`, then `q = quantize(rms_norm(x) · weight)` in `q`'s format (Q8_0, Q8_1 or
    /// Q8_K), x the `m.n_rows()` values of one row, in one dispatch: the residual epilogue,
    /// then the norm in the product's tail — the workgroup that finishes last norms and
    /// quantizes the whole row (`q1_0_out_norm.wgsl`) — the bits of [`Recorder::q1_0_gemv_add`]
    /// then [`Recorder::rms_norm_quantize`]. `q` may be `xq` itself (every workgroup has read it
    /// before the tail writes it). Where the device binds too few storage buffers
    /// ([`Gpu::norm_tail_fits`]) it is an error: record the two.
    #[allow(clippy::too_many_arguments)]
    pub fn q1_0_gemv_add_norm(
        &mut self,
        m: &Q1Matrix,
        xq: &Q8Tensor,
        x: &Tensor,
        weight: &Tensor,
        eps: f32,
        q: &Q8Tensor,
    ) -> Result<(), GpuError> {
        let what = "q1_0_gemv_add_norm";
        let n = m.n_rows();
        let (product, groups) = self.q1_0_binding(m, xq, x)?;
        let kind_ok = matches!(
            q.kind(),
            FormatKind::Q8_0 | FormatKind::Q8_1 | FormatKind::Q8_K
        );
        let in_place = q.words.buffer == xq.words.buffer;
        let fits = in_place || self.gpu.norm_tail_fits();
        if !kind_ok
            || weight.len() != n
            || q.n_in() != n
            || !n.is_multiple_of(q.block())
            || groups > crate::ops::MAX_GROUPS
            || !fits
        {
            return Err(GpuError::Shape {
                what: what.to_owned(),
                reason: format!(
                    "{n} rows, a norm weight of {}, {} values of {:?}                      (takes Q8_0 / Q8_1 / Q8_K, whole blocks), {groups} workgroups (at most                      {}), {TAIL_STORAGE_BUFFERS} storage buffers (the device binds {})",
                    weight.len(),
                    q.n_in(),
                    q.kind(),
                    crate::ops::MAX_GROUPS,
                    self.gpu.device.limits().max_storage_buffers_per_shader_stage
                ),
            });
        }
        let done = self.gpu.norm_tail_done()?;
        // The activation from its own bindings, or (the same tensor) from the output's.
        macro_rules! tail {
            ($act:literal) => {
                match q.kind() {
                    FormatKind::Q8_K => q1_0_shader!(
                        self.gpu,
                        "q1_0_gemv",
                        with "q1_0_sum",
                        "rms_scale",
                        "q8_k_block_wg",
                        $act,
                        "q1_0_out_norm"
                    ),
                    FormatKind::Q8_1 => q1_0_shader!(
                        self.gpu,
                        "q1_0_gemv",
                        with "q1_0_sum",
                        "rms_scale",
                        "q8_1_meta",
                        "q8_0_block_wg",
                        $act,
                        "q1_0_out_norm"
                    ),
                    _ => q1_0_shader!(
                        self.gpu,
                        "q1_0_gemv",
                        with "q1_0_sum",
                        "rms_scale",
                        "q8_0_meta",
                        "q8_0_block_wg",
                        $act,
                        "q1_0_out_norm"
                    ),
                }
            };
        }
        let (shader, act) = if in_place {
            (tail!("q1_0_act_out"), [None, None])
        } else {
            (
                tail!("q1_0_act_storage"),
                [Some(product[2]), Some(product[3])],
            )
        };
        let mut constants = self.gpu.q1_0_split(m.n_in());
        constants.extend([
            ("N", count("q1_0_gemv_add_norm width", n)?),
            ("EPS", f64::from(eps)),
            ("GROUPS", f64::from(groups)),
        ]);
        let buffers = [
            Some(product[0]),
            Some(product[1]),
            act[0],
            act[1],
            Some(&x.buffer),
            Some(product[5]),
            Some(&weight.buffer),
            Some(&q.words.buffer),
            Some(&q.meta.buffer),
            Some(&done),
        ];
        self.dispatch_sparse(&shader, &constants, &buffers, groups)
    }

    /// `h = quantize(silu(gate) · up)` into `h`'s format (Q8_0 or Q8_1), gate and up the two
    /// halves of `m · xq` (a stacked gate|up Q1_0 matrix, the gate's `h.n_in()` rows first), in
    /// one dispatch: SwiGLU and its quantization as the product's epilogue
    /// (`q1_0_out_swiglu.wgsl`, a workgroup a block of h), the bits of [`Recorder::q1_0_gemv`]
    /// then [`Recorder::swiglu_quantize`], the gate|up output never written.
    pub fn q1_0_gemv_swiglu(
        &mut self,
        m: &Q1Matrix,
        xq: &Q8Tensor,
        h: &Q8Tensor,
    ) -> Result<(), GpuError> {
        let what = "q1_0_gemv_swiglu";
        let n_ff = swiglu_rows(what, m, h, self.gpu.q1_0_tile_rows(m.n_in()))?;
        if xq.kind() != FormatKind::Q8_0 || xq.n_in() != m.n_in() {
            return Err(GpuError::Shape {
                what: what.to_owned(),
                reason: format!(
                    "a {:?} activation of {}, rows of {} (takes Q8_0)",
                    xq.kind(),
                    xq.n_in(),
                    m.n_in()
                ),
            });
        }
        let shader = match h.kind() {
            FormatKind::Q8_1 => q1_0_shader!(
                self.gpu,
                "q1_0_gemv",
                with "q1_0_sum",
                "q8_1_meta",
                "q8_0_block_wg",
                "q1_0_act_storage",
                "q1_0_out_swiglu"
            ),
            _ => q1_0_shader!(
                self.gpu,
                "q1_0_gemv",
                with "q1_0_sum",
                "q8_0_meta",
                "q8_0_block_wg",
                "q1_0_act_storage",
                "q1_0_out_swiglu"
            ),
        };
        let mut constants = self.gpu.q1_0_split(m.n_in());
        constants.extend([
            ("TILES", (64 / self.gpu.q1_0_tile_rows(m.n_in())) as f64),
            ("N_FF", count("q1_0_gemv_swiglu values", n_ff)?),
        ]);
        let buffers = [
            &m.bits,
            &m.scales,
            &xq.words.buffer,
            &xq.meta.buffer,
            &h.words.buffer,
            &m.dims,
            &h.meta.buffer,
        ];
        let groups = count("q1_0_gemv_swiglu workgroups", n_ff / 32)? as u32;
        self.dispatch(&shader, &constants, &buffers, groups)
    }

    /// [`Recorder::rms_norm_q1_0_gemv`]'s prologue and [`Recorder::q1_0_gemv_swiglu`]'s
    /// epilogue in one dispatch: `h = quantize(swiglu(m · quantize(rms_norm(x) · weight)))`, the
    /// bits of `rms_norm_quantize`, `q1_0_gemv` and `swiglu_quantize`.
    pub fn rms_norm_q1_0_gemv_swiglu(
        &mut self,
        x: &Tensor,
        weight: &Tensor,
        eps: f32,
        m: &Q1Matrix,
        h: &Q8Tensor,
    ) -> Result<(), GpuError> {
        let what = "rms_norm_q1_0_gemv_swiglu";
        let n_ff = swiglu_rows(what, m, h, self.gpu.q1_0_tile_rows(m.n_in()))?;
        let n = m.n_in();
        if weight.len() != n || !self.gpu.norm_prologue_swiglu_fits(n) {
            return Err(GpuError::Shape {
                what: what.to_owned(),
                reason: format!(
                    "a norm weight of {} for rows of {n} (whole Q1_0 blocks, at most \
                     {PROLOGUE_MAX_N}; {} bytes of workgroup memory, the device has {})",
                    weight.len(),
                    PROLOGUE_BYTES + EPILOGUE_BYTES,
                    self.gpu.workgroup_storage_bytes()
                ),
            });
        }
        holds("rms_norm_q1_0_gemv_swiglu input", x, n)?;
        let shader = match h.kind() {
            FormatKind::Q8_1 => q1_0_shader!(
                self.gpu,
                "q1_0_gemv",
                with "q1_0_sum",
                "q8_1_meta",
                "q8_0_block_wg",
                "rms_scale",
                "q1_0_act_norm",
                "q1_0_out_swiglu"
            ),
            _ => q1_0_shader!(
                self.gpu,
                "q1_0_gemv",
                with "q1_0_sum",
                "q8_0_meta",
                "q8_0_block_wg",
                "rms_scale",
                "q1_0_act_norm",
                "q1_0_out_swiglu"
            ),
        };
        let mut constants = self.gpu.q1_0_split(m.n_in());
        constants.extend([
            ("TILES", (64 / self.gpu.q1_0_tile_rows(m.n_in())) as f64),
            ("N_FF", count("rms_norm_q1_0_gemv_swiglu values", n_ff)?),
            ("N", count("rms_norm_q1_0_gemv_swiglu width", n)?),
            ("EPS", f64::from(eps)),
        ]);
        let buffers = [
            &m.bits,
            &m.scales,
            &x.buffer,
            &weight.buffer,
            &h.words.buffer,
            &m.dims,
            &h.meta.buffer,
        ];
        let groups = count("rms_norm_q1_0_gemv_swiglu workgroups", n_ff / 32)? as u32;
        self.dispatch(&shader, &constants, &buffers, groups)
    }
}

/// The h values of a SwiGLU epilogue on the stacked gate|up matrix `m` into `h`: `m`'s rows are
/// 2 · h's values, in whole Q8_0 / Q8_1 blocks (a workgroup a block: its 32 gate rows, then its 32
/// up rows, in tiles of `tile` rows, a divisor of 32).
fn swiglu_rows(what: &str, m: &Q1Matrix, h: &Q8Tensor, tile: usize) -> Result<usize, GpuError> {
    let n_ff = h.n_in();
    let q8 = matches!(h.kind(), FormatKind::Q8_0 | FormatKind::Q8_1);
    let tiled = tile > 0 && 32 % tile == 0;
    if !q8 || m.n_rows() != 2 * n_ff || !n_ff.is_multiple_of(32) || !tiled {
        return Err(GpuError::Shape {
            what: what.to_owned(),
            reason: format!(
                "{} gate|up rows into {n_ff} values of {:?} in tiles of {tile} rows (takes Q8_0 / \
                 Q8_1, two rows a value, tiles dividing 32)",
                m.n_rows(),
                h.kind()
            ),
        });
    }
    Ok(n_ff)
}
