//! Harness of scripts/arm-mca.sh's K-quant rows (run under qemu-aarch64 with its execution
//! trace on; never timed): `harness FORMAT TIER BLOCKS ROWS [TOKENS]` runs the tier's
//! matrix-vector kernel once over ROWS rows of BLOCKS super-blocks of filler bytes (the kernels
//! have no data-dependent branches) or, with TOKENS, its matrix-matrix kernel once over those
//! rows and TOKENS tokens (each token prepared before, outside the traced kernel), then prints
//! the run-time address of `marker` so the trace's addresses can be mapped to the binary's
//! symbols.
use oxibonsai_formats::kernels::{Isa, Kernels};
use oxibonsai_formats::{format, FormatKind};

#[inline(never)]
fn marker() {}

fn main() {
    let a: Vec<String> = std::env::args().collect();
    let usage = "usage: harness Q2_K|Q3_K|Q4_K|Q5_K|Q6_K neon|dotprod|i8mm BLOCKS ROWS [TOKENS]";
    let kind = match a.get(1).map(String::as_str) {
        Some("Q2_K") => FormatKind::Q2_K,
        Some("Q3_K") => FormatKind::Q3_K,
        Some("Q4_K") => FormatKind::Q4_K,
        Some("Q5_K") => FormatKind::Q5_K,
        Some("Q6_K") => FormatKind::Q6_K,
        _ => panic!("{usage}"),
    };
    let isa = Isa::parse(a.get(2).expect(usage)).expect(usage);
    let blocks: usize = a.get(3).and_then(|s| s.parse().ok()).expect(usage);
    let rows: usize = a.get(4).and_then(|s| s.parse().ok()).expect(usage);
    let kernels = Kernels::new(isa).expect("tier not available (run under qemu -cpu max)");
    let f = format(kind);
    let act = format(FormatKind::Q8_K);
    let row_bytes = blocks * f.block_bytes;
    let fill = |n: usize, seed: u32| -> Vec<u8> {
        let mut s = seed;
        (0..n)
            .map(|_| {
                s = s.wrapping_mul(1_103_515_245).wrapping_add(12_345);
                // Keep every byte's top bit clear: f16 fields stay finite.
                ((s >> 16) & 0x3b) as u8
            })
            .collect()
    };
    let w = fill(rows * row_bytes, 1);
    let mut out = vec![0.0f32; rows];
    if let Some(tokens) = a.get(5) {
        let tokens: usize = tokens.parse().expect(usage);
        let n_values = blocks * f.block_elems;
        let stride = kernels
            .gemm_prepared_bytes(f, n_values)
            .expect("no matrix-matrix kernel of this format on this tier");
        let mut prepared = vec![0u8; tokens * stride];
        for (t, dst) in prepared.chunks_exact_mut(stride).enumerate() {
            let y = fill(blocks * act.block_bytes, 2 + t as u32);
            kernels.gemm_prepare(f, n_values, &y, dst);
        }
        out = vec![0.0f32; rows * tokens];
        kernels.gemm(f, n_values, &w, rows, &prepared, tokens, &mut out, rows);
    } else {
        let y = fill(blocks * act.block_bytes, 2);
        kernels.gemv(f, &w, row_bytes, &y, &mut out);
    }
    marker();
    println!(
        "marker {:#x} sum {}",
        marker as *const () as usize,
        out.iter().sum::<f32>()
    );
}
