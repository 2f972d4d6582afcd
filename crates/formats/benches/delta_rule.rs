//! The gated delta rule's decode step of one Gated DeltaNet layer of Bonsai-27B's shape (S 128,
//! 48 value heads on 16 key heads): every head's S×S state read and written once per token, one
//! thread, per tier; throughput in bytes of state. The state of all 48 layers (151 MB) does not
//! fit a cache, so `streamed` cycles through 48 layers' states as a decode step does.

mod common;

use std::time::Duration;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use oxibonsai_formats::kernels::{Isa, Kernels};

const S: usize = 128;
const H_V: usize = 48;
const H_K: usize = 16;
const LAYERS: usize = 48;

fn bench(c: &mut Criterion) {
    let mut values = common::Values::new();
    let mut next = move || 0.1 * values.next();
    let layer = H_V * S * S;
    let mut states: Vec<f32> = (0..LAYERS * layer).map(|_| next()).collect();
    let unit = |v: Vec<f32>| {
        let n = v.iter().map(|x| x * x).sum::<f32>().sqrt();
        v.into_iter().map(|x| x / n).collect::<Vec<f32>>()
    };
    let q = unit((0..H_K * S).map(|_| next()).collect());
    let k = unit((0..H_K * S).map(|_| next()).collect());
    let v: Vec<f32> = (0..H_V * S).map(|_| next()).collect();
    let mut out = vec![0.0f32; H_V * S];
    let mut group = c.benchmark_group(format!("delta_rule_s{S}_hv{H_V}_layer"));
    group
        .sample_size(20)
        .measurement_time(Duration::from_secs(2))
        .warm_up_time(Duration::from_millis(300))
        .throughput(Throughput::Bytes((2 * layer * 4) as u64));
    for isa in Isa::ALL.into_iter().filter(|i| i.available()) {
        let kernels = Kernels::new(isa).expect("available");
        let mut l = 0;
        group.bench_function(format!("{}_streamed", isa.name()), |b| {
            b.iter(|| {
                let state = &mut states[l * layer..(l + 1) * layer];
                for (h, (st, o)) in state
                    .chunks_exact_mut(S * S)
                    .zip(out.chunks_exact_mut(S))
                    .enumerate()
                {
                    let kh = h % H_K;
                    let (qh, kh) = (&q[kh * S..(kh + 1) * S], &k[kh * S..(kh + 1) * S]);
                    kernels.delta_rule(st, kh, &v[h * S..(h + 1) * S], qh, 0.99, 0.5, o);
                }
                l = (l + 1) % LAYERS;
            })
        });
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
