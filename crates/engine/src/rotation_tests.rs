//! The rotation's contract, key by key, and its algebra against dense matrices built from the
//! definition (`S[r][c] = (−1)^popcount(r & c)`, f64), independent of the FWHT kernels.

use oxibonsai_formats::format_by_name;
use oxibonsai_formats::kernels::{Isa, Kernels};
use oxibonsai_gguf::{Array, GgufFile, GgufWriter, Value};

use super::*;

const BLOCK: usize = 4;
const N_EMBD: u64 = 8;
/// The GDN value width: state 2 × 2 groups × 3 value heads a group.
const V_WIDTH: u64 = 12;

fn kernels() -> Kernels {
    Kernels::new(Isa::best()).expect("the best tier is available")
}

/// A valid rotated qwen35 file: signs for widths 8 and 12, folded q / ffn_down / ssm_out, the
/// embedding rotated, the GDN V-heads grouped.
fn valid_keys() -> Vec<(String, Value)> {
    let signs: Vec<i32> = (0..N_EMBD + V_WIDTH)
        .map(|i| if i % 3 == 1 { -1 } else { 1 })
        .collect();
    let strings =
        |names: &[&str]| Value::Array(Array::String(names.iter().map(|s| s.to_string()).collect()));
    vec![
        ("general.architecture".into(), "qwen35".into()),
        ("qwen35.ssm.state_size".into(), Value::U32(2)),
        ("qwen35.ssm.group_count".into(), Value::U32(2)),
        ("qwen35.ssm.time_step_rank".into(), Value::U32(6)),
        (VERSION.into(), Value::U32(1)),
        (BLOCK_SIZE.into(), Value::U32(BLOCK as u32)),
        (TRANSFORM.into(), TRANSFORM_NAME.into()),
        (AXIS.into(), AXIS_NAME.into()),
        (SIGN_MODE.into(), "explicit".into()),
        (
            WEIGHT_NAMES.into(),
            strings(&[
                "blk.0.attn_q.weight",
                "blk.0.ffn_down.weight",
                "blk.0.ssm_out.weight",
            ]),
        ),
        (
            SIGN_WIDTHS.into(),
            Value::Array(Array::I32(vec![N_EMBD as i32, V_WIDTH as i32])),
        ),
        (SIGN_VALUES.into(), Value::Array(Array::I32(signs))),
        (GDN_V_GROUPED.into(), Value::Bool(true)),
        (INVERSE_WEIGHT_NAMES.into(), strings(&[EMBEDDING])),
    ]
}

/// `(name, input width, output rows)` of the tensors of the test file.
const TENSORS: [(&str, u64, u64); 6] = [
    ("token_embd.weight", N_EMBD, 5),
    ("blk.0.attn_q.weight", N_EMBD, 4),
    ("blk.0.attn_k.weight", 6, 4),
    ("blk.0.ffn_up.weight", 16, 3),
    ("blk.0.ffn_down.weight", V_WIDTH, 8),
    ("blk.0.ssm_out.weight", V_WIDTH, 8),
];

fn file_with(keys: Vec<(String, Value)>) -> GgufFile {
    let f32_format = format_by_name("f32").unwrap();
    let mut w = GgufWriter::new();
    for (k, v) in keys {
        w.add_kv(k, v).unwrap();
    }
    for (name, cols, rows) in TENSORS {
        let data = vec![0u8; (cols * rows * 4) as usize];
        w.add_tensor(name, &[cols, rows], f32_format, data).unwrap();
    }
    GgufFile::from_bytes(w.to_bytes().unwrap()).unwrap()
}

fn load(keys: Vec<(String, Value)>) -> Result<Option<Rotation>, EngineError> {
    Rotation::from_gguf(&file_with(keys), "qwen35")
}

fn set(keys: &mut Vec<(String, Value)>, key: &str, value: Option<Value>) {
    keys.retain(|(k, _)| k != key);
    if let Some(value) = value {
        keys.push((key.to_owned(), value));
    }
}

fn names(list: &[&str]) -> Option<Value> {
    Some(Value::Array(Array::String(
        list.iter().map(|s| s.to_string()).collect(),
    )))
}

fn ints(list: &[i32]) -> Option<Value> {
    Some(Value::Array(Array::I32(list.to_vec())))
}

/// `keys` with `key` set to `value` (removed for `None`) is refused naming `key` and `reason`.
fn refused(key: &str, value: Option<Value>, named: &str, reason: &str) {
    let mut keys = valid_keys();
    set(&mut keys, key, value);
    let message = match load(keys) {
        Ok(_) => panic!("{key} = … was accepted (expected: {reason})"),
        Err(e) => e.to_string(),
    };
    assert!(
        message.contains(named) && message.contains(reason),
        "{key}: '{message}' does not name '{named}' and '{reason}'"
    );
}

#[test]
fn the_valid_file_loads() {
    let rotation = load(valid_keys()).unwrap().expect("a rotation");
    assert_eq!(rotation.block_size(), BLOCK);
    assert!(rotation.is_folded("blk.0.attn_q.weight"));
    assert!(rotation.is_folded("blk.0.ssm_out.weight"));
    assert!(!rotation.is_folded("blk.0.attn_k.weight"));
    assert_eq!(rotation.n_folded(), 3);
    assert!(rotation.embedding_is_rotated());
    assert_eq!(rotation.sign_widths().collect::<Vec<_>>(), [8, 12]);
    assert_eq!(rotation.signs(8).unwrap()[..4], [1.0, -1.0, 1.0, 1.0]);
    assert_eq!(rotation.signs(12).unwrap()[..3], [1.0, 1.0, -1.0]);
    let heads = rotation.gdn_heads().unwrap();
    assert_eq!((heads.head_dim, heads.n_group, heads.rep), (2, 2, 3));
}

#[test]
fn a_file_without_the_keys_has_no_rotation() {
    let keys: Vec<_> = valid_keys()
        .into_iter()
        .filter(|(k, _)| !k.starts_with(PREFIX))
        .collect();
    assert!(load(keys).unwrap().is_none());
}

#[test]
fn the_version_is_required_and_must_be_1() {
    refused(
        VERSION,
        Some(Value::U32(2)),
        VERSION,
        "unsupported version 2",
    );
    refused(VERSION, None, VERSION, "missing");
    refused(VERSION, Some("1".into()), VERSION, "string");
}

#[test]
fn keys_of_another_version_are_refused() {
    let key = "prism.hadamard.tied_output";
    refused(key, Some(Value::Bool(true)), key, "not a key of");
}

#[test]
fn the_architecture_must_be_one_the_contract_rotates() {
    let mut keys = valid_keys();
    set(&mut keys, GDN_V_GROUPED, Some(Value::Bool(false)));
    let file = file_with(keys);
    for arch in ARCHITECTURES {
        assert!(
            Rotation::from_gguf(&file, arch).unwrap().is_some(),
            "{arch}"
        );
    }
    let message = Rotation::from_gguf(&file_with(valid_keys()), "qwen2")
        .unwrap_err()
        .to_string();
    assert!(message.contains(VERSION) && message.contains("architecture 'qwen2'"));
}

#[test]
fn the_block_size_is_a_power_of_two_the_kernels_take() {
    refused(BLOCK_SIZE, Some(Value::U32(6)), BLOCK_SIZE, "power of two");
    refused(BLOCK_SIZE, Some(Value::U32(0)), BLOCK_SIZE, "power of two");
    refused(BLOCK_SIZE, Some(Value::U32(1 << 17)), BLOCK_SIZE, "larger");
    refused(BLOCK_SIZE, None, BLOCK_SIZE, "missing");
}

#[test]
fn transform_and_axis_are_the_contract_s() {
    refused(TRANSFORM, Some("hadamard".into()), TRANSFORM, "'hadamard'");
    refused(TRANSFORM, None, TRANSFORM, "missing");
    refused(
        AXIS,
        Some("output-first-dimension".into()),
        AXIS,
        "contract",
    );
}

#[test]
fn the_sign_mode_is_identity_or_explicit() {
    refused(SIGN_MODE, Some("random".into()), SIGN_MODE, "'random'");
    // Identity mode with sign keys: inconsistent metadata.
    refused(SIGN_MODE, Some("identity".into()), SIGN_WIDTHS, "identity");
}

#[test]
fn sign_widths_and_values_agree() {
    refused(SIGN_WIDTHS, ints(&[]), SIGN_WIDTHS, "empty");
    refused(SIGN_WIDTHS, ints(&[8, 10]), SIGN_WIDTHS, "width 10");
    refused(SIGN_WIDTHS, ints(&[-8, 28]), SIGN_WIDTHS, "width -8");
    refused(
        SIGN_WIDTHS,
        ints(&[8, 8, 4]),
        SIGN_WIDTHS,
        "width 8 is listed twice",
    );
    refused(SIGN_WIDTHS, ints(&[8]), SIGN_VALUES, "add up to 8");
    refused(SIGN_WIDTHS, None, SIGN_WIDTHS, "missing");
    let mut values = vec![1; 20];
    values[13] = 0;
    refused(SIGN_VALUES, ints(&values), SIGN_VALUES, "value 13 is 0");
    refused(SIGN_VALUES, ints(&[1; 19]), SIGN_VALUES, "19 values");
}

#[test]
fn weight_names_are_foldable_distinct_tensors_of_whole_blocks_with_signs() {
    refused(WEIGHT_NAMES, names(&[]), WEIGHT_NAMES, "empty");
    refused(WEIGHT_NAMES, None, WEIGHT_NAMES, "missing");
    let q = "blk.0.attn_q.weight";
    refused(WEIGHT_NAMES, names(&[q, q]), q, "listed twice");
    for name in [
        "blk.0.attn_norm.weight",
        "token_embd.weight",
        "blk.x.attn_q.weight",
        "blk..attn_q.weight",
        "blk.0.attn_q.bias",
        "blk.0.output.weight",
    ] {
        refused(
            WEIGHT_NAMES,
            names(&[name]),
            name,
            "not a weight the contract",
        );
    }
    refused(
        WEIGHT_NAMES,
        names(&["blk.1.attn_q.weight"]),
        "blk.1.attn_q.weight",
        "not a tensor",
    );
    refused(
        WEIGHT_NAMES,
        names(&["blk.0.attn_k.weight"]),
        "rows of 6",
        "not whole blocks of 4",
    );
    refused(
        WEIGHT_NAMES,
        names(&["blk.0.ffn_up.weight"]),
        SIGN_WIDTHS,
        "no signs of width 16",
    );
}

#[test]
fn only_the_embedding_is_stored_rotated() {
    refused(
        INVERSE_WEIGHT_NAMES,
        names(&["output.weight"]),
        "'output.weight'",
        "cannot be stored rotated",
    );
    refused(
        INVERSE_WEIGHT_NAMES,
        names(&[EMBEDDING, EMBEDDING]),
        INVERSE_WEIGHT_NAMES,
        "twice",
    );
    let mut keys = valid_keys();
    set(&mut keys, INVERSE_WEIGHT_NAMES, None);
    assert!(!load(keys).unwrap().unwrap().embedding_is_rotated());
}

#[test]
fn grouped_v_heads_need_the_ssm_keys_and_match_ssm_out() {
    refused(
        "qwen35.ssm.group_count",
        None,
        GDN_V_GROUPED,
        "qwen35.ssm.group_count",
    );
    refused(
        "qwen35.ssm.time_step_rank",
        Some(Value::U32(5)),
        "time_step_rank",
        "whole groups",
    );
    refused(
        "qwen35.ssm.state_size",
        Some(Value::U32(4)),
        "ssm_out.weight",
        "make 24",
    );
    refused(GDN_V_GROUPED, Some(Value::U32(1)), GDN_V_GROUPED, "bool");
    let mut keys = valid_keys();
    set(&mut keys, GDN_V_GROUPED, Some(Value::Bool(false)));
    assert!(load(keys).unwrap().unwrap().gdn_heads().is_none());
}

/// The blockwise `(1/√n)·S_n` of a width, dense, from the definition.
fn hadamard(width: usize, n: usize) -> Vec<Vec<f64>> {
    let scale = 1.0 / (n as f64).sqrt();
    (0..width)
        .map(|r| {
            (0..width)
                .map(|c| {
                    if r / n != c / n {
                        0.0
                    } else if ((r % n) & (c % n)).count_ones().is_multiple_of(2) {
                        scale
                    } else {
                        -scale
                    }
                })
                .collect()
        })
        .collect()
}

fn matmul(a: &[Vec<f64>], b: &[Vec<f64>]) -> Vec<Vec<f64>> {
    a.iter()
        .map(|row| {
            (0..b[0].len())
                .map(|c| row.iter().zip(b).map(|(x, brow)| x * brow[c]).sum())
                .collect()
        })
        .collect()
}

fn diag(v: &[f32]) -> Vec<Vec<f64>> {
    (0..v.len())
        .map(|r| {
            (0..v.len())
                .map(|c| if r == c { f64::from(v[r]) } else { 0.0 })
                .collect()
        })
        .collect()
}

/// The permutation matrix of `tiled_to_grouped` written from the formula of the contract:
/// `(P·x)[d + hd·(r + rep·k)] = x[d + hd·(k + nk·r)]`.
fn permutation(heads: GdnHeads) -> Vec<Vec<f64>> {
    let w = heads.width();
    let mut p = vec![vec![0.0; w]; w];
    let (hd, nk, rep) = (heads.head_dim, heads.n_group, heads.rep);
    for k in 0..nk {
        for r in 0..rep {
            for d in 0..hd {
                p[d + hd * (r + rep * k)][d + hd * (k + nk * r)] = 1.0;
            }
        }
    }
    p
}

fn random(seed: u64, len: usize) -> Vec<f32> {
    let mut state = seed;
    (0..len)
        .map(|_| {
            state = state
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((state >> 40) as f32 / (1u64 << 24) as f32) - 0.5
        })
        .collect()
}

/// `W'·apply(x) = W·x` with `W' = W·T⁻¹`, `T = H·diag(s)·P` (`P` the identity but for
/// `ssm_out`), `T⁻¹ = Pᵀ·diag(s)·H` (H symmetric and involutive), for several rows of x at once.
#[test]
fn apply_undoes_the_fold() {
    let rotation = load(valid_keys()).unwrap().unwrap();
    let kernels = kernels();
    for (name, width, gdn) in [
        ("blk.0.attn_q.weight", 8usize, false),
        ("blk.0.ffn_down.weight", 12, false),
        ("blk.0.ssm_out.weight", 12, true),
    ] {
        let n_out = 5;
        let n_rows = 3;
        let w: Vec<Vec<f64>> = random(7, n_out * width)
            .chunks(width)
            .map(|r| r.iter().map(|&v| f64::from(v)).collect())
            .collect();
        let s = rotation.signs(width).unwrap();
        let mut t_inv = matmul(&diag(s), &hadamard(width, BLOCK));
        if gdn {
            let p = permutation(rotation.gdn_heads().unwrap());
            let p_t: Vec<Vec<f64>> = (0..width)
                .map(|r| (0..width).map(|c| p[c][r]).collect())
                .collect();
            t_inv = matmul(&p_t, &t_inv);
        }
        let folded = matmul(&w, &t_inv);
        let x = random(11, n_rows * width);
        let mut rotated = x.clone();
        if gdn {
            let mut scratch = vec![0.0; width];
            rotation.apply_ssm_out(&kernels, width, &mut rotated, &mut scratch);
        } else {
            rotation.apply(&kernels, width, &mut rotated);
        }
        for (xr, rr) in x.chunks(width).zip(rotated.chunks(width)) {
            for o in 0..n_out {
                let want: f64 = w[o].iter().zip(xr).map(|(a, &b)| a * f64::from(b)).sum();
                let got: f64 = folded[o]
                    .iter()
                    .zip(rr)
                    .map(|(a, &b)| a * f64::from(b))
                    .sum();
                assert!(
                    (got - want).abs() < 1e-5,
                    "{name} output {o}: {got} vs {want}"
                );
            }
        }
        // Without the permutation the GDN product is wrong: the test sees the order.
        if gdn {
            let mut plain = x.clone();
            rotation.apply(&kernels, width, &mut plain);
            let want: f64 = w[0].iter().zip(&x).map(|(a, &b)| a * f64::from(b)).sum();
            let got: f64 = folded[0]
                .iter()
                .zip(&plain)
                .map(|(a, &b)| a * f64::from(b))
                .sum();
            assert!(
                (got - want).abs() > 1e-3,
                "the permutation made no difference"
            );
        }
    }
}

#[test]
fn identity_sign_mode_rotates_without_signs() {
    let mut keys = valid_keys();
    set(&mut keys, SIGN_MODE, Some("identity".into()));
    set(&mut keys, SIGN_WIDTHS, None);
    set(&mut keys, SIGN_VALUES, None);
    let rotation = load(keys).unwrap().unwrap();
    assert!(rotation.signs(8).is_none());
    let mut x = vec![1.0f32, 2.0, 3.0, 4.0, 0.0, 0.0, 0.0, 2.0];
    rotation.apply(&kernels(), 8, &mut x);
    assert_eq!(x, [5.0, -1.0, -2.0, 0.0, 1.0, -1.0, -1.0, 1.0]);
}

/// The contract's permutation on a hand example: 2 groups of 3 value heads of 2 values; value
/// head `k + 2r` of the tiled order holds `10·(k + 2r) + d`.
#[test]
fn the_gdn_permutation_by_hand() {
    let heads = GdnHeads {
        head_dim: 2,
        n_group: 2,
        rep: 3,
    };
    let tiled: Vec<f32> = (0..12).map(|i| (10 * (i / 2) + i % 2) as f32).collect();
    let mut grouped = vec![0.0; 12];
    heads.tiled_to_grouped(&tiled, &mut grouped);
    // Grouped slot r + 3k: (k0 r0, k0 r1, k0 r2, k1 r0, k1 r1, k1 r2) = tiled heads 0, 2, 4, 1, 3, 5.
    assert_eq!(
        grouped,
        [0.0, 1.0, 20.0, 21.0, 40.0, 41.0, 10.0, 11.0, 30.0, 31.0, 50.0, 51.0]
    );
}

/// Rows stored as `H·(s ⊙ e)` (the export's) come back as `e`; and on a literal row the inverse
/// is `s ⊙ (H·row)`.
#[test]
fn the_inverse_embedding_is_the_definition() {
    let rotation = load(valid_keys()).unwrap().unwrap();
    let kernels = kernels();
    let s = rotation.signs(8).unwrap();
    let h = hadamard(8, BLOCK);
    let e = random(3, 16);
    let mut stored: Vec<f32> = Vec::new();
    for row in e.chunks(8) {
        let signed: Vec<f64> = row.iter().zip(s).map(|(&v, &s)| f64::from(v * s)).collect();
        stored.extend(
            h.iter()
                .map(|hr| hr.iter().zip(&signed).map(|(a, b)| a * b).sum::<f64>() as f32),
        );
    }
    let mut back = stored.clone();
    rotation.inverse_embedding(&kernels, 8, &mut back);
    for (a, b) in back.iter().zip(&e) {
        assert!((a - b).abs() < 1e-6, "{a} vs {b}");
    }
    // s = (1, −1, 1, 1, −1, 1, 1, −1); H·(2, 0, 0, 0 | 0, 0, 0, 4) = (1, 1, 1, 1 | 2, −2, −2, 2).
    let mut row = [2.0f32, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 4.0];
    rotation.inverse_embedding(&kernels, 8, &mut row);
    assert_eq!(row, [1.0, -1.0, 1.0, 1.0, -2.0, -2.0, -2.0, -2.0]);
}
