//! Where a fused decode step's time goes, op by op: each fused op of a Bonsai-8B-shaped layer
//! (`decode_step`'s `fused` mode) recorded `N` times into one submission on the same buffers, so
//! the time per dispatch of each kind shows which kernels — not the dispatch count — make the
//! step slow. The products report the weight bytes they read per second. Also: attention at
//! positions 64, 1024 and 4096 of an 8192-position cache, three ways — split over the positions
//! in use (`Recorder::set_attention_positions`, what an engine records), split with chunk slots
//! for the whole cache (what the idle ones cost), and one chunk (one workgroup) a head
//! (`Gpu::set_max_attention_splits(1)`: what the split buys) — and split with Qwen3's q/k norms
//! in the dispatch (`"split_qk_norms"`, against `"split"` plus `rms_norm_qk`, the dispatch it
//! saves), and both with the attention's loads batched (`"…_batched_loads"`,
//! `Gpu::set_attention_batched_loads`: the same bits, several loads in flight), and split into
//! Q8_K (`rope_store_attention_q8_k`, against the Q8_0 one plus `quantize_q8_k_att_out`, the
//! dispatch it saves a TQ2_0 / K-quant layer) — and an
//! 8-element add (the bare
//! cost of a dispatch). The Q8_K-partnered step's own (TQ2_0, the K-quants): RMS norm and SwiGLU
//! with Q8_K, and the attention output's Q8_K quantization, a dispatch of its own. The prompt's
//! products too: each matrix-matrix product (`Recorder::q1_0_gemm`
//! / `q1_0_gemm_add`, the batched prompt pass's) at T = 8 and 32 tokens (`"tokens"`; its
//! `us_per_token` against the gemv's `us_per_dispatch`), in both loop orders (`"order"`,
//! `Gpu::set_gemm_tokens_outer`). Where the device has timestamps, each line also
//! gives the device's own time per dispatch (`device_us_per_dispatch`, `Gpu::timed_recorder`).
//!
//! usage: cargo run --release -p oxibonsai-gpu --example op_cost [-- SHAPE N REPS]
//! SHAPE: 8b (default) | 1.7b | tiny. Prints one JSON line per op.

#[path = "../tests/common/mod.rs"]
#[allow(dead_code)] // the CPU's product is the tests' business
mod common;

use common::{random_q1_0, Rng};
use oxibonsai_gpu::{
    Gpu, Input, KvCache, Q1Matrix, Q8Tensor, QkNorms, Recorder, Rope, MAX_ATTENTION_SPLITS,
};

type Op<'a> = Box<dyn Fn(&mut Recorder<'_>) -> Result<(), oxibonsai_gpu::GpuError> + 'a>;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let name = args.next().unwrap_or_else(|| "8b".to_owned());
    let n: usize = args.next().map(|a| a.parse()).transpose()?.unwrap_or(36);
    let reps: usize = args.next().map(|a| a.parse()).transpose()?.unwrap_or(12);
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
    let scale = 1.0 / (hd as f32).sqrt();
    // The gemm's token-major tensors, for T = 8 and 32.
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
    let batches = [batch(8)?, batch(32)?];

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
            (split, in_use, false, false, "split_batched_loads"),
            (split, in_use, true, false, "split_qk_norms_batched_loads"),
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
    let (qkv, o, gate_up, down) = (&qkv, &o, &gate_up, &down);
    for ((t, xq_t, qkv_t, aq_t, x_t, gu_t, gq_t), order) in batches
        .iter()
        .flat_map(|b| [(b, "tile_inner"), (b, "tokens_outer")])
    {
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
    }
    for (op_name, bytes, op, pos, most, variant) in &ops {
        gpu.write(&step, &[*pos])?;
        gpu.set_max_attention_splits(*most);
        gpu.set_attention_batched_loads(variant.contains("batched_loads"));
        gpu.set_gemm_tokens_outer(*variant == "tokens_outer");
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
            Some((_, t)) if op_name.starts_with("gemm") => t.parse::<usize>().unwrap_or(1),
            _ => 1,
        };
        let tokens = if tokens > 1 {
            format!(
                ", \"tokens\": {tokens}, \"order\": {variant:?}, \"us_per_token\": {:.2}",
                us / tokens as f64
            )
        } else {
            String::new()
        };
        let attention = if op_name.contains("attention") {
            format!(
                ", \"variant\": {variant:?}, \"pos\": {pos}, \"n_ctx\": {n_ctx}, \"max_chunks\": {most}"
            )
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
