//! Matrix-vector throughput of the standard formats and the K-quants at Bonsai-1.7B shapes, one
//! thread, per tier: GB/s of weight bytes (criterion's throughput line) against the scalar tier.

mod common;

use std::time::Duration;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use oxibonsai_formats::kernels::{Isa, Kernels};
use oxibonsai_formats::{format, FormatKind};

const SHAPES: [(usize, usize); 3] = [(2048, 2048), (6144, 2048), (2048, 6144)];
const FORMATS: [FormatKind; 12] = [
    FormatKind::Q4_1,
    FormatKind::Q4_0,
    FormatKind::Q8_0,
    FormatKind::F16,
    FormatKind::F32,
    FormatKind::Q4_K,
    FormatKind::Q5_K,
    FormatKind::Q6_K,
    FormatKind::Q5_0,
    FormatKind::Q5_1,
    FormatKind::Q2_K,
    FormatKind::Q3_K,
];

fn bench(c: &mut Criterion) {
    let mut values = common::Values::new();
    let mut next = move || values.next();
    for kind in FORMATS {
        let f = format(kind);
        let mut group = c.benchmark_group(format!("gemv_{}", f.name));
        group
            .sample_size(10)
            .measurement_time(Duration::from_secs(1))
            .warm_up_time(Duration::from_millis(300));
        for (rows, cols) in SHAPES {
            let values: Vec<f32> = (0..rows * cols).map(|_| next()).collect();
            let weights = f.quantize_row(&values).expect("whole blocks");
            let row_bytes = weights.len() / rows;
            let x: Vec<f32> = (0..cols).map(|_| next()).collect();
            let activation = f
                .partner_format()
                .quantize_activation_row(&x)
                .expect("whole blocks");
            let mut out = vec![0.0f32; rows];
            group.throughput(Throughput::Bytes(weights.len() as u64));
            for isa in Isa::ALL.into_iter().filter(|isa| isa.available()) {
                let kernels = Kernels::new(isa).expect("available");
                group.bench_with_input(
                    BenchmarkId::new(isa.name(), format!("{rows}x{cols}")),
                    &(),
                    |b, _| b.iter(|| kernels.gemv(f, &weights, row_bytes, &activation, &mut out)),
                );
            }
        }
        group.finish();
    }
}

criterion_group!(benches, bench);
criterion_main!(benches);
