//! `validate` and the loader (`info`) on malformed files made by mutating a valid golden model:
//! each is rejected with exit code 1 and a message naming what is wrong — never a panic.
//! (The GGUF crate's own tests check each error variant in detail; this checks what a user sees.)

mod common;

use common::{oxibonsai, path_str};
use oxibonsai_testkit::golden;

/// Where a tensor's info record sits in the header: the byte after its name.
struct TensorRecord {
    n_dims_at: usize,
    n_dims: usize,
}

impl TensorRecord {
    fn find(bytes: &[u8], name: &str) -> TensorRecord {
        let mut needle = (name.len() as u64).to_le_bytes().to_vec();
        needle.extend_from_slice(name.as_bytes());
        let at = bytes
            .windows(needle.len())
            .position(|w| w == needle.as_slice())
            .unwrap_or_else(|| panic!("tensor {name} in the header"));
        let n_dims_at = at + needle.len();
        let n_dims =
            u32::from_le_bytes(bytes[n_dims_at..n_dims_at + 4].try_into().unwrap()) as usize;
        TensorRecord { n_dims_at, n_dims }
    }
    fn dim_at(&self, i: usize) -> usize {
        self.n_dims_at + 4 + 8 * i
    }
    fn type_at(&self) -> usize {
        self.n_dims_at + 4 + 8 * self.n_dims
    }
    fn offset_at(&self) -> usize {
        self.type_at() + 4
    }
}

fn put_u32(bytes: &mut [u8], at: usize, value: u32) {
    bytes[at..at + 4].copy_from_slice(&value.to_le_bytes());
}
fn put_u64(bytes: &mut [u8], at: usize, value: u64) {
    bytes[at..at + 8].copy_from_slice(&value.to_le_bytes());
}
fn get_u64(bytes: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(bytes[at..at + 8].try_into().unwrap())
}

type Mutation = fn(&mut Vec<u8>);

/// (case name, mutation, a word the one-line error must contain — case-insensitive).
fn cases() -> Vec<(&'static str, Mutation, &'static str)> {
    vec![
        ("bad magic", |b| b[0..4].copy_from_slice(b"GGML"), "magic"),
        ("version 1", |b| put_u32(b, 4, 1), "version"),
        ("version 4", |b| put_u32(b, 4, 4), "version"),
        ("tensor count 2^60", |b| put_u64(b, 8, 1 << 60), "count"),
        ("kv count 2^60", |b| put_u64(b, 16, 1 << 60), "count"),
        (
            "first key longer than the file",
            |b| put_u64(b, 24, 1 << 40),
            "length",
        ),
        ("first key not UTF-8", |b| b[32] = 0xff, "utf-8"),
        ("truncated in the header", |b| b.truncate(100), "truncated"),
        (
            "truncated in the tensor data",
            |b| {
                let n = b.len();
                b.truncate(n - 1000)
            },
            "output.weight",
        ),
        (
            "unknown type id",
            |b| {
                let t = TensorRecord::find(b, "blk.0.attn_q.weight");
                put_u32(b, t.type_at(), 99)
            },
            "99",
        ),
        (
            "offset past the end",
            |b| {
                let t = TensorRecord::find(b, "blk.1.ffn_up.weight");
                put_u64(b, t.offset_at(), 1 << 40)
            },
            "blk.1.ffn_up.weight",
        ),
        (
            "misaligned offset",
            |b| {
                let t = TensorRecord::find(b, "blk.1.ffn_up.weight");
                let offset = get_u64(b, t.offset_at());
                put_u64(b, t.offset_at(), offset + 2)
            },
            "blk.1.ffn_up.weight",
        ),
        (
            "overlapping tensors",
            |b| {
                let a = TensorRecord::find(b, "blk.0.ffn_up.weight");
                let c = TensorRecord::find(b, "blk.0.ffn_gate.weight");
                let offset = get_u64(b, a.offset_at());
                put_u64(b, c.offset_at(), offset)
            },
            "overlap",
        ),
        (
            "shape does not match the size",
            |b| {
                let t = TensorRecord::find(b, "blk.0.ffn_up.weight");
                let at = t.dim_at(1);
                let rows = get_u64(b, at);
                put_u64(b, at, rows * 64)
            },
            "blk.0.ffn_up.weight",
        ),
        (
            "row length not a multiple of the block",
            |b| {
                let t = TensorRecord::find(b, "blk.0.ffn_up.weight");
                put_u64(b, t.dim_at(0), 255)
            },
            "blk.0.ffn_up.weight",
        ),
        (
            "zero dimensions",
            |b| {
                let t = TensorRecord::find(b, "blk.0.ffn_up.weight");
                put_u32(b, t.n_dims_at, 0)
            },
            "blk.0.ffn_up.weight",
        ),
        (
            "five dimensions",
            |b| {
                let t = TensorRecord::find(b, "blk.0.ffn_up.weight");
                put_u32(b, t.n_dims_at, 5)
            },
            "blk.0.ffn_up.weight",
        ),
        (
            "tensor name not UTF-8",
            |b| {
                let t = TensorRecord::find(b, "blk.0.ffn_up.weight");
                b[t.n_dims_at - 1] = 0xfe
            },
            "utf-8",
        ),
    ]
}

#[test]
fn every_malformed_file_is_rejected_by_validate_and_by_the_loader() {
    let valid = std::fs::read(golden("models/qwen3-mixed.gguf")).expect("golden model");
    let dir = tempfile::tempdir().unwrap();
    for (name, mutate, needle) in cases() {
        let mut bytes = valid.clone();
        mutate(&mut bytes);
        assert_ne!(bytes, valid, "{name}: the mutation changed nothing");
        let path = dir.path().join(format!("{}.gguf", name.replace(' ', "_")));
        std::fs::write(&path, &bytes).unwrap();

        let run = oxibonsai(["validate", path_str(&path)]);
        assert_eq!(
            run.code, 1,
            "{name}: validate exit code; {}{}",
            run.stdout, run.stderr
        );
        let report = run.stdout.to_lowercase();
        assert!(
            report.contains(&needle.to_lowercase()),
            "{name}: validate should mention {needle:?}:\n{}{}",
            run.stdout,
            run.stderr
        );

        let run = oxibonsai(["info", path_str(&path)]);
        assert_eq!(run.code, 1, "{name}: info exit code; {}", run.stderr);
        assert_eq!(
            run.stderr.trim().lines().count(),
            1,
            "{name}: {}",
            run.stderr
        );
        assert!(
            run.stderr.to_lowercase().contains(&needle.to_lowercase()),
            "{name}: the loader's error should mention {needle:?}: {}",
            run.stderr
        );
    }
}
