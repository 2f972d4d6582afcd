//! `synth … --rotate BLOCK [--sign-mode identity|explicit] [--grouped]`: folds PrismML's
//! `prism.hadamard` rotation into a model's weights as the export does, and writes its metadata,
//! so that a correct engine gives the same logits on the rotated file as on the source.
//!
//! For a weight `W` read as `W·x`, the runtime computes `W'·T(x)` with `T(x) = H·(s ⊙ P·x)` (`H`
//! the blockwise normalised Sylvester transform, `s` the signs of the input width, `P` the GDN
//! V-head permutation, `ssm_out` only and only with `--grouped`); the file stores
//! `W' = W·T⁻¹ = W·Pᵀ·diag(s)·H`, i.e. each row `w` becomes `H·(s ⊙ P·w)` (T is orthogonal). The
//! embedding of an untied model is stored the same way (`H·(s ⊙ e)`), which the runtime undoes with
//! `s ⊙ (H·row)`. A tied model keeps its embedding as it is: its head reads the same table, and
//! version 1 of the contract has no key telling a reference engine to rotate the head's input.
//!
//! The fold is computed here in f64 by its own transform, not by the engine's runtime path, so a
//! test comparing the two proves something. Folded tensors (and a rotated embedding) are written
//! as F32, dequantized first when the source stores them otherwise; every other tensor is copied.

use std::path::Path;

use anyhow::{bail, Context, Result};
use oxibonsai_engine::rotation::{is_foldable, EMBEDDING};
use oxibonsai_formats::format_by_name;
use oxibonsai_gguf::{Array, GgufFile, GgufWriter, Value};

/// The rotation options of `synth`.
#[derive(clap::Args, Debug, Clone)]
pub struct RotateArgs {
    /// Fold the prism.hadamard rotation with blocks of BLOCK values (a power of two) into every
    /// foldable weight, written as F32 with the prism.hadamard.* keys.
    #[arg(long, value_name = "BLOCK")]
    pub rotate: Option<u32>,
    /// Signs before the rotation: random ±1 per input width (explicit) or none (identity).
    #[arg(long, value_name = "MODE", default_value = "explicit", requires = "rotate",
          value_parser = ["explicit", "identity"])]
    pub sign_mode: String,
    /// Gated DeltaNet `ssm_out` weights in grouped V-head order (`gdn_v_grouped`), as Bonsai-2.
    #[arg(long, requires = "rotate")]
    pub grouped: bool,
}

/// The V-head layout of `ssm_out`'s input: `(state_size, group_count, value heads a group)`.
pub(crate) type Heads = (usize, usize, usize);

/// The rotation of one fold: block, signs per width, GDN heads.
struct Fold {
    block: usize,
    explicit: bool,
    signs: Vec<(usize, Vec<f64>)>,
    heads: Option<Heads>,
}

impl Fold {
    fn signs(&self, width: usize) -> Option<&[f64]> {
        let found = self.signs.iter().find(|s| s.0 == width);
        found.map(|s| &s.1[..]).filter(|_| self.explicit)
    }

    /// `H·(s ⊙ P·row)` in f64: what a folded row (or a rotated embedding row) stores.
    fn row(&self, row: &[f32], permute: bool) -> Vec<f32> {
        let mut x: Vec<f64> = row.iter().map(|&v| f64::from(v)).collect();
        if permute {
            let (hd, nk, rep) = self.heads.expect("checked: --grouped has its heads");
            let tiled = x.clone();
            for k in 0..nk {
                for r in 0..rep {
                    let (to, from) = (hd * (r + rep * k), hd * (k + nk * r));
                    x[to..to + hd].copy_from_slice(&tiled[from..from + hd]);
                }
            }
        }
        if let Some(signs) = self.signs(row.len()) {
            for (v, s) in x.iter_mut().zip(signs) {
                *v *= s;
            }
        }
        for chunk in x.chunks_exact_mut(self.block) {
            hadamard_f64(chunk);
        }
        x.into_iter().map(|v| v as f32).collect()
    }
}

/// `(1/√n)·S_n·x` in place, `S_n[r][c] = (−1)^popcount(r & c)`, by the recursive halving
/// `S_2n = [[S_n, S_n], [S_n, −S_n]]`.
fn hadamard_f64(x: &mut [f64]) {
    let n = x.len();
    let mut half = n / 2;
    while half >= 1 {
        // The outermost split first: the halves of each 2·half group are (a + b, a − b).
        for group in x.chunks_exact_mut(2 * half) {
            let (a, b) = group.split_at_mut(half);
            for (a, b) in a.iter_mut().zip(b) {
                (*a, *b) = (*a + *b, *a - *b);
            }
        }
        half /= 2;
    }
    let scale = 1.0 / (n as f64).sqrt();
    x.iter_mut().for_each(|v| *v *= scale);
}

/// SplitMix64: reproducible signs.
struct SplitMix(u64);
impl SplitMix {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
}

/// The GDN V-head layout from the source's `{arch}.ssm.*` keys.
fn heads(file: &GgufFile, arch: &str) -> Result<Heads> {
    let meta = file.metadata();
    let get = |suffix: &str| -> Result<usize> {
        let key = format!("{arch}.ssm.{suffix}");
        let v = meta
            .get_u64(&key)
            .with_context(|| format!("--grouped needs '{key}'"))?;
        if v == 0 {
            bail!("'{key}' is 0");
        }
        Ok(v as usize)
    };
    let (hd, nk, n_v) = (
        get("state_size")?,
        get("group_count")?,
        get("time_step_rank")?,
    );
    if !n_v.is_multiple_of(nk) {
        bail!("{arch}.ssm.time_step_rank {n_v} is not whole groups of {nk}");
    }
    Ok((hd, nk, n_v / nk))
}

/// The source's tensor `name` as f32 rows (dequantized through the registry).
fn f32_rows(file: &GgufFile, name: &str) -> Result<Vec<f32>> {
    let t = file.tensor(name).expect("listed by the file");
    t.format
        .dequantize_row(file.tensor_data(t))
        .with_context(|| format!("cannot dequantize '{name}'"))
}

/// Writes `source` rotated to `output` (`--rotate` and friends).
pub fn rotate_file(source: &Path, output: &Path, args: &RotateArgs) -> Result<()> {
    let block = args.rotate.context("no --rotate block")? as usize;
    if !block.is_power_of_two() || !(2..=65_536).contains(&block) {
        bail!("--rotate {block}: the block must be a power of two from 2 to 65536");
    }
    let file =
        GgufFile::open(source).with_context(|| format!("cannot open '{}'", source.display()))?;
    let meta = file.metadata();
    if let Some((key, _)) = meta.iter().find(|(k, _)| k.starts_with("prism.hadamard.")) {
        bail!("'{}' is rotated already ({key})", source.display());
    }
    let arch = meta.get_str("general.architecture")?.to_owned();
    let folded: Vec<String> = file
        .tensors()
        .iter()
        .filter(|t| is_foldable(&t.name))
        .map(|t| t.name.clone())
        .collect();
    if folded.is_empty() {
        bail!("'{}' has no weight the rotation folds", source.display());
    }
    let untied = file.tensor("output.weight").is_some();
    let mut widths: Vec<usize> = Vec::new();
    for name in folded
        .iter()
        .map(String::as_str)
        .chain(untied.then_some(EMBEDDING))
    {
        let t = file
            .tensor(name)
            .with_context(|| format!("'{name}' is missing"))?;
        let width = t.row_len() as usize;
        if !width.is_multiple_of(block) {
            bail!("'{name}' has rows of {width} values, not whole blocks of {block}: choose another --rotate");
        }
        if !widths.contains(&width) {
            widths.push(width);
        }
    }
    widths.sort_unstable();
    let signs = random_signs(block, &widths);
    let heads = if args.grouped {
        Some(heads(&file, &arch)?)
    } else {
        None
    };
    let fold = Fold {
        block,
        explicit: args.sign_mode == "explicit",
        signs,
        heads,
    };

    let mut w = GgufWriter::new();
    for (key, value) in meta.iter() {
        w.add_kv(key, value.clone())?;
    }
    add_metadata(&mut w, &fold, &folded, untied)?;
    let f32_format = format_by_name("f32").expect("f32 is registered");
    for t in file.tensors() {
        let rotated = folded.contains(&t.name) || (untied && t.name == EMBEDDING);
        if !rotated {
            w.add_tensor(&t.name, &t.dims, t.format, file.tensor_data(t))?;
            continue;
        }
        let permute = fold.heads.is_some() && t.name.ends_with(".ssm_out.weight");
        if let Some((hd, nk, rep)) = fold.heads.filter(|_| permute) {
            if hd * nk * rep != t.row_len() as usize {
                bail!(
                    "'{}' reads {} values, not the {} of its V heads",
                    t.name,
                    t.row_len(),
                    hd * nk * rep
                );
            }
        }
        let width = t.row_len() as usize;
        let rows = f32_rows(&file, &t.name)?;
        let data: Vec<u8> = rows
            .chunks_exact(width)
            .flat_map(|row| fold.row(row, permute))
            .flat_map(f32::to_le_bytes)
            .collect();
        w.add_tensor(&t.name, &t.dims, f32_format, data)?;
    }
    let partial = output.with_extension("gguf.partial");
    w.write_file(&partial)
        .with_context(|| format!("cannot write '{}'", partial.display()))?;
    std::fs::rename(&partial, output)
        .with_context(|| format!("cannot write '{}'", output.display()))?;
    Ok(())
}

/// Reproducible random ±1 signs for each width.
fn random_signs(block: usize, widths: &[usize]) -> Vec<(usize, Vec<f64>)> {
    let mut rng = SplitMix(0x5eed_4ad4 ^ block as u64);
    widths
        .iter()
        .map(|&w| {
            let s = (0..w)
                .map(|_| if rng.next() >> 63 == 0 { 1.0 } else { -1.0 })
                .collect();
            (w, s)
        })
        .collect()
}

/// The `prism.hadamard.*` keys of a random-weight file, as the published rotated files carry
/// them (explicit signs, `heads` for `gdn_v_grouped`): nothing is folded, the weights being
/// random already, but an engine does all of the rotation's work on it — what a benchmark needs.
pub(crate) fn add_unfolded_metadata(
    w: &mut GgufWriter<'_>,
    block: usize,
    heads: Option<Heads>,
) -> Result<()> {
    let mut folded = Vec::new();
    let mut widths: Vec<usize> = Vec::new();
    let mut untied = false;
    for (name, dims) in w.tensor_shapes() {
        untied |= name == "output.weight";
        if is_foldable(name) {
            folded.push(name.to_owned());
            let width = dims[0] as usize;
            if !width.is_multiple_of(block) {
                bail!("'{name}' has rows of {width} values, not whole blocks of {block}");
            }
            if !widths.contains(&width) {
                widths.push(width);
            }
        }
    }
    widths.sort_unstable();
    let fold = Fold {
        block,
        explicit: true,
        signs: random_signs(block, &widths),
        heads,
    };
    add_metadata(w, &fold, &folded, untied)
}

/// The `prism.hadamard.*` keys of version 1 for `fold`.
fn add_metadata(w: &mut GgufWriter, fold: &Fold, folded: &[String], untied: bool) -> Result<()> {
    let strings = |v: Vec<String>| Value::Array(Array::String(v));
    w.add_kv("prism.hadamard.version", Value::U32(1))?;
    w.add_kv("prism.hadamard.block_size", Value::U32(fold.block as u32))?;
    w.add_kv(
        "prism.hadamard.transform",
        "normalized-sylvester-walsh-hadamard",
    )?;
    w.add_kv("prism.hadamard.axis", "input-last-dimension")?;
    let mode = if fold.explicit {
        "explicit"
    } else {
        "identity"
    };
    w.add_kv("prism.hadamard.sign_mode", mode)?;
    w.add_kv("prism.hadamard.weight_names", strings(folded.to_vec()))?;
    if fold.explicit {
        let widths = fold.signs.iter().map(|s| s.0 as i32).collect();
        let values = fold
            .signs
            .iter()
            .flat_map(|s| s.1.iter().map(|&v| v as i32))
            .collect();
        w.add_kv(
            "prism.hadamard.sign_widths",
            Value::Array(Array::I32(widths)),
        )?;
        w.add_kv(
            "prism.hadamard.sign_values",
            Value::Array(Array::I32(values)),
        )?;
    }
    w.add_kv(
        "prism.hadamard.gdn_v_grouped",
        Value::Bool(fold.heads.is_some()),
    )?;
    if untied {
        w.add_kv(
            "prism.hadamard.inverse_weight_names",
            strings(vec![EMBEDDING.to_owned()]),
        )?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fold(block: usize, signs: &[f64], heads: Option<Heads>) -> Fold {
        Fold {
            block,
            explicit: true,
            signs: vec![(signs.len(), signs.to_vec())],
            heads,
        }
    }

    fn close(got: &[f32], want: &[f64]) {
        for (g, w) in got.iter().zip(want) {
            assert!((f64::from(*g) - w).abs() < 1e-6, "{got:?} vs {want:?}");
        }
    }

    /// The fold of `synth_qwen35.py` (`W' = W·inv(H·diag(s)·P)`), its values computed by numpy
    /// with the script's own lines on W = [[1, 2, 3, 4], [0.5, −1, 0, 2]], s = (1, −1, −1, 1).
    #[test]
    fn the_fold_is_the_reference_script_s() {
        let s = [1.0, -1.0, -1.0, 1.0];
        let w = [[1.0f32, 2.0, 3.0, 4.0], [0.5, -1.0, 0.0, 2.0]];
        let r = std::f64::consts::FRAC_1_SQRT_2;
        // Blocks of 2: row 0 is H·(1, −2, −3, 4) = (−1, 3, 1, −7)/√2.
        let plain = fold(2, &s, None);
        close(&plain.row(&w[0], false), &[-r, 3.0 * r, r, -7.0 * r]);
        // numpy printed 1.0606601717798214, −0.3535533905932738, ±1.4142135623730951: in
        // multiples of 1/√2 (clippy wants no approximate constants) 1.5, −0.5, 2, −2.
        close(
            &plain.row(&w[1], false),
            &[1.5 * r, -0.5 * r, 2.0 * r, -2.0 * r],
        );
        // One block of 4.
        let one = fold(4, &s, None);
        close(&one.row(&w[0], false), &[0.0, -2.0, -1.0, 5.0]);
        close(&one.row(&w[1], false), &[1.75, -1.25, -0.25, 0.75]);
        // Grouped V heads: state 1, 2 groups of 2 heads (the script's perm for S=1, H_k=2, H_v=4);
        // numpy: (−1.41421, 2.82843, 1.41421, −4.24264) and (0.35355, 0.35355, 2.12132, −0.70711).
        let grouped = fold(2, &s, Some((1, 2, 2)));
        close(
            &grouped.row(&w[0], true),
            &[-2.0 * r, 4.0 * r, 2.0 * r, -6.0 * r],
        );
        close(&grouped.row(&w[1], true), &[0.5 * r, 0.5 * r, 3.0 * r, -r]);
    }

    /// The f64 transform against the dense Sylvester matrix from its definition.
    #[test]
    fn the_f64_transform_is_the_sylvester_product() {
        for n in [2usize, 8, 64] {
            let x: Vec<f64> = (0..n).map(|i| ((i * 7919) % 13) as f64 - 6.0).collect();
            let mut got = x.clone();
            hadamard_f64(&mut got);
            for (r, g) in got.iter().enumerate() {
                let want: f64 = (0..n)
                    .map(|c| {
                        if (r & c).count_ones().is_multiple_of(2) {
                            x[c]
                        } else {
                            -x[c]
                        }
                    })
                    .sum::<f64>()
                    / (n as f64).sqrt();
                assert!((g - want).abs() < 1e-12, "n {n} [{r}]: {g} vs {want}");
            }
        }
    }
}
