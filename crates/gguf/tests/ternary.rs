//! The five ternary golden files encode the same weights: dequantizing every tensor (with the
//! format the reader resolved, id 42 included) gives bit-identical f32 values in all of them. This
//! checks the id-42 decision end to end: the wrong layout would decode garbage.

use oxibonsai_formats::FormatKind;
use oxibonsai_gguf::GgufFile;
use oxibonsai_testkit::golden;

const FILES: [(&str, FormatKind); 5] = [
    ("qwen3-ternary-tq2_0", FormatKind::TQ2_0),
    ("qwen3-ternary-tq1_0", FormatKind::TQ1_0),
    ("qwen3-ternary-q2_0", FormatKind::Q2_0),
    ("qwen3-ternary-pq2_0", FormatKind::PQ2_0),
    ("qwen3-ternary-q2_0_g128_legacy", FormatKind::Q2_0G128Legacy),
];

fn dequantized(file: &GgufFile, name: &str) -> Vec<f32> {
    let t = file.tensor(name).unwrap_or_else(|| panic!("tensor {name}"));
    let mut out = vec![0f32; t.n_elements() as usize];
    (t.format.dequantize)(file.tensor_data(t), &mut out);
    out
}

#[test]
fn the_five_ternary_files_hold_the_same_weights() {
    let files: Vec<(&str, FormatKind, GgufFile)> = FILES
        .iter()
        .map(|&(name, kind)| {
            let path = golden(&format!("models/{name}.gguf"));
            (
                name,
                kind,
                GgufFile::open(path).unwrap_or_else(|e| panic!("{name}: {e}")),
            )
        })
        .collect();
    let (_, _, reference) = &files[0];
    let mut ternary_tensors = 0;
    for t in reference.tensors() {
        let expected = dequantized(reference, &t.name);
        assert!(expected.iter().any(|&x| x != 0.0), "{}: all zero", t.name);
        let is_matrix = t.format.kind == FormatKind::TQ2_0;
        if is_matrix {
            ternary_tensors += 1;
        }
        for (name, kind, file) in &files[1..] {
            let other = file
                .tensor(&t.name)
                .unwrap_or_else(|| panic!("{name}: no {}", t.name));
            assert_eq!(other.dims, t.dims, "{name}: {}", t.name);
            if is_matrix {
                // Every ternary matrix is in the file's own encoding: the comparison spans formats.
                assert_eq!(other.format.kind, *kind, "{name}: {}", t.name);
            }
            let got = dequantized(file, &t.name);
            let differing = expected
                .iter()
                .zip(&got)
                .filter(|(a, b)| a.to_bits() != b.to_bits())
                .count();
            assert_eq!(
                differing,
                0,
                "{name}: {} differs in {differing} of {} values",
                t.name,
                got.len()
            );
        }
    }
    // 7 matrices per layer, 4 layers.
    assert_eq!(ternary_tensors, 28);
}

#[test]
fn ternary_weights_are_ternary_per_block() {
    // Independent of the other encodings: within each 256-value block of tq2_0, the values are
    // {-d, 0, +d} for one d, as the README says the weights were made.
    let file = GgufFile::open(golden("models/qwen3-ternary-tq2_0.gguf")).unwrap();
    let t = file.tensor("blk.0.ffn_down.weight").unwrap();
    let values = dequantized(&file, &t.name);
    for block in values.chunks(256) {
        let d = block.iter().fold(0f32, |m, x| m.max(x.abs()));
        assert!(block.iter().all(|&x| x == 0.0 || x.abs() == d));
    }
}
