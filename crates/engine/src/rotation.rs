//! PrismML's `prism.hadamard` rotation (Ternary-Bonsai-2): weights stored pre-multiplied by a
//! blockwise, sign-prefixed, normalised Sylvester Walsh–Hadamard rotation along their input
//! dimension, so the forward pass must rotate the activation those weights read, and the token
//! embedding, whose rows are stored rotated, must be rotated back after the lookup. Without it a
//! Bonsai-2 file loads and prints gibberish.
//!
//! The contract (PrismML's fork, `llama_model_base::load_hparams`; `specs/bonsai2-formats.md`
//! §2) is read and checked here in full, each refusal naming the key (and the weight); the
//! transform itself is the formats crate's `Kernels::fwht`.
//!
//! # Where the forward pass calls it
//! With `T(x) = H·(s ⊙ P·x)` (`P` the GDN permutation, `ssm_out` only; `s` the signs of the
//! activation's width; `H` the blockwise FWHT scaled by `1/√block`), a folded weight stores
//! `W' = W·T⁻¹`, so `W'·T(x) = W·x`. Each activation is rotated once, into a copy, however many
//! weights read it; weights that are not folded keep reading the unrotated activation:
//! - after `token_embd` lookup: [`Rotation::inverse_embedding`] on the looked-up rows (a no-op
//!   unless `inverse_weight_names` lists `token_embd.weight`); the residual stream is then in the
//!   model's own basis, and every rotation below is local to one product;
//! - attention: the normed input of `attn_q` / `attn_k` / `attn_v` (or `attn_qkv` and
//!   `attn_gate` in a Gated DeltaNet layer — whose `ssm_alpha` / `ssm_beta` read the same input
//!   unrotated: they are never folded), one [`Rotation::apply`] of width `n_embd` when
//!   [`Rotation::is_folded`] says so of them; the input of `attn_output` (width
//!   `n_head·head_dim_v`), its own `apply`;
//! - Gated DeltaNet output: the input of `ssm_out` through [`Rotation::apply_ssm_out`] (the
//!   tiled → grouped V-head permutation first, when `gdn_v_grouped`);
//! - FFN: the normed input of `ffn_gate` / `ffn_up` (and the `_exps` / `_shexp` variants), one
//!   `apply` of width `n_embd`; the input of `ffn_down`, one `apply` of width `n_ff`;
//! - head: the final normed activation before `output.weight` when it is folded; a tied head
//!   (no `output.weight`) reads the embedding table, whose rows are rotated when
//!   [`Rotation::embedding_is_rotated`], so its input takes `apply` of width `n_embd` then.
//!
//! A batch is rows of one width: `apply` takes any number of rows at once.

use std::collections::HashSet;

use oxibonsai_formats::kernels::{Kernels, FWHT_BLOCKS};
use oxibonsai_gguf::{GgufFile, Metadata};

use crate::error::EngineError;

const PREFIX: &str = "prism.hadamard.";
const VERSION: &str = "prism.hadamard.version";
const BLOCK_SIZE: &str = "prism.hadamard.block_size";
const TRANSFORM: &str = "prism.hadamard.transform";
const AXIS: &str = "prism.hadamard.axis";
const SIGN_MODE: &str = "prism.hadamard.sign_mode";
const WEIGHT_NAMES: &str = "prism.hadamard.weight_names";
const SIGN_WIDTHS: &str = "prism.hadamard.sign_widths";
const SIGN_VALUES: &str = "prism.hadamard.sign_values";
const GDN_V_GROUPED: &str = "prism.hadamard.gdn_v_grouped";
const INVERSE_WEIGHT_NAMES: &str = "prism.hadamard.inverse_weight_names";
/// Every key of version 1; any other `prism.hadamard.*` key is refused (a later version's key
/// may change what the weights mean).
const KEYS: [&str; 10] = [
    VERSION,
    BLOCK_SIZE,
    TRANSFORM,
    AXIS,
    SIGN_MODE,
    WEIGHT_NAMES,
    SIGN_WIDTHS,
    SIGN_VALUES,
    GDN_V_GROUPED,
    INVERSE_WEIGHT_NAMES,
];

pub const TRANSFORM_NAME: &str = "normalized-sylvester-walsh-hadamard";
pub const AXIS_NAME: &str = "input-last-dimension";
/// The architectures whose graph the fork rotates (llama.cpp's names).
pub const ARCHITECTURES: [&str; 7] = [
    "llama",
    "qwen3",
    "qwen3moe",
    "qwen35",
    "qwen35moe",
    "qwen3next",
    "dspark",
];
/// The per-layer weights that may be folded (`blk.N.<name>.weight`), besides `output.weight`.
pub const FOLDABLE: [&str; 17] = [
    "attn_q",
    "attn_k",
    "attn_v",
    "attn_qkv",
    "attn_gate",
    "attn_output",
    "ffn_gate",
    "ffn_up",
    "ffn_down",
    "ffn_gate_exps",
    "ffn_up_exps",
    "ffn_down_exps",
    "ffn_gate_up_exps",
    "ffn_gate_shexp",
    "ffn_up_shexp",
    "ffn_down_shexp",
    "ssm_out",
];
/// The only table whose rows may be stored rotated.
pub const EMBEDDING: &str = "token_embd.weight";

/// Whether the contract lets `name` be folded: `output.weight` or `blk.N.<FOLDABLE>.weight`.
pub fn is_foldable(name: &str) -> bool {
    if name == "output.weight" {
        return true;
    }
    let Some(rest) = name.strip_prefix("blk.") else {
        return false;
    };
    let Some((layer, rest)) = rest.split_once('.') else {
        return false;
    };
    let Some(base) = rest.strip_suffix(".weight") else {
        return false;
    };
    !layer.is_empty() && layer.bytes().all(|b| b.is_ascii_digit()) && FOLDABLE.contains(&base)
}

/// The transform a rotation runs on rows: the formats crate's kernels, or a backend's own.
pub trait Fwht {
    /// `Kernels::fwht`'s contract: each `width`-value row of `rows`, per `block`-value chunk,
    /// becomes `(1/√block)·S_block·(row ⊙ signs)`.
    fn fwht(&self, rows: &mut [f32], width: usize, block: usize, signs: Option<&[f32]>);
}

impl Fwht for Kernels {
    fn fwht(&self, rows: &mut [f32], width: usize, block: usize, signs: Option<&[f32]>) {
        Kernels::fwht(self, rows, width, block, signs)
    }
}

/// The Gated DeltaNet value heads as `ssm_out` reads them: `nk` key-head groups of `rep` value
/// heads of `head_dim` values. The runtime's order is tiled (value head `k + nk·r`), the folded
/// weight's is grouped (`r + rep·k`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GdnHeads {
    /// `ssm.state_size`.
    pub head_dim: usize,
    /// `ssm.group_count`.
    pub n_group: usize,
    /// `ssm.time_step_rank / ssm.group_count`.
    pub rep: usize,
}

impl GdnHeads {
    /// Values of one `ssm_out` input row.
    pub fn width(&self) -> usize {
        self.head_dim * self.n_group * self.rep
    }

    /// `grouped[d + hd·(r + rep·k)] = tiled[d + hd·(k + nk·r)]` for one row of [`Self::width`].
    pub fn tiled_to_grouped(&self, tiled: &[f32], grouped: &mut [f32]) {
        let (hd, nk, rep) = (self.head_dim, self.n_group, self.rep);
        assert!(
            tiled.len() == self.width() && grouped.len() == self.width(),
            "tiled_to_grouped: rows of {} values expected",
            self.width()
        );
        for k in 0..nk {
            for r in 0..rep {
                let from = hd * (k + nk * r);
                let to = hd * (r + rep * k);
                grouped[to..to + hd].copy_from_slice(&tiled[from..from + hd]);
            }
        }
    }
}

/// A validated `prism.hadamard` rotation.
#[derive(Clone, Debug)]
pub struct Rotation {
    block: usize,
    /// `(width, ±1 per value)` in explicit sign mode, sorted by width; empty in identity mode.
    signs: Vec<(usize, Vec<f32>)>,
    explicit: bool,
    folded: HashSet<String>,
    embedding_rotated: bool,
    /// The V-head layout of `ssm_out`'s input when `gdn_v_grouped`.
    gdn: Option<GdnHeads>,
}

fn bad(key: &str, reason: impl Into<String>) -> EngineError {
    EngineError::BadRotation {
        key: key.to_owned(),
        reason: reason.into(),
    }
}

impl Rotation {
    /// The rotation of `file`, `None` when it has none (no `prism.hadamard.version`). `arch` is
    /// the model's `general.architecture` name (its `ssm.*` keys describe the GDN heads).
    pub fn from_gguf(file: &GgufFile, arch: &str) -> Result<Option<Rotation>, EngineError> {
        let meta = file.metadata();
        let keys: Vec<&str> = meta
            .iter()
            .map(|(k, _)| k)
            .filter(|k| k.starts_with(PREFIX))
            .collect();
        if keys.is_empty() {
            return Ok(None);
        }
        if let Some(unknown) = keys.iter().find(|k| !KEYS.contains(k)) {
            return Err(bad(unknown, "not a key of prism.hadamard version 1"));
        }
        if !meta.contains_key(VERSION) {
            return Err(bad(
                VERSION,
                format!(
                    "missing, but '{}' is present: the rotation is declared without its version",
                    keys[0]
                ),
            ));
        }
        let version = meta.get_u64(VERSION)?;
        if version != 1 {
            return Err(bad(
                VERSION,
                format!("unsupported version {version} (only 1 is known)"),
            ));
        }
        if !ARCHITECTURES.contains(&arch) {
            return Err(bad(
                VERSION,
                format!(
                    "architecture '{arch}' has no rotated graph (the contract allows {})",
                    ARCHITECTURES.join(", ")
                ),
            ));
        }
        let block = meta.get_u64(BLOCK_SIZE)?;
        if block == 0 || !block.is_power_of_two() {
            return Err(bad(
                BLOCK_SIZE,
                format!("{block} is not a non-zero power of two"),
            ));
        }
        if block > *FWHT_BLOCKS.end() as u64 {
            return Err(bad(
                BLOCK_SIZE,
                format!("{block} is larger than the {} supported", FWHT_BLOCKS.end()),
            ));
        }
        let block = block as usize;
        expect_str(meta, TRANSFORM, TRANSFORM_NAME)?;
        expect_str(meta, AXIS, AXIS_NAME)?;
        let explicit = match meta.get_str(SIGN_MODE)? {
            "explicit" => true,
            "identity" => false,
            other => {
                return Err(bad(
                    SIGN_MODE,
                    format!("'{other}' is neither 'identity' nor 'explicit'"),
                ))
            }
        };
        let signs = if explicit {
            sign_vectors(meta, block)?
        } else {
            for key in [SIGN_WIDTHS, SIGN_VALUES] {
                if meta.contains_key(key) {
                    return Err(bad(key, "present, but sign_mode is 'identity'"));
                }
            }
            Vec::new()
        };
        let gdn = match meta.opt_bool(GDN_V_GROUPED)? {
            Some(true) => Some(gdn_heads(meta, arch)?),
            _ => None,
        };
        let mut rotation = Rotation {
            block,
            signs,
            explicit,
            folded: HashSet::new(),
            embedding_rotated: false,
            gdn,
        };

        let names = meta.get_str_array(WEIGHT_NAMES)?;
        if names.is_empty() {
            return Err(bad(WEIGHT_NAMES, "empty: no weight is folded"));
        }
        for name in names {
            if !is_foldable(name) {
                return Err(bad(
                    WEIGHT_NAMES,
                    format!("'{name}' is not a weight the contract can fold"),
                ));
            }
            if !rotation.folded.insert(name.clone()) {
                return Err(bad(WEIGHT_NAMES, format!("'{name}' is listed twice")));
            }
            let width = rotation.input_width(file, WEIGHT_NAMES, name)?;
            if name.ends_with(".ssm_out.weight") {
                if let Some(gdn) = rotation.gdn.filter(|g| g.width() != width) {
                    return Err(bad(
                        GDN_V_GROUPED,
                        format!(
                            "'{name}' reads {width} values, but the GDN heads make {} \
                             (state_size {} × group_count {} × {} value heads a group)",
                            gdn.width(),
                            gdn.head_dim,
                            gdn.n_group,
                            gdn.rep
                        ),
                    ));
                }
            }
        }
        if let Some(inverse) = meta.opt_str_array(INVERSE_WEIGHT_NAMES)? {
            for name in inverse {
                if name != EMBEDDING {
                    return Err(bad(
                        INVERSE_WEIGHT_NAMES,
                        format!("'{name}' cannot be stored rotated (only {EMBEDDING} can)"),
                    ));
                }
                if rotation.embedding_rotated {
                    return Err(bad(
                        INVERSE_WEIGHT_NAMES,
                        format!("'{name}' is listed twice"),
                    ));
                }
                rotation.input_width(file, INVERSE_WEIGHT_NAMES, name)?;
                rotation.embedding_rotated = true;
            }
        }
        Ok(Some(rotation))
    }

    /// The row length of tensor `name`, checked to be whole blocks with signs of that width.
    fn input_width(&self, file: &GgufFile, key: &str, name: &str) -> Result<usize, EngineError> {
        let Some(tensor) = file.tensor(name) else {
            return Err(bad(key, format!("'{name}' is not a tensor of this file")));
        };
        let width = tensor.row_len();
        if !width.is_multiple_of(self.block as u64) {
            return Err(bad(
                key,
                format!(
                    "'{name}' has rows of {width} values, not whole blocks of {}",
                    self.block
                ),
            ));
        }
        let width = width as usize;
        if self.explicit && self.signs(width).is_none() {
            return Err(bad(
                SIGN_WIDTHS,
                format!("no signs of width {width}, which '{name}' reads"),
            ));
        }
        Ok(width)
    }

    pub fn block_size(&self) -> usize {
        self.block
    }

    /// Whether `weight_name` is stored folded: its input must go through [`Rotation::apply`]
    /// (or [`Rotation::apply_ssm_out`] for `ssm_out`).
    pub fn is_folded(&self, weight_name: &str) -> bool {
        self.folded.contains(weight_name)
    }

    /// How many weights are folded.
    pub fn n_folded(&self) -> usize {
        self.folded.len()
    }

    /// The folded weights' names, in no particular order.
    pub fn folded_names(&self) -> impl Iterator<Item = &str> {
        self.folded.iter().map(String::as_str)
    }

    /// Whether the embedding rows are stored rotated (then [`Rotation::inverse_embedding`]
    /// restores them, and a tied head's input takes [`Rotation::apply`]).
    pub fn embedding_is_rotated(&self) -> bool {
        self.embedding_rotated
    }

    /// The signs of `width` (explicit sign mode), `None` in identity mode or for a width the
    /// file has none of.
    pub fn signs(&self, width: usize) -> Option<&[f32]> {
        let i = self.signs.binary_search_by_key(&width, |s| s.0).ok()?;
        Some(&self.signs[i].1)
    }

    /// The widths that have signs (explicit sign mode), ascending.
    pub fn sign_widths(&self) -> impl Iterator<Item = usize> + '_ {
        self.signs.iter().map(|s| s.0)
    }

    /// The V-head layout `ssm_out`'s input is permuted by, when the file says `gdn_v_grouped`.
    pub fn gdn_heads(&self) -> Option<GdnHeads> {
        self.gdn
    }

    /// `x ← H·(s ⊙ x)` on each `width`-value row of `rows`: what a folded weight of that input
    /// width must read. Panics for a width that is not whole blocks or, in explicit sign mode,
    /// has no signs — both checked at load for every folded weight.
    pub fn apply(&self, fwht: &impl Fwht, width: usize, rows: &mut [f32]) {
        let signs = if self.explicit {
            Some(
                self.signs(width)
                    .unwrap_or_else(|| panic!("rotation: no signs of width {width}")),
            )
        } else {
            None
        };
        self.transform(fwht, width, rows, signs);
    }

    /// [`Rotation::apply`] for the input of a Gated DeltaNet `ssm_out`: with `gdn_v_grouped`,
    /// each row is first permuted from the runtime's tiled V-head order to the folded weight's
    /// grouped one (through `scratch`, at least one row long).
    pub fn apply_ssm_out(
        &self,
        fwht: &impl Fwht,
        width: usize,
        rows: &mut [f32],
        scratch: &mut [f32],
    ) {
        if let Some(gdn) = self.gdn {
            assert_eq!(gdn.width(), width, "apply_ssm_out: row width");
            let scratch = &mut scratch[..width];
            for row in rows.chunks_exact_mut(width) {
                scratch.copy_from_slice(row);
                gdn.tiled_to_grouped(scratch, row);
            }
        }
        self.apply(fwht, width, rows);
    }

    /// The embedding rows as the model was trained, from rows looked up in a table stored
    /// rotated: `x ← s ⊙ (H·x)` (rotation first, then signs: the inverse of `apply`). Nothing
    /// to do when the table is not stored rotated.
    pub fn inverse_embedding(&self, fwht: &impl Fwht, n_embd: usize, rows: &mut [f32]) {
        if !self.embedding_rotated {
            return;
        }
        self.transform(fwht, n_embd, rows, None);
        if self.explicit {
            let signs = self
                .signs(n_embd)
                .unwrap_or_else(|| panic!("rotation: no signs of width {n_embd}"));
            for row in rows.chunks_exact_mut(n_embd) {
                for (x, s) in row.iter_mut().zip(signs) {
                    *x *= s;
                }
            }
        }
    }

    fn transform(&self, fwht: &impl Fwht, width: usize, rows: &mut [f32], signs: Option<&[f32]>) {
        if self.block >= 2 {
            fwht.fwht(rows, width, self.block, signs);
        } else if let Some(signs) = signs {
            // A block of one value: the rotation is the identity, the signs remain.
            for row in rows.chunks_exact_mut(width) {
                for (x, s) in row.iter_mut().zip(signs) {
                    *x *= s;
                }
            }
        }
    }
}

fn expect_str(meta: &Metadata, key: &str, want: &str) -> Result<(), EngineError> {
    let found = meta.get_str(key)?;
    if found != want {
        return Err(bad(key, format!("'{found}' (the contract knows '{want}')")));
    }
    Ok(())
}

/// The explicit sign vectors, one per width in `sign_widths`, cut from `sign_values`.
fn sign_vectors(meta: &Metadata, block: usize) -> Result<Vec<(usize, Vec<f32>)>, EngineError> {
    let widths = meta.get_i32_array(SIGN_WIDTHS)?;
    let values = meta.get_i32_array(SIGN_VALUES)?;
    if widths.is_empty() {
        return Err(bad(SIGN_WIDTHS, "empty in explicit sign mode"));
    }
    let mut total = 0usize;
    for &w in widths.iter() {
        if w <= 0 || !(w as usize).is_multiple_of(block) {
            return Err(bad(
                SIGN_WIDTHS,
                format!("width {w} is not a positive multiple of the block size {block}"),
            ));
        }
        total += w as usize;
    }
    if values.len() != total {
        return Err(bad(
            SIGN_VALUES,
            format!("{} values, but sign_widths add up to {total}", values.len()),
        ));
    }
    if let Some(i) = values.iter().position(|&v| v != 1 && v != -1) {
        return Err(bad(
            SIGN_VALUES,
            format!("value {i} is {}, not ±1", values[i]),
        ));
    }
    let mut signs: Vec<(usize, Vec<f32>)> = Vec::with_capacity(widths.len());
    let mut at = 0;
    for &w in widths.iter() {
        let w = w as usize;
        if signs.iter().any(|s| s.0 == w) {
            return Err(bad(SIGN_WIDTHS, format!("width {w} is listed twice")));
        }
        signs.push((w, values[at..at + w].iter().map(|&v| v as f32).collect()));
        at += w;
    }
    signs.sort_by_key(|s| s.0);
    Ok(signs)
}

/// The GDN value-head layout from `{arch}.ssm.*`.
fn gdn_heads(meta: &Metadata, arch: &str) -> Result<GdnHeads, EngineError> {
    let read = |suffix: &str| -> Result<usize, EngineError> {
        let key = format!("{arch}.ssm.{suffix}");
        if !meta.contains_key(&key) {
            return Err(bad(
                GDN_V_GROUPED,
                format!("true, but '{key}' (needed for the V-head order) is missing"),
            ));
        }
        match meta.get_u64(&key)? {
            v @ 1..=65_536 => Ok(v as usize),
            v => Err(EngineError::BadHyperParameter {
                key,
                reason: format!("{v} is outside 1..=65536"),
            }),
        }
    };
    let head_dim = read("state_size")?;
    let n_group = read("group_count")?;
    let n_v_head = read("time_step_rank")?;
    if !n_v_head.is_multiple_of(n_group) {
        return Err(EngineError::BadHyperParameter {
            key: format!("{arch}.ssm.time_step_rank"),
            reason: format!("{n_v_head} value heads are not whole groups of {n_group}"),
        });
    }
    Ok(GdnHeads {
        head_dim,
        n_group,
        rep: n_v_head / n_group,
    })
}

#[cfg(test)]
#[path = "rotation_tests.rs"]
mod tests;
