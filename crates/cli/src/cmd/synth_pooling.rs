//! `oxibonsai synth --from GGUF --pooling TYPE [--classifier-tokens ID,ID] -o OUT`: a copy of a model
//! that carries `<arch>.pooling_type` — and, for rank pooling, the classifier head llama.cpp reads
//! (`cls.output.weight` with `<arch>.classifier.output_labels`), made as llama.cpp's converter makes
//! Qwen3-Reranker's: the LM head's rows of the label tokens (yes, no). So embedding and reranking
//! test models exist without downloading one.

use std::path::Path;

use anyhow::{bail, Context, Result};
use oxibonsai_engine::Pooling;
use oxibonsai_formats::format_by_name;
use oxibonsai_gguf::{Array, GgufFile, GgufWriter, Value};

#[derive(clap::Args, Debug, Clone)]
pub struct PoolingArgs {
    /// With --from: write `<arch>.pooling_type` (none, mean, cls, last or rank).
    #[arg(long, value_name = "TYPE")]
    pub pooling: Option<String>,
    /// With --pooling rank: the token ids whose LM-head rows make the classifier head, in label
    /// order (Qwen3-Reranker: the ids of "yes" then "no").
    #[arg(long, value_name = "ID,ID", requires = "pooling")]
    pub classifier_tokens: Option<String>,
}

pub fn pooling_file(source: &Path, output: &Path, args: &PoolingArgs) -> Result<()> {
    let name = args.pooling.as_deref().context("no --pooling type")?;
    let pooling = Pooling::from_name(name)
        .with_context(|| format!("--pooling '{name}': expected none, mean, cls, last or rank"))?;
    let tokens: Vec<u64> = match &args.classifier_tokens {
        Some(list) => list
            .split([',', ' '])
            .filter(|s| !s.is_empty())
            .map(|s| {
                s.parse()
                    .with_context(|| format!("--classifier-tokens: '{s}' is not a token id"))
            })
            .collect::<Result<_>>()?,
        None => Vec::new(),
    };
    if (pooling == Pooling::Rank) == tokens.is_empty() {
        bail!("--classifier-tokens goes with --pooling rank, and rank pooling needs them");
    }
    let file =
        GgufFile::open(source).with_context(|| format!("cannot open '{}'", source.display()))?;
    let arch = file.metadata().get_str("general.architecture")?.to_owned();
    let pooling_key = format!("{arch}.pooling_type");
    let labels_key = format!("{arch}.classifier.output_labels");
    let mut w = GgufWriter::new();
    for (key, value) in file.metadata().iter() {
        if key != pooling_key && key != labels_key {
            w.add_kv(key, value.clone())?;
        }
    }
    w.add_kv(pooling_key, Value::U32(pooling.id()))?;
    for t in file.tensors() {
        if !t.name.starts_with("cls.") {
            w.add_tensor(&t.name, &t.dims, t.format, file.tensor_data(t))?;
        }
    }
    if pooling == Pooling::Rank {
        let head = file
            .tensor("output.weight")
            .or_else(|| file.tensor("token_embd.weight"))
            .context("the model has neither output.weight nor token_embd.weight")?;
        let (width, n_rows) = (head.row_len(), head.n_rows());
        let row_bytes = head.row_bytes() as usize;
        let data = file.tensor_data(head);
        let mut rows = Vec::with_capacity(tokens.len() * width as usize * 4);
        let mut row = vec![0f32; width as usize];
        for &id in &tokens {
            if id >= n_rows {
                bail!("--classifier-tokens: {id} is past the vocabulary of {n_rows}");
            }
            let at = id as usize * row_bytes;
            (head.format.dequantize)(&data[at..at + row_bytes], &mut row);
            rows.extend(row.iter().flat_map(|v| v.to_le_bytes()));
        }
        let labels = tokens.iter().map(|id| format!("token {id}")).collect();
        w.add_kv(labels_key, Value::Array(Array::String(labels)))?;
        let f32_format = format_by_name("f32").expect("f32 is registered");
        w.add_tensor(
            "cls.output.weight",
            &[width, tokens.len() as u64],
            f32_format,
            rows,
        )?;
    }
    super::synth::write_atomically(&w, output)
}
