//! A whole decode step of a Q1_0 transformer recorded with the op library — per layer RMS norm,
//! Q8_0, Q/K/V products, RoPE, the KV store, attention, the output product, the residual add,
//! then the FFN block — as one submission, timed over consecutive positions: the time per token a
//! device-resident forward pass built from these ops (one dispatch per op, nothing fused) takes,
//! and how much of it the dispatch count explains. Random weights (the tests prove the ops).
//!
//! usage: cargo run --release -p oxibonsai-gpu --example decode_step [-- SHAPE STEPS]
//! SHAPE: 8b | 1.7b | tiny (default tiny: fits lavapipe). Prints one JSON line.

#[path = "../tests/common/mod.rs"]
#[allow(dead_code)] // the CPU's product is the tests' business
mod common;

use common::{random_q1_0, Rng};
use oxibonsai_gpu::{Gpu, KvCache, Q1Matrix, Q8Tensor, Recorder, Rope, Tensor};

struct Shape {
    n_embd: usize,
    n_ff: usize,
    n_layer: usize,
    n_head: usize,
    n_head_kv: usize,
    head_dim: usize,
}

struct Layer {
    attn_norm: Tensor,
    ffn_norm: Tensor,
    q: Q1Matrix,
    k: Q1Matrix,
    v: Q1Matrix,
    o: Q1Matrix,
    gate: Q1Matrix,
    up: Q1Matrix,
    down: Q1Matrix,
    cache: KvCache,
}

/// The activations of a step, allocated once.
struct Scratch {
    x: Tensor,
    xn: Tensor,
    xq: Q8Tensor,
    q: Tensor,
    k: Tensor,
    v: Tensor,
    att: Tensor,
    aq: Q8Tensor,
    o: Tensor,
    g: Tensor,
    u: Tensor,
    gq: Q8Tensor,
    step: Tensor,
    cos_sin: Tensor,
}

fn record(
    rec: &mut Recorder<'_>,
    s: &Shape,
    layers: &[Layer],
    t: &Scratch,
) -> Result<(), Box<dyn std::error::Error>> {
    let (hd, nh, nkv) = (s.head_dim, s.n_head, s.n_head_kv);
    let scale = 1.0 / (hd as f32).sqrt();
    for l in layers {
        rec.rms_norm(&t.x, &l.attn_norm, 1e-6, 1, &t.xn)?;
        rec.quantize(&t.xn, &t.xq)?;
        rec.q1_0_gemv(&l.q, &t.xq, &t.q)?;
        rec.q1_0_gemv(&l.k, &t.xq, &t.k)?;
        rec.q1_0_gemv(&l.v, &t.xq, &t.v)?;
        rec.rope(&t.q, &t.cos_sin, 1, nh, hd, hd, Rope::Neox)?;
        rec.rope(&t.k, &t.cos_sin, 1, nkv, hd, hd, Rope::Neox)?;
        rec.store_kv(&l.cache, &t.k, &t.v, &t.step)?;
        rec.attention(&t.q, &l.cache, &t.step, nh, scale, &t.att)?;
        rec.quantize(&t.att, &t.aq)?;
        rec.q1_0_gemv(&l.o, &t.aq, &t.o)?;
        rec.add(&t.x, &t.o, s.n_embd)?;
        rec.rms_norm(&t.x, &l.ffn_norm, 1e-6, 1, &t.xn)?;
        rec.quantize(&t.xn, &t.xq)?;
        rec.q1_0_gemv(&l.gate, &t.xq, &t.g)?;
        rec.q1_0_gemv(&l.up, &t.xq, &t.u)?;
        rec.swiglu(&t.g, &t.u, s.n_ff)?;
        rec.quantize(&t.g, &t.gq)?;
        rec.q1_0_gemv(&l.down, &t.gq, &t.o)?;
        rec.add(&t.x, &t.o, s.n_embd)?;
    }
    Ok(())
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let name = args.next().unwrap_or_else(|| "tiny".to_owned());
    let steps: usize = args.next().map(|a| a.parse()).transpose()?.unwrap_or(32);
    let s = match name.as_str() {
        "8b" => Shape {
            n_embd: 4096,
            n_ff: 12288,
            n_layer: 36,
            n_head: 32,
            n_head_kv: 8,
            head_dim: 128,
        },
        "1.7b" => Shape {
            n_embd: 2048,
            n_ff: 6144,
            n_layer: 28,
            n_head: 16,
            n_head_kv: 8,
            head_dim: 128,
        },
        "tiny" => Shape {
            n_embd: 512,
            n_ff: 1536,
            n_layer: 4,
            n_head: 8,
            n_head_kv: 2,
            head_dim: 64,
        },
        other => return Err(format!("unknown shape {other:?}: 8b, 1.7b or tiny").into()),
    };
    let n_ctx = steps + 1;
    let gpu = Gpu::new()?;
    let mut rng = Rng(5);
    let (qd, kvd) = (s.n_head * s.head_dim, s.n_head_kv * s.head_dim);
    let mut weight_bytes = 0u64;
    let mut matrix = |rows: usize, n_in: usize| -> Result<Q1Matrix, oxibonsai_gpu::GpuError> {
        let m = Q1Matrix::upload(&gpu, &random_q1_0(&mut rng, rows, n_in), rows, n_in)?;
        weight_bytes += m.bytes();
        Ok(m)
    };
    let mut layers = Vec::new();
    for _ in 0..s.n_layer {
        layers.push(Layer {
            attn_norm: gpu.upload("attn_norm", &vec![1.0f32; s.n_embd])?,
            ffn_norm: gpu.upload("ffn_norm", &vec![1.0f32; s.n_embd])?,
            q: matrix(qd, s.n_embd)?,
            k: matrix(kvd, s.n_embd)?,
            v: matrix(kvd, s.n_embd)?,
            o: matrix(s.n_embd, qd)?,
            gate: matrix(s.n_ff, s.n_embd)?,
            up: matrix(s.n_ff, s.n_embd)?,
            down: matrix(s.n_embd, s.n_ff)?,
            cache: KvCache::new(&gpu, s.n_head_kv, s.head_dim, s.head_dim, n_ctx, true)?,
        });
    }
    let mut rng = Rng(6);
    let x0: Vec<f32> = (0..s.n_embd).map(|_| rng.unit()).collect();
    let t = Scratch {
        x: gpu.upload("x", &x0)?,
        xn: gpu.tensor("xn", s.n_embd)?,
        xq: Q8Tensor::new(&gpu, s.n_embd)?,
        q: gpu.tensor("q", qd)?,
        k: gpu.tensor("k", kvd)?,
        v: gpu.tensor("v", kvd)?,
        att: gpu.tensor("att", qd)?,
        aq: Q8Tensor::new(&gpu, qd)?,
        o: gpu.tensor("o", s.n_embd)?,
        g: gpu.tensor("g", s.n_ff)?,
        u: gpu.tensor("u", s.n_ff)?,
        gq: Q8Tensor::new(&gpu, s.n_ff)?,
        step: gpu.tensor("step", 1)?,
        cos_sin: gpu.tensor("cos_sin", s.head_dim)?,
    };
    let mut step_s = Vec::new();
    let mut record_s = Vec::new();
    let mut dispatches = 0;
    for pos in 0..steps {
        let theta_scale = 1e6f32.powf(-2.0 / s.head_dim as f32);
        let mut theta = pos as f32;
        let mut angles = Vec::with_capacity(s.head_dim);
        for _ in 0..s.head_dim / 2 {
            angles.extend([theta.cos(), theta.sin()]);
            theta *= theta_scale;
        }
        gpu.write(&t.cos_sin, &angles)?;
        gpu.write(&t.step, &[pos as u32])?;
        // The residual stream restarts each step, so values stay in range over many steps.
        gpu.write(&t.x, &x0)?;
        let start = std::time::Instant::now();
        let mut rec = gpu.recorder();
        record(&mut rec, &s, &layers, &t)?;
        dispatches = rec.dispatches();
        let recorded = start.elapsed().as_secs_f64();
        rec.submit()?;
        let total = start.elapsed().as_secs_f64();
        record_s.push(recorded);
        step_s.push(total);
    }
    let out: Vec<f32> = gpu.read(&t.x)?;
    if out.iter().any(|v| !v.is_finite()) {
        return Err("the step's output is not finite".into());
    }
    // The first steps compile pipelines and build bind groups: leave out a quarter.
    let skip = steps / 4;
    let stats = |v: &[f64]| {
        let v = &v[skip..];
        let mean = v.iter().sum::<f64>() / v.len() as f64;
        let sd = (v.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / v.len() as f64).sqrt();
        (mean * 1e3, sd * 1e3)
    };
    let ((step_ms, step_sd), (rec_ms, _)) = (stats(&step_s), stats(&record_s));
    println!(
        "{{\"adapter\": {:?}, \"shape\": {name:?}, \"layers\": {}, \"steps\": {steps}, \"dispatches_per_step\": {dispatches}, \"weight_mib\": {:.1}, \"step_ms\": {step_ms:.3}, \"step_sd_ms\": {step_sd:.3}, \"record_ms\": {rec_ms:.3}, \"tokens_per_s\": {:.1}, \"weight_gb_s\": {:.1}, \"us_per_dispatch\": {:.2}}}",
        gpu.report().name,
        s.n_layer,
        weight_bytes as f64 / (1 << 20) as f64,
        1e3 / step_ms,
        weight_bytes as f64 / (step_ms * 1e-3) / 1e9,
        step_ms * 1e3 / dispatches as f64,
    );
    Ok(())
}
