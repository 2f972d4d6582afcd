//! Every golden model and vocabulary GGUF opens, and its header facts match the manifest written by
//! the reference side (and the README's description of the vocabulary files).

use oxibonsai_formats::FormatKind;
use oxibonsai_gguf::{validate_file, GgufFile};
use oxibonsai_testkit::golden;
use serde_json::Value as Json;

fn manifest() -> serde_json::Map<String, Json> {
    let text = std::fs::read_to_string(golden("models/manifest.json")).expect("manifest readable");
    match serde_json::from_str(&text).expect("manifest is JSON") {
        Json::Object(map) => map,
        other => panic!("manifest is not an object: {other}"),
    }
}

fn int(entry: &Json, field: &str) -> u64 {
    entry[field]
        .as_u64()
        .unwrap_or_else(|| panic!("manifest field {field} missing in {entry}"))
}

#[test]
fn every_manifest_model_opens_with_the_manifest_facts() {
    let manifest = manifest();
    // The two PrismML files must be in the manifest too, or this test would not see them.
    for name in ["qwen3-ternary-pq2_0", "qwen3-ternary-q2_0_g128_legacy"] {
        assert!(
            manifest.contains_key(name),
            "{name} missing from the manifest"
        );
    }
    for (name, entry) in &manifest {
        let path = golden(entry["file"].as_str().expect("file field"));
        let file = GgufFile::open(&path).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert!(validate_file(&path).expect("readable").is_empty(), "{name}");
        let md = file.metadata();
        let arch = md.get_str("general.architecture").expect("architecture");
        assert_eq!(arch, entry["arch"].as_str().expect("arch"), "{name}");
        let key = |suffix: &str| format!("{arch}.{suffix}");
        assert_eq!(
            u64::from(md.get_u32(&key("embedding_length")).unwrap()),
            int(entry, "n_embd"),
            "{name}"
        );
        assert_eq!(
            u64::from(md.get_u32(&key("block_count")).unwrap()),
            int(entry, "n_layer"),
            "{name}"
        );
        assert_eq!(
            u64::from(md.get_u32(&key("feed_forward_length")).unwrap()),
            int(entry, "n_ff"),
            "{name}"
        );
        assert_eq!(
            u64::from(md.get_u32(&key("attention.head_count")).unwrap()),
            int(entry, "n_head"),
            "{name}"
        );
        assert_eq!(
            u64::from(md.get_u32(&key("attention.head_count_kv")).unwrap()),
            int(entry, "n_head_kv"),
            "{name}"
        );
        let n_head = md.get_u32(&key("attention.head_count")).unwrap();
        let head_dim = md
            .opt_u32(&key("attention.key_length"))
            .unwrap()
            .unwrap_or(md.get_u32(&key("embedding_length")).unwrap() / n_head);
        assert_eq!(u64::from(head_dim), int(entry, "head_dim"), "{name}");
        let tokens = md.get_str_array("tokenizer.ggml.tokens").expect("tokens");
        assert_eq!(tokens.len() as u64, int(entry, "n_vocab"), "{name}");
        let tied = entry["tied_embeddings"].as_bool().expect("tied_embeddings");
        assert_eq!(file.tensor("output.weight").is_none(), tied, "{name}");
        assert_eq!(file.file_size(), int(entry, "bytes"), "{name}");

        let embd = file.tensor("token_embd.weight").expect("token_embd");
        assert_eq!(
            embd.dims,
            vec![int(entry, "n_embd"), int(entry, "n_vocab")],
            "{name}"
        );
        assert_eq!(embd.row_len(), int(entry, "n_embd"));
        assert_eq!(embd.n_rows(), int(entry, "n_vocab"));
        assert_eq!(
            embd.n_elements(),
            int(entry, "n_embd") * int(entry, "n_vocab")
        );
        let n_layer = int(entry, "n_layer");
        for layer in 0..n_layer {
            assert!(
                file.tensor(&format!("blk.{layer}.attn_q.weight")).is_some(),
                "{name} layer {layer}"
            );
        }
        assert!(file
            .tensor(&format!("blk.{n_layer}.attn_q.weight"))
            .is_none());

        // The data section is packed as ggml packs it: each tensor padded to the alignment, in file
        // order, ending exactly at the end of the file.
        let mut expected_offset = 0;
        for t in file.tensors() {
            assert_eq!(t.offset, expected_offset, "{name}: {}", t.name);
            assert_eq!(file.tensor_data(t).len() as u64, t.n_bytes);
            let f = t.format;
            assert_eq!(
                t.n_bytes,
                t.n_elements() / f.block_elems as u64 * f.block_bytes as u64
            );
            expected_offset = (t.offset + t.n_bytes).next_multiple_of(file.alignment());
        }
        assert_eq!(
            file.data_offset() + expected_offset,
            file.file_size(),
            "{name}"
        );
        assert_eq!(file.data_offset() % file.alignment(), 0);
    }
}

fn kinds(file: &GgufFile, type_id: u32) -> Vec<FormatKind> {
    let mut kinds: Vec<FormatKind> = file
        .tensors()
        .iter()
        .filter(|t| t.type_id == type_id)
        .map(|t| t.format.kind)
        .collect();
    kinds.dedup();
    kinds
}

#[test]
fn id_42_files_resolve_to_their_layout() {
    let g64 = GgufFile::open(golden("models/qwen3-ternary-q2_0.gguf")).unwrap();
    assert_eq!(kinds(&g64, 42), vec![FormatKind::Q2_0]);
    let legacy = GgufFile::open(golden("models/qwen3-ternary-q2_0_g128_legacy.gguf")).unwrap();
    assert_eq!(kinds(&legacy, 42), vec![FormatKind::Q2_0G128Legacy]);
    let pq = GgufFile::open(golden("models/qwen3-ternary-pq2_0.gguf")).unwrap();
    assert_eq!(kinds(&pq, 142), vec![FormatKind::PQ2_0]);
    // The same shapes in both id-42 files: only the layout differs.
    for (a, b) in g64.tensors().iter().zip(legacy.tensors()) {
        assert_eq!((&a.name, &a.dims), (&b.name, &b.dims));
        if a.type_id == 42 {
            assert_eq!(a.n_bytes * 17, b.n_bytes * 18, "{}", a.name);
        }
    }
}

#[test]
fn mixed_file_has_the_formats_the_manifest_describes() {
    let file = GgufFile::open(golden("models/qwen3-mixed.gguf")).unwrap();
    let kind = |name: &str| {
        file.tensor(name)
            .unwrap_or_else(|| panic!("{name}"))
            .format
            .kind
    };
    assert_eq!(kind("token_embd.weight"), FormatKind::Q8_0);
    assert_eq!(kind("output.weight"), FormatKind::Q4_1);
    for layer in 0..4 {
        for t in ["attn_q", "attn_k", "attn_v", "attn_output"] {
            assert_eq!(kind(&format!("blk.{layer}.{t}.weight")), FormatKind::Q4_0);
        }
        for t in ["ffn_gate", "ffn_up", "ffn_down"] {
            assert_eq!(kind(&format!("blk.{layer}.{t}.weight")), FormatKind::Q1_0);
        }
    }
}

#[test]
fn vocabulary_files_match_the_readme() {
    let qwen = GgufFile::open(golden("tokenizer/qwen3/qwen3-vocab.gguf")).unwrap();
    let md = qwen.metadata();
    assert!(qwen.tensors().is_empty());
    assert_eq!(
        md.get_str_array("tokenizer.ggml.tokens").unwrap().len(),
        151_936
    );
    assert_eq!(
        md.get_i32_array("tokenizer.ggml.token_type").unwrap().len(),
        151_936
    );
    assert_eq!(md.get_str("tokenizer.ggml.pre").unwrap(), "qwen2");
    assert_eq!(md.get_u32("tokenizer.ggml.bos_token_id").unwrap(), 151_643);
    assert_eq!(md.get_u32("tokenizer.ggml.eos_token_id").unwrap(), 151_645);
    assert_eq!(
        md.get_u32("tokenizer.ggml.padding_token_id").unwrap(),
        151_643
    );
    assert!(!md.get_bool("tokenizer.ggml.add_bos_token").unwrap());
    let tokens = md.get_str_array("tokenizer.ggml.tokens").unwrap();
    assert_eq!(tokens[151_643], "<|endoftext|>");
    assert_eq!(tokens[151_645], "<|im_end|>");
    assert!(md
        .get_str("tokenizer.chat_template")
        .unwrap()
        .contains("<|im_start|>"));

    let smol = GgufFile::open(golden("tokenizer/smollm2/smollm2-vocab.gguf")).unwrap();
    let md = smol.metadata();
    assert!(smol.tensors().is_empty());
    assert_eq!(md.get_str("general.architecture").unwrap(), "llama");
    assert_eq!(
        md.get_str_array("tokenizer.ggml.tokens").unwrap().len(),
        49_152
    );
    assert_eq!(md.get_str("tokenizer.ggml.pre").unwrap(), "smollm");
}
