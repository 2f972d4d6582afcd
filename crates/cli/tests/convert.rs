//! `convert` through the binary, on tiny checkpoints written here with the `safetensors` crate
//! and the real Qwen3 tokenizer files: the engine's logits on the converted file (Qwen3, Qwen2, Llama) equal an
//! independent float64 forward pass over the checkpoint's own weights (Hugging Face conventions:
//! `rotate_half` RoPE, so Llama's query/key permutation is really checked), sharded and single
//! checkpoints give the same file, the vocabulary equals the reference converter's and tokenizes
//! like `tokenizers`, ternary weights survive `tq2_0` / `pq2_0` exactly, and bad input is refused
//! naming the file, key or tensor.

mod common;
// Beside this file, not in tests/ itself, where cargo would take each for a test of its own.
#[path = "convert/checkpoint.rs"]
mod checkpoint;
#[path = "convert/reference.rs"]
mod reference;

use std::path::{Path, PathBuf};

use checkpoint::{llama_spec, make_weights, qwen2_spec, qwen3_spec, write_checkpoint, Spec};
use common::{oxibonsai, path_str};
use oxibonsai_gguf::GgufFile;
use oxibonsai_testkit::golden;
use reference::{reference_logits, sigma_between, worst_sigma, RopePairs};
use serde_json::{json, Value};

fn convert(dir: &Path, out: &Path, file_type: &str) {
    let run = oxibonsai(["convert", path_str(dir), path_str(out), "--type", file_type]);
    assert_eq!(run.code, 0, "convert failed: {}", run.stderr);
}

/// The engine's logits for `tokens`, teacher-forced, through `oxibonsai logits --raw`.
fn engine_logits(model: &Path, tokens: &[u32], scratch: &Path) -> Vec<f32> {
    let raw = scratch.join("logits.f32");
    let list: Vec<String> = tokens.iter().map(u32::to_string).collect();
    let run = oxibonsai([
        "logits",
        "-m",
        path_str(model),
        "--tokens",
        &list.join(","),
        "--raw",
        path_str(&raw),
    ]);
    assert_eq!(run.code, 0, "logits failed: {}", run.stderr);
    std::fs::read(&raw)
        .unwrap()
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
        .collect()
}

const TOKENS: &[u32] = &[
    151644, 872, 198, 9707, 11, 1879, 0, 33975, 13, 151645, 151667, 42,
];

/// f32 weights against float64: what differs is rounding, mostly the engine's f16 KV cache (as
/// llama.cpp's default), observed ~1.4e-3 σ. A wrong RoPE pairing, norm or head layout is off by
/// tenths of σ or more.
const LOGIT_BOUND_SIGMA: f64 = 1e-2;

/// Converts the spec (also sharded, when asked: the file must not change), then checks the
/// logits against the float64 pass and the chat template against its source.
fn check_architecture(spec: &Spec, seed: u64, also_sharded: bool) {
    let tmp = tempfile::tempdir().unwrap();
    let weights = make_weights(spec, seed);
    // The folder name becomes general.name, so both copies share it.
    let single = tmp.path().join("single").join("tiny");
    write_checkpoint(&single, spec, &weights, 1);
    let out_single = tmp.path().join("single.gguf");
    convert(&single, &out_single, "f32");
    if also_sharded {
        let sharded = tmp.path().join("sharded").join("tiny");
        write_checkpoint(&sharded, spec, &weights, 3);
        let out_sharded = tmp.path().join("sharded.gguf");
        convert(&sharded, &out_sharded, "f32");
        assert!(
            std::fs::read(&out_single).unwrap() == std::fs::read(&out_sharded).unwrap(),
            "sharded and single-file checkpoints converted differently"
        );
    }

    let file = GgufFile::open(&out_single).unwrap();
    let template = file
        .metadata()
        .get_str("tokenizer.chat_template")
        .unwrap()
        .to_owned();
    if spec.template_file {
        assert_eq!(template, checkpoint::TEMPLATE_FILE_TEXT);
    } else {
        let tc: Value = serde_json::from_str(
            &std::fs::read_to_string(golden("tokenizer/qwen3/tokenizer_config.json")).unwrap(),
        )
        .unwrap();
        assert_eq!(template, tc["chat_template"].as_str().unwrap());
    }
    assert_eq!(file.tensor("output.weight").is_some(), !spec.tied);
    drop(file);

    let ours = engine_logits(&out_single, TOKENS, tmp.path());
    let reference = reference_logits(spec, &weights, TOKENS, RopePairs::Halves);
    let err = worst_sigma(&ours, &reference);
    eprintln!(
        "{:?}: worst |Δ| = {err:.2e} σ (bound {LOGIT_BOUND_SIGMA:.0e} σ)",
        spec.arch
    );
    assert!(
        err <= LOGIT_BOUND_SIGMA,
        "{:?}: logits off by {err} σ",
        spec.arch
    );
    // The test can tell the RoPE pairings apart: the other one is far outside the bound.
    let other = reference_logits(spec, &weights, TOKENS, RopePairs::Adjacent);
    let gap = sigma_between(&other, &reference);
    eprintln!(
        "{:?}: the other RoPE pairing is off by {gap:.2} σ",
        spec.arch
    );
    assert!(
        gap > 10.0 * LOGIT_BOUND_SIGMA,
        "RoPE pairing barely matters here ({gap} σ)"
    );
}

#[test]
fn qwen3_logits_match_a_float64_forward_pass() {
    check_architecture(&qwen3_spec(), 1, true);
}

#[test]
fn llama_logits_match_a_float64_forward_pass_through_the_rope_permutation() {
    check_architecture(&llama_spec(), 2, true);
}

#[test]
fn qwen2_logits_match_a_float64_forward_pass_with_biases() {
    check_architecture(&qwen2_spec(), 6, false);
}

/// The converted vocabulary equals the reference converter's (the golden vocabulary-only GGUF
/// was built from the same files), tokenizes as `tokenizers` does, and carries the template.
#[test]
fn qwen3_vocabulary_matches_the_reference_converter_and_tokenizers() {
    let tmp = tempfile::tempdir().unwrap();
    let spec = Spec {
        n_layer: 1,
        ..qwen3_spec()
    };
    let dir = tmp.path().join("tiny");
    write_checkpoint(&dir, &spec, &make_weights(&spec, 3), 1);
    let out = tmp.path().join("out.gguf");
    convert(&dir, &out, "f16");
    let ours = GgufFile::open(&out).unwrap();
    let reference = GgufFile::open(golden("tokenizer/qwen3/qwen3-vocab.gguf")).unwrap();
    let (a, b) = (ours.metadata(), reference.metadata());
    for key in [
        "tokenizer.ggml.model",
        "tokenizer.ggml.pre",
        "tokenizer.chat_template",
    ] {
        assert_eq!(a.get_str(key).unwrap(), b.get_str(key).unwrap(), "{key}");
    }
    for key in ["tokenizer.ggml.tokens", "tokenizer.ggml.merges"] {
        assert!(
            a.get_str_array(key).unwrap() == b.get_str_array(key).unwrap(),
            "{key}"
        );
    }
    assert!(
        a.get_i32_array("tokenizer.ggml.token_type").unwrap()
            == b.get_i32_array("tokenizer.ggml.token_type").unwrap()
    );
    for key in [
        "tokenizer.ggml.bos_token_id",
        "tokenizer.ggml.eos_token_id",
        "tokenizer.ggml.padding_token_id",
    ] {
        assert_eq!(a.get_u32(key).unwrap(), b.get_u32(key).unwrap(), "{key}");
    }
    assert_eq!(
        a.get_bool("tokenizer.ggml.add_bos_token").unwrap(),
        b.get_bool("tokenizer.ggml.add_bos_token").unwrap()
    );
    // The chat template is tokenizer_config.json's, byte for byte.
    let tc: Value = serde_json::from_str(
        &std::fs::read_to_string(golden("tokenizer/qwen3/tokenizer_config.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(
        a.get_str("tokenizer.chat_template").unwrap(),
        tc["chat_template"].as_str().unwrap()
    );
    // The architecture keys the engine needs, including the head size that n_embd / n_head
    // would get wrong.
    assert_eq!(a.get_u32("qwen3.attention.key_length").unwrap(), 32);
    assert_eq!(a.get_u32("qwen3.attention.head_count_kv").unwrap(), 2);
    assert!(
        ours.tensor("output.weight").is_none(),
        "tied: no output.weight"
    );
    assert_eq!(
        ours.tensor("blk.0.attn_q.weight").unwrap().format.name,
        "f16"
    );
    assert_eq!(
        ours.tensor("blk.0.attn_norm.weight").unwrap().format.name,
        "f32"
    );

    let tokenizer = oxibonsai_tokenizer::Tokenizer::from_gguf(&ours).unwrap();
    let hf = tokenizers::Tokenizer::from_file(golden("tokenizer/qwen3/tokenizer.json")).unwrap();
    let texts = [
        "Hello, world!",
        "<|im_start|>user\nWhat is 12345 + 678?<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n",
        "  leading spaces and\ttabs\n\n\nnewlines   ",
        "Ünïcödé: 我想在apple工作, нещо на Български, 🦙🚀😶‍🌫️",
        "I've been 'told he's there, 'RE you sure? We'Ve a'lL",
        "<tool_call>\n{\"name\": \"f\", \"arguments\": {}}\n</tool_call>",
        "3.14159 1000000 0x1F ------======= ......!!!",
    ];
    for text in texts {
        let ours = tokenizer.encode(text, true, true).unwrap();
        let theirs = hf.encode(text, true).unwrap().get_ids().to_vec();
        assert_eq!(ours, theirs, "{text:?}");
    }
}

/// A quantized file type goes through `quantize`'s planner and converter: every tensor gets
/// the type and bytes that `convert --type f32` followed by `quantize` gives.
#[test]
fn quantized_types_equal_converting_then_quantizing() {
    let tmp = tempfile::tempdir().unwrap();
    let spec = Spec {
        n_layer: 1,
        ..qwen3_spec()
    };
    let dir = tmp.path().join("tiny");
    write_checkpoint(&dir, &spec, &make_weights(&spec, 7), 1);
    let f32_file = tmp.path().join("f32.gguf");
    convert(&dir, &f32_file, "f32");
    for file_type in ["q8_0", "q4_k_m"] {
        let direct = tmp.path().join(format!("direct-{file_type}.gguf"));
        convert(&dir, &direct, file_type);
        let requant = tmp.path().join(format!("requant-{file_type}.gguf"));
        let run = oxibonsai([
            "quantize",
            path_str(&f32_file),
            path_str(&requant),
            file_type,
        ]);
        assert_eq!(run.code, 0, "{}", run.stderr);
        let (a, b) = (
            GgufFile::open(&direct).unwrap(),
            GgufFile::open(&requant).unwrap(),
        );
        assert_eq!(a.tensors().len(), b.tensors().len());
        for t in a.tensors() {
            let u = b.tensor(&t.name).unwrap();
            assert_eq!(t.format.name, u.format.name, "{} in {file_type}", t.name);
            assert!(
                a.tensor_data(t) == b.tensor_data(u),
                "{} in {file_type}: bytes differ",
                t.name
            );
        }
        assert_eq!(
            a.metadata().get_u32("general.file_type").unwrap(),
            b.metadata().get_u32("general.file_type").unwrap()
        );
    }
}

/// PrismML-style unpacked ternary weights ({−s, 0, +s} per row) survive tq2_0 and pq2_0
/// exactly; the planner still gives the embeddings their own type.
#[test]
fn ternary_checkpoint_converts_losslessly() {
    let tmp = tempfile::tempdir().unwrap();
    let spec = Spec {
        n_embd: 256,
        n_ff: 256,
        n_layer: 1,
        n_head: 2,
        n_head_kv: 1,
        head_dim: Some(128),
        ternary: true,
        ..qwen3_spec()
    };
    let weights = make_weights(&spec, 4);
    let dir = tmp.path().join("ternary");
    write_checkpoint(&dir, &spec, &weights, 1);
    for (file_type, format) in [("tq2_0", "tq2_0"), ("pq2_0", "pq2_0")] {
        let out = tmp.path().join(format!("{file_type}.gguf"));
        convert(&dir, &out, file_type);
        let file = GgufFile::open(&out).unwrap();
        for (hf, gguf) in [
            ("self_attn.q_proj", "attn_q"),
            ("self_attn.k_proj", "attn_k"),
            ("self_attn.v_proj", "attn_v"),
            ("self_attn.o_proj", "attn_output"),
            ("mlp.gate_proj", "ffn_gate"),
            ("mlp.up_proj", "ffn_up"),
            ("mlp.down_proj", "ffn_down"),
        ] {
            let t = file.tensor(&format!("blk.0.{gguf}.weight")).unwrap();
            assert_eq!(t.format.name, format, "{gguf} in {file_type}");
            let source = &weights[&format!("model.layers.0.{hf}.weight")].1;
            let mut decoded = vec![0f32; source.len()];
            (t.format.dequantize)(file.tensor_data(t), &mut decoded);
            assert!(decoded == *source, "{gguf} in {file_type} is not exact");
        }
        let embd = file.tensor("token_embd.weight").unwrap();
        assert_ne!(
            embd.format.name, format,
            "embeddings follow the mixture, not the ternary type"
        );
    }
}

// ---------------------------------------------------------------------------------------------
// Bad input: a small vocabulary suffices, as these are refused before the tokenizer is read.

fn small_spec() -> Spec {
    Spec {
        n_vocab: 300,
        n_layer: 2,
        ..llama_spec()
    }
}

/// Writes a small checkpoint, lets `edit` damage it, and returns the error message.
fn refused(edit: impl FnOnce(&Path), n_shards: usize, file_type: &str) -> String {
    let tmp = tempfile::tempdir().unwrap();
    let spec = small_spec();
    let dir = tmp.path().join("bad");
    write_checkpoint(&dir, &spec, &make_weights(&spec, 5), n_shards);
    edit(&dir);
    let out: PathBuf = tmp.path().join("out.gguf");
    let run = oxibonsai([
        "convert",
        path_str(&dir),
        path_str(&out),
        "--type",
        file_type,
    ]);
    assert_eq!(run.code, 1, "expected a refusal: {}", run.stderr);
    assert!(
        !out.exists(),
        "a refused conversion wrote {}",
        out.display()
    );
    run.stderr
}

fn edit_config(dir: &Path, f: impl FnOnce(&mut Value)) {
    let path = dir.join("config.json");
    let mut config: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    f(&mut config);
    std::fs::write(&path, config.to_string()).unwrap();
}

#[test]
fn unknown_architecture_is_named() {
    let err = refused(
        |d| edit_config(d, |c| c["architectures"] = json!(["GPT2LMHeadModel"])),
        1,
        "f16",
    );
    assert!(
        err.contains("GPT2LMHeadModel") && err.contains("LlamaForCausalLM"),
        "{err}"
    );
}

#[test]
fn missing_config_key_is_named() {
    let err = refused(
        |d| {
            edit_config(d, |c| {
                c.as_object_mut().unwrap().remove("hidden_size");
            })
        },
        1,
        "f16",
    );
    assert!(
        err.contains("config.json") && err.contains("'hidden_size'"),
        "{err}"
    );
}

#[test]
fn shape_mismatch_names_the_tensor() {
    let err = refused(
        |d| {
            let spec = small_spec();
            let mut w = make_weights(&spec, 5);
            w.insert(
                "model.layers.1.self_attn.q_proj.weight".into(),
                (vec![64, 32], vec![0.0; 64 * 32]),
            );
            std::fs::remove_file(d.join("model.safetensors")).unwrap();
            write_checkpoint(d, &spec, &w, 1);
        },
        1,
        "f16",
    );
    assert!(
        err.contains("model.layers.1.self_attn.q_proj.weight"),
        "{err}"
    );
    assert!(
        err.contains("[64, 32]") && err.contains("[64, 64]"),
        "{err}"
    );
}

#[test]
fn missing_shard_is_named() {
    let err = refused(
        |d| std::fs::remove_file(d.join("model-00002-of-00003.safetensors")).unwrap(),
        3,
        "f16",
    );
    assert!(err.contains("model-00002-of-00003.safetensors"), "{err}");
}

#[test]
fn missing_tensor_is_named() {
    let err = refused(
        |d| {
            // Rewrite the single file without one layer's down projection.
            let spec = small_spec();
            let mut w = make_weights(&spec, 5);
            w.remove("model.layers.1.mlp.down_proj.weight");
            std::fs::remove_file(d.join("model.safetensors")).unwrap();
            write_checkpoint(d, &spec, &w, 1);
        },
        1,
        "f16",
    );
    assert!(err.contains("model.layers.1.mlp.down_proj.weight"), "{err}");
}

#[test]
fn rope_scaling_and_unknown_types_are_refused() {
    let err = refused(
        |d| {
            edit_config(d, |c| {
                c["rope_scaling"] = json!({"rope_type": "yarn", "factor": 4.0})
            })
        },
        1,
        "f16",
    );
    assert!(err.contains("yarn"), "{err}");
    let err = refused(|_| {}, 1, "q7_x");
    assert!(err.contains("unknown file type 'q7_x'"), "{err}");
}

#[test]
fn corrupt_safetensors_file_is_named() {
    let err = refused(
        |d| {
            let path = d.join("model.safetensors");
            let bytes = std::fs::read(&path).unwrap();
            std::fs::write(&path, &bytes[..bytes.len() / 2]).unwrap();
        },
        1,
        "f16",
    );
    assert!(err.contains("model.safetensors"), "{err}");
}

#[test]
fn missing_tokenizer_is_named() {
    let tmp = tempfile::tempdir().unwrap();
    // A full vocabulary, so that the weights pass and the tokenizer is what is missing.
    let spec = Spec {
        n_layer: 1,
        ..qwen3_spec()
    };
    let dir = tmp.path().join("tiny");
    write_checkpoint(&dir, &spec, &make_weights(&spec, 8), 1);
    std::fs::remove_file(dir.join("tokenizer.json")).unwrap();
    let out = tmp.path().join("out.gguf");
    let run = oxibonsai(["convert", path_str(&dir), path_str(&out)]);
    assert_eq!(run.code, 1, "{}", run.stderr);
    assert!(run.stderr.contains("tokenizer.json"), "{}", run.stderr);
    assert!(!out.exists());
}
