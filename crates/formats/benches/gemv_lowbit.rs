//! Matrix-vector products of the 1-bit and ternary formats at the Bonsai-1.7B shapes, one thread,
//! per tier; throughput is reported in bytes of weights read.

use std::time::Duration;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use oxibonsai_formats::kernels::{Isa, Kernels};
use oxibonsai_formats::{format, FormatKind};

const FORMATS: [FormatKind; 7] = [
    FormatKind::Q1_0,
    FormatKind::Q2_0,
    FormatKind::PQ2_0,
    FormatKind::Q2_0G128Legacy,
    FormatKind::TQ2_0,
    FormatKind::TQ1_0,
    FormatKind::PTQ1_0,
];
/// (rows, columns) of the Bonsai-1.7B projections.
const SHAPES: [(usize, usize); 3] = [(2048, 2048), (6144, 2048), (2048, 6144)];

fn bench(c: &mut Criterion) {
    let mut group = c.benchmark_group("gemv_lowbit");
    group
        .sample_size(10)
        .warm_up_time(Duration::from_millis(300))
        .measurement_time(Duration::from_secs(1));
    for kind in FORMATS {
        let f = format(kind);
        let partner = format(f.partner);
        for (rows, cols) in SHAPES {
            let row_bytes = cols / f.block_elems * f.block_bytes;
            // Weights drawn from a quantized pseudo-random matrix, so scales are realistic.
            let x: Vec<f32> = (0..rows * cols)
                .map(|i| {
                    ((i as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 40) as f32 / 8.4e6 - 1.0
                })
                .collect();
            let mut weights = vec![0u8; rows * row_bytes];
            (f.quantize)(&x, &mut weights);
            let mut activation = vec![0u8; cols / partner.block_elems * partner.block_bytes];
            (partner.quantize_activation.expect("partner conversion"))(&x[..cols], &mut activation);
            let mut out = vec![0f32; rows];
            group.throughput(Throughput::Bytes(weights.len() as u64));
            for isa in Isa::ALL {
                let Some(kernels) = Kernels::new(isa) else {
                    continue;
                };
                let id = BenchmarkId::new(
                    format!("{}/{}", f.name, isa.name()),
                    format!("{rows}x{cols}"),
                );
                group.bench_function(id, |b| {
                    // Bands of 64 rows, as the CPU backend hands them out.
                    b.iter(|| {
                        for (band, o) in out.chunks_mut(64).enumerate() {
                            let w = &weights[band * 64 * row_bytes..];
                            kernels.gemv(f, w, row_bytes, &activation, o);
                        }
                    })
                });
            }
        }
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
