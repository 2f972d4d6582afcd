//! The CPU backend's matrix products as the model runs them — activation conversion, bands of rows
//! over the thread pool — for one token (decode, matrix-vector) and a batch (prefill, matrix-matrix),
//! per format and tier, at the Bonsai-1.7B feed-forward shape (6144 × 2048). Throughput is in weight
//! bytes per product.

use std::sync::Arc;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use oxibonsai_engine::{Backend, CpuBackend};
use oxibonsai_formats::format_by_name;
use oxibonsai_formats::kernels::Isa;
use oxibonsai_gguf::{GgufFile, GgufWriter};

const FORMATS: [&str; 6] = ["q1_0", "q2_0", "tq2_0", "q4_0", "q4_1", "q8_0"];
const N_IN: usize = 2048;
const N_OUT: usize = 6144;

fn weight_file(name: &str) -> Arc<GgufFile> {
    let f = format_by_name(name).expect("registered");
    let x: Vec<f32> = (0..N_IN * N_OUT)
        .map(|i| ((i as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 40) as f32 / 8.4e6 - 1.0)
        .collect();
    let mut bytes = vec![0u8; N_IN * N_OUT / f.block_elems * f.block_bytes];
    (f.quantize)(&x, &mut bytes);
    let mut w = GgufWriter::new();
    w.add_tensor("w", &[N_IN as u64, N_OUT as u64], f, bytes)
        .unwrap();
    Arc::new(GgufFile::from_bytes(w.to_bytes().unwrap()).unwrap())
}

fn bench(c: &mut Criterion) {
    let mut group = c.benchmark_group("matmul");
    group
        .sample_size(10)
        .warm_up_time(Duration::from_millis(300))
        .measurement_time(Duration::from_secs(1));
    for name in FORMATS {
        let file = weight_file(name);
        let tensor = file.tensor("w").unwrap().clone();
        for isa in Isa::ALL.into_iter().filter(|isa| isa.available()) {
            let backend = CpuBackend::with_isa(2, isa).unwrap();
            let weight = backend.prepare(&file, &tensor).unwrap();
            for n_tokens in [1usize, 64] {
                let x: Vec<f32> = (0..n_tokens * N_IN)
                    .map(|i| ((i % 97) as f32 - 48.0) / 50.0)
                    .collect();
                let mut out = vec![0.0f32; n_tokens * N_OUT];
                let mut scratch = Default::default();
                group.throughput(Throughput::Bytes(tensor.n_bytes));
                group.bench_function(
                    BenchmarkId::new(
                        format!("{name}/{}", isa.name()),
                        format!("tokens={n_tokens}"),
                    ),
                    |b| b.iter(|| backend.matmul(&weight, &x, n_tokens, &mut out, &mut scratch)),
                );
            }
        }
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
