//! A whole decode step of a Q1_0 transformer recorded with the op library — per layer RMS norm,
//! Q8_0, Q/K/V products, RoPE, the KV store, attention, the output product, the residual add,
//! then the FFN block — as one submission, timed over consecutive positions: the time per token a
//! device-resident forward pass built from these ops takes, and how much of it the dispatch count
//! explains. Two ways to record it: `unfused`, one dispatch per op (21 a layer), and `fused`, the
//! fused ops with Q/K/V and gate/up stacked (8 a layer, 5 with the prologue and epilogue below);
//! `both` runs them alternately, step by step, on the same weights, and reports whether they give
//! the same bits. Random weights (the tests prove the ops). The fused mode takes the norms before the Q/K/V and gate/up products as their
//! prologue (`Recorder::rms_norm_q1_0_gemv`) unless `OXIBONSAI_GPU_PROLOGUE=0`, and SwiGLU + Q8_0
//! as the gate/up product's epilogue (`Recorder::q1_0_gemv_swiglu`) unless
//! `OXIBONSAI_GPU_EPILOGUE=0` — the engine's switches: 5 a layer with both. With
//! `OXIBONSAI_GPU_NORM_TAIL=1` (`Gpu::set_norm_tail`) the norms go in the residual products'
//! tails instead of the prologue (`Recorder::q1_0_gemv_add_norm`: the FFN's norm in the O
//! product's, the next layer's attention norm in the down product's; the first layer's apart):
//! 5 a layer with the epilogue, plus the first norm.
//!
//! usage: cargo run --release -p oxibonsai-gpu --example decode_step [-- SHAPE STEPS MODE] [--pos P] [--profile]
//! SHAPE: 8b | 1.7b | tiny (default tiny: fits lavapipe); MODE: both (default) | fused | unfused;
//! `--pos P` starts at position P (default 0), to time the step deep in a context: the cache's
//! positions before P hold zeros, which attention reads as it would any values. Prints one JSON
//! line per mode. `--profile` then records 8 more steps at the last position with device
//! timestamps (`Gpu::timed_recorder`) and prints, per mode, each shader's device time a step.

#[path = "../tests/common/mod.rs"]
#[allow(dead_code)] // the CPU's product is the tests' business
mod common;

use common::{random_q1_0, Rng};
use oxibonsai_gpu::{Gpu, Input, KvCache, Q1Matrix, Q8Tensor, Recorder, Rope, Tensor};

const EPS: f32 = 1e-6;

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
    /// The fused step's: Q/K/V and gate/up stacked, and its own cache.
    qkv: Q1Matrix,
    gate_up: Q1Matrix,
    fused_cache: KvCache,
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
    /// The stacked products' outputs.
    qkv: Tensor,
    gu: Tensor,
}

/// One mode's step and record times, dispatches a step, and the last step's output.
#[derive(Default)]
struct Run {
    step_s: Vec<f64>,
    record_s: Vec<f64>,
    dispatches: usize,
    out: Vec<f32>,
}

/// The same step in 8 dispatches a layer: RMS norm + Q8_0, Q/K/V, RoPE + KV store + attention
/// with Q8_0, O + residual, RMS norm + Q8_0, gate/up, SwiGLU + Q8_0, down + residual — one
/// fewer with each of `prologue` (the norms as the Q/K/V and gate/up products' prologue) and
/// `epilogue` (SwiGLU + Q8_0 as the gate/up product's), 5 with both; `tail` (without
/// `prologue`): the norms after the first in the O and down products' tails, two fewer a layer.
fn record_fused(
    rec: &mut Recorder<'_>,
    s: &Shape,
    layers: &[Layer],
    t: &Scratch,
    (prologue, epilogue, tail): (bool, bool, bool),
) -> Result<(), Box<dyn std::error::Error>> {
    let (hd, nh) = (s.head_dim, s.n_head);
    let scale = 1.0 / (hd as f32).sqrt();
    for (li, l) in layers.iter().enumerate() {
        if prologue {
            rec.rms_norm_q1_0_gemv(&t.x, &l.attn_norm, EPS, &l.qkv, &t.qkv)?;
        } else {
            // After the first layer, the down product's tail wrote it.
            if !tail || li == 0 {
                rec.rms_norm_quantize(&t.x, &l.attn_norm, EPS, &t.xq)?;
            }
            rec.q1_0_gemv(&l.qkv, &t.xq, &t.qkv)?;
        }
        let cache = &l.fused_cache;
        rec.rope_store_attention(
            &t.qkv,
            &t.cos_sin,
            nh,
            hd,
            Rope::Neox,
            cache,
            &t.step,
            scale,
            Input::Quantized(&t.aq),
            None,
            None,
        )?;
        if tail {
            rec.q1_0_gemv_add_norm(&l.o, &t.aq, &t.x, &l.ffn_norm, EPS, &t.xq)?;
        } else {
            rec.q1_0_gemv_add(&l.o, &t.aq, &t.x)?;
        }
        match (prologue, epilogue) {
            (true, true) => {
                rec.rms_norm_q1_0_gemv_swiglu(&t.x, &l.ffn_norm, EPS, &l.gate_up, &t.gq)?
            }
            (true, false) => {
                rec.rms_norm_q1_0_gemv(&t.x, &l.ffn_norm, EPS, &l.gate_up, &t.gu)?;
                rec.swiglu_quantize(&t.gu, &t.gq)?;
            }
            (false, true) => {
                if !tail {
                    rec.rms_norm_quantize(&t.x, &l.ffn_norm, EPS, &t.xq)?;
                }
                rec.q1_0_gemv_swiglu(&l.gate_up, &t.xq, &t.gq)?;
            }
            (false, false) => {
                if !tail {
                    rec.rms_norm_quantize(&t.x, &l.ffn_norm, EPS, &t.xq)?;
                }
                rec.q1_0_gemv(&l.gate_up, &t.xq, &t.gu)?;
                rec.swiglu_quantize(&t.gu, &t.gq)?;
            }
        }
        match layers.get(li + 1) {
            Some(next) if tail => {
                rec.q1_0_gemv_add_norm(&l.down, &t.gq, &t.x, &next.attn_norm, EPS, &t.xq)?
            }
            _ => rec.q1_0_gemv_add(&l.down, &t.gq, &t.x)?,
        }
    }
    Ok(())
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
        rec.rms_norm(&t.x, &l.attn_norm, EPS, 1, &t.xn)?;
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
        rec.rms_norm(&t.x, &l.ffn_norm, EPS, 1, &t.xn)?;
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
    let mut all: Vec<String> = std::env::args().skip(1).collect();
    let start_pos = match all.iter().position(|a| a == "--pos") {
        Some(i) => {
            let p = all
                .get(i + 1)
                .ok_or("--pos needs a position")?
                .parse::<usize>()
                .map_err(|e| format!("--pos: {e}"))?;
            all.drain(i..i + 2);
            p
        }
        None => 0,
    };
    let profile = match all.iter().position(|a| a == "--profile") {
        Some(i) => {
            all.remove(i);
            true
        }
        None => false,
    };
    let mut args = all.into_iter();
    let name = args.next().unwrap_or_else(|| "tiny".to_owned());
    let steps: usize = args.next().map(|a| a.parse()).transpose()?.unwrap_or(32);
    let modes: &[bool] = match args.next().as_deref().unwrap_or("both") {
        "both" => &[false, true],
        "fused" => &[true],
        "unfused" => &[false],
        other => return Err(format!("unknown mode {other:?}: both, fused or unfused").into()),
    };
    if steps < 2 {
        return Err("at least 2 steps (the first quarter is left out of the timing)".into());
    }
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
    let n_ctx = start_pos + steps + 1;
    let gpu = Gpu::new()?;
    // The engine's A/B switch (on by default), where the device takes rows of n_embd so.
    let on = |var: &str| std::env::var(var).map_or(true, |v| v.trim() != "0");
    let prologue = on("OXIBONSAI_GPU_PROLOGUE") && gpu.norm_prologue_fits(s.n_embd);
    let epilogue = on("OXIBONSAI_GPU_EPILOGUE");
    // The two in one product where the workgroup memory holds both, else the epilogue alone.
    let prologue = prologue && (!epilogue || gpu.norm_prologue_swiglu_fits(s.n_embd));
    // The norms in the residual products' tails (`OXIBONSAI_GPU_NORM_TAIL=1`, off by default)
    // replace the prologue.
    let tail = gpu.norm_tail() && gpu.norm_tail_fits();
    let prologue = prologue && !tail;
    let mut rng = Rng(5);
    let (qd, kvd) = (s.n_head * s.head_dim, s.n_head_kv * s.head_dim);
    // Each matrix's bytes serve both steps: as they are, and stacked with their partners.
    let mut rows = |n_rows: usize, n_in: usize| random_q1_0(&mut rng, n_rows, n_in);
    let mut weight_bytes = 0u64;
    let mut layers = Vec::new();
    for _ in 0..s.n_layer {
        let (q, k, v) = (rows(qd, s.n_embd), rows(kvd, s.n_embd), rows(kvd, s.n_embd));
        let (o, gate, up) = (
            rows(s.n_embd, qd),
            rows(s.n_ff, s.n_embd),
            rows(s.n_ff, s.n_embd),
        );
        let down = rows(s.n_embd, s.n_ff);
        let m = |r: &[u8], n_rows, n_in| Q1Matrix::upload(&gpu, r, n_rows, n_in);
        let cache = || KvCache::new(&gpu, s.n_head_kv, s.head_dim, s.head_dim, n_ctx, true);
        let layer = Layer {
            attn_norm: gpu.upload("attn_norm", &vec![1.0f32; s.n_embd])?,
            ffn_norm: gpu.upload("ffn_norm", &vec![1.0f32; s.n_embd])?,
            q: m(&q, qd, s.n_embd)?,
            k: m(&k, kvd, s.n_embd)?,
            v: m(&v, kvd, s.n_embd)?,
            o: m(&o, s.n_embd, qd)?,
            gate: m(&gate, s.n_ff, s.n_embd)?,
            up: m(&up, s.n_ff, s.n_embd)?,
            down: m(&down, s.n_embd, s.n_ff)?,
            cache: cache()?,
            qkv: Q1Matrix::upload_stacked(&gpu, &[&q, &k, &v], s.n_embd)?,
            gate_up: Q1Matrix::upload_stacked(&gpu, &[&gate, &up], s.n_embd)?,
            fused_cache: cache()?,
        };
        weight_bytes += [
            &layer.q,
            &layer.k,
            &layer.v,
            &layer.o,
            &layer.gate,
            &layer.up,
            &layer.down,
        ]
        .iter()
        .map(|m| m.bytes())
        .sum::<u64>();
        layers.push(layer);
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
        qkv: gpu.tensor("qkv", qd + 2 * kvd)?,
        gu: gpu.tensor("gate_up", 2 * s.n_ff)?,
    };
    let angles_at = |pos: usize| {
        let theta_scale = 1e6f32.powf(-2.0 / s.head_dim as f32);
        let mut theta = pos as f32;
        let mut angles = Vec::with_capacity(s.head_dim);
        for _ in 0..s.head_dim / 2 {
            angles.extend([theta.cos(), theta.sin()]);
            theta *= theta_scale;
        }
        angles
    };
    let mut runs: Vec<Run> = modes.iter().map(|_| Run::default()).collect();
    for pos in start_pos..start_pos + steps {
        let angles = angles_at(pos);
        // The modes alternate step by step, so drift on the device hits both alike.
        for (&fused, run) in modes.iter().zip(&mut runs) {
            gpu.write(&t.cos_sin, &angles)?;
            gpu.write(&t.step, &[pos as u32])?;
            // The residual stream restarts each step, so values stay in range over many steps.
            gpu.write(&t.x, &x0)?;
            let start = std::time::Instant::now();
            let mut rec = gpu.recorder();
            // What an engine knows when it records a step: the positions attention reads.
            rec.set_attention_positions(pos + 1);
            if fused {
                record_fused(&mut rec, &s, &layers, &t, (prologue, epilogue, tail))?;
            } else {
                record(&mut rec, &s, &layers, &t)?;
            }
            run.dispatches = rec.dispatches();
            let recorded = start.elapsed().as_secs_f64();
            rec.submit()?;
            run.step_s.push(start.elapsed().as_secs_f64());
            run.record_s.push(recorded);
            if pos + 1 == start_pos + steps {
                run.out = gpu.read(&t.x)?;
            }
        }
    }
    // The first steps compile pipelines and build bind groups: leave out a quarter.
    let skip = steps / 4;
    let stats = |v: &[f64]| {
        let v = &v[skip..];
        let mean = v.iter().sum::<f64>() / v.len() as f64;
        let sd = (v.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / v.len() as f64).sqrt();
        (mean * 1e3, sd * 1e3)
    };
    for (&fused, run) in modes.iter().zip(&runs) {
        let Run {
            step_s,
            record_s,
            dispatches,
            out,
        } = run;
        if out.iter().any(|v| !v.is_finite()) {
            return Err("the step's output is not finite".into());
        }
        // Every fused op gives the unfused chain's bits, so the whole step should too: reported
        // (with the largest difference) rather than refused, so a driver that compiles the
        // shared expressions differently (FMA contraction) still gets its timings printed.
        let same = if fused && modes.len() == 2 {
            let (mut differ, mut worst) = (0usize, 0f32);
            for (a, b) in out.iter().zip(&runs[0].out) {
                if a.to_bits() != b.to_bits() {
                    differ += 1;
                    worst = worst.max((a - b).abs());
                }
            }
            format!(", \"same_bits_as_unfused\": {}, \"values_differing\": {differ}, \"max_abs_diff\": {worst:e}", differ == 0)
        } else {
            String::new()
        };
        let same = if fused {
            format!(
                "{same}, \"prologue\": {prologue}, \"epilogue\": {epilogue}, \"norm_tail\": {tail}"
            )
        } else {
            same
        };
        let ((step_ms, step_sd), (rec_ms, _)) = (stats(step_s), stats(record_s));
        println!(
            "{{\"adapter\": {:?}, \"shape\": {name:?}, \"mode\": {:?}, \"layers\": {}, \"start_pos\": {start_pos}, \"steps\": {steps}, \"dispatches_per_step\": {dispatches}, \"dispatches_per_layer\": {}, \"weight_mib\": {:.1}, \"step_ms\": {step_ms:.3}, \"step_sd_ms\": {step_sd:.3}, \"record_ms\": {rec_ms:.3}, \"tokens_per_s\": {:.1}, \"weight_gb_s\": {:.1}, \"us_per_dispatch\": {:.2}{same}}}",
            gpu.report().name,
            if fused { "fused" } else { "unfused" },
            s.n_layer,
            dispatches / s.n_layer,
            weight_bytes as f64 / (1 << 20) as f64,
            1e3 / step_ms,
            weight_bytes as f64 / (step_ms * 1e-3) / 1e9,
            step_ms * 1e3 / *dispatches as f64,
        );
    }
    if profile {
        const PROFILE_STEPS: usize = 8;
        let pos = start_pos + steps - 1;
        let angles = angles_at(pos);
        for (&fused, run) in modes.iter().zip(&runs) {
            // (shader, dispatches, seconds) summed over the profiled steps, in first-seen order.
            let mut by_shader: Vec<(&str, usize, f64)> = Vec::new();
            for _ in 0..PROFILE_STEPS {
                gpu.write(&t.cos_sin, &angles)?;
                gpu.write(&t.step, &[pos as u32])?;
                gpu.write(&t.x, &x0)?;
                let mut rec = gpu.timed_recorder(run.dispatches)?;
                rec.set_attention_positions(pos + 1);
                if fused {
                    record_fused(&mut rec, &s, &layers, &t, (prologue, epilogue, tail))?;
                } else {
                    record(&mut rec, &s, &layers, &t)?;
                }
                for (shader, secs) in rec.submit_timed()? {
                    match by_shader.iter_mut().find(|e| e.0 == shader) {
                        Some(e) => {
                            e.1 += 1;
                            e.2 += secs;
                        }
                        None => by_shader.push((shader, 1, secs)),
                    }
                }
            }
            let total: f64 = by_shader.iter().map(|e| e.2).sum();
            by_shader.sort_by(|a, b| b.2.total_cmp(&a.2));
            let shaders: Vec<String> = by_shader
                .iter()
                .map(|(shader, k, secs)| {
                    format!(
                        "{{\"shader\": {shader:?}, \"dispatches_per_step\": {}, \"device_us_per_step\": {:.1}, \"share\": {:.3}}}",
                        k / PROFILE_STEPS,
                        secs * 1e6 / PROFILE_STEPS as f64,
                        secs / total
                    )
                })
                .collect();
            println!(
                "{{\"adapter\": {:?}, \"shape\": {name:?}, \"mode\": {:?}, \"pos\": {pos}, \"profiled_steps\": {PROFILE_STEPS}, \"device_step_ms\": {:.3}, \"shaders\": [{}]}}",
                gpu.report().name,
                if fused { "fused" } else { "unfused" },
                total * 1e3 / PROFILE_STEPS as f64,
                shaders.join(", ")
            );
        }
    }
    Ok(())
}
