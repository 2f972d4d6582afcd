//! The gated delta rule's step (Gated DeltaNet's recurrence) of every tier against its scalar
//! twin, and the twin against an f64 transcription of the rule in matrix notation (`M[i][j]`,
//! `M ← g·M; δ = β(v − Mᵀk); M ← M + k δᵀ; o = Mᵀq`), over many tokens on awkward state sizes
//! (1, 3, every vector-width remainder, 128), with guard values after the state and the output.

use oxibonsai_formats::kernels::delta_rule_scalar;

mod common;
use common::Rng;

/// A unit-length vector (the layer L2-normalises q and k before the rule).
fn unit_vector(rng: &mut Rng, s: usize) -> Vec<f32> {
    let v: Vec<f32> = (0..s).map(|_| rng.unit() * 2.0 - 1.0).collect();
    let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt().max(1e-6);
    v.iter().map(|x| x / norm).collect()
}

struct Token {
    k: Vec<f32>,
    v: Vec<f32>,
    q: Vec<f32>,
    decay: f32,
    beta: f32,
}

fn tokens(rng: &mut Rng, s: usize, n: usize) -> Vec<Token> {
    (0..n)
        .map(|_| Token {
            k: unit_vector(rng, s),
            v: (0..s).map(|_| rng.unit() * 4.0 - 2.0).collect(),
            q: unit_vector(rng, s),
            decay: (-(rng.unit() * 2.0)).exp(),
            beta: rng.unit(),
        })
        .collect()
}

const SIZES: [usize; 11] = [1, 3, 4, 7, 8, 15, 16, 17, 33, 64, 128];
const STEPS: usize = 24;

#[test]
fn the_scalar_twin_is_the_delta_rule() {
    let mut rng = Rng(7);
    for s in SIZES {
        let mut m = vec![vec![0.0f64; s]; s]; // m[i][j]
        let mut state = vec![0.0f32; s * s];
        let mut out = vec![0.0f32; s];
        for t in tokens(&mut rng, s, STEPS) {
            let g = f64::from(t.decay);
            m.iter_mut().flatten().for_each(|x| *x *= g);
            let kv: Vec<f64> = (0..s)
                .map(|j| (0..s).map(|i| m[i][j] * f64::from(t.k[i])).sum())
                .collect();
            for (row, &ki) in m.iter_mut().zip(&t.k) {
                for ((mij, &vj), kvj) in row.iter_mut().zip(&t.v).zip(&kv) {
                    let delta = f64::from(t.beta) * (f64::from(vj) - kvj);
                    *mij += f64::from(ki) * delta;
                }
            }
            delta_rule_scalar(&mut state, &t.k, &t.v, &t.q, t.decay, t.beta, &mut out);
            for j in 0..s {
                let want: f64 = (0..s).map(|i| m[i][j] * f64::from(t.q[i])).sum();
                let scale: f64 = (0..s).map(|i| (m[i][j] * f64::from(t.q[i])).abs()).sum();
                assert!(
                    (f64::from(out[j]) - want).abs() <= 1e-5 * (scale + 1.0),
                    "S {s} out[{j}]: {} vs {want}",
                    out[j]
                );
                for i in 0..s {
                    let got = f64::from(state[j * s + i]);
                    assert!((got - m[i][j]).abs() <= 1e-5 * (m[i][j].abs() + 1.0));
                }
            }
        }
    }
}

#[test]
fn every_tier_matches_the_scalar_twin() {
    let mut rng = Rng(19);
    let mut tested = 0;
    let guard = f32::from_bits(0x7fc0_dead);
    for kernels in common::tiers() {
        for s in SIZES {
            let mut want_state = vec![0.0f32; s * s];
            let mut want = vec![0.0f32; s];
            let mut state = vec![0.0f32; s * s + 3];
            state[s * s..].fill(guard);
            let mut got = vec![guard; s + 3];
            for (n, t) in tokens(&mut rng, s, STEPS).iter().enumerate() {
                delta_rule_scalar(
                    &mut want_state,
                    &t.k,
                    &t.v,
                    &t.q,
                    t.decay,
                    t.beta,
                    &mut want,
                );
                let (st, _) = state.split_at_mut(s * s);
                kernels.delta_rule(st, &t.k, &t.v, &t.q, t.decay, t.beta, &mut got[..s]);
                for g in state[s * s..].iter().chain(&got[s..]) {
                    assert_eq!(g.to_bits(), guard.to_bits(), "wrote past the state or out");
                }
                let name = kernels.isa().name();
                for j in 0..s {
                    let row = &want_state[j * s..(j + 1) * s];
                    let scale: f32 = row.iter().zip(&t.q).map(|(m, q)| (m * q).abs()).sum();
                    assert!(
                        (got[j] - want[j]).abs() <= 1e-5 * (scale + 1.0),
                        "{name} S {s} token {n} out[{j}]: {} vs {}",
                        got[j],
                        want[j]
                    );
                    for (a, b) in state[j * s..(j + 1) * s].iter().zip(row) {
                        assert!(
                            (a - b).abs() <= 1e-5 * (b.abs() + 1.0),
                            "{name} S {s} token {n} state row {j}: {a} vs {b}"
                        );
                    }
                }
            }
        }
        tested += 1;
    }
    assert!(tested >= 1);
}

#[test]
#[should_panic(expected = "delta_rule")]
fn a_state_of_the_wrong_size_is_refused() {
    let mut state = vec![0.0f32; 15];
    let k = [0.0f32; 4];
    let mut out = [0.0f32; 4];
    delta_rule_scalar(&mut state, &k, &k, &k, 1.0, 0.5, &mut out);
}
