//! Re-quantizing a GGUF model the way `llama-quantize` does, with the same per-tensor choices,
//! tensor order and metadata, so the output is byte-identical to the reference's for the types
//! this build can write.
//!
//! [`file_type`] lists the file types; [`rules`] is the reference's mixture (which type each
//! tensor gets); [`plan`] applies the user's overrides and the row-fit fallbacks to every tensor
//! before anything is converted, so a refusal (a quantized input without `allow_requantize`, a
//! row that no block divides) leaves no partial output behind; [`rows`] converts one tensor's
//! data. [`Quantization`] runs the whole file through them; the Hugging Face converter reuses the
//! same planner and row converter.

pub mod file_type;
pub mod plan;
pub mod rows;
pub mod rules;

use std::borrow::Cow;
use std::collections::BTreeMap;

use oxibonsai_gguf::{GgufError, GgufFile, GgufWriter, TensorInfo, Value};

use crate::Progress;
pub use file_type::{
    file_type_by_name, file_type_by_number, FileType, FileTypeId, UnknownFileType, FILE_TYPES,
};
pub use plan::{Decision, Options, PlanError, TensorIn, QUANTIZATION_VERSION};
pub use rows::RowError;
pub use rules::{ModelFacts, RuleError};

#[derive(Debug, thiserror::Error)]
pub enum QuantizeError {
    #[error(transparent)]
    Rule(#[from] RuleError),
    #[error(transparent)]
    Plan(#[from] PlanError),
    #[error(transparent)]
    Rows(#[from] RowError),
    #[error(transparent)]
    Gguf(#[from] GgufError),
}

/// `FILE_TYPE: type count, …`, the types by descending tensor count (then by name): how
/// `quantize` sums up what it wrote and `info` what a file holds.
pub fn mixture(file_type: &str, counts: &[(&str, usize)]) -> String {
    let mut counts = counts.to_vec();
    counts.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
    let types: Vec<String> = counts.iter().map(|(t, n)| format!("{t} {n}")).collect();
    format!("{file_type}: {}", types.join(", "))
}

/// A GGUF file with every tensor's type decided, ready to convert.
pub struct Quantization<'a> {
    file: &'a GgufFile,
    /// In the reference's order ([`plan::layer_order_key`]), which is also the output's.
    tensors: Vec<&'a TensorInfo>,
    decisions: Vec<Decision>,
    llama_ftype: u32,
}

/// The converted file, not yet written.
pub struct Quantized<'a> {
    pub writer: GgufWriter<'a>,
    /// Bytes of tensor data in the output.
    pub tensor_bytes: u64,
    /// How many tensors each type has in the output, by type name.
    pub counts: BTreeMap<&'static str, usize>,
}

/// Keys the reference does not copy from the input: it sets the first two itself and writes
/// one file, not a split.
const REWRITTEN: &[&str] = &[
    "general.quantization_version",
    "general.file_type",
    "split.no",
    "split.count",
    "split.tensors.count",
];

impl<'a> Quantization<'a> {
    /// Plans every tensor of `file`; nothing is converted yet.
    pub fn plan(file: &'a GgufFile, options: &Options) -> Result<Self, QuantizeError> {
        let mut tensors: Vec<&TensorInfo> = file.tensors().iter().collect();
        tensors.sort_by(|a, b| plan::layer_order_key(&a.name).cmp(&plan::layer_order_key(&b.name)));
        let facts = ModelFacts::new(file.metadata(), tensors.iter().map(|t| t.name.as_str()))?;
        let inputs: Vec<TensorIn> = tensors
            .iter()
            .map(|t| TensorIn {
                name: &t.name,
                dims: &t.dims,
                format: t.format,
            })
            .collect();
        let decisions = plan::plan(&inputs, options, &facts)?;
        Ok(Quantization {
            file,
            tensors,
            decisions,
            llama_ftype: options.file_type.llama_ftype,
        })
    }

    /// The planned type of each tensor, in output order.
    pub fn decisions(&self) -> impl Iterator<Item = (&'a str, Decision)> + '_ {
        self.tensors
            .iter()
            .zip(&self.decisions)
            .map(|(t, d)| (t.name.as_str(), *d))
    }

    /// Elements over all tensors, the unit of [`Progress::Done`].
    pub fn n_elements(&self) -> u64 {
        self.tensors.iter().map(|t| t.n_elements()).sum()
    }

    /// Converts every tensor as planned into a writer holding the output file.
    pub fn run(self, progress: &mut dyn FnMut(Progress)) -> Result<Quantized<'a>, QuantizeError> {
        let mut writer = GgufWriter::new();
        for (key, value) in self.file.metadata().iter() {
            if !REWRITTEN.contains(&key) {
                writer.add_kv(key, value.clone())?;
            }
        }
        // The reference sets these two after copying the rest, which moves them to the end.
        writer.add_kv(
            "general.quantization_version",
            Value::U32(QUANTIZATION_VERSION),
        )?;
        writer.add_kv("general.file_type", Value::U32(self.llama_ftype))?;

        let mut counts: BTreeMap<&'static str, usize> = BTreeMap::new();
        let mut tensor_bytes = 0u64;
        for (t, decision) in self.tensors.iter().zip(&self.decisions) {
            progress(Progress::Started { tensor: &t.name });
            let data = self.file.tensor_data(t);
            let data: Cow<[u8]> = if decision.convert {
                Cow::Owned(rows::convert(
                    &t.name,
                    data,
                    t.row_len(),
                    t.format,
                    decision.format,
                )?)
            } else {
                Cow::Borrowed(data)
            };
            tensor_bytes += data.len() as u64;
            *counts.entry(decision.format.name).or_default() += 1;
            writer.add_tensor(&t.name, &t.dims, decision.format, data)?;
            progress(Progress::Done {
                n_elements: t.n_elements(),
            });
        }
        Ok(Quantized {
            writer,
            tensor_bytes,
            counts,
        })
    }
}
