//! Parameter validation, bad logits, greedy decoding, logit bias and the penalties, against
//! hand-computed examples and an independent argmax.

use oxibonsai_engine::sampling::{Sampler, SamplingError, SamplingParams};
use proptest::prelude::*;

mod common;
use common::{plain, sampler};

fn counts(sampler: &mut Sampler, logits: &[f32], draws: usize) -> Vec<usize> {
    let mut counts = vec![0; logits.len()];
    for _ in 0..draws {
        counts[sampler.sample(logits).unwrap() as usize] += 1;
    }
    counts
}

// ---- defaults and validation ----

#[test]
fn defaults_are_llama_cpp_defaults() {
    let d = SamplingParams::default();
    assert_eq!(
        (d.temperature, d.top_k, d.top_p, d.min_p),
        (0.8, 40, 0.95, 0.05)
    );
    assert_eq!(
        (
            d.repeat_penalty,
            d.repeat_last_n,
            d.presence_penalty,
            d.frequency_penalty
        ),
        (1.0, 64, 0.0, 0.0)
    );
    assert!(d.logit_bias.is_empty() && d.seed.is_none());
}

#[test]
fn each_invalid_parameter_is_named() {
    let cases: Vec<(&str, SamplingParams)> = vec![
        (
            "temperature",
            SamplingParams {
                temperature: f32::NAN,
                ..Default::default()
            },
        ),
        (
            "temperature",
            SamplingParams {
                temperature: f32::INFINITY,
                ..Default::default()
            },
        ),
        (
            "top_p",
            SamplingParams {
                top_p: -0.1,
                ..Default::default()
            },
        ),
        (
            "top_p",
            SamplingParams {
                top_p: 1.5,
                ..Default::default()
            },
        ),
        (
            "top_p",
            SamplingParams {
                top_p: f32::NAN,
                ..Default::default()
            },
        ),
        (
            "min_p",
            SamplingParams {
                min_p: -0.5,
                ..Default::default()
            },
        ),
        (
            "min_p",
            SamplingParams {
                min_p: f32::NAN,
                ..Default::default()
            },
        ),
        (
            "repeat_penalty",
            SamplingParams {
                repeat_penalty: 0.0,
                ..Default::default()
            },
        ),
        (
            "repeat_penalty",
            SamplingParams {
                repeat_penalty: -1.1,
                ..Default::default()
            },
        ),
        (
            "presence_penalty",
            SamplingParams {
                presence_penalty: f32::INFINITY,
                ..Default::default()
            },
        ),
        (
            "frequency_penalty",
            SamplingParams {
                frequency_penalty: f32::NAN,
                ..Default::default()
            },
        ),
    ];
    for (name, params) in cases {
        match Sampler::new(params, 10) {
            Err(err @ SamplingError::InvalidParameter { name: found, .. }) => {
                assert_eq!(found, name);
                assert!(err.to_string().contains(name), "{err}");
            }
            other => panic!("{name}: expected InvalidParameter, got {other:?}"),
        }
    }
}

#[test]
fn logit_bias_and_vocabulary_errors_are_specific() {
    let out_of_range = SamplingParams {
        logit_bias: vec![(3, 1.0), (10, 1.0)],
        ..Default::default()
    };
    assert_eq!(
        Sampler::new(out_of_range, 10).unwrap_err(),
        SamplingError::BiasTokenOutOfRange {
            token: 10,
            n_vocab: 10
        }
    );
    let plus_inf = SamplingParams {
        logit_bias: vec![(4, f32::INFINITY)],
        ..Default::default()
    };
    assert_eq!(
        Sampler::new(plus_inf, 10).unwrap_err(),
        SamplingError::InvalidBias {
            token: 4,
            found: f32::INFINITY
        }
    );
    let nan = SamplingParams {
        logit_bias: vec![(2, f32::NAN)],
        ..Default::default()
    };
    assert!(matches!(
        Sampler::new(nan, 10),
        Err(SamplingError::InvalidBias { token: 2, .. })
    ));
    assert_eq!(
        Sampler::new(SamplingParams::default(), 0).unwrap_err(),
        SamplingError::InvalidVocabularySize { n_vocab: 0 }
    );
    // Edge values are accepted: a ban, top_p 0 and 1, min_p 0 and 1, negative temperature.
    let edges = SamplingParams {
        logit_bias: vec![(9, f32::NEG_INFINITY)],
        top_p: 0.0,
        min_p: 1.0,
        temperature: -1.0,
        ..Default::default()
    };
    Sampler::new(edges, 10).unwrap();
}

#[test]
fn bad_logits_are_errors() {
    let mut s = sampler(plain(1), 4);
    assert_eq!(
        s.sample(&[0.0; 3]).unwrap_err(),
        SamplingError::LogitCount {
            expected: 4,
            found: 3
        }
    );
    assert!(matches!(
        s.sample(&[0.0, f32::NAN, 1.0, 2.0]),
        Err(SamplingError::InvalidLogit { token: 1, .. })
    ));
    assert!(matches!(
        s.sample(&[0.0, 1.0, f32::INFINITY, 2.0]),
        Err(SamplingError::InvalidLogit { token: 2, .. })
    ));
    assert_eq!(
        s.sample(&[f32::NEG_INFINITY; 4]).unwrap_err(),
        SamplingError::NoCandidates
    );
}

// ---- greedy and logit bias ----

proptest! {
    #[test]
    fn greedy_is_the_first_argmax(logits in prop::collection::vec(-8i8..8, 1..300)) {
        // Small integers make ties frequent.
        let logits: Vec<f32> = logits.into_iter().map(f32::from).collect();
        let mut expected = 0;
        for (i, &l) in logits.iter().enumerate() {
            if l > logits[expected] {
                expected = i;
            }
        }
        let mut s = sampler(SamplingParams::greedy(), logits.len());
        prop_assert_eq!(s.sample(&logits).unwrap(), expected as u32);
        // A tiny positive temperature concentrates all mass on the same token.
        let mut cold = sampler(SamplingParams { temperature: 1e-4, seed: Some(3), ..plain(0) }, logits.len());
        let tied = logits.iter().filter(|&&l| l == logits[expected]).count();
        if tied == 1 {
            prop_assert_eq!(cold.sample(&logits).unwrap(), expected as u32);
        }
    }
}

#[test]
fn greedy_ties_go_to_the_lowest_id() {
    let mut s = sampler(SamplingParams::greedy(), 5);
    assert_eq!(s.sample(&[1.0, 3.0, 0.5, 3.0, 3.0]).unwrap(), 1);
    assert_eq!(s.sample(&[-0.0, 0.0, -1.0, -2.0, -3.0]).unwrap(), 0);
}

#[test]
fn logit_bias_bans_and_forces_tokens() {
    let logits = [1.0, 3.0, 2.0, 0.0];
    let ban = SamplingParams {
        logit_bias: vec![(1, f32::NEG_INFINITY)],
        ..SamplingParams::greedy()
    };
    assert_eq!(sampler(ban, 4).sample(&logits).unwrap(), 2);
    let force = SamplingParams {
        logit_bias: vec![(3, 100.0)],
        ..SamplingParams::greedy()
    };
    assert_eq!(sampler(force, 4).sample(&logits).unwrap(), 3);
    // Entries for one token add up: 1 + 1.5 + 1.5 = 4 > 3.
    let summed = SamplingParams {
        logit_bias: vec![(0, 1.5), (0, 1.5)],
        ..SamplingParams::greedy()
    };
    assert_eq!(sampler(summed, 4).sample(&logits).unwrap(), 0);

    // When drawing, a banned token never comes out, even the most likely one.
    let bans = SamplingParams {
        logit_bias: vec![(1, f32::NEG_INFINITY), (2, f32::NEG_INFINITY)],
        ..plain(7)
    };
    let drawn = counts(&mut sampler(bans, 4), &logits, 5_000);
    assert_eq!((drawn[1], drawn[2]), (0, 0));
    assert!(drawn[0] > 0 && drawn[3] > 0, "{drawn:?}");
}

// ---- penalties ----

/// The logit of each token after bias and penalties, as `candidates()` reports them.
fn adjusted(s: &mut Sampler, logits: &[f32]) -> Vec<f32> {
    let mut out = vec![f32::NAN; logits.len()];
    for c in s.candidates(logits).unwrap() {
        out[c.id as usize] = c.logit;
    }
    out
}

#[test]
fn repeat_penalty_divides_positive_and_multiplies_negative_logits() {
    let logits = [2.0f32, -1.0, 0.5, 3.0, 0.0];
    let mut s = sampler(
        SamplingParams {
            repeat_penalty: 2.0,
            ..plain(0)
        },
        5,
    );
    for t in [0, 1, 0, 4] {
        s.accept(t);
    }
    // Counts do not matter to the repeat penalty; zero stays zero.
    assert_eq!(adjusted(&mut s, &logits), vec![1.0, -2.0, 0.5, 3.0, 0.0]);
    s.reset();
    assert_eq!(adjusted(&mut s, &logits), logits.to_vec());
}

#[test]
fn presence_and_frequency_penalties_use_window_counts() {
    let logits = [2.0f32, -1.0, 0.5, 3.0];
    let params = SamplingParams {
        frequency_penalty: 0.5,
        presence_penalty: 0.25,
        ..plain(0)
    };
    let mut s = sampler(params, 4);
    for t in [2, 3, 2, 2] {
        s.accept(t);
    }
    // Token 2: 0.5 - 3 × 0.5 - 0.25; token 3: 3 - 0.5 - 0.25.
    assert_eq!(adjusted(&mut s, &logits), vec![2.0, -1.0, -1.25, 2.25]);

    // All three together: the repeat penalty first, then the subtraction.
    let all = SamplingParams {
        repeat_penalty: 2.0,
        frequency_penalty: 0.5,
        presence_penalty: 1.0,
        ..plain(0)
    };
    let mut s = sampler(all, 4);
    for t in [0, 1, 0] {
        s.accept(t);
    }
    // Token 0: 2 / 2 - 2 × 0.5 - 1; token 1: -1 × 2 - 0.5 - 1.
    assert_eq!(adjusted(&mut s, &logits), vec![-1.0, -3.5, 0.5, 3.0]);
}

#[test]
fn penalties_see_only_the_last_n_tokens() {
    let logits = [1.0f32, 1.0, 1.0, 1.0];
    let params = SamplingParams {
        repeat_last_n: 3,
        frequency_penalty: 1.0,
        ..plain(0)
    };
    let mut s = sampler(params, 4);
    for t in [0, 0, 1, 2, 2] {
        s.accept(t);
    }
    // The window is [1, 2, 2]: both 0s have left it.
    assert_eq!(adjusted(&mut s, &logits), vec![1.0, 0.0, -1.0, 1.0]);
    s.accept(3);
    // [2, 2, 3]
    assert_eq!(adjusted(&mut s, &logits), vec![1.0, 1.0, -1.0, 0.0]);

    let off = SamplingParams {
        repeat_last_n: 0,
        frequency_penalty: 1.0,
        repeat_penalty: 3.0,
        ..plain(0)
    };
    let mut s = sampler(off, 4);
    s.accept(0);
    assert_eq!(adjusted(&mut s, &logits), logits.to_vec());
}

#[test]
fn penalties_change_the_greedy_choice_and_bans_survive_them() {
    let logits = [3.0f32, 2.0, 2.5];
    let params = SamplingParams {
        repeat_penalty: 2.0,
        presence_penalty: -10.0, // a negative presence penalty favours seen tokens…
        logit_bias: vec![(2, f32::NEG_INFINITY)],
        ..SamplingParams::greedy()
    };
    let mut s = sampler(params, 3);
    assert_eq!(s.sample(&logits).unwrap(), 0);
    s.accept(2);
    // …but a banned token stays banned: -inf × 2 + 10 is still -inf.
    assert_eq!(s.sample(&logits).unwrap(), 0);
    s.accept(0);
    // Token 0: 3 / 2 + 10 = 11.5 still wins; drop the presence term and it loses to token 1.
    assert_eq!(s.sample(&logits).unwrap(), 0);
    let mut plain_repeat = sampler(
        SamplingParams {
            repeat_penalty: 2.0,
            ..SamplingParams::greedy()
        },
        3,
    );
    plain_repeat.accept(0);
    assert_eq!(plain_repeat.sample(&logits).unwrap(), 2);
    plain_repeat.accept(2);
    assert_eq!(plain_repeat.sample(&logits).unwrap(), 1);
}
