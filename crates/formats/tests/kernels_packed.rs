//! Weights packed at load (`Kernels::pack`), on every tier this CPU runs that packs (the AVX2
//! variants the table skips are tested in `x86_avx2/packed.rs`): the packed
//! product against the registry's scalar `dot` for every (row, token) on awkward shapes (partial
//! groups, every token tile remainder, bands starting past the first group, guard values around
//! each token's rows); each row's result bit-identical whatever the token count and to the plain
//! matrix-matrix kernel's; and pack → unpack reproducing the original bytes exactly. TQ1_0
//! (kept in its base-3 bytes on AVX-512 VNNI, converted to TQ2_0 at packing elsewhere) has no
//! plain matrix-matrix kernel: its products are compared bit for bit with TQ2_0's plain kernel
//! on the same values. PTQ1_0 (whose trits are decoded at packing) and converted TQ1_0 unpack to
//! the same values, and to the same bytes where the encoder wrote them; base-3 TQ1_0 to its
//! bytes.

use oxibonsai_formats::kernels::{Isa, Kernels, Packed};
use oxibonsai_formats::{format, Format, FormatKind};

mod common;
use common::{
    abs_sum, check_matrix_kernels_on_awkward_shapes, random_activation, random_weights, Rng,
};

/// The formats with a packed kernel in at least one tier.
const PACKED_FORMATS: [FormatKind; 12] = [
    FormatKind::Q4_1,
    FormatKind::Q5_0,
    FormatKind::Q5_1,
    FormatKind::Q8_0,
    FormatKind::Q1_0,
    FormatKind::Q4_0,
    FormatKind::Q2_0,
    FormatKind::PQ2_0,
    FormatKind::Q2_0G128Legacy,
    FormatKind::TQ2_0,
    FormatKind::TQ1_0,
    FormatKind::PTQ1_0,
];

const SENTINEL: u32 = 0x7fc0_dead;

/// Whether `kernels` packs TQ1_0 in its own base-3 bytes: AVX-512 with VNNI (whose packed
/// kernels it runs).
fn packs_base3(kernels: &Kernels) -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        kernels.isa() == Isa::Avx512 && std::arch::is_x86_feature_detected!("avx512vnni")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = kernels;
        false
    }
}

fn tiers_with_packing(kind: FormatKind) -> Vec<Kernels> {
    common::tiers()
        .into_iter()
        .filter(|k| k.pack_plan(format(kind), 2048, 16).is_some())
        .collect()
}

/// Random rows of `n_values` and `tokens` prepared activations (with their partner rows).
struct Case {
    f: &'static Format,
    row_bytes: usize,
    weights: Vec<u8>,
    acts: Vec<Vec<u8>>,
}

fn case(kind: FormatKind, n_values: usize, rows: usize, tokens: usize, seed: u64) -> Case {
    let f = format(kind);
    let partner = format(f.partner);
    let mut rng = Rng(seed);
    let n_blocks = n_values / f.block_elems;
    Case {
        f,
        row_bytes: n_blocks * f.block_bytes,
        weights: random_weights(f, n_blocks * rows, &mut rng),
        acts: (0..tokens)
            .map(|_| random_activation(partner, n_values, &mut rng))
            .collect(),
    }
}

fn prepare(kernels: &Kernels, w: &Packed, acts: &[Vec<u8>]) -> Vec<u8> {
    let stride = kernels.packed_prepared_bytes(w);
    let mut prepared = vec![0xA5u8; acts.len() * stride];
    for (a, dst) in acts.iter().zip(prepared.chunks_exact_mut(stride)) {
        kernels.packed_prepare(w, a, dst);
    }
    prepared
}

/// Rows `first..first + n` of the packed matrix by every token, with 3 guard values after each
/// token's rows; panics if a guard was written.
fn product(
    kernels: &Kernels,
    w: &Packed,
    first: usize,
    n: usize,
    prepared: &[u8],
    tokens: usize,
) -> Vec<Vec<f32>> {
    let out_stride = n + 3;
    let mut out = vec![f32::from_bits(SENTINEL); tokens * out_stride];
    kernels.packed_gemm(w, first, n, prepared, tokens, &mut out, out_stride);
    out.chunks_exact(out_stride)
        .enumerate()
        .map(|(t, o)| {
            for (r, g) in o[n..].iter().enumerate() {
                assert_eq!(
                    g.to_bits(),
                    SENTINEL,
                    "wrote guard {r} after token {t}'s rows"
                );
            }
            o[..n].to_vec()
        })
        .collect()
}

/// One shape; returns the worst |packed − scalar| / tolerance.
fn check(
    kernels: &Kernels,
    kind: FormatKind,
    n_values: usize,
    rows: usize,
    tokens: usize,
    seed: u64,
) -> f64 {
    let c = case(kind, n_values, rows, tokens, seed);
    let partner = format(c.f.partner);
    let w = kernels
        .pack(c.f, n_values, &c.weights, rows)
        .unwrap_or_else(|| panic!("{kind:?}: no packed layout for {n_values} values"));
    let prepared = prepare(kernels, &w, &c.acts);
    let whole = product(kernels, &w, 0, rows, &prepared, tokens);
    let mut worst = 0f64;
    for (t, a) in c.acts.iter().enumerate() {
        for (r, &fast) in whole[t].iter().enumerate() {
            let row = &c.weights[r * c.row_bytes..(r + 1) * c.row_bytes];
            let scalar = (c.f.dot)(row, a);
            let tolerance = 1e-5 * abs_sum(c.f, partner, row, a) + 1e-6;
            let error = (f64::from(fast) - f64::from(scalar)).abs();
            assert!(
                error <= tolerance,
                "{kind:?} on {}: {n_values} values, row {r} of {rows}, token {t} of {tokens}, \
                 seed {seed}: packed {fast} vs scalar {scalar} (tolerance {tolerance:e})",
                kernels.isa().name()
            );
            worst = worst.max(error / tolerance);
        }
    }
    // A band past the first group (as the engine's bands of 32 rows): the same values.
    let g = w.plan().group_rows();
    if rows > g {
        let band = product(kernels, &w, g, rows - g, &prepared, tokens);
        for t in 0..tokens {
            assert_eq!(
                band[t],
                whole[t][g..],
                "{kind:?}: band from row {g}, token {t}"
            );
        }
    }
    worst
}

/// Dequantized values of `bytes` (whole blocks of `f`), bit for bit (NaN scales compare equal
/// to themselves).
fn values(f: &Format, bytes: &[u8]) -> Vec<u32> {
    let mut v = vec![0f32; bytes.len() / f.block_bytes * f.block_elems];
    (f.dequantize)(bytes, &mut v);
    v.iter().map(|x| x.to_bits()).collect()
}

/// TQ1_0 rows as TQ2_0 rows of the same values, built from the two formats' documented layouts
/// (the trit of each value read back through TQ1_0's dequantization at scale 1).
fn tq1_0_as_tq2_0(rows: &[u8]) -> Vec<u8> {
    let (tq1, tq2) = (format(FormatKind::TQ1_0), format(FormatKind::TQ2_0));
    let mut out = Vec::new();
    for block in rows.chunks_exact(tq1.block_bytes) {
        let mut unit = block.to_vec();
        unit[52..54].copy_from_slice(&half::f16::ONE.to_le_bytes());
        let mut v = [0f32; 256];
        (tq1.dequantize)(&unit, &mut v);
        let mut qs = [0u8; 64];
        for (i, x) in v.iter().enumerate() {
            // TQ2_0: value 128h + 32l + m at bits 2l of byte 32h + m.
            qs[32 * (i / 128) + i % 32] |= ((*x as i32 + 1) as u8) << (2 * (i % 128 / 32));
        }
        out.extend_from_slice(&qs);
        out.extend_from_slice(&block[52..54]);
    }
    assert_eq!(out.len(), rows.len() / tq1.block_bytes * tq2.block_bytes);
    out
}

#[test]
fn packed_products_match_the_scalar_dot_on_awkward_shapes() {
    check_matrix_kernels_on_awkward_shapes(
        &PACKED_FORMATS,
        tiers_with_packing,
        11,
        check,
        "packed",
    );
}

#[test]
fn a_rows_result_does_not_depend_on_the_token_count_and_matches_the_plain_kernel() {
    for kind in PACKED_FORMATS {
        for kernels in tiers_with_packing(kind) {
            let (n_values, rows, tokens) = (3 * format(kind).block_elems.max(64), 37, 19);
            let c = case(kind, n_values, rows, tokens, 99);
            let w = kernels
                .pack(c.f, n_values, &c.weights, rows)
                .expect("packs");
            let prepared = prepare(&kernels, &w, &c.acts);
            let stride = kernels.packed_prepared_bytes(&w);
            let all = product(&kernels, &w, 0, rows, &prepared, tokens);
            // Each token alone (the matrix-vector case), then every prefix of the tokens.
            for t in 0..tokens {
                let one = product(
                    &kernels,
                    &w,
                    0,
                    rows,
                    &prepared[t * stride..(t + 1) * stride],
                    1,
                );
                let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
                assert_eq!(bits(&one[0]), bits(&all[t]), "{kind:?}: token {t} alone");
            }
            for n in 1..tokens {
                let some = product(&kernels, &w, 0, rows, &prepared[..n * stride], n);
                assert_eq!(some[..], all[..n], "{kind:?}: the first {n} tokens");
            }
            // The plain matrix-matrix kernel on the original rows sums in the same order.
            let (plain_format, plain_rows) = if kind == FormatKind::TQ1_0 {
                assert_eq!(kernels.gemm_prepared_bytes(c.f, n_values), None);
                (format(FormatKind::TQ2_0), tq1_0_as_tq2_0(&c.weights))
            } else {
                (c.f, c.weights.clone())
            };
            assert_eq!(
                kernels.gemm_prepared_bytes(plain_format, n_values),
                Some(stride)
            );
            let mut plain = vec![0f32; tokens * rows];
            kernels.gemm(
                plain_format,
                n_values,
                &plain_rows,
                rows,
                &prepared,
                tokens,
                &mut plain,
                rows,
            );
            for t in 0..tokens {
                assert_eq!(
                    plain[t * rows..(t + 1) * rows],
                    all[t][..],
                    "{kind:?}: plain gemm, token {t}"
                );
            }
        }
    }
}

#[test]
fn pack_then_unpack_gives_back_the_original_rows() {
    for kind in PACKED_FORMATS {
        let f = format(kind);
        for kernels in tiers_with_packing(kind) {
            let step = f.block_elems.max(128);
            for (n_values, rows) in [
                (f.block_elems.max(64), 1),
                (3 * step, 17),
                (2048 + step, 40),
            ] {
                let c = case(kind, n_values, rows, 0, 5 + rows as u64);
                let w = kernels.pack(f, n_values, &c.weights, rows).expect("packs");
                let mut row = vec![0u8; c.row_bytes];
                let mut block = vec![0u8; f.block_bytes];
                // Random TQ1_0 / PTQ1_0 bytes are mostly encodings their quantizers never write:
                // converted at packing, they come back as the ones it writes, of the same
                // values. TQ1_0 keeps its bytes on AVX-512 VNNI.
                let base3 = kind == FormatKind::TQ1_0 && packs_base3(&kernels);
                let same = |got: &[u8], want: &[u8]| {
                    if matches!(kind, FormatKind::TQ1_0 | FormatKind::PTQ1_0) && !base3 {
                        values(f, got) == values(f, want)
                    } else {
                        got == want
                    }
                };
                for r in 0..rows {
                    row.fill(0xA5);
                    w.unpack_row(r, &mut row);
                    let original = &c.weights[r * c.row_bytes..(r + 1) * c.row_bytes];
                    assert!(same(&row, original), "{kind:?}: row {r} of {rows}");
                    let b = r % (n_values / f.block_elems);
                    w.unpack_block(r, b, &mut block);
                    assert!(
                        same(
                            &block,
                            &original[b * f.block_bytes..(b + 1) * f.block_bytes]
                        ),
                        "{kind:?}: row {r} block {b}"
                    );
                }
                // The packed copy replaces the rows: at most 15 % larger over whole groups
                // (TQ1_0 in base 3 on AVX-512 VNNI: its bytes, the scales padded to a vector: 4 % for a
                // row of one block, under 1 % from 8 blocks; converted to 2-bit codes on ARM: 66 / 54 bytes plus
                // the header, 30 %; PTQ1_0's 1.75-bit trits as 2-bit codes: 21 %, up to 29 %
                // for a row of one block, whose scales' padding to a vector is shared by no
                // other block).
                let plan = w.plan();
                let original = plan.n_groups() * plan.group_rows() * c.row_bytes;
                let bound = match kind {
                    FormatKind::TQ1_0 if base3 => 104,
                    FormatKind::TQ1_0 => 130,
                    FormatKind::PTQ1_0 => 129,
                    _ => 115,
                };
                assert!(
                    plan.packed_bytes() * 100 <= original * bound,
                    "{kind:?}: {} packed bytes for {original}",
                    plan.packed_bytes()
                );
                assert_eq!(w.storage().len(), plan.packed_bytes());
            }
        }
    }
}

#[test]
fn ptq1_0_rows_the_encoder_wrote_unpack_to_their_bytes() {
    let f = format(FormatKind::PTQ1_0);
    let tiers = tiers_with_packing(FormatKind::PTQ1_0);
    assert!(
        tiers.iter().any(|k| k.isa() != Isa::Scalar) || !Isa::Avx2.available(),
        "an x86 tier with AVX2 packs PTQ1_0"
    );
    for kernels in tiers {
        let (n_values, rows) = (384, 21);
        let mut rng = Rng(77);
        let x: Vec<f32> = (0..n_values * rows)
            .map(|_| (rng.next() % 2001) as f32 / 1000.0 - 1.0)
            .collect();
        let mut weights = vec![0u8; n_values / f.block_elems * f.block_bytes * rows];
        (f.quantize)(&x, &mut weights);
        let w = kernels.pack(f, n_values, &weights, rows).expect("packs");
        let rb = weights.len() / rows;
        let mut row = vec![0u8; rb];
        for r in 0..rows {
            w.unpack_row(r, &mut row);
            assert_eq!(row, weights[r * rb..(r + 1) * rb], "row {r}");
        }
    }
}

#[test]
fn shapes_without_a_prepared_layout_are_not_packed() {
    for kind in PACKED_FORMATS {
        let f = format(kind);
        for kernels in tiers_with_packing(kind) {
            if f.block_elems == 32 {
                // An odd number of 32-value blocks is not whole 64-value pairs.
                assert!(kernels.pack_plan(f, 96, 16).is_none(), "{kind:?}");
            }
            assert!(kernels.pack_plan(f, 0, 16).is_none(), "{kind:?}");
            assert!(kernels.pack_plan(f, 2048, 0).is_none(), "{kind:?}");
            assert!(
                kernels.pack_plan(f, f.block_elems * 3 + 1, 16).is_none(),
                "{kind:?}"
            );
        }
    }
    // The scalar tier and formats without a packed kernel keep the plain rows.
    let scalar = Kernels::new(Isa::Scalar).expect("always");
    assert!(scalar
        .pack_plan(format(FormatKind::Q4_1), 2048, 16)
        .is_none());
    for kernels in common::tiers() {
        assert!(kernels
            .pack_plan(format(FormatKind::Q6_K), 2048, 16)
            .is_none());
    }
}
