//! The Hugging Face → GGUF mapping through the library, on the tiny checkpoints the CLI's
//! convert tests write: converted to f32, every checkpoint tensor comes back under llama.cpp's
//! name (a table written out here from `convert_hf_to_gguf.py`'s names), with its shape reversed
//! and its values exact — Llama's query/key rows in the interleaved order the reference's
//! `permute` gives, computed here independently; and the vocabulary keys equal the reference
//! converter's vocabulary-only GGUF of the same tokenizer files.

#[allow(dead_code)]
#[path = "../../cli/tests/convert/checkpoint.rs"]
mod checkpoint;

use checkpoint::{llama_spec, make_weights, qwen2_spec, qwen3_spec, write_checkpoint, Arch, Spec};
use oxibonsai_convert::hf::{vocab, Conversion, Options};
use oxibonsai_convert::quantize::FileType;
use oxibonsai_gguf::GgufFile;
use oxibonsai_testkit::golden;

/// Hugging Face name suffix → GGUF name suffix, as llama.cpp's converter names them.
const LAYER_NAMES: &[(&str, &str)] = &[
    ("input_layernorm.weight", "attn_norm.weight"),
    ("self_attn.q_proj.weight", "attn_q.weight"),
    ("self_attn.k_proj.weight", "attn_k.weight"),
    ("self_attn.v_proj.weight", "attn_v.weight"),
    ("self_attn.o_proj.weight", "attn_output.weight"),
    ("self_attn.q_proj.bias", "attn_q.bias"),
    ("self_attn.k_proj.bias", "attn_k.bias"),
    ("self_attn.v_proj.bias", "attn_v.bias"),
    ("self_attn.q_norm.weight", "attn_q_norm.weight"),
    ("self_attn.k_norm.weight", "attn_k_norm.weight"),
    ("post_attention_layernorm.weight", "ffn_norm.weight"),
    ("mlp.gate_proj.weight", "ffn_gate.weight"),
    ("mlp.up_proj.weight", "ffn_up.weight"),
    ("mlp.down_proj.weight", "ffn_down.weight"),
];

fn gguf_name(hf: &str) -> String {
    match hf {
        "model.embed_tokens.weight" => return "token_embd.weight".into(),
        "model.norm.weight" => return "output_norm.weight".into(),
        "lm_head.weight" => return "output.weight".into(),
        _ => {}
    }
    let rest = hf.strip_prefix("model.layers.").unwrap();
    let (layer, suffix) = rest.split_once('.').unwrap();
    let gguf = LAYER_NAMES
        .iter()
        .find(|(h, _)| *h == suffix)
        .unwrap_or_else(|| panic!("no GGUF name for {hf}"))
        .1;
    format!("blk.{layer}.{gguf}")
}

/// Llama's q/k rows as the reference's `permute` leaves them: within each head of `d` rows,
/// GGUF row 2i is checkpoint row i and row 2i + 1 is checkpoint row d/2 + i.
fn interleave_halves(values: &[f32], n_heads: usize, row_len: usize) -> Vec<f32> {
    let d = values.len() / row_len / n_heads;
    let mut out = Vec::with_capacity(values.len());
    for h in 0..n_heads {
        for j in 0..d {
            let src = h * d + if j % 2 == 0 { j / 2 } else { d / 2 + j / 2 };
            out.extend_from_slice(&values[src * row_len..(src + 1) * row_len]);
        }
    }
    out
}

fn round_trip(spec: &Spec, seed: u64) {
    let tmp = tempfile::tempdir().unwrap();
    let weights = make_weights(spec, seed);
    let dir = tmp.path().join("tiny");
    write_checkpoint(&dir, spec, &weights, 2);
    let options = Options {
        file_type: FileType::parse("f32").unwrap(),
        fallback: false,
    };
    let conversion = Conversion::plan(&dir, &options).unwrap();
    let mut n_done = 0;
    let converted = conversion
        .run(&mut |event| {
            if let oxibonsai_convert::Progress::Done { n_elements } = event {
                n_done += n_elements;
            }
        })
        .unwrap();
    assert_eq!(n_done, conversion.n_elements(), "{:?}", spec.arch);
    let out = tmp.path().join("out.gguf");
    converted.writer.write_file(&out).unwrap();

    let file = GgufFile::open(&out).unwrap();
    let mut n_expected = 0;
    for (hf, (shape, values)) in &weights {
        let name = gguf_name(hf);
        if spec.tied && name == "output.weight" {
            continue;
        }
        n_expected += 1;
        let t = file
            .tensor(&name)
            .unwrap_or_else(|| panic!("{:?}: {hf} → {name} missing", spec.arch));
        let dims: Vec<u64> = shape.iter().rev().map(|&d| d as u64).collect();
        assert_eq!(t.dims, dims, "{name}");
        assert_eq!(t.format.name, "f32", "{name}");
        let data: Vec<f32> = file
            .tensor_data(t)
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes(b.try_into().unwrap()))
            .collect();
        let row_len = if shape.len() == 2 { shape[1] } else { 1 };
        let want = match (spec.arch, name.rsplit('.').nth(1)) {
            (Arch::Llama, Some("attn_q")) => interleave_halves(values, spec.n_head, row_len),
            (Arch::Llama, Some("attn_k")) => interleave_halves(values, spec.n_head_kv, row_len),
            _ => values.clone(),
        };
        assert!(data == want, "{:?}: {name} differs", spec.arch);
    }
    assert_eq!(file.tensors().len(), n_expected, "{:?}", spec.arch);
    assert_eq!(conversion.n_tensors(), n_expected);
    assert_eq!(
        file.metadata().get_str("general.architecture").unwrap(),
        conversion.arch()
    );
}

#[test]
fn qwen3_f32_round_trips_every_tensor_under_its_llama_cpp_name() {
    round_trip(&qwen3_spec(), 11);
}

#[test]
fn llama_f32_round_trips_with_the_reference_rope_permutation() {
    round_trip(&llama_spec(), 12);
}

#[test]
fn qwen2_f32_round_trips_with_its_biases() {
    round_trip(&qwen2_spec(), 13);
}

/// The `tokenizer.*` keys built from the real Qwen3 tokenizer files equal, key for key and in
/// order, those of the reference converter's vocabulary-only GGUF of the same files (built with
/// Qwen3-8B's config.json, whose BOS / EOS ids are given here).
#[test]
fn qwen3_vocabulary_keys_equal_the_reference_converters() {
    let config = serde_json::json!({"bos_token_id": 151643, "eos_token_id": 151645});
    let ours = vocab::tokenizer_metadata(&golden("tokenizer/qwen3"), 151_936, &config).unwrap();
    let reference = GgufFile::open(golden("tokenizer/qwen3/qwen3-vocab.gguf")).unwrap();
    let theirs: Vec<(&str, &oxibonsai_gguf::Value)> = reference
        .metadata()
        .iter()
        .filter(|(key, _)| key.starts_with("tokenizer."))
        .collect();
    let ours: Vec<(&str, &oxibonsai_gguf::Value)> =
        ours.iter().map(|(k, v)| (k.as_str(), v)).collect();
    let keys = |list: &[(&str, &oxibonsai_gguf::Value)]| -> Vec<String> {
        list.iter().map(|(k, _)| k.to_string()).collect()
    };
    assert_eq!(keys(&ours), keys(&theirs));
    for ((key, a), (_, b)) in ours.iter().zip(&theirs) {
        assert!(a == b, "{key} differs from the reference converter's");
    }
}

/// Each layer of an error's chain adds its own context and leaves the source's text to the
/// source, so `{err:#}` says each thing once.
fn assert_chain_says_each_thing_once(err: &dyn std::error::Error) {
    let mut layer = err;
    while let Some(source) = layer.source() {
        let (outer, inner) = (layer.to_string(), source.to_string());
        assert!(
            !outer.contains(&inner),
            "'{outer}' repeats its source '{inner}'"
        );
        layer = source;
    }
}

#[test]
fn unreadable_and_malformed_config_errors_name_the_file_once() {
    let tmp = tempfile::tempdir().unwrap();
    let options = Options {
        file_type: FileType::parse("f16").unwrap(),
        fallback: false,
    };
    // Not UTF-8: reading it as text fails with an I/O error.
    let unreadable = tmp.path().join("unreadable");
    std::fs::create_dir_all(&unreadable).unwrap();
    std::fs::write(unreadable.join("config.json"), [0xff, 0xfe, 0x00]).unwrap();
    let err = Conversion::plan(&unreadable, &options).err().unwrap();
    assert!(err.to_string().contains("config.json"), "{err}");
    assert!(std::error::Error::source(&err).is_some(), "{err}");
    assert_chain_says_each_thing_once(&err);

    let malformed = tmp.path().join("malformed");
    std::fs::create_dir_all(&malformed).unwrap();
    std::fs::write(malformed.join("config.json"), "{bad").unwrap();
    let err = Conversion::plan(&malformed, &options).err().unwrap();
    assert!(err.to_string().contains("not valid JSON"), "{err}");
    assert!(std::error::Error::source(&err).is_some(), "{err}");
    assert_chain_says_each_thing_once(&err);
}
