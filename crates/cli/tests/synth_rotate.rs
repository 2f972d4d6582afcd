//! `synth --from MODEL --rotate BLOCK`: the prism.hadamard fold of a golden model, checked three
//! ways — the stored rows against the dense Sylvester product of the source rows (from the
//! definition, in this file), the engine's runtime rotation undoing the fold (`W'·apply(x) =
//! W·x`, the embedding's inverse giving the source rows back), and the engine's validation
//! accepting the metadata — plus the refusals.

mod common;

use common::{oxibonsai, path_str};
use oxibonsai_engine::rotation::Rotation;
use oxibonsai_formats::kernels::Kernels;
use oxibonsai_gguf::GgufFile;
use oxibonsai_testkit::golden;

/// The source's and the rotated file's rows of `name`, as f32.
fn rows(file: &GgufFile, name: &str) -> Vec<f32> {
    let t = file
        .tensor(name)
        .unwrap_or_else(|| panic!("{name} missing"));
    t.format.dequantize_row(file.tensor_data(t)).unwrap()
}

/// `(1/√n)·S_n·x` per n-chunk by the dense product, `S_n[r][c] = (−1)^popcount(r & c)`.
fn dense_hadamard(x: &[f64], n: usize) -> Vec<f64> {
    let scale = 1.0 / (n as f64).sqrt();
    x.chunks(n)
        .flat_map(|chunk| {
            (0..n).map(move |r| {
                let sum: f64 = chunk
                    .iter()
                    .enumerate()
                    .map(|(c, &v)| {
                        if (r & c).count_ones().is_multiple_of(2) {
                            v
                        } else {
                            -v
                        }
                    })
                    .sum();
                sum * scale
            })
        })
        .collect()
}

fn rotate(source: &std::path::Path, extra: &[&str]) -> (tempfile::TempDir, std::path::PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("rotated.gguf");
    let mut args = vec!["synth", "--from", path_str(source), "-o", path_str(&out)];
    args.extend_from_slice(extra);
    let run = oxibonsai(&args);
    assert_eq!(run.code, 0, "{}", run.stderr);
    (dir, out)
}

/// A random-looking activation, reproducible.
fn activation(seed: u64, len: usize) -> Vec<f32> {
    let mut state = seed;
    (0..len)
        .map(|_| {
            state = state
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            ((state >> 40) as f32 / (1u64 << 24) as f32) - 0.5
        })
        .collect()
}

#[test]
fn an_untied_model_is_folded_as_the_definition_says_and_the_runtime_undoes_it() {
    let source_path = golden("models/qwen3-q1_0-headdim-untied.gguf");
    let (_dir, out) = rotate(&source_path, &["--rotate", "256"]);
    let source = GgufFile::open(&source_path).unwrap();
    let rotated = GgufFile::open(&out).unwrap();
    let rotation = Rotation::from_gguf(&rotated, "qwen3")
        .unwrap()
        .expect("the rotated file declares its rotation");
    assert_eq!(rotation.block_size(), 256);
    // q, k, v, attn_output, ffn_gate, ffn_up, ffn_down in each of 4 layers, and output.
    assert_eq!(rotation.n_folded(), 4 * 7 + 1);
    assert!(rotation.embedding_is_rotated());
    assert_eq!(rotation.sign_widths().collect::<Vec<_>>(), [256, 512, 768]);
    for t in source.tensors() {
        let folded = rotation.is_folded(&t.name) || t.name == "token_embd.weight";
        if !folded {
            assert_eq!(
                source.tensor_data(t),
                rotated.tensor_data(rotated.tensor(&t.name).unwrap()),
                "{} must be copied as it is",
                t.name
            );
        }
    }

    let kernels = Kernels::from_env().unwrap();
    let mut worst_fold = 0f64;
    let mut worst_product = 0f64;
    for name in [
        "blk.0.attn_q.weight",
        "blk.1.attn_output.weight",
        "blk.2.ffn_down.weight",
        "blk.3.ffn_up.weight",
        "output.weight",
        "token_embd.weight",
    ] {
        let w = rows(&source, name);
        let folded = rows(&rotated, name);
        let width = source.tensor(name).unwrap().row_len() as usize;
        let signs = rotation.signs(width).expect("explicit signs");
        // Stored rows: H·(s ⊙ w), by the dense product.
        for (row, stored) in w.chunks(width).zip(folded.chunks(width)).take(4) {
            let signed: Vec<f64> = row
                .iter()
                .zip(signs)
                .map(|(&v, &s)| f64::from(v * s))
                .collect();
            let want = dense_hadamard(&signed, 256);
            let scale = row.iter().fold(0f32, |m, v| m.max(v.abs())) as f64 + 1e-30;
            for (g, w) in stored.iter().zip(&want) {
                let error = (f64::from(*g) - w).abs() / scale;
                assert!(error < 1e-6, "{name}: stored {g} vs the definition's {w}");
                worst_fold = worst_fold.max(error);
            }
        }
        if name == "token_embd.weight" {
            // The runtime's inverse gives the source rows back.
            let mut back = folded[..8 * width].to_vec();
            rotation.inverse_embedding(&kernels, width, &mut back);
            for (g, w) in back.iter().zip(&w) {
                assert!(
                    (g - w).abs() <= 1e-5 * w.abs().max(1e-2),
                    "embedding {g} vs {w}"
                );
            }
            continue;
        }
        // W'·apply(x) = W·x on three activation rows at once.
        let x = activation(width as u64, 3 * width);
        let mut rx = x.clone();
        rotation.apply(&kernels, width, &mut rx);
        for (xr, rr) in x.chunks(width).zip(rx.chunks(width)) {
            for (orig, fold) in w.chunks(width).zip(folded.chunks(width)).take(16) {
                let want: f64 = orig.iter().zip(xr).map(|(a, b)| f64::from(a * b)).sum();
                let got: f64 = fold.iter().zip(rr).map(|(a, b)| f64::from(a * b)).sum();
                let magnitude: f64 = orig
                    .iter()
                    .zip(xr)
                    .map(|(a, b)| f64::from((a * b).abs()))
                    .sum();
                let error = (got - want).abs() / magnitude;
                assert!(error < 1e-5, "{name}: W'·apply(x) {got} vs W·x {want}");
                worst_product = worst_product.max(error);
            }
        }
    }
    eprintln!(
        "fold vs the dense definition: worst {worst_fold:.2e} of the row's largest value; \
         W'·apply(x) vs W·x: worst {worst_product:.2e} of Σ|w·x|"
    );
}

/// Identity sign mode on a tied model: no sign keys, the embedding (which the tied head reads)
/// left as it is, every matrix folded without signs.
#[test]
fn a_tied_model_in_identity_mode_keeps_its_embedding() {
    let source_path = golden("models/qwen3-f16.gguf");
    let (_dir, out) = rotate(
        &source_path,
        &["--rotate", "256", "--sign-mode", "identity"],
    );
    let source = GgufFile::open(&source_path).unwrap();
    let rotated = GgufFile::open(&out).unwrap();
    let meta = rotated.metadata();
    assert_eq!(
        meta.get_str("prism.hadamard.sign_mode").unwrap(),
        "identity"
    );
    assert!(!meta.contains_key("prism.hadamard.sign_values"));
    assert!(!meta.contains_key("prism.hadamard.inverse_weight_names"));
    let rotation = Rotation::from_gguf(&rotated, "qwen3").unwrap().unwrap();
    assert!(!rotation.embedding_is_rotated() && rotation.signs(256).is_none());
    assert_eq!(rotation.n_folded(), 4 * 7);
    let embd = |f: &GgufFile| {
        f.tensor_data(f.tensor("token_embd.weight").unwrap())
            .to_vec()
    };
    assert_eq!(embd(&source), embd(&rotated));
    let w = rows(&source, "blk.0.ffn_gate.weight");
    let folded = rows(&rotated, "blk.0.ffn_gate.weight");
    let want = dense_hadamard(
        &w[..256].iter().map(|&v| f64::from(v)).collect::<Vec<_>>(),
        256,
    );
    for (g, w) in folded.iter().zip(&want) {
        assert!((f64::from(*g) - w).abs() < 1e-6, "{g} vs {w}");
    }
}

#[test]
fn bad_rotations_are_refused_naming_the_problem() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("x.gguf");
    let tied = golden("models/qwen3-f16.gguf");
    let cases: [(&[&str], &str); 3] = [
        (&["--rotate", "100"], "power of two"),
        (&["--rotate", "512"], "not whole blocks of 512"),
        (&["--rotate", "256", "--grouped"], "qwen3.ssm.state_size"),
    ];
    for (extra, message) in cases {
        let mut args = vec!["synth", "--from", path_str(&tied), "-o", path_str(&out)];
        args.extend_from_slice(extra);
        let run = oxibonsai(&args);
        assert_eq!(run.code, 1, "{extra:?}: {}", run.stderr);
        assert!(run.stderr.contains(message), "{extra:?}: {}", run.stderr);
    }
    let (_dir, rotated) = rotate(&tied, &["--rotate", "256"]);
    let run = oxibonsai([
        "synth",
        "--from",
        path_str(&rotated),
        "--rotate",
        "256",
        "-o",
        path_str(&out),
    ]);
    assert_eq!(run.code, 1);
    assert!(run.stderr.contains("rotated already"), "{}", run.stderr);
    let run = oxibonsai(["synth", "--from", path_str(&tied), "-o", path_str(&out)]);
    assert_eq!(run.code, 1, "--from without --rotate: {}", run.stderr);
    assert!(run.stderr.contains("--rotate"), "{}", run.stderr);
}
