//! Shared by the GPU tests and the benchmark example: random Q1_0 matrices and the CPU's answer.

use oxibonsai_formats::q1_0::{self, QK1_0};
use oxibonsai_formats::q8_0::{self, QK8_0};

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
}

/// `n_rows` random Q1_0 rows of `n_in`: random signs, scales in [0.001, 0.1).
pub fn random_q1_0(rng: &mut Rng, n_rows: usize, n_in: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(n_rows * n_in / QK1_0 * 18);
    for _ in 0..n_rows * n_in / QK1_0 {
        let d = half::f16::from_f32(0.001 + 0.099 * (rng.unit() * 0.5 + 0.5));
        out.extend_from_slice(&d.to_le_bytes());
        for _ in 0..2 {
            out.extend_from_slice(&rng.next().to_le_bytes());
        }
    }
    out
}

/// The CPU's product (the registry's scalar Q1_0 × Q8_0 dot of each row) and, per row, the sum
/// of the magnitudes of its terms (the scale its rounding error is measured against).
pub fn cpu_product(rows: &[u8], n_in: usize, x: &[f32]) -> (Vec<f32>, Vec<f32>) {
    let row_bytes = n_in / QK1_0 * 18;
    let mut act = vec![0u8; n_in / QK8_0 * 34];
    q8_0::quantize_activation(x, &mut act);
    let mut magnitude_act = vec![0u8; act.len()];
    for (m, a) in magnitude_act.chunks_exact_mut(34).zip(act.chunks_exact(34)) {
        m[..2].copy_from_slice(&a[..2]);
        for (mq, &aq) in m[2..].iter_mut().zip(&a[2..]) {
            *mq = (aq as i8).unsigned_abs().min(127);
        }
    }
    let mut out = Vec::new();
    let mut scale = Vec::new();
    for row in rows.chunks_exact(row_bytes) {
        out.push(q1_0::dot(row, &act));
        // |d_w| · Σ_k |d_k| · Σ|q|: the dot of all-positive signs with the codes' magnitudes.
        let mut positive = row.to_vec();
        for block in positive.chunks_exact_mut(18) {
            block[2..].fill(0xFF);
            let d = half::f16::from_le_bytes([block[0], block[1]])
                .to_f32()
                .abs();
            block[..2].copy_from_slice(&half::f16::from_f32(d).to_le_bytes());
        }
        scale.push(q1_0::dot(&positive, &magnitude_act).abs());
    }
    (out, scale)
}
