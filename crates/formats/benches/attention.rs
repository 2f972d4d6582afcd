//! Decode attention of one key/value head, as the CPU backend runs one task: the scores of the
//! group's queries against every key, their softmax, the weighted sum of the values. One thread,
//! per tier; throughput in bytes of f16 keys and values read. `cached`: one head, again and again
//! (in L2); `streamed`: a different head each iteration out of 64 MiB of them (what a long
//! context's cache looks like to one token's attention).

mod common;

use std::time::Duration;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use half::f16;
use oxibonsai_formats::kernels::{Isa, Kernels};

/// (head dim, queries per key head): SmolLM2 (9 query heads on 3), Bonsai / Qwen3 (16 on 8).
const SHAPES: [(usize, usize); 2] = [(64, 3), (128, 2)];
const KEYS: [usize; 2] = [512, 2048];
const STREAMED_BYTES: usize = 64 << 20;

fn bench(c: &mut Criterion) {
    let mut values = common::Values::new();
    let mut next = move || 0.5 * values.next();
    for (dim, n_q) in SHAPES {
        for n_keys in KEYS {
            let head = n_keys * dim; // f16 values of keys (and of values) per head
            let n_heads = (STREAMED_BYTES / (4 * head)).max(2);
            let keys: Vec<f16> = (0..n_heads * head).map(|_| f16::from_f32(next())).collect();
            let values: Vec<f16> = (0..n_heads * head).map(|_| f16::from_f32(next())).collect();
            let queries: Vec<f16> = (0..n_q * dim).map(|_| f16::from_f32(next())).collect();
            let lens = vec![n_keys; n_q];
            let mut scores = vec![0.0f32; n_q * n_keys];
            let mut out = vec![0.0f32; n_q * dim];
            let mut group = c.benchmark_group(format!("attention_d{dim}_q{n_q}_k{n_keys}"));
            group
                .sample_size(20)
                .measurement_time(Duration::from_secs(1))
                .warm_up_time(Duration::from_millis(300))
                .throughput(Throughput::Bytes((2 * head * 2) as u64));
            for isa in Isa::ALL.into_iter().filter(|i| i.available()) {
                let k = Kernels::new(isa).expect("available");
                for streamed in [false, true] {
                    let mut h = 0;
                    let name = if streamed { "streamed" } else { "cached" };
                    group.bench_function(BenchmarkId::new(name, isa.name()), |b| {
                        b.iter(|| {
                            if streamed {
                                h = (h + 1) % n_heads;
                            }
                            let kh = &keys[h * head..(h + 1) * head];
                            let vh = &values[h * head..(h + 1) * head];
                            k.attention_scores(kh, &queries, dim, &lens, &mut scores, n_keys);
                            for s in scores.chunks_mut(n_keys) {
                                k.softmax(s, 0.125);
                            }
                            k.attention_values(&scores, n_keys, &lens, vh, &mut out);
                        })
                    });
                }
            }
            group.finish();
        }
    }
}

criterion_group!(benches, bench);
criterion_main!(benches);
