//! Test data shared by the kernel tests: reproducible random blocks and activations.
#![allow(dead_code)]

use oxibonsai_formats::kernels::{Isa, Kernels};
use oxibonsai_formats::{format, Format, FormatKind};

/// splitmix64: reproducible data without a dependency.
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    pub fn unit(&mut self) -> f32 {
        (self.next() >> 40) as f32 / (1u64 << 24) as f32
    }
}

/// An f16 scale from the interesting classes: zero, negative, subnormal, large, ordinary.
pub fn scale(rng: &mut Rng) -> [u8; 2] {
    let v = match rng.next() % 8 {
        0 => 0.0,
        1 => -(rng.unit() * 2.0),
        2 => 3.0e-7 * (1.0 + rng.unit()),
        3 => 2000.0 * (rng.unit() - 0.5),
        _ => rng.unit() * 0.1,
    };
    half::f16::from_f32(v).to_bits().to_le_bytes()
}

/// `n_blocks` random blocks: every code byte random, the f16 scale where the layout keeps it.
pub fn random_weights(f: &Format, n_blocks: usize, rng: &mut Rng) -> Vec<u8> {
    // Where the layout keeps f16 scales (and Q4_1's / Q5_1's minimum, the K-quants' dmin): set
    // to sane classes, as random bytes there would be NaN or infinity half the time.
    let scales: &[usize] = match f.kind {
        FormatKind::TQ2_0 | FormatKind::TQ1_0 | FormatKind::PTQ1_0 => &[f.block_bytes - 2],
        FormatKind::Q4_1 | FormatKind::Q5_1 | FormatKind::Q4_K | FormatKind::Q5_K => &[0, 2],
        FormatKind::Q2_K => &[80, 82],
        FormatKind::Q3_K => &[108],
        FormatKind::Q6_K => &[208],
        _ => &[0],
    };
    let mut out = Vec::with_capacity(n_blocks * f.block_bytes);
    for _ in 0..n_blocks {
        let mut block: Vec<u8> = (0..f.block_bytes).map(|_| rng.next() as u8).collect();
        for &at in scales {
            block[at..at + 2].copy_from_slice(&scale(rng));
        }
        out.extend_from_slice(&block);
    }
    out
}

/// A random activation row converted by the partner's scalar conversion; some blocks all zero.
pub fn random_activation(partner: &Format, n: usize, rng: &mut Rng) -> Vec<u8> {
    let magnitude = [1e-3f32, 1.0, 50.0][(rng.next() % 3) as usize];
    let mut x: Vec<f32> = (0..n).map(|_| (rng.unit() - 0.5) * magnitude).collect();
    if n >= 2 * partner.block_elems && rng.next().is_multiple_of(2) {
        x[..partner.block_elems].fill(0.0);
    }
    let mut bytes = vec![0u8; n / partner.block_elems * partner.block_bytes];
    let convert = partner
        .quantize_activation
        .expect("partner has a conversion");
    convert(&x, &mut bytes);
    bytes
}

/// Σ |w·a| of one row over dequantized values: the scale of the tolerance.
pub fn abs_sum(f: &Format, partner: &Format, row: &[u8], activation: &[u8]) -> f64 {
    let n = row.len() / f.block_bytes * f.block_elems;
    let mut w = vec![0f32; n];
    let mut a = vec![0f32; n];
    (f.dequantize)(row, &mut w);
    (partner.dequantize)(activation, &mut a);
    w.iter()
        .zip(&a)
        .map(|(w, a)| f64::from((w * a).abs()))
        .sum()
}

/// Copies `data` to `offset` bytes into an exactly sized boxed buffer (so it ends the allocation).
pub fn placed(data: &[u8], offset: usize) -> Box<[u8]> {
    let mut buf = vec![0xA5u8; offset + data.len()].into_boxed_slice();
    buf[offset..].copy_from_slice(data);
    buf
}

/// Runs one GEMV case (random rows of `n_values`, weights `offset` bytes into an exactly sized
/// allocation, the activation at another odd address) through `kernels` and returns the worst |fast − scalar| / tolerance.
pub fn check_gemv(
    kernels: &Kernels,
    kind: FormatKind,
    n_values: usize,
    rows: usize,
    offset: usize,
    seed: u64,
) -> f64 {
    let f = format(kind);
    let partner = format(f.partner);
    let mut rng = Rng(seed);
    let n_blocks = n_values / f.block_elems;
    let row_bytes = n_blocks * f.block_bytes;
    let weights = random_weights(f, n_blocks * rows, &mut rng);
    let activation = random_activation(partner, n_values, &mut rng);
    let w_buf = placed(&weights, offset);
    let a_offset = (offset * 5) % 8;
    let a_buf = placed(&activation, a_offset);
    // Guard values on both sides of `out` catch writes outside the rows asked for.
    let guard = 2;
    let mut out = vec![f32::from_bits(0x7fc0_dead); rows + 2 * guard];
    kernels.gemv(
        f,
        &w_buf[offset..],
        row_bytes,
        &a_buf[a_offset..],
        &mut out[guard..guard + rows],
    );
    for g in out[..guard].iter().chain(&out[guard + rows..]) {
        assert_eq!(
            g.to_bits(),
            0x7fc0_dead,
            "{kind:?} {}: wrote outside out",
            kernels.isa().name()
        );
    }
    let mut worst = 0f64;
    for r in 0..rows {
        let row = &weights[r * row_bytes..(r + 1) * row_bytes];
        let scalar = (f.dot)(row, &activation);
        let fast = out[guard + r];
        let tolerance = 1e-5 * abs_sum(f, partner, row, &activation) + 1e-6;
        let error = (f64::from(fast) - f64::from(scalar)).abs();
        assert!(
            error <= tolerance,
            "{kind:?} on {}: row {r} of {rows}, {n_values} values, offset {offset}, seed {seed}: \
             fast {fast} vs scalar {scalar} (tolerance {tolerance:e})",
            kernels.isa().name()
        );
        worst = worst.max(error / tolerance);
    }
    worst
}

/// The tiers this CPU runs, scalar first. `OXIBONSAI_REQUIRE_ISA` (comma-separated tier names,
/// e.g. `neon,dotprod`) names tiers that must be among them: a run on a CPU without one fails
/// naming it instead of passing having tested only what it had.
pub fn tiers() -> Vec<Kernels> {
    for isa in Isa::ALL {
        if !isa.available() {
            eprintln!(
                "tier {} not available on this CPU: not tested here",
                isa.name()
            );
        }
    }
    assert_required_tiers_present();
    Isa::ALL.into_iter().filter_map(Kernels::new).collect()
}

/// Panics naming each tier of `OXIBONSAI_REQUIRE_ISA` this CPU lacks (or that is no tier).
pub fn assert_required_tiers_present() {
    let Ok(required) = std::env::var("OXIBONSAI_REQUIRE_ISA") else {
        return;
    };
    for name in required.split(',').map(str::trim).filter(|n| !n.is_empty()) {
        let isa = Isa::parse(name).unwrap_or_else(|e| panic!("OXIBONSAI_REQUIRE_ISA: {e}"));
        assert!(
            isa.available(),
            "OXIBONSAI_REQUIRE_ISA names {name}, which this CPU lacks: its kernels would go untested"
        );
    }
}

/// The formats whose matrix-vector kernel an ARM tier provides.
pub const ARM_FAST_GEMV: &[FormatKind] = &[
    FormatKind::Q1_0,
    FormatKind::Q2_0,
    FormatKind::PQ2_0,
    FormatKind::Q2_0G128Legacy,
    FormatKind::TQ2_0,
    FormatKind::TQ1_0,
    FormatKind::PTQ1_0,
    FormatKind::F32,
    FormatKind::F16,
    FormatKind::BF16,
    FormatKind::Q8_0,
    FormatKind::Q4_0,
    FormatKind::Q4_1,
    FormatKind::Q5_0,
    FormatKind::Q5_1,
    FormatKind::IQ4_NL,
    FormatKind::Q2_K,
    FormatKind::Q3_K,
    FormatKind::Q4_K,
    FormatKind::Q5_K,
    FormatKind::Q6_K,
];

/// Whether tier `isa` should have a fast matrix-vector kernel for `kind`: every x86 vector tier
/// has one for every format the tests ask about; the ARM tiers only for [`ARM_FAST_GEMV`].
pub fn expects_fast_gemv(isa: Isa, kind: FormatKind) -> bool {
    match isa {
        Isa::Scalar => false,
        Isa::Neon | Isa::Dotprod | Isa::I8mm => ARM_FAST_GEMV.contains(&kind),
        Isa::Avx2 | Isa::Avx512 => true,
    }
}

/// The awkward shapes the matrix-matrix tests sweep for a format with `block_elems` values per
/// block: row lengths of one, three and many blocks (and 6144), row counts around the 8- and
/// 16-row groups, token counts 1…9, 11 and 19 (fewer on the longest rows). `check(n_values, rows, tokens,
/// seed)` returns error / tolerance; the worst is returned.
pub fn worst_over_gemm_shapes(
    block_elems: usize,
    mut seed: u64,
    mut check: impl FnMut(usize, usize, usize, u64) -> f64,
) -> f64 {
    let step = block_elems.max(64);
    let mut worst = 0f64;
    for n_values in [step, 3 * step, 2048 + step, 6144] {
        for rows in [1, 5, 15, 16, 17, 31, 33, 40] {
            for tokens in [1, 2, 3, 4, 5, 6, 7, 8, 9, 11, 19] {
                if n_values > 4096 && (rows > 17 || tokens > 8) {
                    continue;
                }
                seed += 1;
                worst = worst.max(check(n_values, rows, tokens, seed));
            }
        }
    }
    worst
}

/// The formats whose matrix-matrix kernel the `dotprod` and `i8mm` tiers provide (`neon` has
/// none).
pub const ARM_GEMM: [FormatKind; 16] = [
    FormatKind::Q1_0,
    FormatKind::Q2_0,
    FormatKind::PQ2_0,
    FormatKind::Q2_0G128Legacy,
    FormatKind::TQ2_0,
    FormatKind::PTQ1_0,
    FormatKind::Q8_0,
    FormatKind::Q4_0,
    FormatKind::Q4_1,
    FormatKind::Q5_0,
    FormatKind::Q5_1,
    FormatKind::Q2_K,
    FormatKind::Q3_K,
    FormatKind::Q4_K,
    FormatKind::Q5_K,
    FormatKind::Q6_K,
];

/// The formats whose kernel on packed weights the `dotprod` tier provides (`i8mm` inherits it).
pub const ARM_PACKED: [FormatKind; 12] = [
    FormatKind::Q1_0,
    FormatKind::TQ2_0,
    FormatKind::TQ1_0,
    FormatKind::PTQ1_0,
    FormatKind::Q2_0,
    FormatKind::PQ2_0,
    FormatKind::Q2_0G128Legacy,
    FormatKind::Q8_0,
    FormatKind::Q4_0,
    FormatKind::Q4_1,
    FormatKind::Q5_0,
    FormatKind::Q5_1,
];

/// How many (format, tier) pairs of `kinds` have a matrix-matrix kernel (`packed`: one on packed
/// weights) on this CPU. On x86, with every format of `kinds` (Q8_0 among them) having one on
/// each tier: all on AVX-512 VNNI; on AVX2 all but Q8_0 unless the CPU has AVX-VNNI (its codes
/// would saturate `maddubs`'s 16-bit pair sums).
#[cfg(target_arch = "x86_64")]
pub fn expected_matrix_kernels(kinds: &[FormatKind], _packed: bool) -> usize {
    let n_formats = kinds.len();
    let mut expected = 0;
    if Isa::Avx512.available() && std::arch::is_x86_feature_detected!("avx512vnni") {
        expected += n_formats;
    }
    if Isa::Avx2.available() {
        let q8_0 = std::arch::is_x86_feature_detected!("avxvnni");
        expected += n_formats - usize::from(!q8_0);
    }
    expected
}
/// On ARM: the [`ARM_GEMM`] (or [`ARM_PACKED`]) formats of `kinds` on each of the `dotprod` and
/// `i8mm` tiers the CPU has. None on another architecture (only the scalar tier is built).
#[cfg(not(target_arch = "x86_64"))]
pub fn expected_matrix_kernels(kinds: &[FormatKind], packed: bool) -> usize {
    if !cfg!(target_arch = "aarch64") {
        return 0;
    }
    let tiers = [Isa::Dotprod, Isa::I8mm]
        .into_iter()
        .filter(|isa| isa.available())
        .count();
    let arm: &[FormatKind] = if packed { &ARM_PACKED } else { &ARM_GEMM };
    tiers * kinds.iter().filter(|k| arm.contains(k)).count()
}

/// Asserts that every vector tier this CPU runs has a fast matrix-vector kernel for each of
/// `kinds` it should have ([`expects_fast_gemv`]), and none it does not claim (an ARM tier
/// providing only Q1_0 says so).
pub fn assert_fast_gemv_on_every_tier(kinds: &[FormatKind]) {
    for kernels in tiers().iter().filter(|k| k.isa() != Isa::Scalar) {
        for &kind in kinds {
            assert_eq!(
                kernels.has_fast_gemv(kind),
                expects_fast_gemv(kernels.isa(), kind),
                "{kind:?}: {} kernel present vs expected",
                kernels.isa().name()
            );
        }
    }
}

/// [`check_gemv`] over the awkward shapes: rows of each of `n_values` values × 1..=13 and 37
/// rows (every unroll remainder; the rows past 5 only as 37 where `long(n_values)`, as the long
/// rows need each remainder once). Prints the worst error / tolerance.
pub fn check_awkward_gemv_shapes(
    kernels: &Kernels,
    kind: FormatKind,
    n_values: &[usize],
    long: impl Fn(usize) -> bool,
) {
    let mut worst = 0f64;
    let mut seed = 1;
    for &n in n_values {
        for rows in (1..=13).chain([37]) {
            if long(n) && rows > 5 && rows != 37 {
                continue;
            }
            seed += 1;
            worst = worst.max(check_gemv(kernels, kind, n, rows, 0, seed));
        }
    }
    eprintln!(
        "{kind:?} {}: worst error / tolerance {worst:.3e}",
        kernels.isa().name()
    );
}

/// [`check_gemv`] on rows of `n_values` placed 1, 3 and 7 bytes into an exactly sized
/// allocation, 1, 4, 5 and 9 rows.
pub fn check_unaligned_gemv(kernels: &Kernels, kind: FormatKind, n_values: usize) {
    for offset in [1, 3, 7] {
        for rows in [1, 4, 5, 9] {
            let seed = 1000 + offset as u64 * 31 + rows as u64;
            check_gemv(kernels, kind, n_values, rows, offset, seed);
        }
    }
}

/// `weights` may hold more rows than asked for: asserts only the first `out.len()` count
/// (7 rows of `n_values` given, 5 asked for).
pub fn assert_rows_past_the_band_are_ignored(kernels: &Kernels, kind: FormatKind, n_values: usize) {
    let f = format(kind);
    let partner = format(f.partner);
    let mut rng = Rng(77);
    let n_blocks = n_values / f.block_elems;
    let row_bytes = n_blocks * f.block_bytes;
    let weights = random_weights(f, n_blocks * 7, &mut rng);
    let activation = random_activation(partner, n_values, &mut rng);
    let mut all = vec![0f32; 7];
    let mut first = vec![0f32; 5];
    kernels.gemv(f, &weights, row_bytes, &activation, &mut all);
    kernels.gemv(f, &weights, row_bytes, &activation, &mut first);
    assert_eq!(all[..5], first[..], "{kind:?} {}", kernels.isa().name());
}

/// Every (format, tier) pair of `kinds` × `tiers_with(kind)` through `check(kernels, kind,
/// n_values, rows, tokens, seed)` over [`worst_over_gemm_shapes`], and asserts that as many
/// pairs were tested as [`expected_matrix_kernels`] says (`what` names the kernel family:
/// `gemm` or `packed`).
pub fn check_matrix_kernels_on_awkward_shapes(
    kinds: &[FormatKind],
    tiers_with: impl Fn(FormatKind) -> Vec<Kernels>,
    seed: u64,
    check: impl Fn(&Kernels, FormatKind, usize, usize, usize, u64) -> f64,
    what: &str,
) {
    let mut tested = 0;
    for &kind in kinds {
        for kernels in tiers_with(kind) {
            let worst = worst_over_gemm_shapes(format(kind).block_elems, seed, |n, r, t, seed| {
                check(&kernels, kind, n, r, t, seed)
            });
            eprintln!(
                "{kind:?} {}: worst error / tolerance {worst:.3e}",
                kernels.isa().name()
            );
            tested += 1;
        }
    }
    let expected = expected_matrix_kernels(kinds, what == "packed");
    assert_eq!(
        tested, expected,
        "a format lost its {what} kernel on some tier"
    );
}
