//! One FFN block recorded into one submission — RMS norm → Q8_0 → Q1_0 gate and up → SwiGLU →
//! Q8_0 → Q1_0 down → residual add — against the CPU chain. Every intermediate stays on the
//! device until the one submission is done; then each is read back and checked against the CPU op
//! applied to the GPU's previous stage (bounds as in the single-op tests, the quantizations bit
//! for bit), and the end result against the CPU chain run alone.

mod common;
mod support;

use oxibonsai_formats::kernels::silu_mul_scalar;
use oxibonsai_gpu::{Q1Matrix, Q1Reduce, Q8Tensor};
use support::{gpu, Rng, Worst, U};

const EPS: f32 = 1e-6;

fn cpu_norm(x: &[f32], w: &[f32]) -> Vec<f32> {
    let sum: f64 = x.iter().map(|&v| f64::from(v * v)).sum();
    let scale = 1.0 / ((sum / x.len() as f64) as f32 + EPS).sqrt();
    x.iter().zip(w).map(|(&v, &g)| (v * scale) * g).collect()
}

/// The Q1_0 product of `rows` with `x` on the CPU, with the bound of each row (as tests/q1_0.rs).
fn cpu_q1(rows: &[u8], n_in: usize, x: &[f32]) -> Vec<(f32, f64)> {
    let (out, scale) = common::cpu_product(rows, n_in, x);
    out.into_iter()
        .zip(scale)
        .map(|(o, s)| (o, 4e-6 * f64::from(s) + f64::from(f32::MIN_POSITIVE)))
        .collect()
}

#[test]
fn an_ffn_block_in_one_submission_matches_the_cpu_chain() {
    // By the rows' width (32 lanes here: rows of 3 and 9 blocks), then each split forced (lanes,
    // rows an invocation), with each lane sum.
    for reduce in [Q1Reduce::Tree, Q1Reduce::Subgroup] {
        for (lanes, rows) in [
            (None, None),
            (Some(8), Some(1)),
            (Some(8), Some(8)),
            (Some(16), Some(4)),
            (Some(64), None),
            (Some(64), Some(8)),
            (Some(128), Some(3)),
        ] {
            ffn_block_matches_the_cpu_chain(lanes, rows, reduce);
        }
    }
}

fn ffn_block_matches_the_cpu_chain(lanes: Option<u32>, rows: Option<u32>, reduce: Q1Reduce) {
    let gpu = gpu();
    gpu.set_q1_0_lanes(lanes).unwrap();
    gpu.set_q1_0_rows(rows).unwrap();
    gpu.set_q1_0_reduce(reduce).unwrap();
    let mut rng = Rng(31);
    let mut crng = common::Rng(32);
    let (n_embd, n_ff) = (384, 1152);
    let x = rng.vec(n_embd, 2.0);
    let w = rng.vec(n_embd, 1.0);
    let gate_rows = common::random_q1_0(&mut crng, n_ff, n_embd);
    let up_rows = common::random_q1_0(&mut crng, n_ff, n_embd);
    let down_rows = common::random_q1_0(&mut crng, n_embd, n_ff);

    let t = |what, n| gpu.tensor(what, n).unwrap();
    let (xt, wt) = (gpu.upload("x", &x).unwrap(), gpu.upload("w", &w).unwrap());
    let (xn, g, u, d) = (
        t("xn", n_embd),
        t("gate", n_ff),
        t("up", n_ff),
        t("down", n_embd),
    );
    let (xq, gq) = (
        Q8Tensor::new(&gpu, n_embd).unwrap(),
        Q8Tensor::new(&gpu, n_ff).unwrap(),
    );
    let gate = Q1Matrix::upload(&gpu, &gate_rows, n_ff, n_embd).unwrap();
    let up = Q1Matrix::upload(&gpu, &up_rows, n_ff, n_embd).unwrap();
    let down = Q1Matrix::upload(&gpu, &down_rows, n_embd, n_ff).unwrap();

    let mut rec = gpu.recorder();
    rec.rms_norm(&xt, &wt, EPS, 1, &xn).unwrap();
    rec.quantize(&xn, &xq).unwrap();
    rec.q1_0_gemv(&gate, &xq, &g).unwrap();
    rec.q1_0_gemv(&up, &xq, &u).unwrap();
    rec.swiglu(&g, &u, n_ff).unwrap();
    rec.quantize(&g, &gq).unwrap();
    rec.q1_0_gemv(&down, &gq, &d).unwrap();
    rec.add(&xt, &d, n_embd).unwrap();
    assert_eq!(rec.dispatches(), 8);
    rec.submit().unwrap();
    let read = |t| gpu.read::<f32>(t).unwrap();
    let (xn_g, u_g, g_g, d_g, out_g) = (read(&xn), read(&u), read(&g), read(&d), read(&xt));

    // Stage by stage, each CPU op fed the GPU's previous stage.
    let mut worst = Worst::new("chain stages");
    for (i, (&got, want)) in xn_g.iter().zip(cpu_norm(&x, &w)).enumerate() {
        let bound = f64::from(want.abs()) * ((n_embd / 256) as f64 + 33.0) * U;
        worst.check(|| format!("norm [{i}]"), got, f64::from(want), bound);
    }
    let quantized = |q: &Q8Tensor| {
        (
            gpu.read::<u32>(&q.words).unwrap(),
            gpu.read::<u32>(&q.meta).unwrap(),
        )
    };
    assert_eq!(quantized(&xq), support::cpu_q8(&xn_g), "the norm's Q8_0");
    let gate_cpu = cpu_q1(&gate_rows, n_embd, &xn_g);
    for (r, (&got, &(want, bound))) in u_g.iter().zip(&cpu_q1(&up_rows, n_embd, &xn_g)).enumerate()
    {
        worst.check(|| format!("up row {r}"), got, f64::from(want), bound);
    }
    let mut swiglu_cpu: Vec<f32> = gate_cpu.iter().map(|&(v, _)| v).collect();
    silu_mul_scalar(&mut swiglu_cpu, &u_g);
    for (r, ((&got, &want), (&(gv, gb), &uv))) in g_g
        .iter()
        .zip(&swiglu_cpu)
        .zip(gate_cpu.iter().zip(&u_g))
        .enumerate()
    {
        // The gate's product error through silu (slope below 1.1) times up, then silu's own.
        let bound = 1.1 * gb * f64::from(uv.abs())
            + f64::from(want.abs()) * (2.0 * f64::from(gv.abs()) + 12.0) * U;
        worst.check(|| format!("swiglu row {r}"), got, f64::from(want), bound);
    }
    assert_eq!(quantized(&gq), support::cpu_q8(&g_g), "SwiGLU's Q8_0");
    for (r, (&got, &(want, bound))) in d_g.iter().zip(&cpu_q1(&down_rows, n_ff, &g_g)).enumerate() {
        worst.check(|| format!("down row {r}"), got, f64::from(want), bound);
    }
    for (i, ((&got, &xv), &dv)) in out_g.iter().zip(&x).zip(&d_g).enumerate() {
        assert_eq!(got, xv + dv, "residual add [{i}]");
    }
    worst.report();

    // The CPU chain alone: its quantizations see slightly different inputs, so a code can move by
    // one step; the results agree to the size of such a step, not to rounding.
    let xn_c = cpu_norm(&x, &w);
    let g_c: Vec<f32> = cpu_q1(&gate_rows, n_embd, &xn_c)
        .iter()
        .map(|p| p.0)
        .collect();
    let u_c: Vec<f32> = cpu_q1(&up_rows, n_embd, &xn_c)
        .iter()
        .map(|p| p.0)
        .collect();
    let mut s_c = g_c;
    silu_mul_scalar(&mut s_c, &u_c);
    let d_c: Vec<f32> = cpu_q1(&down_rows, n_ff, &s_c).iter().map(|p| p.0).collect();
    let out_c: Vec<f32> = x.iter().zip(&d_c).map(|(a, b)| a + b).collect();
    let scale = d_c.iter().fold(0f32, |m, v| m.max(v.abs()));
    let worst_rel = out_g
        .iter()
        .zip(&out_c)
        .map(|(a, b)| (a - b).abs() / scale)
        .fold(0f32, f32::max);
    eprintln!("chain end to end: worst |GPU − CPU| / max|FFN out| = {worst_rel:.3e}");
    // A Q8_0 step is 1/127 of a block's largest value; the FFN output moves by far less.
    assert!(worst_rel < 1.0 / 127.0, "{worst_rel}");
}

/// A timed recorder (device timestamps between dispatches) runs the same dispatches — the same
/// bits as an untimed one — and reports one device time a dispatch, named by its shader, in
/// recording order; past the dispatches it was made for, it refuses the next. An adapter without
/// timestamps inside passes refuses to make one, naming what it lacks.
#[test]
fn a_timed_recording_gives_the_same_bits_and_a_device_time_a_dispatch() {
    let gpu = gpu();
    let mut rng = Rng(33);
    let n = 512;
    let x = gpu.upload("x", &rng.vec(n, 2.0)).unwrap();
    let w = gpu.upload("w", &rng.vec(n, 1.0)).unwrap();
    let outs = [(); 2].map(|_| {
        (
            gpu.tensor("xn", n).unwrap(),
            Q8Tensor::new(&gpu, n).unwrap(),
        )
    });
    if !gpu.has_timestamps() {
        let e = gpu.timed_recorder(2).err().unwrap();
        assert!(e.to_string().contains("timestamp"), "{e}");
        eprintln!("adapter {}: no timestamps inside passes", gpu.report());
        return;
    }
    let mut plain = gpu.recorder();
    plain.rms_norm(&x, &w, EPS, 1, &outs[0].0).unwrap();
    plain.quantize(&outs[0].0, &outs[0].1).unwrap();
    plain.submit().unwrap();
    let mut timed = gpu.timed_recorder(3).unwrap();
    timed.rms_norm(&x, &w, EPS, 1, &outs[1].0).unwrap();
    timed.quantize(&outs[1].0, &outs[1].1).unwrap();
    timed.add(&outs[1].0, &x, n).unwrap();
    let e = timed.add(&outs[1].0, &x, n).err().unwrap();
    assert!(e.to_string().contains("timed recorder"), "{e}");
    let times = timed.submit_timed().unwrap();
    let names: Vec<&str> = times.iter().map(|t| t.0).collect();
    assert_eq!(names.len(), 3, "{names:?}");
    for (name, want) in names.iter().zip(["rms_norm", "quantize_q8_0", "add"]) {
        assert!(name.starts_with(want), "{names:?}");
    }
    assert!(
        times.iter().all(|t| t.1.is_finite() && t.1 >= 0.0) && times.iter().any(|t| t.1 > 0.0),
        "{times:?}"
    );
    let q8 = |q: &Q8Tensor| {
        (
            gpu.read::<u32>(&q.words).unwrap(),
            gpu.read::<u32>(&q.meta).unwrap(),
        )
    };
    assert_eq!(q8(&outs[1].1), q8(&outs[0].1), "the timed recording's Q8_0");
    // The timed recording's add ran after the quantization: xn + x.
    let (xn0, xs, xn1) = (
        gpu.read::<f32>(&outs[0].0).unwrap(),
        gpu.read::<f32>(&x).unwrap(),
        gpu.read::<f32>(&outs[1].0).unwrap(),
    );
    for i in 0..n {
        assert_eq!(xn1[i].to_bits(), (xn0[i] + xs[i]).to_bits(), "[{i}]");
    }
}
