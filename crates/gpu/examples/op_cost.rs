//! Where a fused decode step's time goes, op by op: each fused op of a Bonsai-8B-shaped layer
//! (`decode_step`'s `fused` mode) recorded `N` times into one submission on the same buffers, so
//! the time per dispatch of each kind shows which kernels — not the dispatch count — make the
//! step slow. The products report the weight bytes they read per second. Also: attention at
//! positions 64, 1024 and 4096 of an 8192-position cache, three ways — split over the positions
//! in use (`Recorder::set_attention_positions`, what an engine records), split with chunk slots
//! for the whole cache (what the idle ones cost), and one chunk (one workgroup) a head
//! (`Gpu::set_max_attention_splits(1)`: what the split buys) — split with Qwen3's q/k norms in
//! the dispatch (`"split_qk_norms"`, against `"split"` plus `rms_norm_qk`, the dispatch it
//! saves), and split into
//! Q8_K (`rope_store_attention_q8_k`, against the Q8_0 one plus `quantize_q8_k_att_out`, the
//! dispatch it saves a TQ2_0 / K-quant layer), and the 8B's (q/k norms, Q8_0) by each attention
//! kernel setting (`"variant": "attn=…"`, `Gpu::set_attention_kernel`; `"attention_kernel"` on
//! every attention line says the one it ran) — and an 8-element add (the bare
//! cost of a dispatch; `add_8_independent`: the same with each add on its own tensor, no
//! dependency between them, so the difference is the barrier). The Q8_K-partnered step's own
//! (TQ2_0, the K-quants): RMS norm and SwiGLU with Q8_K, and the attention output's Q8_K
//! quantization, a dispatch of its own. The prompt's
//! products too: each matrix-matrix product (`Recorder::q1_0_gemm` / `q1_0_gemm_add`, the
//! batched prompt pass's) at T = 2 (several sequences' decode step), 8, 32, 64 and 128 tokens
//! (`"tokens"`; its `us_per_token` against the gemv's `us_per_dispatch`) by each kernel
//! (`"kernel"`): the register tiles `tile_ROWSxTOKENS` (`Gpu::set_gemm_tile`; the engine's default
//! is `GemmTile::DEFAULT`; a `d` after it: the tile reading the activation directly) and the
//! gemv-exact kernel (`set_gemm_tile(None)`) in its two loop orders (`exact_tile_inner`,
//! `exact_tokens_outer`: `Gpu::set_gemm_tokens_outer`; the latter at T ≤ 32 only); and the gate /
//! up shape as Q4_0 (`gemm_q4_0_gate_up_tT`: the Q8_0-partnered tile, `gemm_q8_tile.wgsl`, against
//! `gemm_rows.wgsl`, `exact_tile_inner`). Where the device has timestamps, each line also gives
//! the device's own time per dispatch (`device_us_per_dispatch`, `Gpu::timed_recorder`).
//! The TQ2_0 products (`tq2_…`: the ternary Bonsai's Q/K/V and gate/up stacked, O and down with
//! the residual add; gemv and gemm at T = 8 and 32) with each kernel (`"tq2_kernel"`:
//! `Gpu::set_tq2_kernel` — `old`, the file-layout kernel, and splits `LANESxROWS` of the
//! quarter-block one; the gemms for the old kernel and three splits).
//! The norm as the product's prologue (`rms_norm_gemv_qkv`, `rms_norm_gemv_gate_up`:
//! `Recorder::rms_norm_q1_0_gemv`, against `rms_norm_q8_0` + `gemv_qkv` / `gemv_gate_up`) at
//! several counts of workgroups (`"prologue_workgroups"`, 0 the default); SwiGLU + Q8_0 as the
//! gate|up product's epilogue (`gemv_gate_up_swiglu_q8_0`, and with the norm's prologue too
//! `rms_norm_gemv_gate_up_swiglu_q8_0`: the whole FFN front half in one dispatch). The norm in
//! the residual product's tail (`gemv_o_add_norm_q8_0`, `…_in_place`, `gemv_down_add_norm_q8_0`:
//! `Recorder::q1_0_gemv_add_norm`, against `gemv_o_add` / `gemv_down_add` + `rms_norm_q8_0`).
//! The Q1_0 products' split sweep (`q1sweep_…`: Q/K/V, O + residual, gate|up, gate|up with the
//! SwiGLU epilogue where the split's tile divides 32, down + residual) for every lanes
//! (8 .. 128) × rows an invocation (1, 2, 4, 8) × lane sum (`"q1_split"`: `LxR_tree`,
//! `LxR_subgroup`; `Gpu::set_q1_0_lanes` / `_rows` / `_reduce`), every other op with the
//! defaults; with it (FILTER `q1sweep`), `q1sweep_check` lines: each subgroup split's bits
//! against its tree's on the device.
//!
//! usage: cargo run --release -p oxibonsai-gpu --example op_cost [-- SHAPE N REPS [FILTER]]
//! SHAPE: 8b (default) | 1.7b | tiny; FILTER: only the ops whose name contains it (e.g. `gemm`,
//! `tq2`).
//! Prints one JSON line per op.

#[path = "../tests/common/mod.rs"]
#[allow(dead_code)] // the CPU's product is the tests' business
mod common;

use common::{random_q1_0, Rng};
use oxibonsai_formats::FormatKind;
use oxibonsai_gpu::{
    AttentionKernel, GemmTile, Gpu, Input, KvCache, Matrix, Q1Kernel, Q1Matrix, Q1Reduce, Q8Tensor,
    QkNorms, Recorder, Rope, Tq2Kernel, MAX_ATTENTION_SPLITS,
};

type Op<'a> = Box<dyn Fn(&mut Recorder<'_>) -> Result<(), oxibonsai_gpu::GpuError> + 'a>;

/// The attention kernel settings measured (`AttentionKernel::parse`'s text after `attn=`): the
/// default, each change alone, and the combinations (GQA packing with the others).
const ATTENTION_KERNELS: [&str; 13] = [
    "attn=default",
    "attn=tile32",
    "attn=min1",
    "attn=tile32,min1",
    "attn=unroll",
    "attn=tree",
    "attn=unroll,tree",
    "attn=min1,unroll,tree",
    "attn=tile32,min1,unroll,tree",
    "attn=gqa",
    "attn=tile32,gqa",
    "attn=min1,unroll,tree,gqa",
    "attn=tile32,min1,unroll,tree,gqa",
];

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let name = args.next().unwrap_or_else(|| "8b".to_owned());
    let n: usize = args.next().map(|a| a.parse()).transpose()?.unwrap_or(36);
    let reps: usize = args.next().map(|a| a.parse()).transpose()?.unwrap_or(12);
    let filter = args.next().unwrap_or_default();
    let (n_embd, n_ff, n_head, n_head_kv, hd) = match name.as_str() {
        "8b" => (4096, 12288, 32, 8, 128),
        "1.7b" => (2048, 6144, 16, 8, 128),
        "tiny" => (512, 1536, 8, 2, 64),
        other => return Err(format!("unknown shape {other:?}: 8b, 1.7b or tiny").into()),
    };
    let (qd, kvd) = (n_head * hd, n_head_kv * hd);
    let gpu = Gpu::new()?;
    let mut rng = Rng(5);
    let mut rows = |n_rows: usize, n_in: usize| random_q1_0(&mut rng, n_rows, n_in);
    let (q, k, v) = (rows(qd, n_embd), rows(kvd, n_embd), rows(kvd, n_embd));
    let (o, gate, up, down) = (
        rows(n_embd, qd),
        rows(n_ff, n_embd),
        rows(n_ff, n_embd),
        rows(n_embd, n_ff),
    );
    let qkv = Q1Matrix::upload_stacked(&gpu, &[&q, &k, &v], n_embd)?;
    let gate_up = Q1Matrix::upload_stacked(&gpu, &[&gate, &up], n_embd)?;
    // The gate / up shape as Q4_0 (random codes, scales in [0.001, 0.1)): the Q8_0-partnered
    // gemm's register tile against `gemm_rows.wgsl`.
    let q4_0_rows = {
        let mut rng = Rng(9);
        let blocks = 2 * n_ff * n_embd / 32;
        let mut bytes = Vec::with_capacity(blocks * 18);
        for _ in 0..blocks {
            let d = half::f16::from_f32(0.001 + 0.099 * (rng.unit() * 0.5 + 0.5));
            bytes.extend_from_slice(&d.to_le_bytes());
            bytes.extend_from_slice(&rng.next().to_le_bytes());
            bytes.extend_from_slice(&rng.next().to_le_bytes());
        }
        bytes
    };
    let gate_up_q4_0 = Matrix::upload(
        &gpu,
        oxibonsai_formats::FormatKind::Q4_0,
        &q4_0_rows,
        2 * n_ff,
        n_embd,
    )?;
    let q4_0_bytes = q4_0_rows.len() as u64;
    drop(q4_0_rows);
    let o = Q1Matrix::upload(&gpu, &o, n_embd, qd)?;
    let down = Q1Matrix::upload(&gpu, &down, n_embd, n_ff)?;
    // Room for the deepest position timed (the cache's size also sets the chunk slots a head).
    let n_ctx = 8192;
    let cache = KvCache::new(&gpu, n_head_kv, hd, hd, n_ctx, true)?;
    let mut rng = Rng(6);
    let x0: Vec<f32> = (0..n_embd).map(|_| rng.unit()).collect();
    let x = gpu.upload("x", &x0)?;
    let norm = gpu.upload("norm", &vec![1.0f32; n_embd])?;
    let xq = Q8Tensor::new(&gpu, n_embd)?;
    let qkv_out = gpu.tensor("qkv", qd + 2 * kvd)?;
    let aq = Q8Tensor::new(&gpu, qd)?;
    let gu = gpu.tensor("gate_up", 2 * n_ff)?;
    let gq = Q8Tensor::new(&gpu, n_ff)?;
    // The Q8_K-partnered step's (TQ2_0, the K-quants) activations, and its attention output as
    // f32 (quantized by a dispatch of its own, against the attention quantizing it).
    let q8_k = |n: usize| Q8Tensor::with_kind(&gpu, oxibonsai_formats::FormatKind::Q8_K, n);
    let (xq_k, aq_k, gq_k) = (q8_k(n_embd)?, q8_k(qd)?, q8_k(n_ff)?);
    let att = gpu.tensor("attention", qd)?;
    let step = gpu.tensor("step", 1)?;
    let cos_sin = gpu.upload("cos_sin", &vec![0.5f32; hd])?;
    // Qwen3's q/k norms: apart (`rms_norm_qk`, into `qkv_normed`) or in the attention's dispatch.
    let (q_norm, k_norm) = (
        gpu.upload("q norm", &vec![1.0f32; hd])?,
        gpu.upload("k norm", &vec![1.0f32; hd])?,
    );
    let qkv_normed = gpu.tensor("qkv normed", qd + 2 * kvd)?;
    let small = gpu.upload("small", &[1.0f32; 8])?;
    let small2 = gpu.upload("small2", &[0.0f32; 8])?;
    // The bare dispatch without a dependency: each add writes its own tensor (no hazard between
    // consecutive dispatches), against `add_8`'s chain on one tensor — what the barrier costs.
    let apart = (0..n)
        .map(|i| gpu.upload(&format!("apart {i}"), &[1.0f32; 8]))
        .collect::<Result<Vec<_>, _>>()?;
    let next_apart = std::cell::Cell::new(0usize);
    let scale = 1.0 / (hd as f32).sqrt();
    // The gemm's token-major tensors, for T = 2 (several sequences' decode step), 8, 32, 64 and
    // 128.
    let batch = |t: usize| -> Result<_, oxibonsai_gpu::GpuError> {
        Ok((
            t,
            Q8Tensor::new(&gpu, t * n_embd)?,
            gpu.tensor("qkv rows", t * (qd + 2 * kvd))?,
            Q8Tensor::new(&gpu, t * qd)?,
            gpu.tensor("x rows", t * n_embd)?,
            gpu.tensor("gate_up rows", t * 2 * n_ff)?,
            Q8Tensor::new(&gpu, t * n_ff)?,
        ))
    };
    let batches = [batch(2)?, batch(8)?, batch(32)?, batch(64)?, batch(128)?];
    // The gemm's kernels: the register tiles, then the gemv-exact kernel's two loop orders.
    let tiles = [
        "32x32", "64x32", "128x16", "32x64", "64x64", "32x32d", "64x32d", "32x64d",
    ];
    let kernels = |t: usize| {
        let exact: &[&str] = if t <= 32 {
            &["exact_tile_inner", "exact_tokens_outer"]
        } else {
            &["exact_tile_inner"]
        };
        tiles
            .iter()
            .map(|tile| format!("tile_{tile}"))
            .chain(exact.iter().map(|e| (*e).to_owned()))
            .collect::<Vec<String>>()
    };
    // TQ2_0 matrices of the same shapes (random codes 0 ..= 2, scales in [0.001, 0.1)), in the
    // old kernel's layout and in quarters, and the gemms' Q8_K activations.
    let mut rng = Rng(7);
    let mut tq2_rows = |n_rows: usize, n_in: usize| -> Vec<u8> {
        let mut out = Vec::with_capacity(n_rows * n_in / 256 * 66);
        for _ in 0..n_rows * n_in / 256 {
            for _ in 0..64 {
                out.push((0..4).fold(0u8, |b, i| b | ((rng.next() % 3) as u8) << (2 * i)));
            }
            let d = half::f16::from_f32(0.001 + 0.099 * (rng.unit() * 0.5 + 0.5));
            out.extend_from_slice(&d.to_le_bytes());
        }
        out
    };
    let tq2_shapes = [
        ("qkv", qd + 2 * kvd, n_embd),
        ("o_add", n_embd, qd),
        ("gate_up", 2 * n_ff, n_embd),
        ("down_add", n_embd, n_ff),
    ];
    let tq2_data: Vec<Vec<u8>> = tq2_shapes.iter().map(|&(_, r, i)| tq2_rows(r, i)).collect();
    let tq2_upload = |kernel: Tq2Kernel| -> Result<Vec<Matrix>, oxibonsai_gpu::GpuError> {
        gpu.set_tq2_kernel(kernel);
        let m = tq2_shapes
            .iter()
            .zip(&tq2_data)
            .map(|(&(_, r, i), d)| Matrix::upload(&gpu, FormatKind::TQ2_0, d, r, i))
            .collect();
        gpu.set_tq2_kernel(Tq2Kernel::DEFAULT);
        m
    };
    let (tq2_old, tq2_new) = (tq2_upload(Tq2Kernel::Old)?, tq2_upload(Tq2Kernel::DEFAULT)?);
    let tq2_acts: Vec<(usize, [Q8Tensor; 3])> = [8usize, 32]
        .iter()
        .map(|&t| Ok((t, [q8_k(t * n_embd)?, q8_k(t * qd)?, q8_k(t * n_ff)?])))
        .collect::<Result<_, oxibonsai_gpu::GpuError>>()?;

    // `in_use`: the positions the recorder is told attention reads (else slots for the cache);
    // `fold`: Qwen3's q/k norms in the dispatch; `q8_k`: its output Q8_K (else Q8_0).
    let attention = |in_use: Option<usize>, fold: bool, q8_k: bool| -> Op<'_> {
        let (qkv_out, cos_sin, cache, step) = (&qkv_out, &cos_sin, &cache, &step);
        let aq = if q8_k { &aq_k } else { &aq };
        let norms = fold.then_some(QkNorms {
            q: &q_norm,
            k: &k_norm,
            eps: 1e-6,
        });
        Box::new(move |r: &mut Recorder<'_>| {
            if let Some(n) = in_use {
                r.set_attention_positions(n);
            }
            r.rope_store_attention(
                qkv_out,
                cos_sin,
                n_head,
                hd,
                Rope::Neox,
                cache,
                step,
                scale,
                Input::Quantized(aq),
                None,
                norms,
            )
        })
    };
    // The Q1_0 products' split sweep (`q1sweep_…`, variant `q1_LANESxROWS_REDUCE`): lanes a row
    // set, rows an invocation and lane sum (`Gpu::set_q1_0_lanes` / `_rows` / `_reduce`; the
    // subgroup ones where the device has `subgroups`). Every other op runs with the defaults.
    let reduces: &[&str] = if gpu.report().subgroup_sizes.is_some() {
        &["tree", "subgroup"]
    } else {
        &["tree"]
    };
    let sweep: Vec<String> = Q1Kernel::LANE_CHOICES
        .iter()
        .flat_map(|lanes| {
            [1, 2, 4, 8].into_iter().flat_map(move |rows| {
                reduces
                    .iter()
                    .map(move |reduce| format!("q1_{lanes}x{rows}_{reduce}"))
            })
        })
        .collect();
    // (name, weight bytes read by one dispatch, the op, the position it runs at, the cap on
    // attention's chunks a head, which attention variant)
    let split = MAX_ATTENTION_SPLITS;
    let mut ops: Vec<(String, u64, Op<'_>, u32, usize, &str)> = vec![
        (
            "add_8".into(),
            0,
            Box::new(|r| r.add(&small, &small2, 8)),
            0,
            split,
            "",
        ),
        (
            "add_8_independent".into(),
            0,
            Box::new(|r| {
                let i = next_apart.get();
                next_apart.set((i + 1) % apart.len());
                r.add(&apart[i], &small2, 8)
            }),
            0,
            split,
            "",
        ),
        (
            "rms_norm_q8_0".into(),
            0,
            Box::new(|r| r.rms_norm_quantize(&x, &norm, 1e-6, &xq)),
            0,
            split,
            "",
        ),
        (
            "gemv_qkv".into(),
            qkv.bytes(),
            Box::new(|r| r.q1_0_gemv(&qkv, &xq, &qkv_out)),
            0,
            split,
            "",
        ),
        (
            "rms_norm_q8_k".into(),
            0,
            Box::new(|r| r.rms_norm_quantize(&x, &norm, 1e-6, &xq_k)),
            0,
            split,
            "",
        ),
        (
            "quantize_q8_k_att_out".into(),
            0,
            Box::new(|r| r.quantize(&att, &aq_k)),
            0,
            split,
            "",
        ),
        (
            "rms_norm_qk".into(),
            0,
            Box::new(|r| {
                r.rms_norm_qk(
                    &qkv_out,
                    &q_norm,
                    &k_norm,
                    1e-6,
                    n_head,
                    n_head_kv,
                    kvd,
                    &qkv_normed,
                )
            }),
            0,
            split,
            "",
        ),
        (
            "swiglu_q8_k".into(),
            0,
            Box::new(|r| r.swiglu_quantize(&gu, &gq_k)),
            0,
            split,
            "",
        ),
    ];
    // Split over the positions in use (what an engine records), split with slots for the whole
    // cache (most idle), and one chunk a head (one workgroup a head, as before the split); and
    // split with the q/k norms in the dispatch (against `split` + `rms_norm_qk`); the same into
    // Q8_K (`rope_store_attention_q8_k`, against `split` + `quantize_q8_k_att_out`).
    for pos in [64u32, 1024, 4096] {
        let in_use = Some(pos as usize + 1);
        let variants = [
            (split, in_use, false, false, "split"),
            (split, in_use, true, false, "split_qk_norms"),
            (split, in_use, false, true, "split"),
            (split, in_use, true, true, "split_qk_norms"),
            (split, None, false, false, "split_slots_for_the_cache"),
            (1, None, false, false, "one_chunk"),
        ];
        for (most, in_use, fold, q8_k, variant) in variants {
            let out = if q8_k { "q8_k" } else { "q8_0" };
            let name = format!("rope_store_attention_{out}@{pos}");
            ops.push((name, 0, attention(in_use, fold, q8_k), pos, most, variant));
        }
        // The 8B's dispatch (split over the positions in use, the q/k norms in it, Q8_0 out) by
        // each attention kernel setting (`Gpu::set_attention_kernel`; `attn=default` is the
        // `split_qk_norms` line above, run again beside the others).
        for variant in ATTENTION_KERNELS {
            let name = format!("rope_store_attention_q8_0@{pos}");
            ops.push((name, 0, attention(in_use, true, false), pos, split, variant));
        }
    }
    let products: [(String, u64, Op<'_>, u32, usize, &str); 4] = [
        (
            "gemv_o_add".into(),
            o.bytes(),
            Box::new(|r| r.q1_0_gemv_add(&o, &aq, &x)),
            0,
            split,
            "",
        ),
        (
            "gemv_gate_up".into(),
            gate_up.bytes(),
            Box::new(|r| r.q1_0_gemv(&gate_up, &xq, &gu)),
            0,
            split,
            "",
        ),
        (
            "swiglu_q8_0".into(),
            0,
            Box::new(|r| r.swiglu_quantize(&gu, &gq)),
            0,
            split,
            "",
        ),
        (
            "gemv_down_add".into(),
            down.bytes(),
            Box::new(|r| r.q1_0_gemv_add(&down, &gq, &x)),
            0,
            split,
            "",
        ),
    ];
    ops.extend(products);
    // The norm as the product's prologue (one dispatch where `rms_norm_q8_0` + `gemv_qkv` /
    // `gemv_gate_up` are two), at the default count of workgroups (`"wg0"`) and others
    // (`Gpu::set_prologue_workgroups`: each workgroup norms the row, several row tiles each).
    for variant in ["wg0", "wg256", "wg512", "wg2048"] {
        let (qkv, gate_up, x, norm) = (&qkv, &gate_up, &x, &norm);
        let (qkv_out, gu) = (&qkv_out, &gu);
        let fused: [(String, u64, Op<'_>, u32, usize, &str); 2] = [
            (
                "rms_norm_gemv_qkv".into(),
                qkv.bytes(),
                Box::new(move |r| r.rms_norm_q1_0_gemv(x, norm, 1e-6, qkv, qkv_out)),
                0,
                split,
                variant,
            ),
            (
                "rms_norm_gemv_gate_up".into(),
                gate_up.bytes(),
                Box::new(move |r| r.rms_norm_q1_0_gemv(x, norm, 1e-6, gate_up, gu)),
                0,
                split,
                variant,
            ),
        ];
        ops.extend(fused);
    }
    // SwiGLU + Q8_0 as the gate|up product's epilogue (a workgroup a block of h: its own count
    // of workgroups), without and with the norm's prologue: against `gemv_gate_up` +
    // `swiglu_q8_0`, and `rms_norm_q8_0` + those.
    let epilogues: [(String, u64, Op<'_>, u32, usize, &str); 2] = [
        (
            "gemv_gate_up_swiglu_q8_0".into(),
            gate_up.bytes(),
            Box::new(|r| r.q1_0_gemv_swiglu(&gate_up, &xq, &gq)),
            0,
            split,
            "",
        ),
        (
            "rms_norm_gemv_gate_up_swiglu_q8_0".into(),
            gate_up.bytes(),
            Box::new(|r| r.rms_norm_q1_0_gemv_swiglu(&x, &norm, 1e-6, &gate_up, &gq)),
            0,
            split,
            "",
        ),
    ];
    ops.extend(epilogues);
    // The RMS norm + Q8_0 in the residual product's tail (`Recorder::q1_0_gemv_add_norm`: the
    // workgroup that finishes last norms the row; one dispatch where `gemv_o_add` /
    // `gemv_down_add` + `rms_norm_q8_0` are two): O into the FFN's activation, O in place (the
    // next activation the tensor the product reads, as the engine's 8B step records it: the
    // attention output and the residual both 4096 values of Q8_0), down into the next layer's.
    let tails: [(String, u64, Op<'_>, u32, usize, &str); 3] = [
        (
            "gemv_o_add_norm_q8_0".into(),
            o.bytes(),
            Box::new(|r| r.q1_0_gemv_add_norm(&o, &aq, &x, &norm, 1e-6, &xq)),
            0,
            split,
            "",
        ),
        (
            "gemv_o_add_norm_q8_0_in_place".into(),
            o.bytes(),
            Box::new(|r| r.q1_0_gemv_add_norm(&o, &aq, &x, &norm, 1e-6, &aq)),
            0,
            split,
            "",
        ),
        (
            "gemv_down_add_norm_q8_0".into(),
            down.bytes(),
            Box::new(|r| r.q1_0_gemv_add_norm(&down, &gq, &x, &norm, 1e-6, &xq)),
            0,
            split,
            "",
        ),
    ];
    ops.extend(tails);
    let (qkv, o, gate_up, down) = (&qkv, &o, &gate_up, &down);
    let variants: Vec<(usize, String)> = batches
        .iter()
        .enumerate()
        .flat_map(|(i, b)| kernels(b.0).into_iter().map(move |k| (i, k)))
        .collect();
    for (i, order) in &variants {
        let (t, xq_t, qkv_t, aq_t, x_t, gu_t, gq_t) = &batches[*i];
        let order = order.as_str();
        let t = *t;
        let gemms: [(String, u64, Op<'_>, u32, usize, &str); 4] = [
            (
                format!("gemm_qkv_t{t}"),
                qkv.bytes(),
                Box::new(move |r| r.q1_0_gemm(qkv, xq_t, qkv_t, t)),
                0,
                split,
                order,
            ),
            (
                format!("gemm_o_add_t{t}"),
                o.bytes(),
                Box::new(move |r| r.q1_0_gemm_add(o, aq_t, x_t, t)),
                0,
                split,
                order,
            ),
            (
                format!("gemm_gate_up_t{t}"),
                gate_up.bytes(),
                Box::new(move |r| r.q1_0_gemm(gate_up, xq_t, gu_t, t)),
                0,
                split,
                order,
            ),
            (
                format!("gemm_down_add_t{t}"),
                down.bytes(),
                Box::new(move |r| r.q1_0_gemm_add(down, gq_t, x_t, t)),
                0,
                split,
                order,
            ),
        ];
        ops.extend(gemms);
        if matches!(order, "tile_32x32" | "tile_64x32" | "exact_tile_inner") {
            let m = &gate_up_q4_0;
            ops.push((
                format!("gemm_q4_0_gate_up_t{t}"),
                q4_0_bytes,
                Box::new(move |r| r.gemm(m, Input::Quantized(xq_t), gu_t, t)),
                0,
                split,
                order,
            ));
        }
    }
    // (op name, matrix index, the kernel, gemm tokens (0: the gemv))
    let mut tq2_ops: Vec<(String, usize, &str, usize)> = Vec::new();
    for kernel in [
        "old", "32x1", "16x1", "16x2", "8x2", "8x4", "16x4", "32x2", "64x4",
    ] {
        for (i, (what, _, _)) in tq2_shapes.iter().enumerate() {
            tq2_ops.push((format!("tq2_gemv_{what}"), i, kernel, 0));
            if matches!(kernel, "old" | "32x1" | "16x2" | "8x4") {
                for t in [8, 32] {
                    let what = what.trim_end_matches("_add");
                    tq2_ops.push((format!("tq2_gemm_{what}_t{t}"), i, kernel, t));
                }
            }
        }
    }
    let (gu_ref, x_ref, qkv_ref, xq_k_ref, aq_k_ref, gq_k_ref) =
        (&gu, &x, &qkv_out, &xq_k, &aq_k, &gq_k);
    for (op_name, i, kernel, t) in tq2_ops {
        let m = if kernel == "old" {
            &tq2_old[i]
        } else {
            &tq2_new[i]
        };
        let bytes = (m.n_rows() * m.n_in() / 256 * 66) as u64;
        let op: Op<'_> = if t == 0 {
            let (input, out) = match i {
                0 => (xq_k_ref, qkv_ref),
                1 => (aq_k_ref, x_ref),
                2 => (xq_k_ref, gu_ref),
                _ => (gq_k_ref, x_ref),
            };
            if matches!(i, 1 | 3) {
                Box::new(move |r| r.gemv_add(m, Input::Quantized(input), out))
            } else {
                Box::new(move |r| r.gemv(m, Input::Quantized(input), out))
            }
        } else {
            // The token count's output rows (`batches`) and Q8_K activations (`tq2_acts`).
            let b = batches.iter().position(|b| b.0 == t).unwrap_or(0);
            let a = tq2_acts.iter().position(|a| a.0 == t).unwrap_or(0);
            let acts = &tq2_acts[a].1;
            let (input, out) = match i {
                0 => (&acts[0], &batches[b].2),
                1 => (&acts[1], &batches[b].4),
                2 => (&acts[0], &batches[b].5),
                _ => (&acts[2], &batches[b].4),
            };
            Box::new(move |r| r.gemm(m, Input::Quantized(input), out, t))
        };
        ops.push((op_name, bytes, op, 0, split, kernel));
    }
    for variant in &sweep {
        let (lanes, rows, _) = q1_split(variant)?;
        let (xq, aq, gq, x, qkv_out, gu) = (&xq, &aq, &gq, &x, &qkv_out, &gu);
        let products: [(String, u64, Op<'_>, u32, usize, &str); 4] = [
            (
                "q1sweep_gemv_qkv".into(),
                qkv.bytes(),
                Box::new(move |r| r.q1_0_gemv(qkv, xq, qkv_out)),
                0,
                split,
                variant,
            ),
            (
                "q1sweep_gemv_o_add".into(),
                o.bytes(),
                Box::new(move |r| r.q1_0_gemv_add(o, aq, x)),
                0,
                split,
                variant,
            ),
            (
                "q1sweep_gemv_gate_up".into(),
                gate_up.bytes(),
                Box::new(move |r| r.q1_0_gemv(gate_up, xq, gu)),
                0,
                split,
                variant,
            ),
            (
                "q1sweep_gemv_down_add".into(),
                down.bytes(),
                Box::new(move |r| r.q1_0_gemv_add(down, gq, x)),
                0,
                split,
                variant,
            ),
        ];
        ops.extend(products);
        // The SwiGLU epilogue where the split's tile (rows · 256 / lanes) divides its 32-row
        // blocks (`Gpu::q1_0_swiglu_fits`).
        if 32 % (rows * 256 / lanes) == 0 {
            ops.push((
                "q1sweep_gemv_gate_up_swiglu_q8_0".into(),
                gate_up.bytes(),
                Box::new(move |r| r.q1_0_gemv_swiglu(gate_up, xq, gq)),
                0,
                split,
                variant,
            ));
        }
    }
    ops.retain(|op| op.0.contains(filter.as_str()));
    // With the sweep: each split's subgroup lane sum against its tree, bit for bit, on the
    // stacked Q/K/V and the down product (the subgroup sum assumes a workgroup's invocations fill
    // its subgroups in order: this shows it holds on the device).
    if "q1sweep_check".contains(filter.as_str()) || filter.starts_with("q1sweep") {
        for variant in sweep.iter().filter(|v| v.ends_with("_subgroup")) {
            let (lanes, rows, _) = q1_split(variant)?;
            let mut same = true;
            for (m, input, len) in [(&qkv, &xq, qd + 2 * kvd), (&down, &gq, n_embd)] {
                let out = |reduce| -> Result<Vec<u32>, oxibonsai_gpu::GpuError> {
                    gpu.set_q1_0_lanes(Some(lanes))?;
                    gpu.set_q1_0_rows(Some(rows))?;
                    gpu.set_q1_0_reduce(reduce)?;
                    let t = gpu.tensor("check", len)?;
                    let mut rec = gpu.recorder();
                    rec.rms_norm_quantize(&x, &norm, 1e-6, &xq)?;
                    rec.q1_0_gemv(gate_up, &xq, &gu)?;
                    rec.swiglu_quantize(&gu, &gq)?;
                    rec.q1_0_gemv(m, input, &t)?;
                    rec.submit()?;
                    gpu.read::<u32>(&t)
                };
                same &= out(Q1Reduce::Tree)? == out(Q1Reduce::Subgroup)?;
            }
            println!(
                "{{\"adapter\": {:?}, \"op\": \"q1sweep_check\", \"q1_split\": {variant:?}, \"subgroup_sizes\": {:?}, \"same_bits_as_the_tree\": {same}}}",
                gpu.report().name,
                gpu.report().subgroup_sizes.map_or(Vec::new(), |(lo, hi)| vec![lo, hi]),
            );
        }
    }
    for (op_name, bytes, op, pos, most, variant) in &ops {
        let tq2 = op_name.starts_with("tq2_");
        gpu.set_tq2_kernel(if tq2 {
            Tq2Kernel::parse(variant)?
        } else {
            Tq2Kernel::DEFAULT
        });
        gpu.write(&step, &[*pos])?;
        gpu.set_max_attention_splits(*most);
        let attention_kernel = variant.strip_prefix("attn=");
        gpu.set_attention_kernel(match attention_kernel {
            Some(kernel) => AttentionKernel::parse(kernel)?,
            None => AttentionKernel::DEFAULT,
        });
        gpu.set_gemm_tokens_outer(*variant == "exact_tokens_outer");
        gpu.set_gemm_tile(match variant.strip_prefix("tile_") {
            Some(tile) => Some(GemmTile::parse(tile)?),
            None => None,
        });
        let (lanes, rows, reduce) = match variant.starts_with("q1_") {
            true => {
                let (l, r, reduce) = q1_split(variant)?;
                (Some(l), Some(r), reduce)
            }
            false => (None, None, Q1Reduce::Tree),
        };
        gpu.set_q1_0_lanes(lanes)?;
        gpu.set_q1_0_rows(rows)?;
        gpu.set_q1_0_reduce(reduce)?;
        let prologue_workgroups = variant.strip_prefix("wg").and_then(|w| w.parse().ok());
        gpu.set_prologue_workgroups(prologue_workgroups.unwrap_or(0));
        let mut times = Vec::with_capacity(reps);
        let mut record = Vec::with_capacity(reps);
        for _ in 0..reps {
            gpu.write(&x, &x0)?;
            let start = std::time::Instant::now();
            let mut rec = gpu.recorder();
            for _ in 0..n {
                op(&mut rec)?;
            }
            record.push(start.elapsed().as_secs_f64());
            rec.submit()?;
            times.push(start.elapsed().as_secs_f64());
        }
        // The first repetitions compile the pipeline and build the bind groups.
        let keep = |v: &mut Vec<f64>| {
            v.drain(..reps / 3);
            v.sort_by(f64::total_cmp);
            v[v.len() / 2]
        };
        let (t, rec_t) = (keep(&mut times), keep(&mut record));
        let us = t * 1e6 / n as f64;
        let gbs = if *bytes > 0 {
            format!(
                ", \"weight_mib\": {:.2}, \"weight_gb_s\": {:.1}",
                *bytes as f64 / (1u64 << 20) as f64,
                *bytes as f64 * n as f64 / t / 1e9
            )
        } else {
            String::new()
        };
        // The device's own clock where it has timestamps: the same dispatches, each timed alone.
        let device = if gpu.has_timestamps() {
            let mut per = Vec::with_capacity(reps);
            for _ in 0..reps {
                gpu.write(&x, &x0)?;
                let mut rec = gpu.timed_recorder(n)?;
                for _ in 0..n {
                    op(&mut rec)?;
                }
                let timed = rec.submit_timed()?;
                per.push(timed.iter().map(|&(_, s)| s).sum::<f64>() / n as f64);
            }
            format!(", \"device_us_per_dispatch\": {:.2}", keep(&mut per) * 1e6)
        } else {
            String::new()
        };
        let tokens = match op_name.rsplit_once("_t") {
            Some((_, t)) if op_name.contains("gemm") => t.parse::<usize>().unwrap_or(1),
            _ => 1,
        };
        let key = if tq2 { "tq2_kernel" } else { "kernel" };
        let tokens = if tokens > 1 {
            format!(
                ", \"tokens\": {tokens}, \"{key}\": {variant:?}, \"us_per_token\": {:.2}",
                us / tokens as f64
            )
        } else if tq2 {
            format!(", \"tq2_kernel\": {variant:?}")
        } else {
            String::new()
        };
        let attention = if op_name.contains("attention") {
            format!(
                ", \"variant\": {variant:?}, \"pos\": {pos}, \"n_ctx\": {n_ctx}, \"max_chunks\": {most}, \"attention_kernel\": \"{}\"",
                gpu.attention_kernel()
            )
        } else if let Some(w) = prologue_workgroups {
            format!(", \"prologue_workgroups\": {w}")
        } else if let Some(q1) = variant.strip_prefix("q1_") {
            format!(", \"q1_split\": {q1:?}")
        } else {
            String::new()
        };
        println!(
            "{{\"adapter\": {:?}, \"shape\": {name:?}, \"op\": {op_name:?}{tokens}{attention}, \"dispatches\": {n}, \"us_per_dispatch\": {us:.2}, \"record_us_per_dispatch\": {:.2}{device}{gbs}}}",
            gpu.report().name,
            rec_t * 1e6 / n as f64,
        );
    }
    Ok(())
}

/// A sweep variant `q1_LANESxROWS_REDUCE`'s lanes, rows and lane sum.
fn q1_split(variant: &str) -> Result<(u32, u32, Q1Reduce), Box<dyn std::error::Error>> {
    let bad = || format!("{variant:?} is not a Q1_0 split (q1_LANESxROWS_REDUCE)");
    let rest = variant.strip_prefix("q1_").ok_or_else(bad)?;
    let (split, reduce) = rest.split_once('_').ok_or_else(bad)?;
    let (lanes, rows) = split.split_once('x').ok_or_else(bad)?;
    Ok((lanes.parse()?, rows.parse()?, Q1Reduce::parse(reduce)?))
}
