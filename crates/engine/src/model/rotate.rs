//! The `prism.hadamard` rotation in the forward pass: which activations a file's folded weights
//! need rotated, decided once at load (the transform and the contract: [`crate::rotation`]).
//!
//! Each rotated activation is rotated once, into a copy, for all the weights that read it: the
//! normed input of the mixer's projections (q / k / v; a Gated DeltaNet's qkv and z, whose β and
//! α read the same rows unrotated), the mixer's output before `attn_output` / `ssm_out`, the
//! normed input of ffn_gate / ffn_up, the SwiGLU output before ffn_down, and the final normed rows
//! before the head. Weights that read one activation must agree (all folded or none), and every
//! folded weight must be one the pass reads: a file that breaks either is refused at load.

use std::collections::HashSet;

use oxibonsai_formats::kernels::{Isa, Kernels};
use oxibonsai_gguf::GgufFile;

use crate::backend::grown;
use crate::config::{LayerKind, ModelConfig};
use crate::error::EngineError;
use crate::rotation::Rotation;

/// Which inputs of one layer are rotated.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct LayerInputs {
    /// The normed input of the mixer's projections.
    pub mixer_in: bool,
    /// The mixer's output, before `attn_output` / `ssm_out`.
    pub mixer_out: bool,
    /// The normed input of ffn_gate / ffn_up.
    pub ffn_in: bool,
    /// The SwiGLU output, before ffn_down.
    pub ffn_down: bool,
}

pub(crate) struct Rotated {
    pub rotation: Rotation,
    /// The transform's kernels: every tier gives the scalar twin's bits, so the best one serves
    /// whatever tier the backend runs.
    pub kernels: Kernels,
    pub layers: Vec<LayerInputs>,
    /// The final normed rows, before the head.
    pub head: bool,
}

impl Rotated {
    /// The rotation of `file` as this model's forward pass applies it, `None` without one.
    pub fn load(
        file: &GgufFile,
        c: &ModelConfig,
        tied: bool,
    ) -> Result<Option<Rotated>, EngineError> {
        let Some(rotation) = Rotation::from_gguf(file, c.arch.name())? else {
            return Ok(None);
        };
        let refuse = |reason: String| EngineError::BadRotation {
            key: "prism.hadamard.weight_names".into(),
            reason,
        };
        let mut read: HashSet<String> = HashSet::new();
        let mut group = |names: &[String]| -> Result<bool, EngineError> {
            let folded: Vec<bool> = names.iter().map(|n| rotation.is_folded(n)).collect();
            read.extend(names.iter().cloned());
            match (
                folded.iter().position(|&f| f),
                folded.iter().position(|&f| !f),
            ) {
                (Some(yes), Some(no)) => Err(refuse(format!(
                    "'{}' is folded but '{}', which reads the same activation, is not",
                    names[yes], names[no]
                ))),
                (yes, _) => Ok(yes.is_some()),
            }
        };
        let mut layers = Vec::with_capacity(c.n_layer);
        for (i, kind) in c.layers.iter().enumerate() {
            let p = |s: &str| format!("blk.{i}.{s}.weight");
            let (mixer_in, mixer_out) = match kind {
                LayerKind::Attention => (
                    group(&[p("attn_q"), p("attn_k"), p("attn_v")])?,
                    group(&[p("attn_output")])?,
                ),
                LayerKind::GatedDeltaNet => (
                    group(&[p("attn_qkv"), p("attn_gate")])?,
                    group(&[p("ssm_out")])?,
                ),
            };
            layers.push(LayerInputs {
                mixer_in,
                mixer_out,
                ffn_in: group(&[p("ffn_gate"), p("ffn_up")])?,
                ffn_down: group(&[p("ffn_down")])?,
            });
        }
        let head = if tied {
            // The head reads the embedding table, stored rotated or not as the file says.
            rotation.embedding_is_rotated()
        } else {
            group(&["output.weight".to_owned()])?
        };
        if let Some(stray) = rotation.folded_names().find(|n| !read.contains(*n)) {
            return Err(refuse(format!(
                "'{stray}' is folded, but this {} model never reads it",
                c.arch.name()
            )));
        }
        if c.has_recurrent_layers() {
            let ssm = c.ssm.expect("recurrent layers come with their ssm config");
            if let Some(gdn) = rotation.gdn_heads() {
                if gdn.width() != ssm.value_dim() {
                    return Err(EngineError::BadRotation {
                        key: "prism.hadamard.gdn_v_grouped".into(),
                        reason: format!(
                            "its heads make {} values, ssm_out reads {}",
                            gdn.width(),
                            ssm.value_dim()
                        ),
                    });
                }
            }
        }
        Ok(Some(Rotated {
            rotation,
            kernels: Kernels::new(Isa::best()).ok_or_else(|| EngineError::BadRotation {
                key: "prism.hadamard.version".into(),
                reason: "this CPU has no kernels for the transform".into(),
            })?,
            layers,
            head,
        }))
    }

    /// `x`, or its rotated copy (made in `copy`) when `rotate`: rows of `width`.
    pub fn input<'a>(
        &self,
        rotate: bool,
        x: &'a [f32],
        copy: &'a mut Vec<f32>,
        width: usize,
    ) -> &'a [f32] {
        if !rotate {
            return x;
        }
        let copy = grown(copy, x.len());
        copy.copy_from_slice(x);
        self.rotation.apply(&self.kernels, width, copy);
        copy
    }

    /// Rotates `x` (rows of `width`) in place when `rotate`.
    pub fn in_place(&self, rotate: bool, x: &mut [f32], width: usize) {
        if rotate {
            self.rotation.apply(&self.kernels, width, x);
        }
    }

    /// Rotates a Gated DeltaNet output (rows of `width`) in place for `ssm_out` when `rotate`,
    /// V heads permuted first when the file says so.
    pub fn ssm_out_in_place(
        &self,
        rotate: bool,
        x: &mut [f32],
        width: usize,
        scratch: &mut Vec<f32>,
    ) {
        if rotate {
            let scratch = grown(scratch, width);
            self.rotation
                .apply_ssm_out(&self.kernels, width, x, scratch);
        }
    }
}
