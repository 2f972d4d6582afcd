//! Decode speed of a GGUF model on the GPU backend beside the CPU backend, alternately, until the
//! CLI's `--device` exists: `cargo run --release -p oxibonsai-engine --features gpu --example
//! gpu_decode -- MODEL.gguf [TOKENS=64] [REPS=3] [THREADS=0] [PROMPT=0]` (`OXIBONSAI_GPU_ADAPTER`
//! picks the adapter). Prints tokens/s per repetition, mean ± sd, and what ran on the CPU under the
//! GPU backend during one decode step and the dispatches it recorded (`OXIBONSAI_GPU_FUSED=0`: the
//! unfused step's, for an A/B). With PROMPT > 0, also a prompt of PROMPT tokens on the GPU (REPS
//! passes: tokens/s, and the dispatches of its last submission — a batched chunk when PROMPT ≥ 2,
//! `OXIBONSAI_GPU_GEMM=0` for one product a token).

use std::sync::Arc;
use std::time::Instant;

use oxibonsai_engine::{Backend, CpuBackend, GpuBackend, Logits, Model};
use oxibonsai_gguf::GgufFile;

type Error = Box<dyn std::error::Error>;

/// Greedy decoding of `tokens` tokens after a one-token prompt; tokens/s.
fn decode<B: Backend>(model: &Model<B>, tokens: usize) -> Result<f64, Error> {
    let mut seq = model.new_sequence(tokens + 1)?;
    let mut next = 1u32;
    let start = Instant::now();
    for _ in 0..tokens {
        let logits = model.forward(&mut seq, &[next], Logits::Last)?;
        next = (0..logits.len())
            .max_by(|&a, &b| logits[a].total_cmp(&logits[b]))
            .unwrap_or(0) as u32;
    }
    Ok(tokens as f64 / start.elapsed().as_secs_f64())
}

fn summary(name: &str, rates: &[f64]) {
    let n = rates.len() as f64;
    let mean = rates.iter().sum::<f64>() / n;
    let sd = (rates.iter().map(|r| (r - mean).powi(2)).sum::<f64>() / n).sqrt();
    println!(
        "{name}: {mean:.2} ± {sd:.2} t/s over {} runs {rates:.2?}",
        rates.len()
    );
}

fn main() -> Result<(), Error> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let path = args
        .first()
        .ok_or("usage: gpu_decode MODEL.gguf [TOKENS] [REPS] [THREADS] [PROMPT]")?;
    let number = |i: usize, default: usize| -> Result<usize, Error> {
        Ok(args
            .get(i)
            .map(|s| s.parse())
            .transpose()?
            .unwrap_or(default))
    };
    let (tokens, reps, threads) = (number(1, 64)?, number(2, 3)?, number(3, 0)?);
    let prompt_len = number(4, 0)?;
    let file = Arc::new(GgufFile::open(path)?);
    let gpu = Model::load(Arc::clone(&file), GpuBackend::new(threads)?)?;
    let cpu = Model::load(file, CpuBackend::new(threads)?)?;
    println!("GPU backend: {}", gpu.backend.name());
    println!("CPU backend: {}", cpu.backend.name());
    // Warm-up (pipelines compiled, pages touched), then one step's CPU work counted.
    decode(&gpu, 2)?;
    decode(&cpu, 2)?;
    gpu.backend.reset_counts();
    decode(&gpu, 1)?;
    println!(
        "one decode step on the GPU backend: {}; {} dispatches ({} a layer with the head's), \
         fused {}",
        gpu.backend.offload(),
        gpu.backend.step_dispatches(),
        gpu.backend.step_dispatches() as f64 / gpu.config.n_layer.max(1) as f64,
        std::env::var("OXIBONSAI_GPU_FUSED").map_or(true, |v| v.trim() != "0"),
    );
    let (mut on_gpu, mut on_cpu) = (Vec::new(), Vec::new());
    for _ in 0..reps {
        on_gpu.push(decode(&gpu, tokens)?);
        on_cpu.push(decode(&cpu, tokens)?);
    }
    summary("gpu", &on_gpu);
    summary("cpu", &on_cpu);
    if prompt_len > 0 {
        let ids: Vec<u32> = (0..prompt_len as u32)
            .map(|i| (i * 31 + 5) % gpu.config.n_vocab as u32)
            .collect();
        let mut rates = Vec::new();
        for _ in 0..=reps {
            let mut seq = gpu.new_sequence(prompt_len)?;
            let start = Instant::now();
            gpu.forward(&mut seq, &ids, Logits::Last)?;
            rates.push(prompt_len as f64 / start.elapsed().as_secs_f64());
        }
        // The first pass compiles the pipelines.
        rates.remove(0);
        println!(
            "a prompt of {prompt_len}: its last submission {} dispatches",
            gpu.backend.step_dispatches()
        );
        summary(&format!("gpu prompt {prompt_len}"), &rates);
    }
    Ok(())
}
