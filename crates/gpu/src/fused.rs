//! Fused ops: a decode step is bound by its dispatch count (~12 µs each on an H200), not by the
//! bytes it reads, so the chains of a layer that meet in one place run as one dispatch — RMS
//! norm with its quantization to the products' partner format (Q8_0, Q8_1 or Q8_K), SwiGLU with
//! its quantization, RoPE of q and k with the KV
//! store, and the residual add as the epilogue of the output / down products. Each gives the same
//! bits as the unfused chain (the same expressions, the shared block quantization), which the
//! tests check; Q/K/V and gate/up become one product each through [`Q1Matrix::upload_stacked`].

use oxibonsai_formats::q1_0::QK1_0;
use oxibonsai_formats::FormatKind;

use crate::attention::{quantized_heads, KvCache};
use crate::device::{Gpu, GpuError};
use crate::elementwise::Rope;
use crate::gemv::{Input, Q8Tensor};
use crate::ops::{count, holds, shader, Recorder, Shader, Tensor};
use crate::q1_0::{Q1Kernel, Q1Matrix};

/// Whether [`Recorder::rope_store_attention`] takes heads of `head_dim` keys and `head_dim_v`
/// values (at most 512 each, whole 32-value blocks of values): the one statement of the fused
/// attention's limits, which the engine's stacking and its step ask before choosing it.
pub fn fused_attention_fits(head_dim: usize, head_dim_v: usize) -> bool {
    head_dim <= 512 && head_dim_v <= 512 && head_dim_v.is_multiple_of(32)
}

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
    /// `q = quantize(rms_norm(x) · weight)` on each of the `q.n_in() / weight.len()` rows, in
    /// `q`'s format (Q8_0, Q8_1 or Q8_K): what [`Recorder::rms_norm`] then [`Recorder::quantize`]
    /// give, in one dispatch.
    pub fn rms_norm_quantize(
        &mut self,
        x: &Tensor,
        weight: &Tensor,
        eps: f32,
        q: &Q8Tensor,
    ) -> Result<(), GpuError> {
        let n = weight.len();
        let block = q.block();
        if n == 0 || !n.is_multiple_of(block) || !q.n_in().is_multiple_of(n) {
            return Err(GpuError::Shape {
                what: "rms_norm_quantize".to_owned(),
                reason: format!(
                    "rows of {n} (a multiple of {block}, {:?}) do not tile {} values",
                    q.kind(),
                    q.n_in()
                ),
            });
        }
        let rows = q.n_in() / n;
        holds("rms_norm_quantize input", x, q.n_in())?;
        // Workgroups a row: 256 values each (see the shader).
        let groups = n.div_ceil(256);
        let constants = [
            ("ROWS", count("rms_norm rows", rows)?),
            ("N", count("rms_norm width", n)?),
            ("EPS", f64::from(eps)),
            ("GROUPS", count("rms_norm workgroups a row", groups)?),
        ];
        let shader = match q.kind() {
            FormatKind::Q8_K => shader!("rms_norm_quantize", with "rms_scale", "q8_k_block_wg"),
            FormatKind::Q8_1 => {
                shader!("rms_norm_quantize", with "rms_scale", "q8_1_meta", "q8_0_block_wg")
            }
            _ => shader!("rms_norm_quantize", with "rms_scale", "q8_0_meta", "q8_0_block_wg"),
        };
        self.dispatch(
            &shader,
            &constants,
            &[&x.buffer, &weight.buffer, &q.words.buffer, &q.meta.buffer],
            count("rms_norm workgroups", rows * groups)? as u32,
        )
    }

    /// `q = quantize(silu(gate) · up)` over `n = q.n_in()` values in `q`'s format (Q8_0, Q8_1
    /// or Q8_K), the gate the first `n` values of `gate_up` and up the next `n` (a stacked gate /
    /// up product's output): [`Recorder::swiglu`] then [`Recorder::quantize`] in one dispatch.
    pub fn swiglu_quantize(&mut self, gate_up: &Tensor, q: &Q8Tensor) -> Result<(), GpuError> {
        let n = q.n_in();
        holds("swiglu_quantize gate and up", gate_up, 2 * n)?;
        let shader = match q.kind() {
            FormatKind::Q8_K => shader!("swiglu_quantize", with "q8_k_block_wg"),
            FormatKind::Q8_1 => shader!("swiglu_quantize", with "q8_1_meta", "q8_0_block_wg"),
            _ => shader!("swiglu_quantize", with "q8_0_meta", "q8_0_block_wg"),
        };
        self.dispatch(
            &shader,
            &[("N", count("swiglu_quantize values", n)?)],
            &[&gate_up.buffer, &q.words.buffer, &q.meta.buffer],
            count("swiglu_quantize workgroups", n.div_ceil(256))? as u32,
        )
    }

    /// One token's RoPE and KV store in one dispatch. `qkv` holds `n_head` query heads, then the
    /// cache's key heads, then its value heads (a stacked Q/K/V product's output); the queries
    /// are rotated in place, the keys rotated into the cache and the values copied there at the
    /// position `step[0]` — what [`Recorder::rope`] on q and k then [`Recorder::store_kv`] give.
    /// `cos_sin` holds the token's `n_rot / 2` (cos, sin) pairs.
    #[allow(clippy::too_many_arguments)]
    pub fn rope_store_kv(
        &mut self,
        qkv: &Tensor,
        cos_sin: &Tensor,
        n_head: usize,
        n_rot: usize,
        style: Rope,
        cache: &KvCache,
        step: &Tensor,
    ) -> Result<(), GpuError> {
        let (hd, hdv, nkv) = (cache.head_dim, cache.head_dim_v, cache.n_head_kv);
        if n_rot == 0 || !n_rot.is_multiple_of(2) || n_rot > hd {
            return Err(GpuError::Shape {
                what: "rope_store_kv".to_owned(),
                reason: format!("{n_rot} rotated values of a {hd}-value head"),
            });
        }
        let pairs = n_rot / 2;
        holds("rope_store_kv q/k/v", qkv, n_head * hd + nkv * (hd + hdv))?;
        holds("rope_store_kv angles", cos_sin, n_rot)?;
        holds("rope_store_kv step", step, 1)?;
        let per_row = |d: usize| if cache.f16 { d / 2 } else { d };
        let invocations = n_head * pairs + nkv * (per_row(hd) + per_row(hdv));
        let constants = [
            ("N_HEAD", count("query heads", n_head)?),
            ("N_HEAD_KV", count("KV heads", nkv)?),
            ("HEAD_DIM", count("head dimension", hd)?),
            ("HEAD_DIM_V", count("value head dimension", hdv)?),
            ("PAIRS", count("rope pairs", pairs)?),
            ("NEOX", f64::from(u8::from(style == Rope::Neox))),
            ("N_CTX", count("KV positions", cache.n_ctx)?),
            ("KV_F16", f64::from(u8::from(cache.f16))),
        ];
        self.dispatch(
            &shader!("rope_kv_store", with "rope_pair"),
            &constants,
            &[
                &qkv.buffer,
                &cos_sin.buffer,
                &step.buffer,
                &cache.k.buffer,
                &cache.v.buffer,
            ],
            count("rope_store_kv", invocations.div_ceil(256))? as u32,
        )
    }

    /// RoPE, the KV store and attention in one dispatch: [`Recorder::rope_store_kv`] (the same
    /// `qkv` layout, `n_rot` rotated) then [`Recorder::attention`] into `out` as f32, or
    /// [`Recorder::attention_quantized`] (Q8_0 or Q8_1: quantized in the same dispatch), the
    /// same bits. Q8_K's blocks span heads, which a workgroup a head cannot quantize: take the f32
    /// output and [`Recorder::quantize`] it. Head dimensions up to 512.
    #[allow(clippy::too_many_arguments)]
    pub fn rope_store_attention(
        &mut self,
        qkv: &Tensor,
        cos_sin: &Tensor,
        n_head: usize,
        n_rot: usize,
        style: Rope,
        cache: &KvCache,
        step: &Tensor,
        scale: f32,
        out: Input<'_>,
        keys: Option<&Tensor>,
    ) -> Result<(), GpuError> {
        let what = "rope_store_attention";
        let (hd, hdv, nkv) = (cache.head_dim, cache.head_dim_v, cache.n_head_kv);
        if n_rot == 0 || !n_rot.is_multiple_of(2) || n_rot > hd || !fused_attention_fits(hd, hdv) {
            return Err(GpuError::Shape {
                what: what.to_owned(),
                reason: format!(
                    "{n_rot} rotated values of heads of {hd} / {hdv} (at most 512, values in whole blocks of 32)"
                ),
            });
        }
        holds(
            "rope_store_attention q/k/v",
            qkv,
            n_head * hd + nkv * (hd + hdv),
        )?;
        holds("rope_store_attention angles", cos_sin, n_rot)?;
        let extra = [
            ("PAIRS", count("rope pairs", n_rot / 2)?),
            ("NEOX", f64::from(u8::from(style == Rope::Neox))),
        ];
        // Bindings 5 and 6 the output (f32: 5 alone), 7 the angles, 8 the rotated keys.
        let mut outs = match out {
            Input::F32(out) => {
                holds("rope_store_attention output", out, n_head * hdv)?;
                vec![Some(&out.buffer), None]
            }
            Input::Quantized(q) => {
                quantized_heads(what, cache, n_head, q)?;
                vec![Some(&q.words.buffer), Some(&q.meta.buffer)]
            }
        };
        outs.push(Some(&cos_sin.buffer));
        if let Some(keys) = keys {
            holds("rope_store_attention keys", keys, nkv * hd)?;
            outs.push(Some(&keys.buffer));
        }
        // The output piece, Q8_1's meta word, and whether the rotated keys are written out.
        macro_rules! fresh {
            ($keys:literal, $($out:literal),*) => {
                shader!("attention_decode", with $($out,)* "rope_pair", $keys, "attention_in_fresh")
            };
        }
        let q1 = matches!(out, Input::Quantized(q) if q.kind() == FormatKind::Q8_1);
        let shader = match (out, q1, keys.is_some()) {
            (Input::F32(_), _, true) => fresh!("fresh_keys_out", "attention_out_f32"),
            (Input::F32(_), _, false) => fresh!("fresh_keys_none", "attention_out_f32"),
            (Input::Quantized(_), true, true) => {
                fresh!(
                    "fresh_keys_out",
                    "q8_1_meta",
                    "q8_0_block",
                    "attention_out_q8_0"
                )
            }
            (Input::Quantized(_), true, false) => {
                fresh!(
                    "fresh_keys_none",
                    "q8_1_meta",
                    "q8_0_block",
                    "attention_out_q8_0"
                )
            }
            (Input::Quantized(_), false, true) => {
                fresh!(
                    "fresh_keys_out",
                    "q8_0_meta",
                    "q8_0_block",
                    "attention_out_q8_0"
                )
            }
            (Input::Quantized(_), false, false) => {
                fresh!(
                    "fresh_keys_none",
                    "q8_0_meta",
                    "q8_0_block",
                    "attention_out_q8_0"
                )
            }
        };
        self.attention_to(qkv, cache, step, n_head, scale, &shader, &extra, &outs)
    }

    /// Qwen3's per-head RMS norms on a stacked Q/K/V product's output `x` in one dispatch:
    /// `n_q` query heads with `wq`, then `n_k` key heads with `wk` (heads of `wq.len()`), into
    /// the same places of `y`, and the `tail` values after them (the value heads) copied — the
    /// bits of [`Recorder::rms_norm`] on the query and the key heads.
    #[allow(clippy::too_many_arguments)]
    pub fn rms_norm_qk(
        &mut self,
        x: &Tensor,
        wq: &Tensor,
        wk: &Tensor,
        eps: f32,
        n_q: usize,
        n_k: usize,
        tail: usize,
        y: &Tensor,
    ) -> Result<(), GpuError> {
        let n = wq.len();
        if n == 0 || wk.len() != n {
            return Err(GpuError::Shape {
                what: "rms_norm_qk".to_owned(),
                reason: format!("query heads of {n} and key heads of {}", wk.len()),
            });
        }
        let need = (n_q + n_k).saturating_mul(n).saturating_add(tail);
        holds("rms_norm_qk input", x, need)?;
        holds("rms_norm_qk output", y, need)?;
        let constants = [
            ("ROWS_Q", count("query heads", n_q)?),
            ("ROWS_K", count("key heads", n_k)?),
            ("N", count("head dimension", n)?),
            ("EPS", f64::from(eps)),
            ("TAIL", count("values copied", tail)?),
        ];
        let groups = count("rms_norm_qk workgroups", n_q + n_k + tail.div_ceil(256))? as u32;
        self.dispatch(
            &shader!("rms_norm_qk", with "rms_scale"),
            &constants,
            &[&x.buffer, &wq.buffer, &wk.buffer, &y.buffer],
            groups,
        )
    }

    /// `out += m · x` for a Q1_0 matrix: the product with the residual add as its epilogue
    /// ([`Recorder::q1_0_gemv`] then [`Recorder::add`] in one dispatch, the same bits).
    pub fn q1_0_gemv_add(
        &mut self,
        m: &Q1Matrix,
        x: &Q8Tensor,
        out: &Tensor,
    ) -> Result<(), GpuError> {
        let (buffers, groups) = self.q1_0_binding(m, x, out)?;
        let shader = Shader {
            name: "q1_0_gemv",
            source: concat!(
                include_str!("../shaders/q1_0_sum.wgsl"),
                include_str!("../shaders/q1_0_act_storage.wgsl"),
                include_str!("../shaders/q1_0_out_rows.wgsl"),
                include_str!("../shaders/q1_0_gemv.wgsl")
            ),
        };
        let constants = [
            ("LANES", f64::from(Q1Kernel::DEFAULT_LANES)),
            ("R", f64::from(Q1Kernel::DEFAULT_ROWS)),
            ("ACCUM", 1.0),
        ];
        self.dispatch(&shader, &constants, &buffers, groups)
    }

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
        let rows_per_group = (Q1Kernel::DEFAULT_ROWS * (256 / Q1Kernel::DEFAULT_LANES)) as usize;
        let row_groups = m.n_rows().div_ceil(rows_per_group);
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
        let constants = [
            ("LANES", f64::from(Q1Kernel::DEFAULT_LANES)),
            ("R", f64::from(Q1Kernel::DEFAULT_ROWS)),
            (
                "TILES",
                count("rms_norm_q1_0_gemv row tiles a workgroup", tiles)?,
            ),
            ("N", count("rms_norm_q1_0_gemv width", n)?),
            ("EPS", f64::from(eps)),
        ];
        self.dispatch(
            &shader!(
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
        let n_ff = swiglu_rows(what, m, h)?;
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
            FormatKind::Q8_1 => shader!(
                "q1_0_gemv",
                with "q1_0_sum",
                "q8_1_meta",
                "q8_0_block_wg",
                "q1_0_act_storage",
                "q1_0_out_swiglu"
            ),
            _ => shader!(
                "q1_0_gemv",
                with "q1_0_sum",
                "q8_0_meta",
                "q8_0_block_wg",
                "q1_0_act_storage",
                "q1_0_out_swiglu"
            ),
        };
        let constants = [
            ("LANES", f64::from(Q1Kernel::DEFAULT_LANES)),
            ("R", f64::from(Q1Kernel::DEFAULT_ROWS)),
            ("TILES", 4.0),
            ("N_FF", count("q1_0_gemv_swiglu values", n_ff)?),
        ];
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
        let n_ff = swiglu_rows(what, m, h)?;
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
            FormatKind::Q8_1 => shader!(
                "q1_0_gemv",
                with "q1_0_sum",
                "q8_1_meta",
                "q8_0_block_wg",
                "rms_scale",
                "q1_0_act_norm",
                "q1_0_out_swiglu"
            ),
            _ => shader!(
                "q1_0_gemv",
                with "q1_0_sum",
                "q8_0_meta",
                "q8_0_block_wg",
                "rms_scale",
                "q1_0_act_norm",
                "q1_0_out_swiglu"
            ),
        };
        let constants = [
            ("LANES", f64::from(Q1Kernel::DEFAULT_LANES)),
            ("R", f64::from(Q1Kernel::DEFAULT_ROWS)),
            ("TILES", 4.0),
            ("N_FF", count("rms_norm_q1_0_gemv_swiglu values", n_ff)?),
            ("N", count("rms_norm_q1_0_gemv_swiglu width", n)?),
            ("EPS", f64::from(eps)),
        ];
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
/// 2 · h's values, in whole Q8_0 / Q8_1 blocks (a workgroup a block; the default split's 16-row
/// tiles, four a block).
fn swiglu_rows(what: &str, m: &Q1Matrix, h: &Q8Tensor) -> Result<usize, GpuError> {
    let n_ff = h.n_in();
    let tile = (Q1Kernel::DEFAULT_ROWS * (256 / Q1Kernel::DEFAULT_LANES)) as usize;
    let q8 = matches!(h.kind(), FormatKind::Q8_0 | FormatKind::Q8_1);
    if !q8 || m.n_rows() != 2 * n_ff || !n_ff.is_multiple_of(32) || 32 != 2 * tile {
        return Err(GpuError::Shape {
            what: what.to_owned(),
            reason: format!(
                "{} gate|up rows into {n_ff} values of {:?} (takes Q8_0 / Q8_1, two rows a value)",
                m.n_rows(),
                h.kind()
            ),
        });
    }
    Ok(n_ff)
}
