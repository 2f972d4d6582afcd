//! An independent float64 forward pass over a checkpoint's own weights, in Hugging Face's
//! conventions (`rotate_half` RoPE, GQA, SwiGLU, RMS norm; Qwen3's per-head q/k norms, Qwen2's
//! q/k/v biases), and the centred-logit comparison.

use super::checkpoint::{Arch, Spec, Weights};

#[derive(Clone, Copy, PartialEq)]
pub enum RopePairs {
    /// `rotate_half`: dimension i turns with i + d/2 (what Hugging Face checkpoints expect).
    Halves,
    /// Dimension 2i turns with 2i + 1: what the engine would do to an unpermuted Llama.
    Adjacent,
}

fn linear(w: &(Vec<usize>, Vec<f32>), x: &[f64]) -> Vec<f64> {
    let (rows, cols) = (w.0[0], w.0[1]);
    assert_eq!(cols, x.len());
    (0..rows)
        .map(|r| {
            w.1[r * cols..(r + 1) * cols]
                .iter()
                .zip(x)
                .map(|(&a, &b)| a as f64 * b)
                .sum()
        })
        .collect()
}

fn rms_norm(x: &[f64], w: &[f32], eps: f64) -> Vec<f64> {
    let ms = x.iter().map(|v| v * v).sum::<f64>() / x.len() as f64;
    let k = 1.0 / (ms + eps).sqrt();
    x.iter().zip(w).map(|(v, &g)| v * k * g as f64).collect()
}

fn rope(head: &mut [f64], pos: usize, theta: f64, pairs: RopePairs) {
    let d = head.len();
    for i in 0..d / 2 {
        let angle = pos as f64 * theta.powf(-2.0 * i as f64 / d as f64);
        let (sin, cos) = angle.sin_cos();
        let (a, b) = match pairs {
            RopePairs::Halves => (i, i + d / 2),
            RopePairs::Adjacent => (2 * i, 2 * i + 1),
        };
        let (x, y) = (head[a], head[b]);
        head[a] = x * cos - y * sin;
        head[b] = y * cos + x * sin;
    }
}

pub fn reference_logits(
    spec: &Spec,
    w: &Weights,
    tokens: &[u32],
    pairs: RopePairs,
) -> Vec<Vec<f64>> {
    let (e, d) = (spec.n_embd, spec.head_dim());
    let get = |name: &str| w.get(name).unwrap_or_else(|| panic!("no {name}"));
    let embd = get("model.embed_tokens.weight");
    let mut xs: Vec<Vec<f64>> = tokens
        .iter()
        .map(|&t| {
            let t = t as usize;
            embd.1[t * e..(t + 1) * e]
                .iter()
                .map(|&v| v as f64)
                .collect()
        })
        .collect();
    for l in 0..spec.n_layer {
        let p = |s: &str| format!("model.layers.{l}.{s}");
        let mut keys: Vec<Vec<f64>> = Vec::new();
        let mut values: Vec<Vec<f64>> = Vec::new();
        let mut queries: Vec<Vec<f64>> = Vec::new();
        for (pos, x) in xs.iter().enumerate() {
            let h = rms_norm(x, &get(&p("input_layernorm.weight")).1, spec.eps);
            let project = |name: &str| {
                let mut y = linear(get(&p(&format!("self_attn.{name}_proj.weight"))), &h);
                if let Some((_, bias)) = w.get(&p(&format!("self_attn.{name}_proj.bias"))) {
                    y.iter_mut().zip(bias).for_each(|(y, &b)| *y += b as f64);
                }
                y
            };
            let mut q = project("q");
            let mut k = project("k");
            let v = project("v");
            for (vec, norm) in [
                (&mut q, "self_attn.q_norm.weight"),
                (&mut k, "self_attn.k_norm.weight"),
            ] {
                for head in vec.chunks_mut(d) {
                    if spec.arch == Arch::Qwen3 {
                        let normed = rms_norm(head, &get(&p(norm)).1, spec.eps);
                        head.copy_from_slice(&normed);
                    }
                    rope(head, pos, spec.rope_theta, pairs);
                }
            }
            queries.push(q);
            keys.push(k);
            values.push(v);
        }
        for pos in 0..xs.len() {
            let attn = causal_attention(spec, &queries[pos], &keys[..=pos], &values[..=pos]);
            let o = linear(get(&p("self_attn.o_proj.weight")), &attn);
            for (x, o) in xs[pos].iter_mut().zip(o) {
                *x += o;
            }
            let h = rms_norm(
                &xs[pos],
                &get(&p("post_attention_layernorm.weight")).1,
                spec.eps,
            );
            let gate = linear(get(&p("mlp.gate_proj.weight")), &h);
            let up = linear(get(&p("mlp.up_proj.weight")), &h);
            let act: Vec<f64> = gate
                .iter()
                .zip(&up)
                .map(|(g, u)| g / (1.0 + (-g).exp()) * u)
                .collect();
            let down = linear(get(&p("mlp.down_proj.weight")), &act);
            for (x, o) in xs[pos].iter_mut().zip(down) {
                *x += o;
            }
        }
    }
    let head = if spec.tied {
        embd
    } else {
        get("lm_head.weight")
    };
    xs.iter()
        .map(|x| linear(head, &rms_norm(x, &get("model.norm.weight").1, spec.eps)))
        .collect()
}

/// One position's attention output over the keys and values up to it (GQA: query head h reads
/// key/value head h / group), softmax over scaled dot products.
fn causal_attention(
    spec: &Spec,
    query: &[f64],
    keys: &[Vec<f64>],
    values: &[Vec<f64>],
) -> Vec<f64> {
    let d = spec.head_dim();
    let group = spec.n_head / spec.n_head_kv;
    let mut attn = vec![0f64; spec.n_head * d];
    for h in 0..spec.n_head {
        let kvh = h / group;
        let q = &query[h * d..(h + 1) * d];
        let scores: Vec<f64> = keys
            .iter()
            .map(|key| {
                let k = &key[kvh * d..(kvh + 1) * d];
                q.iter().zip(k).map(|(a, b)| a * b).sum::<f64>() / (d as f64).sqrt()
            })
            .collect();
        let max = scores.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
        let exp: Vec<f64> = scores.iter().map(|s| (s - max).exp()).collect();
        let sum: f64 = exp.iter().sum();
        for (t, p) in exp.iter().enumerate() {
            let v = &values[t][kvh * d..(kvh + 1) * d];
            for (o, &vv) in attn[h * d..(h + 1) * d].iter_mut().zip(v) {
                *o += p / sum * vv;
            }
        }
    }
    attn
}

/// Worst over positions of max |Δ| / σ on centred logits (σ: the reference's spread).
pub fn worst_sigma(ours: &[f32], reference: &[Vec<f64>]) -> f64 {
    let n_vocab = reference[0].len();
    assert_eq!(ours.len(), reference.len() * n_vocab);
    let mut worst: f64 = 0.0;
    for (row, refs) in ours.chunks_exact(n_vocab).zip(reference) {
        let mean_o = row.iter().map(|&v| v as f64).sum::<f64>() / n_vocab as f64;
        let mean_r = refs.iter().sum::<f64>() / n_vocab as f64;
        let sigma =
            (refs.iter().map(|r| (r - mean_r).powi(2)).sum::<f64>() / n_vocab as f64).sqrt();
        for (&o, &r) in row.iter().zip(refs) {
            worst = worst.max(((o as f64 - mean_o) - (r - mean_r)).abs() / sigma);
        }
    }
    worst
}

pub fn sigma_between(a: &[Vec<f64>], b: &[Vec<f64>]) -> f64 {
    let flat: Vec<f32> = a.iter().flatten().map(|&v| v as f32).collect();
    worst_sigma(&flat, b)
}
