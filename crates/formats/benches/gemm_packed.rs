//! Weights packed at load against today's kernels, one thread, on the best tier: the
//! matrix-vector product (plain `gemv` vs the packed kernel at one token, its activation
//! preparation included) and the matrix-matrix product at 1–16 tokens (plain `gemm` vs packed,
//! activations prepared outside the loop for both), at the shapes of SmolLM2 (Q4_1, Q5_0, Q5_1,
//! Q8_0) and Bonsai-1.7B (Q1_0, ternary Q2_0, PQ2_0, TQ2_0, TQ1_0, PTQ1_0). Rows × values per
//! row.
//! `OXIBONSAI_ISA` picks the tier. A format without a plain matrix-matrix kernel (TQ1_0) runs
//! `gemm/plain` as the engine does without packing: the matrix-vector kernel once per token.

mod common;

use std::time::Duration;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use oxibonsai_formats::kernels::Kernels;
use oxibonsai_formats::{format, FormatKind};

const SMOLLM2: [(usize, usize); 4] = [(576, 576), (1536, 576), (576, 1536), (49152, 576)];
const BONSAI: [(usize, usize); 3] = [(2048, 2048), (6144, 2048), (2048, 6144)];
const TOKENS: [usize; 5] = [1, 2, 4, 8, 16];

fn bench(c: &mut Criterion) {
    let kernels = Kernels::from_env().expect("a tier");
    let mut values = common::Values::new();
    let mut next = move || values.next();
    let cases = [
        (FormatKind::Q4_1, &SMOLLM2[..]),
        (FormatKind::Q5_0, &SMOLLM2[..]),
        (FormatKind::Q5_1, &SMOLLM2[..]),
        (FormatKind::Q8_0, &SMOLLM2[..]),
        (FormatKind::Q1_0, &BONSAI[..]),
        (FormatKind::Q2_0, &BONSAI[..]),
        (FormatKind::PQ2_0, &BONSAI[..]),
        (FormatKind::TQ2_0, &BONSAI[..]),
        (FormatKind::TQ1_0, &BONSAI[..]),
        (FormatKind::PTQ1_0, &BONSAI[..]),
    ];
    for (kind, shapes) in cases {
        let f = format(kind);
        let partner = f.partner_format();
        for &(rows, cols) in shapes {
            let values: Vec<f32> = (0..rows * cols).map(|_| next()).collect();
            let weights = f.quantize_row(&values).expect("whole blocks");
            let row_bytes = weights.len() / rows;
            let Some(packed) = kernels.pack(f, cols, &weights, rows) else {
                eprintln!("{}: no packed kernel on {}", f.name, kernels.isa().name());
                continue;
            };
            let acts: Vec<Vec<u8>> = (0..16)
                .map(|_| {
                    let x: Vec<f32> = (0..cols).map(|_| next()).collect();
                    partner.quantize_activation_row(&x).expect("whole blocks")
                })
                .collect();
            let stride = kernels.packed_prepared_bytes(&packed);
            let mut prepared = vec![0u8; 16 * stride];
            for (a, dst) in acts.iter().zip(prepared.chunks_exact_mut(stride)) {
                kernels.packed_prepare(&packed, a, dst);
            }
            let mut out = vec![0.0f32; 16 * rows];
            let mut one = vec![0u8; stride];

            let mut group = c.benchmark_group(format!("{}_{rows}x{cols}", f.name));
            group
                .sample_size(10)
                .measurement_time(Duration::from_millis(800))
                .warm_up_time(Duration::from_millis(200))
                .throughput(Throughput::Bytes(weights.len() as u64));
            // Load-time cost: one thread, fresh (page-faulting) memory as at load.
            group.bench_function("repack", |b| {
                b.iter(|| {
                    kernels
                        .pack(f, cols, &weights, rows)
                        .map(|p| p.storage().len())
                })
            });
            group.bench_function("gemv/plain", |b| {
                b.iter(|| kernels.gemv(f, &weights, row_bytes, &acts[0], &mut out[..rows]))
            });
            group.bench_function("gemv/packed", |b| {
                b.iter(|| {
                    kernels.packed_prepare(&packed, &acts[0], &mut one);
                    kernels.packed_gemm(&packed, 0, rows, &one, 1, &mut out[..rows], rows)
                })
            });
            let has_gemm = kernels.gemm_prepared_bytes(f, cols).is_some();
            for t in TOKENS {
                group.bench_with_input(BenchmarkId::new("gemm/plain", t), &t, |b, &t| {
                    b.iter(|| {
                        if has_gemm {
                            kernels.gemm(f, cols, &weights, rows, &prepared, t, &mut out, rows)
                        } else {
                            for (a, o) in acts[..t].iter().zip(out.chunks_exact_mut(rows)) {
                                kernels.gemv(f, &weights, row_bytes, a, o);
                            }
                        }
                    })
                });
                group.bench_with_input(BenchmarkId::new("gemm/packed", t), &t, |b, &t| {
                    b.iter(|| kernels.packed_gemm(&packed, 0, rows, &prepared, t, &mut out, rows))
                });
            }
            group.finish();
        }
    }
}

criterion_group!(benches, bench);
criterion_main!(benches);
