//! `oxibonsai synth --arch qwen35 …`: a small random-weight qwen35 (Gated DeltaNet hybrid) file
//! that both engines run, deterministic from `--seed`: the models of the qwen35 reference-parity
//! fixtures (`scripts/qwen35-reference.py`). `synth --shape bonsai-27b | ternary-bonsai-2-27b | -9b | -4b | -2b`:
//! the published qwen35 shapes for benchmarks, their matrices drawn from a pool of valid blocks as
//! the qwen3 shapes' are, the Ternary-Bonsai-2 ones with the `prism.hadamard` keys the published
//! files carry. Every size is an option, so layer patterns, H_k ≠ H_v,
//! GQA, partial rotary and the sections key can be varied; matrices are stored in the chosen
//! format (each row quantized by the format's own reference quantizer), while the conv1d kernel,
//! `ssm_a`, `ssm_dt`, the norms and the per-tensor scales stay F32 as llama.cpp requires.

use std::path::Path;

use anyhow::{bail, Context, Result};
use oxibonsai_formats::{format_by_name, Format};
use oxibonsai_gguf::{Array, GgufWriter, Value};

use super::synth::{block_pool, random_matrix, weight_format, write_atomically, SplitMix};

/// The options of `synth --arch qwen35` (defaults: spec §6's minimal file at a small vocabulary).
#[derive(clap::Args, Debug, Clone)]
pub struct Options {
    /// qwen35: trunk layers (`block_count` less `--nextn`).
    #[arg(long, default_value_t = 4)]
    layers: u64,
    /// qwen35: every this-many-th layer is full attention (`full_attention_interval`).
    #[arg(long, default_value_t = 4)]
    interval: u64,
    /// qwen35: per-layer pattern written as `attention.recurrent_layers` instead of the interval,
    /// e.g. `1,0,1,1` (1 = Gated DeltaNet); its length must be `--layers`.
    #[arg(long, value_delimiter = ',')]
    recurrent_layers: Option<Vec<u8>>,
    #[arg(long, default_value_t = 256)]
    embd: u64,
    #[arg(long, default_value_t = 512)]
    ff: u64,
    #[arg(long, default_value_t = 4)]
    heads: u64,
    #[arg(long, default_value_t = 2)]
    kv_heads: u64,
    #[arg(long, default_value_t = 64)]
    head_dim: u64,
    /// qwen35: rotated dimensions per head (`rope.dimension_count`).
    #[arg(long, default_value_t = 16)]
    rot: u64,
    /// qwen35: `rope.dimension_sections`, four counts of rotary pairs.
    #[arg(long, value_delimiter = ',', default_value = "3,3,2,0")]
    sections: Vec<u32>,
    /// qwen35: `ssm.state_size` (S).
    #[arg(long, default_value_t = 32)]
    state: u64,
    /// qwen35: key heads of the Gated DeltaNet layers (`ssm.group_count`, H_k).
    #[arg(long, default_value_t = 2)]
    k_heads: u64,
    /// qwen35: value heads (`ssm.time_step_rank`, H_v; a multiple of H_k).
    #[arg(long, default_value_t = 4)]
    v_heads: u64,
    /// qwen35: `ssm.conv_kernel`.
    #[arg(long, default_value_t = 4)]
    conv: u64,
    /// qwen35: no `output.weight` (the head is the embedding).
    #[arg(long)]
    tied: bool,
    #[arg(long, default_value_t = 1)]
    seed: u64,
    #[arg(long, default_value_t = 512)]
    vocab_size: u64,
    /// qwen35: a `<name>.scale` tensor (one F32 near 1) beside every matrix llama.cpp scales.
    #[arg(long)]
    tensor_scales: bool,
    /// qwen35: multi-token-prediction layers after the trunk (`nextn_predict_layers`): each a
    /// full-attention block with `nextn.eh_proj`, `nextn.enorm`, `nextn.hnorm` and
    /// `nextn.shared_head_norm`, as the converter writes Qwen3.5's `mtp.*` tensors.
    #[arg(long, default_value_t = 0)]
    nextn: u64,
    /// qwen35: the prediction layers also carry `nextn.shared_head_head` (their own LM head)
    /// and `nextn.embed_tokens` (their own embedding), which llama.cpp prefers when present.
    #[arg(long)]
    nextn_own_head: bool,
}

/// A published qwen35 shape. The 27B sizes are read off the 27B GGUF files
/// (`../shared/specs/bonsai2-formats.md` §3 and §2.4; Bonsai 27B and Ternary-Bonsai-2-27B share
/// them); the small Ternary-Bonsai-2 models are built on Qwen3.5-2B / 4B / 9B (PrismML's small-models
/// whitepaper, spec §4.1), whose Hugging Face configurations give their sizes. Their rotation
/// blocks: 4B 512 and 9B 4096 as reported (spec §2.4); 2B's is not published — 2048, the largest
/// power of two dividing every rotated width, the rule the three published sizes follow.
#[derive(Clone, Copy, Debug)]
pub struct Shape {
    pub name: &'static str,
    /// `prism.hadamard.block_size` of the published file, if it is rotated.
    rotation_block: Option<u32>,
    sizes: Sizes,
}

/// What differs between the published shapes (the rest is common to Qwen3.5: head dim 256, 64
/// rotated dimensions in sections 11 / 11 / 10, state 128, 16 key heads, a 4-wide convolution,
/// every fourth layer full attention, 248,320 tokens).
#[derive(Clone, Copy, Debug)]
struct Sizes {
    layers: u64,
    embd: u64,
    ff: u64,
    heads: u64,
    kv_heads: u64,
    v_heads: u64,
    tied: bool,
}

const SIZES_27B: Sizes = Sizes {
    layers: 64,
    embd: 5120,
    ff: 17408,
    heads: 24,
    kv_heads: 4,
    v_heads: 48,
    tied: false,
};

pub const SHAPES: [Shape; 5] = [
    Shape {
        name: "bonsai-27b",
        rotation_block: None,
        sizes: SIZES_27B,
    },
    Shape {
        name: "ternary-bonsai-2-27b",
        rotation_block: Some(1024),
        sizes: SIZES_27B,
    },
    Shape {
        name: "ternary-bonsai-2-9b",
        rotation_block: Some(4096),
        sizes: Sizes {
            layers: 32,
            embd: 4096,
            ff: 12288,
            heads: 16,
            kv_heads: 4,
            v_heads: 32,
            tied: false,
        },
    },
    Shape {
        name: "ternary-bonsai-2-4b",
        rotation_block: Some(512),
        sizes: Sizes {
            layers: 32,
            embd: 2560,
            ff: 9216,
            heads: 16,
            kv_heads: 4,
            v_heads: 32,
            tied: true,
        },
    },
    Shape {
        name: "ternary-bonsai-2-2b",
        rotation_block: Some(2048),
        sizes: Sizes {
            layers: 24,
            embd: 2048,
            ff: 6144,
            heads: 8,
            kv_heads: 2,
            v_heads: 16,
            tied: true,
        },
    },
];

/// A shape's sizes as options.
fn options_of(sizes: Sizes) -> Options {
    Options {
        layers: sizes.layers,
        interval: 4,
        recurrent_layers: None,
        embd: sizes.embd,
        ff: sizes.ff,
        heads: sizes.heads,
        kv_heads: sizes.kv_heads,
        head_dim: 256,
        rot: 64,
        sections: vec![11, 11, 10, 0],
        state: 128,
        k_heads: 16,
        v_heads: sizes.v_heads,
        conv: 4,
        tied: sizes.tied,
        seed: 1,
        vocab_size: 248_320,
        tensor_scales: false,
        nextn: 0,
        nextn_own_head: false,
    }
}

impl Shape {
    pub fn n_vocab(&self) -> u64 {
        options_of(self.sizes).vocab_size
    }
}

pub fn shape(name: &str) -> Option<Shape> {
    SHAPES
        .into_iter()
        .find(|s| s.name.eq_ignore_ascii_case(name))
}

/// Writes the random-weight file of a published qwen35 shape; `tokenizer` (the `tokenizer.*`
/// keys of a real vocabulary) replaces the placeholder tokens.
pub fn write_shape(
    shape: Shape,
    format: &'static Format,
    tokenizer: Option<Vec<(String, Value)>>,
    path: &Path,
) -> Result<()> {
    let o = options_of(shape.sizes);
    let mut rng = SplitMix(0x00b0_a5a1 ^ 0x35);
    let pool = block_pool(format, &mut rng);
    let source = Source {
        pool: Some(&pool),
        tokenizer,
        context: 262_144,
        name: Some(shape.name),
    };
    let mut w = build(&o, format, source, &mut rng)?;
    if let Some(block) = shape.rotation_block {
        let heads = (
            o.state as usize,
            o.k_heads as usize,
            (o.v_heads / o.k_heads) as usize,
        );
        super::synth_rotate::add_unfolded_metadata(&mut w, block as usize, Some(heads))?;
    }
    write_atomically(&w, path)
}

/// What a file is made of beyond its sizes.
struct Source<'p> {
    /// `Some`: blocks copied from this pool of valid blocks (the published shapes: billions of
    /// weights); `None`: each row drawn and quantized by the format's own quantizer (small files).
    pool: Option<&'p [u8]>,
    /// A real vocabulary's `tokenizer.*` keys, else numbered placeholders.
    tokenizer: Option<Vec<(String, Value)>>,
    context: u64,
    /// The published shape's name, for `general.name`.
    name: Option<&'static str>,
}

/// The matrices llama.cpp looks up a `.scale` tensor for (spec §1.3, end).
const SCALED: [&str; 14] = [
    "attn_q",
    "attn_k",
    "attn_v",
    "attn_qkv",
    "attn_gate",
    "attn_output",
    "ffn_gate",
    "ffn_up",
    "ffn_down",
    "ssm_out",
    "ssm_alpha",
    "ssm_beta",
    "eh_proj",
    "shared_head_head",
];

fn is_recurrent(o: &Options, il: u64) -> bool {
    match &o.recurrent_layers {
        Some(pattern) => pattern[il as usize] != 0,
        None => !(il + 1).is_multiple_of(o.interval),
    }
}

fn check(o: &Options) -> Result<()> {
    if let Some(p) = &o.recurrent_layers {
        if p.len() as u64 != o.layers {
            bail!(
                "--recurrent-layers has {} entries for {} layers",
                p.len(),
                o.layers
            );
        }
    }
    if o.interval == 0 || o.layers == 0 || o.k_heads == 0 || o.kv_heads == 0 || o.state == 0 {
        bail!("--interval, --layers, --k-heads, --kv-heads and --state must be positive");
    }
    if !o.v_heads.is_multiple_of(o.k_heads) {
        bail!(
            "--v-heads {} is not a multiple of --k-heads {}",
            o.v_heads,
            o.k_heads
        );
    }
    if !o.heads.is_multiple_of(o.kv_heads) {
        bail!(
            "--kv-heads {} does not divide --heads {}",
            o.kv_heads,
            o.heads
        );
    }
    if o.sections.len() != 4 {
        bail!("--sections takes 4 counts, not {}", o.sections.len());
    }
    if o.rot > o.head_dim || !o.rot.is_multiple_of(2) {
        bail!(
            "--rot {} must be even and at most --head-dim {}",
            o.rot,
            o.head_dim
        );
    }
    if o.vocab_size < 2 {
        bail!("--vocab-size must be at least 2");
    }
    Ok(())
}

/// An approximately normal value (sum of four uniforms, unit variance).
fn normal(rng: &mut SplitMix) -> f32 {
    (0..4).map(|_| rng.unit()).sum::<f32>() * 0.866_025_4
}

/// Writes the small file of `o`; `tokenizer` (a real vocabulary's `tokenizer.*` keys) replaces the
/// placeholder tokens and sets the vocabulary size.
pub fn write(
    o: &Options,
    format: &'static Format,
    tokenizer: Option<Vec<(String, Value)>>,
    path: &Path,
) -> Result<()> {
    let mut rng = SplitMix(o.seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ 0x0071_3e35);
    let n_vocab = tokenizer.as_ref().map(|keys| {
        keys.iter().find_map(|(k, v)| match v {
            Value::Array(tokens) if k == "tokenizer.ggml.tokens" => Some(tokens.len() as u64),
            _ => None,
        })
    });
    let o = match n_vocab {
        None => o.clone(),
        Some(n) => Options {
            vocab_size: n.context("the vocabulary has no tokenizer.ggml.tokens")?,
            ..o.clone()
        },
    };
    let source = Source {
        pool: None,
        tokenizer,
        context: 4096,
        name: None,
    };
    let w = build(&o, format, source, &mut rng)?;
    write_atomically(&w, path)
}

/// The file's keys and tensors, ready to write.
fn build(
    o: &Options,
    format: &'static Format,
    source: Source<'_>,
    rng: &mut SplitMix,
) -> Result<GgufWriter<'static>> {
    check(o)?;
    let _ = weight_format(format.name)?;
    let f32_format = format_by_name("f32").expect("f32 is registered");
    let Source {
        pool,
        tokenizer,
        context,
        name,
    } = source;
    let (e, v, ff) = (o.embd, o.vocab_size, o.ff);
    let (h, hkv, d) = (o.heads, o.kv_heads, o.head_dim);
    let (s, hk, hv) = (o.state, o.k_heads, o.v_heads);
    let (key_dim, value_dim) = (s * hk, s * hv);
    let conv_dim = 2 * key_dim + value_dim;

    let mut w = GgufWriter::new();
    let arch = "qwen35";
    let mut kv: Vec<(String, Value)> = vec![
        ("general.architecture".into(), arch.into()),
        (
            "general.name".into(),
            match name {
                Some(name) => format!("synthetic {name} {}", format.name),
                None => format!("synthetic qwen35 {} seed {}", format.name, o.seed),
            }
            .as_str()
            .into(),
        ),
        ("general.alignment".into(), Value::U32(32)),
    ];
    let sizes = [
        ("context_length", context),
        ("embedding_length", e),
        ("block_count", o.layers + o.nextn),
        ("feed_forward_length", ff),
        ("attention.head_count", h),
        ("attention.head_count_kv", hkv),
        ("attention.key_length", d),
        ("attention.value_length", d),
        ("rope.dimension_count", o.rot),
        ("ssm.conv_kernel", o.conv),
        ("ssm.inner_size", value_dim),
        ("ssm.state_size", s),
        ("ssm.time_step_rank", hv),
        ("ssm.group_count", hk),
    ];
    for (key, size) in sizes {
        kv.push((format!("{arch}.{key}"), Value::U32(size as u32)));
    }
    kv.push((format!("{arch}.rope.freq_base"), Value::F32(1e7)));
    kv.push((
        format!("{arch}.attention.layer_norm_rms_epsilon"),
        Value::F32(1e-6),
    ));
    kv.push((
        format!("{arch}.rope.dimension_sections"),
        Value::Array(Array::I32(o.sections.iter().map(|&x| x as i32).collect())),
    ));
    if o.nextn > 0 {
        kv.push((
            format!("{arch}.nextn_predict_layers"),
            Value::U32(o.nextn as u32),
        ));
    }
    match &o.recurrent_layers {
        // One flag per block, the prediction layers' false (full attention).
        Some(p) => kv.push((
            format!("{arch}.attention.recurrent_layers"),
            Value::Array(Array::Bool(
                p.iter()
                    .map(|&x| x != 0)
                    .chain((0..o.nextn).map(|_| false))
                    .collect(),
            )),
        )),
        None => kv.push((
            format!("{arch}.full_attention_interval"),
            Value::U32(o.interval as u32),
        )),
    }
    kv.extend(tokenizer.unwrap_or_else(|| small_vocabulary(v)));
    for (key, value) in kv {
        w.add_kv(key, value)?;
    }

    let norm = |rng: &mut SplitMix, n: u64| -> Vec<f32> {
        (0..n).map(|_| 1.0 + 0.1 * normal(rng)).collect()
    };
    // Rows of `cols` values of spread 1/√cols (so activations keep their size), quantized.
    let matrix = |w: &mut GgufWriter, rng: &mut SplitMix, name: &str, rows: u64, cols: u64| {
        if !cols.is_multiple_of(format.block_elems as u64) {
            bail!(
                "{name}: rows of {cols} values are not whole {} blocks of {}",
                format.name,
                format.block_elems
            );
        }
        let data = match pool {
            Some(pool) => random_matrix(format, pool, rows, cols, rng)?,
            None => {
                let spread = 1.0 / (cols as f32).sqrt();
                let values: Vec<f32> = (0..rows * cols).map(|_| normal(rng) * spread).collect();
                let bytes = format
                    .bytes_for(rows * cols)
                    .with_context(|| format!("{name}: too large"))?;
                let mut data = vec![0u8; bytes as usize];
                (format.quantize)(&values, &mut data);
                data
            }
        };
        w.add_tensor(name, &[cols, rows], format, data)?;
        Ok(())
    };
    let tensor_scales = o.tensor_scales;
    let scale = |w: &mut GgufWriter, rng: &mut SplitMix, name: &str| -> Result<()> {
        let base = name.trim_end_matches(".weight");
        if tensor_scales && SCALED.iter().any(|m| base.ends_with(&format!(".{m}"))) {
            let value = 1.0 + 0.5 * rng.unit();
            w.add_tensor(
                format!("{base}.scale"),
                &[1],
                f32_format,
                value.to_le_bytes().to_vec(),
            )?;
        }
        Ok(())
    };
    let mat = |w: &mut GgufWriter, rng: &mut SplitMix, name: &str, rows: u64, cols: u64| {
        matrix(w, rng, name, rows, cols)?;
        scale(w, rng, name)
    };
    let f32s = |w: &mut GgufWriter, name: &str, values: Vec<f32>| -> Result<()> {
        let data: Vec<u8> = values.iter().flat_map(|x| x.to_le_bytes()).collect();
        w.add_tensor(name, &[values.len() as u64], f32_format, data)?;
        Ok(())
    };

    mat(&mut w, rng, "token_embd.weight", v, e)?;
    f32s(&mut w, "output_norm.weight", norm(rng, e))?;
    if !o.tied {
        mat(&mut w, rng, "output.weight", v, e)?;
    }
    for il in 0..o.layers + o.nextn {
        let p = |x: &str| format!("blk.{il}.{x}");
        f32s(&mut w, &p("attn_norm.weight"), norm(rng, e))?;
        f32s(&mut w, &p("post_attention_norm.weight"), norm(rng, e))?;
        if il < o.layers && is_recurrent(o, il) {
            mat(&mut w, rng, &p("attn_qkv.weight"), conv_dim, e)?;
            mat(&mut w, rng, &p("attn_gate.weight"), value_dim, e)?;
            let conv: Vec<f32> = (0..conv_dim * o.conv).map(|_| 0.4 * normal(rng)).collect();
            let data: Vec<u8> = conv.iter().flat_map(|x| x.to_le_bytes()).collect();
            w.add_tensor(
                p("ssm_conv1d.weight"),
                &[o.conv, conv_dim],
                f32_format,
                data,
            )?;
            f32s(
                &mut w,
                &p("ssm_dt.bias"),
                (0..hv).map(|_| 0.5 * normal(rng)).collect(),
            )?;
            // Negative, as the converter's −exp(A_log): every decay stays at most 1.
            let a = (0..hv).map(|_| -(0.5 * normal(rng)).exp()).collect();
            f32s(&mut w, &p("ssm_a"), a)?;
            mat(&mut w, rng, &p("ssm_beta.weight"), hv, e)?;
            mat(&mut w, rng, &p("ssm_alpha.weight"), hv, e)?;
            f32s(&mut w, &p("ssm_norm.weight"), norm(rng, s))?;
            mat(&mut w, rng, &p("ssm_out.weight"), e, value_dim)?;
        } else {
            mat(&mut w, rng, &p("attn_q.weight"), 2 * d * h, e)?;
            mat(&mut w, rng, &p("attn_k.weight"), d * hkv, e)?;
            mat(&mut w, rng, &p("attn_v.weight"), d * hkv, e)?;
            mat(&mut w, rng, &p("attn_output.weight"), e, d * h)?;
            f32s(&mut w, &p("attn_q_norm.weight"), norm(rng, d))?;
            f32s(&mut w, &p("attn_k_norm.weight"), norm(rng, d))?;
        }
        mat(&mut w, rng, &p("ffn_gate.weight"), ff, e)?;
        mat(&mut w, rng, &p("ffn_up.weight"), ff, e)?;
        mat(&mut w, rng, &p("ffn_down.weight"), e, ff)?;
        if il >= o.layers {
            mat(&mut w, rng, &p("nextn.eh_proj.weight"), e, 2 * e)?;
            f32s(&mut w, &p("nextn.enorm.weight"), norm(rng, e))?;
            f32s(&mut w, &p("nextn.hnorm.weight"), norm(rng, e))?;
            f32s(&mut w, &p("nextn.shared_head_norm.weight"), norm(rng, e))?;
            if o.nextn_own_head {
                mat(&mut w, rng, &p("nextn.embed_tokens.weight"), v, e)?;
                mat(&mut w, rng, &p("nextn.shared_head_head.weight"), v, e)?;
            }
        }
    }
    Ok(w)
}

/// Numbered placeholder tokens (a BPE vocabulary both engines load; no text is tokenized).
fn small_vocabulary(n: u64) -> Vec<(String, Value)> {
    vec![
        ("tokenizer.ggml.model".into(), "gpt2".into()),
        ("tokenizer.ggml.pre".into(), "qwen2".into()),
        (
            "tokenizer.ggml.tokens".into(),
            Value::Array(Array::String((0..n).map(|i| format!("<t{i}>")).collect())),
        ),
        (
            "tokenizer.ggml.token_type".into(),
            Value::Array(Array::I32(vec![1; n as usize])),
        ),
        (
            "tokenizer.ggml.merges".into(),
            Value::Array(Array::String(vec!["< t".to_owned()])),
        ),
        ("tokenizer.ggml.bos_token_id".into(), Value::U32(0)),
        ("tokenizer.ggml.eos_token_id".into(), Value::U32(1)),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;
    use oxibonsai_gguf::GgufFile;

    /// Parameters of a shape counted from its sizes, as llama.cpp counts them (every tensor's
    /// elements): the table against the published totals (27B: llama-bench's 26.90 B; 9B:
    /// llama.cpp's 8.95 B for Qwen3.5-9B), and every rotated width whole blocks of the shape's
    /// rotation, the block the largest power of two dividing them all.
    #[test]
    fn the_shape_table_matches_the_published_sizes() {
        let count = |o: &Options| -> u64 {
            let (e, inner) = (o.embd, o.v_heads * o.state);
            let conv_ch = 2 * o.k_heads * o.state + inner;
            let attention = e * o.heads * o.head_dim * 2
                + 2 * e * o.kv_heads * o.head_dim
                + o.heads * o.head_dim * e
                + 2 * o.head_dim;
            let gdn = e * conv_ch
                + e * inner
                + 2 * e * o.v_heads
                + inner * e
                + conv_ch * o.conv
                + 2 * o.v_heads
                + o.state;
            let full = o.layers / o.interval;
            let head = if o.tied { 0 } else { o.vocab_size * e };
            o.vocab_size * e
                + head
                + e
                + o.layers * (3 * e * o.ff + 2 * e)
                + full * attention
                + (o.layers - full) * gdn
        };
        let billions = |name: &str| {
            let s = shape(name).unwrap();
            count(&options_of(s.sizes)) as f64 / 1e9
        };
        assert!((billions("ternary-bonsai-2-27b") - 26.90).abs() < 0.005);
        assert!((billions("ternary-bonsai-2-9b") - 8.95).abs() < 0.005);
        for s in SHAPES {
            let o = options_of(s.sizes);
            let widths = [o.embd, o.v_heads * o.state, o.ff];
            if let Some(block) = s.rotation_block {
                let block = u64::from(block);
                let largest = widths
                    .iter()
                    .map(|w| 1u64 << w.trailing_zeros())
                    .min()
                    .unwrap();
                assert_eq!(block, largest, "{}", s.name);
            }
        }
    }

    /// The published shapes' path (pool-drawn matrices, placeholder vocabulary, the rotation's
    /// keys written without folding) at a small size: the file loads as the engine reads a
    /// rotated qwen35, with every matrix folded at the widths the shape has and the V heads grouped.
    #[test]
    fn a_shape_file_carries_the_rotation_the_engine_reads() {
        let o = Options {
            layers: 4,
            embd: 256,
            ff: 512,
            heads: 4,
            kv_heads: 2,
            head_dim: 64,
            state: 32,
            k_heads: 2,
            v_heads: 4,
            vocab_size: 300,
            ..options_of(SIZES_27B)
        };
        let format = weight_format("ptq1_0").unwrap();
        let mut rng = SplitMix(7);
        let pool = block_pool(format, &mut rng);
        let source = Source {
            pool: Some(&pool),
            tokenizer: None,
            context: 8192,
            name: Some("test-shape"),
        };
        let mut w = build(&o, format, source, &mut rng).unwrap();
        super::super::synth_rotate::add_unfolded_metadata(&mut w, 128, Some((32, 2, 2))).unwrap();
        let file = GgufFile::from_bytes(w.to_bytes().unwrap()).unwrap();
        let meta = file.metadata();
        assert_eq!(meta.get_u64("qwen35.context_length").unwrap(), 8192);
        assert_eq!(meta.get_u64("qwen35.ssm.time_step_rank").unwrap(), 4);
        let rotation = oxibonsai_engine::rotation::Rotation::from_gguf(&file, "qwen35")
            .unwrap()
            .expect("rotated");
        assert_eq!(rotation.block_size(), 128);
        // 3 GDN layers × (qkv, gate, ssm_out) + 1 attention layer × 4 + 4 × 3 FFN + head; β and
        // α read the unrotated input (as in the published file: 401 weights).
        assert_eq!(rotation.n_folded(), 3 * 3 + 4 + 4 * 3 + 1);
        assert!(rotation.embedding_is_rotated());
        assert_eq!(rotation.sign_widths().collect::<Vec<_>>(), [128, 256, 512]);
        assert!(rotation.gdn_heads().is_some());
        // Every matrix is the format's, drawn from the pool's valid blocks.
        let t = file.tensor("blk.0.ffn_down.weight").unwrap();
        assert_eq!(t.format.name, "ptq1_0");
        assert!(t.format.dequantize_row(file.tensor_data(t)).is_ok());
    }
}
