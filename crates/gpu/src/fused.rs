//! Fused ops: a decode step is bound by its dispatch count (~12 µs each on an H200), not by the
//! bytes it reads, so the chains of a layer that meet in one place run as one dispatch — RMS
//! norm with its Q8_0 quantization, SwiGLU with its quantization, RoPE of q and k with the KV
//! store, and the residual add as the epilogue of the output / down products. Each gives the same
//! bits as the unfused chain (the same expressions, the shared block quantization), which the
//! tests check; Q/K/V and gate/up become one product each through [`Q1Matrix::upload_stacked`].

use oxibonsai_formats::q8_0::QK8_0;
use oxibonsai_formats::FormatKind;

use crate::attention::{q8_0_heads, KvCache};
use crate::device::GpuError;
use crate::elementwise::Rope;
use crate::gemv::Q8Tensor;
use crate::ops::{count, holds, shader, Recorder, Shader, Tensor};
use crate::q1_0::{Q1Kernel, Q1Matrix};

fn q8_0_output(what: &str, q: &Q8Tensor) -> Result<usize, GpuError> {
    if q.kind() != FormatKind::Q8_0 {
        return Err(GpuError::Shape {
            what: what.to_owned(),
            reason: format!("writes Q8_0, not {:?}", q.kind()),
        });
    }
    Ok(q.n_in() / QK8_0)
}

/// Whether [`Recorder::rope_store_attention_q8_0`] takes heads of `head_dim` keys and `head_dim_v`
/// values (at most 512 each, whole Q8_0 blocks of values): the one statement of the fused
/// attention's limits, which the engine's stacking and its step ask before choosing it.
pub fn fused_attention_fits(head_dim: usize, head_dim_v: usize) -> bool {
    head_dim <= 512 && head_dim_v <= 512 && head_dim_v.is_multiple_of(32)
}

impl Recorder<'_> {
    /// `q = Q8_0(rms_norm(x) · weight)` on each of the `q.n_in() / weight.len()` rows: what
    /// [`Recorder::rms_norm`] then [`Recorder::quantize`] give, in one dispatch.
    pub fn rms_norm_q8_0(
        &mut self,
        x: &Tensor,
        weight: &Tensor,
        eps: f32,
        q: &Q8Tensor,
    ) -> Result<(), GpuError> {
        q8_0_output("rms_norm_q8_0", q)?;
        let n = weight.len();
        if n == 0 || !n.is_multiple_of(QK8_0) || !q.n_in().is_multiple_of(n) {
            return Err(GpuError::Shape {
                what: "rms_norm_q8_0".to_owned(),
                reason: format!(
                    "rows of {n} (a multiple of {QK8_0}) do not tile {} values",
                    q.n_in()
                ),
            });
        }
        let rows = q.n_in() / n;
        holds("rms_norm_q8_0 input", x, q.n_in())?;
        // Workgroups a row: 8 blocks each (see the shader).
        let groups = n.div_ceil(8 * QK8_0);
        let constants = [
            ("ROWS", count("rms_norm rows", rows)?),
            ("N", count("rms_norm width", n)?),
            ("EPS", f64::from(eps)),
            ("GROUPS", count("rms_norm workgroups a row", groups)?),
        ];
        self.dispatch(
            &shader!("rms_norm_q8_0", with "q8_0_block_wg"),
            &constants,
            &[&x.buffer, &weight.buffer, &q.words.buffer, &q.meta.buffer],
            count("rms_norm workgroups", rows * groups)? as u32,
        )
    }

    /// `q = Q8_0(silu(gate) · up)` over `n = q.n_in()` values, the gate the first `n` values of
    /// `gate_up` and up the next `n` (a stacked gate / up product's output): [`Recorder::swiglu`]
    /// then [`Recorder::quantize`] in one dispatch.
    pub fn swiglu_q8_0(&mut self, gate_up: &Tensor, q: &Q8Tensor) -> Result<(), GpuError> {
        let blocks = q8_0_output("swiglu_q8_0", q)?;
        holds("swiglu_q8_0 gate and up", gate_up, 2 * q.n_in())?;
        self.dispatch(
            &shader!("swiglu_q8_0", with "q8_0_block_wg"),
            &[("N_BLOCKS", count("swiglu_q8_0 blocks", blocks)?)],
            &[&gate_up.buffer, &q.words.buffer, &q.meta.buffer],
            count("swiglu_q8_0 blocks", blocks.div_ceil(8))? as u32,
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

    /// RoPE, the KV store, attention and the Q8_0 quantization of its output in one dispatch:
    /// [`Recorder::rope_store_kv`] (the same `qkv` layout, `n_rot` rotated) then
    /// [`Recorder::attention_q8_0`], the same bits. Head dimensions up to 512.
    #[allow(clippy::too_many_arguments)]
    pub fn rope_store_attention_q8_0(
        &mut self,
        qkv: &Tensor,
        cos_sin: &Tensor,
        n_head: usize,
        n_rot: usize,
        style: Rope,
        cache: &KvCache,
        step: &Tensor,
        scale: f32,
        out: &Q8Tensor,
        keys: Option<&Tensor>,
    ) -> Result<(), GpuError> {
        let what = "rope_store_attention_q8_0";
        let (hd, hdv, nkv) = (cache.head_dim, cache.head_dim_v, cache.n_head_kv);
        if n_rot == 0 || !n_rot.is_multiple_of(2) || n_rot > hd || !fused_attention_fits(hd, hdv) {
            return Err(GpuError::Shape {
                what: what.to_owned(),
                reason: format!(
                    "{n_rot} rotated values of heads of {hd} / {hdv} (at most 512, values in whole blocks of 32)"
                ),
            });
        }
        q8_0_heads(what, cache, n_head, out)?;
        holds(
            "rope_store_attention_q8_0 q/k/v",
            qkv,
            n_head * hd + nkv * (hd + hdv),
        )?;
        holds("rope_store_attention_q8_0 angles", cos_sin, n_rot)?;
        let extra = [
            ("PAIRS", count("rope pairs", n_rot / 2)?),
            ("NEOX", f64::from(u8::from(style == Rope::Neox))),
        ];
        let mut outs = vec![&out.words.buffer, &out.meta.buffer, &cos_sin.buffer];
        let shader = match keys {
            Some(keys) => {
                holds("rope_store_attention_q8_0 keys", keys, nkv * hd)?;
                outs.push(&keys.buffer);
                shader!(
                    "attention_decode",
                    with "q8_0_block", "rope_pair", "fresh_keys_out", "attention_in_fresh",
                    "attention_out_q8_0"
                )
            }
            None => shader!(
                "attention_decode",
                with "q8_0_block", "rope_pair", "fresh_keys_none", "attention_in_fresh",
                "attention_out_q8_0"
            ),
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
            &shader!("rms_norm_qk"),
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
}
