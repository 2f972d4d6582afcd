//! Seeded draws and the truncation chain against independent oracles (the softmax, a full
//! sort), hand-computed examples and statistics of the draws.

use oxibonsai_engine::sampling::{Sampler, SamplingParams, TokenProb};
use proptest::prelude::*;

mod common;
use common::{plain, sampler};

fn ids(candidates: &[TokenProb]) -> Vec<u32> {
    candidates.iter().map(|c| c.id).collect()
}

fn softmax(logits: &[f64]) -> Vec<f64> {
    let max = logits.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let exps: Vec<f64> = logits.iter().map(|l| (l - max).exp()).collect();
    let total: f64 = exps.iter().sum();
    exps.iter().map(|e| e / total).collect()
}

fn counts(sampler: &mut Sampler, logits: &[f32], draws: usize) -> Vec<usize> {
    let mut counts = vec![0; logits.len()];
    for _ in 0..draws {
        counts[sampler.sample(logits).unwrap() as usize] += 1;
    }
    counts
}

/// Deterministic pseudo-random logits (a 64-bit LCG), so large cases need no stored data.
fn lcg_logits(n: usize, seed: u64, spread: f32) -> Vec<f32> {
    let mut state = seed;
    (0..n)
        .map(|_| {
            state = state
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((state >> 40) as f32 / (1u64 << 24) as f32 - 0.5) * spread
        })
        .collect()
}

/// Ids in the chain's order (most likely first, ties by lowest id), by a full sort.
fn order_by_full_sort(logits: &[f32]) -> Vec<u32> {
    let mut order: Vec<u32> = (0..logits.len() as u32).collect();
    order.sort_by(|&a, &b| {
        logits[b as usize]
            .partial_cmp(&logits[a as usize])
            .unwrap()
            .then(a.cmp(&b))
    });
    order
}

/// Top-p by the definition: the shortest sorted prefix whose probability reaches p.
fn top_p_oracle(logits: &[f32], p: f64) -> Vec<u32> {
    let order = order_by_full_sort(logits);
    let probs = softmax(&logits.iter().map(|&l| f64::from(l)).collect::<Vec<_>>());
    let mut cumulative = 0.0;
    let mut kept = Vec::new();
    for id in order {
        kept.push(id);
        cumulative += probs[id as usize];
        if cumulative >= p {
            break;
        }
    }
    kept
}

proptest! {
    #[test]
    fn top_k_keeps_the_k_best_by_full_sort(
        logits in prop::collection::vec(-6i8..6, 1..200),
        k in 1usize..50,
    ) {
        let logits: Vec<f32> = logits.into_iter().map(f32::from).collect();
        let mut expected = order_by_full_sort(&logits);
        expected.truncate(k);
        let mut s = sampler(SamplingParams { top_k: k, ..plain(0) }, logits.len());
        prop_assert_eq!(ids(s.candidates(&logits).unwrap()), expected);
    }

    /// Greedy sampling is the first of the most likely tokens after the logit bias, as a plain
    /// scan finds it: few distinct values (many ties), lengths around the vectorized pass's 16
    /// lanes, banned (-inf) tokens, signed zeros.
    #[test]
    fn greedy_takes_the_lowest_id_of_the_best(
        logits in prop::collection::vec(prop_oneof![
            (-3i8..3).prop_map(f32::from),
            Just(f32::NEG_INFINITY),
            Just(-0.0f32),
        ], 1..70),
        bias in prop::collection::vec((0u32..70, -2i8..3), 0..4),
    ) {
        let n = logits.len();
        let bias: Vec<(u32, f32)> = bias
            .into_iter()
            .filter(|&(t, _)| (t as usize) < n)
            .map(|(t, b)| (t, f32::from(b)))
            .collect();
        let mut adjusted = logits.clone();
        for &(t, b) in &bias {
            adjusted[t as usize] += b;
        }
        let mut s = sampler(
            SamplingParams { temperature: 0.0, logit_bias: bias, ..plain(0) },
            n,
        );
        if adjusted.iter().all(|&l| l == f32::NEG_INFINITY) {
            prop_assert!(s.sample(&logits).is_err());
        } else {
            let mut best = 0;
            for (i, &l) in adjusted.iter().enumerate() {
                if l > adjusted[best] {
                    best = i;
                }
            }
            prop_assert_eq!(s.sample(&logits).unwrap(), best as u32);
            let only = s.candidates(&logits).unwrap();
            prop_assert_eq!(only.len(), 1);
            prop_assert_eq!(only[0].logit.to_bits(), adjusted[best].to_bits());
        }
    }
}

// ---- seeds ----

#[test]
fn same_seed_same_draws_different_seed_different_draws() {
    let logits = lcg_logits(1000, 5, 6.0);
    let run = |seed: u64| {
        let params = SamplingParams {
            seed: Some(seed),
            ..SamplingParams::default()
        };
        let mut s = sampler(params, logits.len());
        (0..1000)
            .map(|_| s.sample(&logits).unwrap())
            .collect::<Vec<u32>>()
    };
    let a = run(1234);
    assert_eq!(a, run(1234));
    let b = run(1235);
    assert_ne!(a, b);
    // The default chain keeps up to 40 tokens: the draws really vary.
    let mut distinct = a.clone();
    distinct.sort_unstable();
    distinct.dedup();
    assert!(distinct.len() > 5, "{} distinct tokens", distinct.len());

    // reset() replays the same sequence when the seed was given.
    let mut s = sampler(
        SamplingParams {
            seed: Some(1234),
            ..SamplingParams::default()
        },
        logits.len(),
    );
    let first: Vec<u32> = (0..100).map(|_| s.sample(&logits).unwrap()).collect();
    s.reset();
    let again: Vec<u32> = (0..100).map(|_| s.sample(&logits).unwrap()).collect();
    assert_eq!(first, again);
    assert_eq!(first[..], a[..100]);
}

#[test]
fn no_seed_draws_a_fresh_one_and_reports_it() {
    let a = sampler(SamplingParams::default(), 8);
    let b = sampler(SamplingParams::default(), 8);
    assert_ne!(a.seed(), b.seed());
    assert_eq!(sampler(plain(99), 8).seed(), 99);
    // Replaying with the reported seed gives the same draws.
    let logits = lcg_logits(8, 1, 2.0);
    let mut original = a;
    let same = SamplingParams {
        seed: Some(original.seed()),
        ..original.params().clone()
    };
    let mut replay = sampler(same, 8);
    for _ in 0..50 {
        assert_eq!(
            original.sample(&logits).unwrap(),
            replay.sample(&logits).unwrap()
        );
    }
}

// ---- the distribution ----

#[test]
fn draws_follow_the_softmax_chi_square() {
    let logits = [0.0f32, 1.0, -0.5, 2.0, 0.3];
    let probs = softmax(&logits.iter().map(|&l| f64::from(l)).collect::<Vec<_>>());
    let draws = 50_000;
    let observed = counts(&mut sampler(plain(2024), 5), &logits, draws);
    let chi2: f64 = observed
        .iter()
        .zip(&probs)
        .map(|(&o, &p)| {
            let e = p * draws as f64;
            (o as f64 - e).powi(2) / e
        })
        .sum();
    // 4 degrees of freedom: P(χ² > 18.47) = 0.001.
    eprintln!("chi-square {chi2:.3} over {observed:?}");
    assert!(
        chi2 < 18.47,
        "chi-square {chi2} for {observed:?} vs {probs:?}"
    );

    // candidates() reports the same softmax.
    let mut s = sampler(plain(0), 5);
    for c in s.candidates(&logits).unwrap() {
        assert!((f64::from(c.prob) - probs[c.id as usize]).abs() < 1e-6);
    }
}

#[test]
fn top_k_two_never_draws_outside_the_top_two() {
    let logits = [0.5f32, 2.0, 1.9, -1.0, 1.8, 0.0];
    let drawn = counts(
        &mut sampler(
            SamplingParams {
                top_k: 2,
                ..plain(11)
            },
            6,
        ),
        &logits,
        10_000,
    );
    assert_eq!(
        drawn.iter().sum::<usize>(),
        drawn[1] + drawn[2],
        "{drawn:?}"
    );
    // Renormalised over the two: p(1) = 1 / (1 + e^-0.1) = 0.525.
    let share = drawn[1] as f64 / 10_000.0;
    assert!((share - 0.524_979).abs() < 0.02, "{share}");
}

#[test]
fn temperature_scales_the_log_odds() {
    // Log-odds of token 1 over token 0 is ln 3 at temperature 1, ln 3 / T otherwise.
    let logits = [0.0f32, 3f32.ln()];
    let draws = 40_000;
    let mut observed = Vec::new();
    for (seed, t) in [(1u64, 0.5f32), (2, 1.0), (3, 2.0)] {
        let c = counts(
            &mut sampler(
                SamplingParams {
                    temperature: t,
                    ..plain(seed)
                },
                2,
            ),
            &logits,
            draws,
        );
        let log_odds = (c[1] as f64 / c[0] as f64).ln();
        let expected = 3f64.ln() / f64::from(t);
        // Standard error of an empirical log-odds: sqrt(1/n0 + 1/n1).
        let sigma = (1.0 / c[0] as f64 + 1.0 / c[1] as f64).sqrt();
        eprintln!("T={t}: log-odds {log_odds:.4} expected {expected:.4} (σ {sigma:.4})");
        assert!(
            (log_odds - expected).abs() < 4.0 * sigma,
            "T={t}: {log_odds} vs {expected}"
        );
        observed.push(log_odds);
    }
    // Halving the temperature doubles the log-odds, doubling it halves them.
    assert!(
        (observed[0] / observed[1] - 2.0).abs() < 0.1,
        "{observed:?}"
    );
    assert!(
        (observed[2] / observed[1] - 0.5).abs() < 0.05,
        "{observed:?}"
    );
}

// ---- top-p and min-p ----

/// Logits whose softmax is exactly (to rounding) the given probabilities.
fn logits_of(probs: &[f64]) -> Vec<f32> {
    probs.iter().map(|p| p.ln() as f32).collect()
}

#[test]
fn top_p_keeps_the_smallest_set_reaching_p() {
    let logits = logits_of(&[0.1, 0.5, 0.15, 0.25]);
    let kept = |p: f32| {
        let mut s = sampler(
            SamplingParams {
                top_p: p,
                ..plain(0)
            },
            4,
        );
        let c = s.candidates(&logits).unwrap().to_vec();
        (ids(&c), c)
    };
    assert_eq!(kept(0.7).0, vec![1, 3]); // 0.5, then 0.75 >= 0.7
    assert_eq!(kept(0.8).0, vec![1, 3, 2]); // 0.75 < 0.8 <= 0.9
    assert_eq!(kept(0.95).0, vec![1, 3, 2, 0]);
    assert_eq!(kept(0.3).0, vec![1]);
    assert_eq!(kept(0.0).0, vec![1]); // at least one token
                                      // The kept set is renormalised: 0.5 / 0.75 and 0.25 / 0.75.
    let (_, c) = kept(0.7);
    assert!((c[0].prob - 2.0 / 3.0).abs() < 1e-6 && (c[1].prob - 1.0 / 3.0).abs() < 1e-6);
}

#[test]
fn top_p_matches_a_full_sort_on_large_vocabularies() {
    // Flat logits push the cut far past the first partial sort (256 tokens); sharp ones keep it
    // inside. 151,936 is Qwen3's vocabulary.
    for (n, spread, seed) in [
        (5_000, 2.0, 1u64),
        (5_000, 40.0, 2),
        (151_936, 8.0, 3),
        (151_936, 0.5, 4),
    ] {
        let logits = lcg_logits(n, seed, spread);
        for p in [0.05f32, 0.5, 0.9, 0.99] {
            let mut s = sampler(
                SamplingParams {
                    top_p: p,
                    ..plain(0)
                },
                n,
            );
            let got = ids(s.candidates(&logits).unwrap());
            let expected = top_p_oracle(&logits, f64::from(p));
            assert_eq!(got.len(), expected.len(), "n={n} spread={spread} p={p}");
            assert_eq!(got, expected, "n={n} spread={spread} p={p}");
        }
    }
}

#[test]
fn min_p_keeps_tokens_relative_to_the_most_likely() {
    // Probabilities relative to the best: 1, e^-1 = 0.368, e^-2 = 0.135, e^-5 = 0.0067.
    let logits = [0.0f32, 2.0, -3.0, 1.0];
    let kept = |min_p: f32| {
        let mut s = sampler(SamplingParams { min_p, ..plain(0) }, 4);
        ids(s.candidates(&logits).unwrap())
    };
    assert_eq!(kept(0.3), vec![1, 3]);
    assert_eq!(kept(0.1), vec![1, 3, 0]);
    assert_eq!(kept(0.005), vec![1, 3, 0, 2]);
    assert_eq!(kept(1.0), vec![1]);
    assert_eq!(kept(0.0), vec![1, 3, 0, 2]);
}

#[test]
fn the_chain_runs_in_llama_cpp_order() {
    let logits = logits_of(&[0.4, 0.3, 0.2, 0.1]);
    let kept = |params: SamplingParams| {
        let mut s = sampler(params, 4);
        s.candidates(&logits).unwrap().to_vec()
    };
    // top-p alone: 0.4, 0.7 >= 0.5 keeps two.
    assert_eq!(
        ids(&kept(SamplingParams {
            top_p: 0.5,
            ..plain(0)
        })),
        vec![0, 1]
    );
    // After top-k = 2 the probabilities are renormalised (4/7, 3/7): top-p 0.5 keeps one.
    assert_eq!(
        ids(&kept(SamplingParams {
            top_k: 2,
            top_p: 0.5,
            ..plain(0)
        })),
        vec![0]
    );
    // top-p before min-p: top-p 0.75 keeps 0.4 + 0.3 + 0.2, min-p 0.3 then drops nothing of it.
    // (min-p first would drop token 3, renormalise to 4/9, 3/9, 2/9, and top-p would keep two.)
    assert_eq!(
        ids(&kept(SamplingParams {
            top_p: 0.75,
            min_p: 0.3,
            ..plain(0)
        })),
        vec![0, 1, 2]
    );
    assert_eq!(
        ids(&kept(SamplingParams {
            min_p: 0.3,
            ..plain(0)
        })),
        vec![0, 1, 2]
    );
    // Temperature comes last: it changes no set, only the final probabilities.
    for t in [0.25f32, 4.0] {
        let c = kept(SamplingParams {
            top_p: 0.5,
            temperature: t,
            ..plain(0)
        });
        assert_eq!(ids(&c), vec![0, 1]);
        let expected = (4.0f64 / 3.0).powf(1.0 / f64::from(t));
        assert!((f64::from(c[0].prob / c[1].prob) - expected).abs() < 1e-4 * expected);
    }
}
