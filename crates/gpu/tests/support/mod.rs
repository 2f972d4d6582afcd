//! Shared by the op tests: the adapter, inputs, and the error bounds' arithmetic.
// Each test binary uses a part of this.
#![allow(dead_code)]

use oxibonsai_formats::q8_0::{self, BlockQ8_0, QK8_0};
use oxibonsai_formats::q8_k::{self, BlockQ8_K, QK_K};
use oxibonsai_gpu::Gpu;

/// One rounding of f32 (2^-24).
pub const U: f64 = 1.0 / 16_777_216.0;

/// The adapter `Gpu::new` picks (`OXIBONSAI_GPU_ADAPTER`; CI: lavapipe). No adapter fails.
pub fn gpu() -> Gpu {
    match Gpu::new() {
        Ok(g) => {
            eprintln!("GPU adapter: {}", g.report());
            g
        }
        Err(e) => panic!("the GPU tests need an adapter: {e}"),
    }
}

/// A small deterministic generator (xorshift64*), so failures reproduce.
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// Uniform in [-1, 1).
    pub fn unit(&mut self) -> f32 {
        (self.next() >> 40) as f32 / (1u64 << 23) as f32 - 1.0
    }

    pub fn vec(&mut self, n: usize, scale: f32) -> Vec<f32> {
        (0..n).map(|_| self.unit() * scale).collect()
    }
}

/// Tracks the worst |got − want| / bound of a test, and fails on any element past its bound.
pub struct Worst {
    pub what: String,
    pub ratio: f64,
    pub abs: f64,
}

impl Worst {
    pub fn new(what: &str) -> Worst {
        Worst {
            what: what.to_owned(),
            ratio: 0.0,
            abs: 0.0,
        }
    }

    pub fn check(&mut self, at: impl FnOnce() -> String, got: f32, want: f64, bound: f64) {
        let err = (f64::from(got) - want).abs();
        // A NaN fails too.
        if err.is_nan() || err > bound {
            panic!(
                "{} {}: GPU {got} reference {want} error {err:e} > bound {bound:e}",
                self.what,
                at()
            );
        }
        if bound > 0.0 {
            self.ratio = self.ratio.max(err / bound);
        }
        self.abs = self.abs.max(err);
    }

    pub fn report(&self) {
        eprintln!(
            "{}: worst error {:.3e}, worst error / bound {:.3}",
            self.what, self.abs, self.ratio
        );
    }
}

/// The engine's `rope_angles` (crates/engine/src/backend/mod.rs), restated: the engine is not a
/// dependency of this crate.
pub fn rope_angles(positions: &[usize], n_rot: usize, freq_base: f32) -> Vec<(f32, f32)> {
    let theta_scale = freq_base.powf(-2.0 / n_rot as f32);
    let mut out = Vec::new();
    for &pos in positions {
        let mut theta = pos as f32;
        for _ in 0..n_rot / 2 {
            out.push((theta.cos(), theta.sin()));
            theta *= theta_scale;
        }
    }
    out
}

/// The CPU's Q8_0 blocks of `x` in the device layout: (words, meta) as `quantize_q8_0` writes.
pub fn cpu_q8(x: &[f32]) -> (Vec<u32>, Vec<u32>) {
    let mut blocks = vec![0u8; x.len() / QK8_0 * 34];
    q8_0::quantize_activation(x, &mut blocks);
    let mut words = Vec::new();
    let mut meta = Vec::new();
    for b in blocks.chunks_exact(34) {
        let b: BlockQ8_0 = bytemuck::pod_read_unaligned(b);
        for i in 0..8 {
            words.push(u32::from_le_bytes(
                [0, 1, 2, 3].map(|l| b.qs[8 * l + i] as u8),
            ));
        }
        let total: i32 = b.qs.iter().map(|&q| i32::from(q)).sum();
        meta.push(b.d.to_f32().to_bits());
        meta.push(total as u32);
    }
    (words, meta)
}

/// The CPU's Q8_K blocks of `x` in the device layout: codes in order, 4 to a word, (d, Σ codes).
pub fn cpu_q8_k(x: &[f32]) -> (Vec<u32>, Vec<u32>) {
    let mut blocks = vec![0u8; x.len() / QK_K * size_of::<BlockQ8_K>()];
    q8_k::quantize_activation(x, &mut blocks);
    let mut words = Vec::new();
    let mut meta = Vec::new();
    for b in blocks.chunks_exact(size_of::<BlockQ8_K>()) {
        let b: BlockQ8_K = bytemuck::pod_read_unaligned(b);
        words.extend(
            b.qs.chunks_exact(4)
                .map(|w| u32::from_le_bytes([0, 1, 2, 3].map(|l| w[l] as u8))),
        );
        let total: i32 = b.qs.iter().map(|&q| i32::from(q)).sum();
        meta.push(b.d.to_f32().to_bits());
        meta.push(total as u32);
    }
    (words, meta)
}
