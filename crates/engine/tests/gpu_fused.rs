//! The GPU backend's fused resident step — Q / K / V and gate / up uploaded stacked, each run as
//! one product, with the fused ops after them (RoPE + KV store + attention + Q8_0 with the q / k
//! head norms in its dispatch, or in one of their own before it: `with_qk_fold`, SwiGLU + Q8_0)
//! — gives the bits of the op-for-op step
//! (`with_fused(false)`: every matrix apart), logits and KV cache alike, on golden models of each
//! shape the fused path takes: Qwen3 (q / k norms) in Q1_0 (the Bonsai layout), with more query
//! heads than fit n_embd, with Q4_0 attention and Q1_0 feed-forward, and Qwen2 (Q / K / V
//! biases) re-quantized to Q8_0. The prompt goes in one batch, the greedy tokens one at a time;
//! every pass must run resident; the fused runs submit each layer apart, the unfused ones each pass
//! whole (`with_submit_layers`). The dispatches a layer of each are printed and must drop (the
//! fused step's measure): Qwen3 Q1_0, the 8B's shape, from 18 to 5 (the norms before the
//! Q|K|V and gate|up products as their prologue, the q / k norms in the attention's dispatch,
//! SwiGLU + Q8_0 as the gate|up product's epilogue; each switch off gives the same bits in more
//! dispatches). On the adapter
//! `OXIBONSAI_GPU_ADAPTER` names (CI: lavapipe); no adapter fails.

use std::sync::Arc;

use oxibonsai_engine::{GpuBackend, Logits, Model};
use oxibonsai_formats::{format, FormatKind};
use oxibonsai_gguf::{GgufFile, GgufWriter};
use oxibonsai_testkit::golden;
use serde_json::Value;

fn entry(name: &str) -> (Vec<u32>, Vec<u32>) {
    let text = std::fs::read_to_string(golden("models/manifest.json")).unwrap();
    let manifest: Value = serde_json::from_str(&text).unwrap();
    let ids = |v: &Value| -> Vec<u32> {
        v.as_array()
            .unwrap_or_else(|| panic!("{name}: no id list in the manifest"))
            .iter()
            .map(|x| x.as_u64().unwrap() as u32)
            .collect()
    };
    (
        ids(&manifest[name]["prompt_ids"]),
        ids(&manifest[name]["greedy_ids"]),
    )
}

fn open(name: &str) -> GgufFile {
    GgufFile::open(golden(&format!("models/{name}.gguf"))).unwrap()
}

/// `source` with every 2-D F16 / F32 matrix but the token embedding quantized to the format
/// `kind_of` gives its name (the formats crate's quantizer; `None`: kept as it is), the rest
/// (norms, biases) as they are.
fn requantized(source: &GgufFile, kind_of: impl Fn(&str) -> Option<FormatKind>) -> GgufFile {
    let mut writer = GgufWriter::new();
    for (key, value) in source.metadata().iter() {
        writer.add_kv(key, value.clone()).unwrap();
    }
    for info in source.tensors() {
        let data = source.tensor_data(info).to_vec();
        let float = matches!(info.format.kind, FormatKind::F16 | FormatKind::F32);
        let kind = (float && info.dims.len() == 2 && info.name != "token_embd.weight")
            .then(|| kind_of(&info.name))
            .flatten();
        if let Some(kind) = kind {
            let q = format(kind);
            let mut values = vec![0f32; info.n_elements() as usize];
            (info.format.dequantize)(&data, &mut values);
            let mut bytes = vec![0u8; values.len() / q.block_elems * q.block_bytes];
            (q.quantize)(&values, &mut bytes);
            writer.add_tensor(&info.name, &info.dims, q, bytes).unwrap();
        } else {
            writer
                .add_tensor(&info.name, &info.dims, info.format, data)
                .unwrap();
        }
    }
    GgufFile::from_bytes(writer.to_bytes().unwrap()).expect("the rebuilt file opens")
}

/// `source`'s matrices in Q8_0.
fn q8_0_of(source: &GgufFile) -> GgufFile {
    requantized(source, |_| Some(FormatKind::Q8_0))
}

/// The format of the layer matrix `name` in `kinds`: (Q|K|V, attention output, gate|up, down).
fn by_role(
    name: &str,
    (qkv, output, gate_up, down): (FormatKind, FormatKind, FormatKind, FormatKind),
) -> Option<FormatKind> {
    let role = name.strip_prefix("blk.")?.split_once('.')?.1;
    Some(match role.split_once('.')?.0 {
        "attn_q" | "attn_k" | "attn_v" => qkv,
        "attn_output" => output,
        "ffn_gate" | "ffn_up" => gate_up,
        "ffn_down" => down,
        _ => return None,
    })
}

struct Run {
    logits: Vec<f32>,
    /// Dispatches of the last (one-token) step.
    dispatches: usize,
    /// Each layer's host KV cache (f16 keys, values): what the step read back.
    cache: Vec<(Vec<u16>, Vec<u16>)>,
}

/// The fused step's switches: the norms before Q1_0 products as their prologue
/// (`with_prologue`), SwiGLU as the Q1_0 gate|up product's epilogue (`with_epilogue`), the q / k
/// norms in the attention's dispatch (`with_qk_fold`), the norms after the residual Q1_0
/// products in their tails (`with_norm_tail`, not with the prologue).
#[derive(Clone, Copy, Debug)]
struct Switches {
    prologue: bool,
    epilogue: bool,
    qk_fold: bool,
    norm_tail: bool,
}

const ALL: Switches = Switches {
    prologue: true,
    epilogue: true,
    qk_fold: true,
    norm_tail: false,
};

/// The backend's defaults (the prologue off) with the norm tails on.
const TAIL: Switches = Switches {
    prologue: false,
    epilogue: true,
    qk_fold: true,
    norm_tail: true,
};

/// The prompt in one batch, then each greedy token alone, every pass resident. The fused runs
/// also submit every layer apart (`with_submit_layers(1)`), the unfused ones each pass whole:
/// the same bits prove the split submissions too.
fn run(file: &Arc<GgufFile>, fused: bool, sw: Switches, prompt: &[u32], decode: &[u32]) -> Run {
    let backend = match GpuBackend::new(2) {
        Ok(b) => b
            .with_fused(fused)
            .with_submit_layers(usize::from(fused))
            .with_prologue(sw.prologue)
            .with_epilogue(sw.epilogue)
            .with_qk_fold(sw.qk_fold)
            .with_norm_tail(sw.norm_tail),
        Err(e) => panic!("the GPU fused-step tests need an adapter: {e}"),
    };
    let model = Model::load(Arc::clone(file), backend).unwrap();
    let mut seq = model.new_sequence(prompt.len() + decode.len()).unwrap();
    let mut logits = model
        .forward(&mut seq, prompt, Logits::All)
        .unwrap()
        .to_vec();
    for &t in decode {
        logits.extend_from_slice(model.forward(&mut seq, &[t], Logits::Last).unwrap());
    }
    let offload = model.backend.offload();
    assert_eq!(offload.steps_not_resident, [], "fused {fused}: {offload}");
    assert_eq!(
        offload.resident_steps,
        1 + decode.len() as u64,
        "fused {fused}: {offload}"
    );
    for (op, n) in &offload.ops_on_cpu {
        assert!(!op.contains("GPU error"), "fused {fused}: {op} ×{n}");
    }
    let cache = seq
        .layers()
        .iter()
        .map(|l| {
            let (k, v) = l.kv().raw();
            (k.to_vec(), v.to_vec())
        })
        .collect();
    Run {
        logits,
        dispatches: model.backend.step_dispatches(),
        cache,
    }
}

/// The fused step's logits equal the unfused step's bit for bit — with every fusion, and with
/// the norm tails ([`TAIL`]) — returns the dispatches of a one-token step (fused, unfused).
fn same_bits(what: &str, file: GgufFile, golden: &str) -> (usize, usize) {
    let (prompt, decode) = entry(golden);
    let file = Arc::new(file);
    let fused = run(&file, true, ALL, &prompt, &decode);
    let unfused = run(&file, false, ALL, &prompt, &decode);
    let tail = run(&file, true, TAIL, &prompt, &decode);
    for (how, other) in [("fused", &fused), ("fused with the norm tails", &tail)] {
        assert_eq!(other.logits.len(), unfused.logits.len(), "{what}: lengths");
        let diffs = other
            .logits
            .iter()
            .zip(&unfused.logits)
            .filter(|(a, b)| a.to_bits() != b.to_bits())
            .count();
        assert_eq!(
            diffs, 0,
            "{what}, {how}: {diffs} logits differ from the unfused step's"
        );
        // The keys and values read back to the host cache (the fused attention's rotated keys,
        // the values from the stacked output): the same bits.
        assert!(
            other.cache == unfused.cache,
            "{what}, {how}: the host KV caches differ"
        );
    }
    println!(
        "{what}: a one-token step records {} dispatches with the norm tails",
        tail.dispatches
    );
    println!(
        "{what}: a one-token step records {} dispatches fused, {} unfused",
        fused.dispatches, unfused.dispatches
    );
    assert!(
        fused.dispatches < unfused.dispatches,
        "{what}: {} dispatches fused, {} unfused",
        fused.dispatches,
        unfused.dispatches
    );
    (fused.dispatches, unfused.dispatches)
}

#[test]
fn qwen3_q1_0_fused_gives_the_unfused_bits_in_5_dispatches_a_layer_not_18() {
    let name = "qwen3-q1_0";
    let (fused, unfused) = same_bits(name, open(name), name);
    // 4 layers, then the output head (Q1_0, tied): fused, the norm as its product's prologue (1);
    // unfused, norm + Q8_0 and the product (2). Unfused a layer: norm + Q8_0, Q, K, V, q norm, k
    // norm, RoPE ×2, the KV store (keys, values), attention + Q8_0, O + residual, norm + Q8_0,
    // gate, up, SwiGLU, Q8_0, down + residual. Fused: norm + Q8_0 + Q|K|V, q/k norms + RoPE +
    // store + attention + Q8_0, O + residual, norm + Q8_0 + gate|up + SwiGLU + Q8_0, down +
    // residual.
    let n_layer = 4;
    println!(
        "{name}: {} dispatches a layer fused, {} unfused",
        (fused - 1) / n_layer,
        (unfused - 2) / n_layer
    );
    // SwiGLU is the gate|up product's epilogue where the device's Q1_0 split takes it: a split
    // set by `OXIBONSAI_GPU_Q1_LANES` / `_ROWS` whose tiles pass 32 rows records it apart (one
    // dispatch more a layer, the same bits).
    let file = Arc::new(open(name));
    let n_embd = file
        .tensor("token_embd.weight")
        .expect("the golden model has a token embedding")
        .dims[0] as usize;
    let apart = usize::from(
        !oxibonsai_gpu::Gpu::new()
            .expect("the GPU fused-step tests need an adapter")
            .q1_0_swiglu_fits(n_embd),
    );
    assert_eq!(
        (fused - 1, unfused - 2),
        ((5 + apart) * n_layer, 18 * n_layer)
    );

    // The A/B switches give the same bits: without the prologue (the norms apart: 7 a layer,
    // the head 2), without the epilogue (SwiGLU apart: 6, the head 1), without the q/k fold
    // (their own dispatch: 6, the head 1), without any (9, 2); the norm tails below.
    let (prompt, decode) = entry(name);
    let all = run(&file, true, ALL, &prompt, &decode);
    assert_eq!(all.dispatches, fused);
    let off = |prologue, epilogue, qk_fold| Switches {
        prologue,
        epilogue,
        qk_fold,
        norm_tail: false,
    };
    // The defaults (the prologue off) with the norm tails: 7 a layer → 5 (the FFN norm in O's
    // tail, the next layer's attention norm in down's), the first layer's attention norm apart,
    // the output norm in the last down's tail (the head 1); without the epilogue 6 a layer.
    let tails = |epilogue| Switches { epilogue, ..TAIL };
    for (sw, want) in [
        (off(false, true, true), (7 + apart) * n_layer + 2),
        (off(true, false, true), 6 * n_layer + 1),
        (off(true, true, false), (6 + apart) * n_layer + 1),
        (off(false, false, false), 9 * n_layer + 2),
        (tails(true), (5 + apart) * n_layer + 1 + 1),
        (tails(false), 6 * n_layer + 1 + 1),
    ] {
        let other = run(&file, true, sw, &prompt, &decode);
        let what = format!("{name}, {sw:?}");
        assert!(
            bits(&all.logits) == bits(&other.logits),
            "{what}: other logits"
        );
        assert!(all.cache == other.cache, "{what}: another KV cache");
        assert_eq!(other.dispatches, want, "{what}: dispatches");
    }
}

fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|x| x.to_bits()).collect()
}

#[test]
fn more_query_heads_than_n_embd_fused_gives_the_unfused_bits() {
    let name = "qwen3-q1_0-headdim-untied";
    same_bits(name, open(name), name);
}

#[test]
fn q4_0_attention_and_q1_0_feed_forward_fused_give_the_unfused_bits() {
    let name = "qwen3-mixed";
    same_bits(name, open(name), name);
}

#[test]
fn qwen2_biases_on_q8_0_fused_give_the_unfused_bits() {
    let name = "qwen2-f16-bias";
    same_bits("qwen2-bias as Q8_0", q8_0_of(&open(name)), name);
}

/// The dispatches a layer (fused, unfused) of a 4-layer model whose output head takes
/// `head` dispatches.
fn per_layer(name: &str, (fused, unfused): (usize, usize), head: usize) -> (usize, usize) {
    let n_layer = 4;
    let per = ((fused - head) / n_layer, (unfused - head) / n_layer);
    println!(
        "{name}: {} dispatches a layer fused, {} unfused",
        per.0, per.1
    );
    assert_eq!(
        (fused - head, unfused - head),
        (per.0 * n_layer, per.1 * n_layer),
        "{name}: whole layers"
    );
    per
}

#[test]
fn ternary_tq2_0_fused_gives_the_unfused_bits_in_8_dispatches_a_layer_not_19() {
    // Every matrix TQ2_0 (partner Q8_K), the head the tied Q8_0 embedding: norm + Q8_0, product.
    let name = "qwen3-ternary-tq2_0";
    let counts = same_bits(name, open(name), name);
    // Unfused a layer: norm + Q8_K, Q, K, V, q norm, k norm, RoPE ×2, the KV store ×2,
    // attention, Q8_K, O + residual, norm + Q8_K, gate, up, SwiGLU, Q8_K, down + residual (before
    // rms_norm_quantize took Q8_K and gemv_add the residual, 23). Fused: norm + Q8_K, Q|K|V,
    // q/k norms + RoPE + store + attention + Q8_K (each block by the head that completes it), O +
    // residual, norm + Q8_K, gate|up, SwiGLU + Q8_K, down + residual.
    assert_eq!(per_layer(name, counts, 2), (8, 19));
}

#[test]
fn k_quants_fused_give_the_unfused_bits() {
    // The Q4_K_M shape: Q|K|V and gate|up in Q4_K, the attention output and down in Q6_K — every
    // product reads Q8_K; the head (output.weight, F16) reads f32.
    let name = "qwen3-f16";
    let kinds = (
        FormatKind::Q4_K,
        FormatKind::Q6_K,
        FormatKind::Q4_K,
        FormatKind::Q6_K,
    );
    let file = requantized(&open(name), |n| by_role(n, kinds));
    let counts = same_bits("qwen3 as Q4_K / Q6_K", file, name);
    // The head: norm, the F16 product. A layer as TQ2_0's.
    assert_eq!(per_layer(name, counts, 2), (8, 19));
}

#[test]
fn partners_mixed_across_a_layer_fused_give_the_unfused_bits() {
    // Q|K|V in Q6_K (Q8_K), the attention output in Q4_1 (Q8_1: quantized in the attention's
    // dispatch), gate|up in Q4_1, down in Q4_K (Q8_K), with Qwen2's biases on the stack.
    let name = "qwen2-f16-bias";
    let kinds = (
        FormatKind::Q6_K,
        FormatKind::Q4_1,
        FormatKind::Q4_1,
        FormatKind::Q4_K,
    );
    let file = requantized(&open(name), |n| by_role(n, kinds));
    let counts = same_bits("qwen2-bias as Q6_K / Q4_1 / Q4_K", file, name);
    // The head: norm, the F16 product. Fused a layer: norm + Q8_K, Q|K|V, the biases in one add,
    // RoPE + store + attention + Q8_1, O + residual, norm + Q8_1, gate|up, SwiGLU + Q8_K, down +
    // residual; unfused: norm + Q8_K, Q, K, V, three biases, RoPE ×2, the KV store ×2,
    // attention + Q8_1, O + residual, norm + Q8_1, gate, up, SwiGLU, Q8_K, down + residual.
    assert_eq!(per_layer(name, counts, 2), (9, 19));
}
