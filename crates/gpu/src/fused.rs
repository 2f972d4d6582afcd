//! Fused ops: a decode step is bound by its dispatch count (~12 µs each on an H200), not by the
//! bytes it reads, so the chains of a layer that meet in one place run as one dispatch — RMS
//! norm with its quantization to the products' partner format (Q8_0, Q8_1 or Q8_K), SwiGLU with
//! its quantization, RoPE of q and k with the KV
//! store and attention (Qwen3's q/k norms folded in), the residual add as the epilogue of the
//! output / down products (for Q1_0 the RMS norm as a product's prologue and SwiGLU as the gate /
//! up product's epilogue: `q1_0_fused.rs`). Each gives the same
//! bits as the unfused chain (the same expressions, the shared block quantization), which the
//! tests check; Q/K/V and gate/up become one product each through [`Q1Matrix::upload_stacked`].

use oxibonsai_formats::FormatKind;

use crate::attention::{quantized_heads, KvCache};
use crate::device::GpuError;
use crate::elementwise::Rope;
use crate::gemv::{Input, Q8Tensor};
use crate::ops::{count, holds, shader, Recorder, Tensor};
use crate::q1_0::Q1Matrix;

/// The values of a head (and of a packed GQA group's query heads) the fresh input holds in
/// workgroup memory (attention_in_fresh.wgsl's FRESH_MAX).
const FRESH_MAX: usize = 512;

/// Whether [`Recorder::rope_store_attention`] takes heads of `head_dim` keys and `head_dim_v`
/// values (at most 512 each, whole 32-value blocks of values): the one statement of the fused
/// attention's limits, which the engine's stacking and its step ask before choosing it.
pub fn fused_attention_fits(head_dim: usize, head_dim_v: usize) -> bool {
    head_dim <= 512 && head_dim_v <= 512 && head_dim_v.is_multiple_of(32)
}

/// Qwen3's per-head RMS norms of the query and the key heads, taken by
/// [`Recorder::rope_store_attention`] into its dispatch: the weights (a head's values each) and
/// the norms' epsilon.
#[derive(Clone, Copy)]
pub struct QkNorms<'a> {
    pub q: &'a Tensor,
    pub k: &'a Tensor,
    pub eps: f32,
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
    /// [`Recorder::attention_quantized`] (Q8_0, Q8_1 or Q8_K: quantized in the same dispatch), the
    /// same bits. Head dimensions up to 512. With `norms`, `qkv`'s
    /// query and key heads are taken before Qwen3's per-head norms and normed in the dispatch:
    /// the bits of [`Recorder::rms_norm_qk`] (the value heads copied) before it, one dispatch
    /// fewer; `qkv` itself is left as it is.
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
        norms: Option<QkNorms<'_>>,
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
        let mut extra = vec![
            ("PAIRS", count("rope pairs", n_rot / 2)?),
            ("NEOX", f64::from(u8::from(style == Rope::Neox))),
        ];
        // Bindings 5 and 6 the output (f32: 5 alone), 7 the angles, 8 the rotated keys, 9 `qkv`
        // again (rms_scale.wgsl's `x`), 10 and 11 the norms' weights.
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
        }
        outs.push(keys.map(|k| &k.buffer));
        if let Some(norms) = &norms {
            if norms.q.len() != hd || norms.k.len() != hd {
                return Err(GpuError::Shape {
                    what: what.to_owned(),
                    reason: format!(
                        "q/k norms of {} / {} values for heads of {hd}",
                        norms.q.len(),
                        norms.k.len()
                    ),
                });
            }
            outs.extend([
                Some(&qkv.buffer),
                Some(&norms.q.buffer),
                Some(&norms.k.buffer),
            ]);
            extra.extend([
                ("N", count("head dimension", hd)?),
                ("EPS", f64::from(norms.eps)),
            ]);
        }
        // The input pieces (the q/k norms or not, the rotated keys written out or not), then the
        // output piece with Q8_1's meta word.
        macro_rules! fresh {
            ([$($input:literal),*], $($out:literal),*) => {
                shader!(
                    "attention_decode",
                    with $($out,)* "rope_pair", $($input,)* "attention_in_fresh"
                )
            };
        }
        let out_kind = match out {
            Input::F32(_) => None,
            Input::Quantized(q) => Some(q.kind()),
        };
        macro_rules! outputs {
            ($($input:literal),*) => {
                match out_kind {
                    None => fresh!([$($input),*], "attention_out_f32"),
                    Some(FormatKind::Q8_K) => fresh!(
                        [$($input),*],
                        "q8_k_block_wg",
                        "attention_out_q8_k"
                    ),
                    Some(FormatKind::Q8_1) => fresh!(
                        [$($input),*],
                        "q8_1_meta",
                        "q8_0_block",
                        "attention_out_q8_0"
                    ),
                    Some(_) => fresh!(
                        [$($input),*],
                        "q8_0_meta",
                        "q8_0_block",
                        "attention_out_q8_0"
                    ),
                }
            };
        }
        let shader = match (norms.is_some(), keys.is_some()) {
            (false, false) => outputs!("fresh_qk_as_is", "fresh_keys_none"),
            (false, true) => outputs!("fresh_qk_as_is", "fresh_keys_out"),
            (true, false) => outputs!("rms_scale", "fresh_qk_norm", "fresh_keys_none"),
            (true, true) => outputs!("rms_scale", "fresh_qk_norm", "fresh_keys_out"),
        };
        // The fresh input rotates the packed group's query heads side by side into its 512
        // values of workgroup memory: GQA-packed only where they fit.
        let packable = n_head / cache.n_head_kv * cache.head_dim <= FRESH_MAX;
        self.attention_to(
            qkv, cache, step, n_head, scale, &shader, &extra, &outs, packable,
        )
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
        self.q1_0_gemv_with(m, x, out, true)
    }
}
