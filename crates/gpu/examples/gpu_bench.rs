//! Q1_0 matrix-vector throughput on a GPU against the device's own read bandwidth, on the matrix
//! shapes of Bonsai models, each result checked against the CPU's scalar kernel first.
//!
//! usage: cargo run --release -p oxibonsai-gpu --example gpu_bench [-- MIB_PER_SHAPE PASSES]
//! (`OXIBONSAI_GPU_ADAPTER` picks the adapter). Prints one JSON line per measurement.

#[path = "../tests/common/mod.rs"]
mod common;

use common::{cpu_product, random_q1_0, Rng};
use oxibonsai_gpu::{Gpu, Q1Kernel, Q1Matrix, Q8Activation};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let mib: usize = args.next().map(|a| a.parse()).transpose()?.unwrap_or(1024);
    let passes: u32 = args.next().map(|a| a.parse()).transpose()?.unwrap_or(20);
    let gpu = Gpu::new()?;
    let r = gpu.report();
    println!(
        "{{\"adapter\": {:?}, \"backend\": {:?}, \"type\": {:?}, \"driver\": {:?}, \"max_binding_mib\": {}}}",
        r.name,
        r.backend,
        r.device_type,
        r.driver,
        r.max_storage_binding_bytes >> 20
    );
    let probe = (mib as u64) << 20;
    let bw = gpu.read_bandwidth(probe.min(r.max_storage_binding_bytes & !15), passes)?;
    println!("{{\"read_bandwidth_gb_s\": {:.1}}}", bw / 1e9);
    // (name, rows, n_in): Bonsai-8B's attention and feed-forward matrices, Bonsai-1.7B's
    // feed-forward, a 27B feed-forward down matrix.
    let shapes = [
        ("8b.attn_q", 4096usize, 4096usize),
        ("8b.ffn_up", 12288, 4096),
        ("8b.ffn_down", 4096, 12288),
        ("1.7b.ffn_up", 6144, 2048),
        ("27b.ffn_down", 5120, 17408),
        // One block: what a dispatch costs with next to no work.
        ("floor", 1, 128),
    ];
    // Work splits to compare: (invocations per row set, rows per invocation).
    let splits: Vec<(u32, u32)> = match std::env::var("SPLITS") {
        Ok(v) => v
            .split(',')
            .filter_map(|p| p.split_once('x'))
            .map(|(a, b)| Ok((a.parse()?, b.parse()?)))
            .collect::<Result<_, std::num::ParseIntError>>()?,
        Err(_) => vec![(Q1Kernel::DEFAULT_LANES, Q1Kernel::DEFAULT_ROWS)],
    };
    let mut rng = Rng(1);
    for (name, rows, n_in) in shapes {
        let one = rows * n_in / 128 * 18;
        // Enough distinct matrices that one pass over them cannot sit in the GPU's cache.
        let count = (mib << 20).div_ceil(one).clamp(1, 4096);
        let data = random_q1_0(&mut rng, rows, n_in);
        let x: Vec<f32> = (0..n_in).map(|_| rng.unit() * 4.0).collect();
        let act = Q8Activation::quantize(&x)?;
        let matrices = (0..count)
            .map(|_| Q1Matrix::upload(&gpu, &data, rows, n_in))
            .collect::<Result<Vec<_>, _>>()?;
        let (want, scale) = cpu_product(&data, n_in, &x);
        for &(lanes, per_thread) in &splits {
            let kernel = gpu.q1_0_kernel(lanes, per_thread)?;
            let products = matrices
                .iter()
                .map(|m| m.product_with(&gpu, &kernel, &act))
                .collect::<Result<Vec<_>, _>>()?;
            let (got, _) = gpu.run_q1_0(&products[0], 1)?;
            let worst = got
                .iter()
                .zip(&want)
                .zip(&scale)
                .map(|((g, w), s)| (g - w).abs() / s.max(f32::MIN_POSITIVE))
                .fold(0.0f32, f32::max);
            // Warm, then time `passes` rounds over all matrices in one submission.
            let all: Vec<_> = products.iter().collect();
            gpu.time_q1_0(&all, 1)?;
            let seconds = gpu.time_q1_0(&all, passes)?;
            let bytes = one as f64 * count as f64 * f64::from(passes);
            let gbs = bytes / seconds / 1e9;
            println!(
            "{{\"shape\": {name:?}, \"lanes\": {lanes}, \"rows_per_thread\": {per_thread}, \"rows\": {rows}, \"n_in\": {n_in}, \"matrices\": {count}, \"mib\": {}, \"q1_0_gb_s\": {gbs:.1}, \"share_of_read_bw\": {:.3}, \"worst_error_rel\": {worst:.2e}, \"us_per_product\": {:.1}}}",
            (one * count) >> 20,
            gbs * 1e9 / bw,
            seconds / (count as f64 * f64::from(passes)) * 1e6
        );
        }
    }
    Ok(())
}
