//! The kernel on packed weights (`packed_layout`) for AVX2 (AVX-VNNI where present): the
//! scheme of `x86_avx512/packed.rs` on 8-row groups, one row per dword lane of a 256-bit vector,
//! the 4-byte dots of `dot4` (`vpmaddubsw` + `vpmaddwd` without VNNI, exact for codes up to 63:
//! Q8_0's sign-flipped codes are packed only with VNNI). The float work is the plain AVX2
//! kernel's in the same order, so a row's result does not depend on the token count.

use core::arch::x86_64::*;

use super::gemm::bits_to_bytes;
use super::lowbit_util::dot4;
use crate::kernels::gemm_layout::{self, formats, Layout, STORED_2BIT, UNIT};
use crate::kernels::packed_layout::{
    block_header, check_run, prefetch_ahead, scales_ahead, unit_bytes, Codes, PackPlan,
    PackedFormat,
};
use crate::kernels::PackedKernel;
use crate::FormatKind;

/// Rows per group: the dword lanes of a 256-bit vector.
pub(crate) const GROUP: usize = 8;

/// Integer accumulators per token (exact sums, so the split changes no result).
const fn chains(t: usize) -> usize {
    if t >= 4 {
        1
    } else {
        4 / t
    }
}

#[inline(always)]
unsafe fn read_f32(p: *const u8) -> f32 {
    p.cast::<f32>().read_unaligned()
}

/// Whether one token's ternary 2-bit codes (TQ2_0, PTQ1_0) are summed in place (`crumbs`):
/// VNNI (exact dword sums) and a chain per code. Q2_0 / PQ2_0 measured no faster so: unchanged.
const fn in_place<W: PackedFormat, const VNNI: bool, const T: usize>() -> bool {
    VNNI && chains(T) == 4 && matches!(W::CODES, Codes::Crumbs) && (W::TRITS || !W::PERMUTED)
}

/// Code `s` (bits 2s..2s+2) of each byte of `v`: `in_place` (see [`in_place`]: one token, in
/// decode) and VNNI, each of the four codes has a chain of its own (`chains`), so it is
/// left in place, 4ˢ times the code, and the chain's sum is divided back once per unit instead
/// of shifting every vector (`vpdpbusd` sums exact integers, at most 3 · 4³ · 128 · 4 a call;
/// the plain variant's `vpmaddubsw` would saturate). Otherwise the code shifted down.
///
/// # Safety
/// AVX2 enabled.
#[inline(always)]
unsafe fn crumbs(v: __m256i, s: usize, in_place: bool) -> __m256i {
    if in_place {
        _mm256_and_si256(v, _mm256_set1_epi8((3u8 << (2 * s)) as i8))
    } else {
        let x = match s {
            0 => v,
            1 => _mm256_srli_epi16::<2>(v),
            2 => _mm256_srli_epi16::<4>(v),
            _ => _mm256_srli_epi16::<6>(v),
        };
        _mm256_and_si256(x, _mm256_set1_epi8(3))
    }
}

/// Q5's fifth bits of dword `k` (bit k of each byte of `planes`, see `packed_layout`) as 16
/// or 0 per byte: a shift in 16-bit lanes (bit 4 of a byte comes from its own bit k) and a mask.
///
/// # Safety
/// AVX2 enabled.
#[inline(always)]
unsafe fn fifth(planes: __m256i, k: usize) -> __m256i {
    let x = match k {
        0 => _mm256_slli_epi16::<4>(planes),
        1 => _mm256_slli_epi16::<3>(planes),
        2 => _mm256_slli_epi16::<2>(planes),
        3 => _mm256_slli_epi16::<1>(planes),
        4 => planes,
        5 => _mm256_srli_epi16::<1>(planes),
        6 => _mm256_srli_epi16::<2>(planes),
        _ => _mm256_srli_epi16::<3>(planes),
    };
    _mm256_and_si256(x, _mm256_set1_epi8(0x10))
}

/// `T` tokens × one packed group of 8 rows; results of the first `n_rows` rows go to
/// `out[t·out_stride + r]`.
///
/// # Safety
/// `group` points at one whole packed group of rows of `l.n_values` values; `prepared` holds
/// `T` prepared tokens of `l.bytes` bytes; `out` takes `n_rows` values at each `t·out_stride`;
/// AVX2 + FMA + F16C (+ AVX-VNNI when `VNNI`) enabled.
#[inline(always)]
unsafe fn tile<W: PackedFormat, const VNNI: bool, const T: usize>(
    group: *const u8,
    l: &Layout,
    prepared: *const u8,
    n_rows: usize,
    out: *mut f32,
    out_stride: usize,
) {
    let j = chains(T);
    let header = block_header::<W>(GROUP);
    let unit = unit_bytes(W::CODES, GROUP);
    let block_stride = header + W::UNITS_PER_BLOCK * unit;
    let n_blocks = l.n_values / (W::UNITS_PER_BLOCK * UNIT);
    let tok: [*const u8; T] = core::array::from_fn(|t| prepared.add(t * l.bytes));
    let nibble = _mm256_set1_epi8(0x0F);
    let mut acc = [_mm256_setzero_ps(); T];
    // Trits keep the group's scales ahead of its codes (`packed_layout`).
    let ahead = scales_ahead(W::TRITS, GROUP, n_blocks);
    for b in 0..n_blocks {
        let blk_at = group.add(ahead + b * block_stride);
        // The block's stream is asked for a unit at a time, spread through the block (a
        // TQ2_0 block is 17 lines on AVX-512: asked at once they measured 12-16 % slower).
        prefetch_ahead(blk_at, header);
        let mut blk: [__m256; T] =
            core::array::from_fn(|t| _mm256_set1_ps(read_f32(tok[t].add(l.bias_at + 4 * b))));
        // Exact integer sums over each activation scale's units (one unit for Q8_0 / Q8_1, the
        // whole block for Q8_K), as the plain kernel.
        let mut isum = [_mm256_setzero_si256(); 4];
        for u in 0..W::UNITS_PER_BLOCK {
            let unit_index = b * W::UNITS_PER_BLOCK + u;
            let codes = blk_at.add(header + u * unit);
            prefetch_ahead(codes, unit);
            // Activation dword `dword` of token `t` (8 per unit), broadcast.
            let act = |t: usize, dword: usize| {
                _mm256_set1_epi32(
                    tok[t]
                        .add(l.codes_at + 4 * dword)
                        .cast::<i32>()
                        .read_unaligned(),
                )
            };
            match W::CODES {
                Codes::Bytes { .. } => {
                    for k in 0..8 {
                        let v = _mm256_loadu_si256(codes.add(32 * k).cast());
                        for t in 0..T {
                            let i = t * j + k % j;
                            isum[i] = dot4::<VNNI>(isum[i], v, act(t, 8 * unit_index + k));
                        }
                    }
                }
                Codes::Nibbles => {
                    for k in 0..4 {
                        let v = _mm256_loadu_si256(codes.add(32 * k).cast());
                        let lo = _mm256_and_si256(v, nibble);
                        let hi = _mm256_and_si256(_mm256_srli_epi16::<4>(v), nibble);
                        for t in 0..T {
                            let i = t * j + (2 * k) % j;
                            isum[i] = dot4::<VNNI>(isum[i], lo, act(t, 8 * unit_index + k));
                            let i = t * j + (2 * k + 1) % j;
                            isum[i] = dot4::<VNNI>(isum[i], hi, act(t, 8 * unit_index + k + 4));
                        }
                    }
                }
                Codes::Crumbs if !W::PERMUTED && !W::TRITS => {
                    // TQ2_0: row dword `jv` of the block's codes (byte j = 32h + m holds values
                    // 128h + 32l + m at bits 2l) shifted by 2l is block dword 32h + 8l + jv % 8.
                    for kk in 0..2 {
                        let v = _mm256_loadu_si256(codes.add(32 * kk).cast());
                        let jv = 2 * u + kk;
                        let first = 64 * b + 32 * (jv / 8) + jv % 8;
                        for s in 0..4 {
                            let c = crumbs(v, s, in_place::<W, VNNI, T>());
                            for t in 0..T {
                                let i = t * j + (4 * kk + s) % j;
                                isum[i] = dot4::<VNNI>(isum[i], c, act(t, first + 8 * s));
                            }
                        }
                    }
                }
                Codes::Crumbs => {
                    // Dword k of a row's 16 code bytes holds values 16k..16k+16; shifted by 2s
                    // its bytes are values 16k + s + {0, 4, 8, 12}: decoded dword 4s + k of
                    // the pair, which the prepared activation keeps in the 2-bit stored order.
                    // Trits were packed so that the shifted bytes are values 16k + 4s + {0..4}
                    // instead: dword 4k + s of the pair in the plain order.
                    let pair_dwords = 16 * (unit_index / 2);
                    for kk in 0..2 {
                        let v = _mm256_loadu_si256(codes.add(32 * kk).cast());
                        let k = 2 * (unit_index % 2) + kk;
                        for s in 0..4 {
                            let c = crumbs(v, s, in_place::<W, VNNI, T>());
                            let dword = pair_dwords
                                + if W::TRITS {
                                    4 * k + s
                                } else {
                                    STORED_2BIT[4 * s + k]
                                };
                            for t in 0..T {
                                let i = t * j + (4 * kk + s) % j;
                                isum[i] = dot4::<VNNI>(isum[i], c, act(t, dword));
                            }
                        }
                    }
                }
                Codes::Fives => {
                    // Q5_0 / Q5_1: the nibbles as Q4's, each ORed with its fifth bits, bit k
                    // of the planes after them for dword k, moved to bit 4.
                    let planes = _mm256_loadu_si256(codes.add(32 * 4).cast());
                    for k in 0..4 {
                        let v = _mm256_loadu_si256(codes.add(32 * k).cast());
                        let lo = _mm256_or_si256(_mm256_and_si256(v, nibble), fifth(planes, k));
                        let hi = _mm256_or_si256(
                            _mm256_and_si256(_mm256_srli_epi16::<4>(v), nibble),
                            fifth(planes, k + 4),
                        );
                        for t in 0..T {
                            let i = t * j + (2 * k) % j;
                            isum[i] = dot4::<VNNI>(isum[i], lo, act(t, 8 * unit_index + k));
                            let i = t * j + (2 * k + 1) % j;
                            isum[i] = dot4::<VNNI>(isum[i], hi, act(t, 8 * unit_index + k + 4));
                        }
                    }
                }
                // TQ1_0 is packed as TQ2_0 here (`packed_layout::Spec::of_kind`).
                Codes::Base3 => unreachable!("no AVX2 packed kernel reads base-3 codes"),
                Codes::Bits => {
                    for k in 0..8 {
                        let bits = codes.add(4 * k).cast::<i32>().read_unaligned();
                        let v = bits_to_bytes(i32::from_le(bits));
                        for t in 0..T {
                            let i = t * j + k % j;
                            isum[i] = dot4::<VNNI>(isum[i], v, act(t, 8 * unit_index + k));
                        }
                    }
                }
            }
            if (u + 1) % W::PARTNER.units != 0 {
                continue;
            }
            let scale_index = unit_index / W::PARTNER.units;
            for t in 0..T {
                let s = &isum[t * j..t * j + j];
                let sum = match j {
                    1 => s[0],
                    2 => _mm256_add_epi32(s[0], s[1]),
                    // One token's 2-bit codes with VNNI: chain s summed the codes in place, 4ˢ ×
                    // theirs (see `crumbs`), a multiple of 4ˢ that the shift divides exactly.
                    _ if in_place::<W, VNNI, T>() => _mm256_add_epi32(
                        _mm256_add_epi32(s[0], _mm256_srai_epi32::<2>(s[1])),
                        _mm256_add_epi32(
                            _mm256_srai_epi32::<4>(s[2]),
                            _mm256_srai_epi32::<6>(s[3]),
                        ),
                    ),
                    _ => {
                        _mm256_add_epi32(_mm256_add_epi32(s[0], s[1]), _mm256_add_epi32(s[2], s[3]))
                    }
                };
                let fd = read_f32(tok[t].add(l.scales_at + 4 * scale_index));
                blk[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sum), _mm256_set1_ps(fd), blk[t]);
            }
            isum = [_mm256_setzero_si256(); 4];
        }
        let scale_at = if ahead > 0 {
            group.add(2 * GROUP * b)
        } else {
            blk_at
        };
        let d = _mm256_cvtph_ps(_mm_loadu_si128(scale_at.cast()));
        for t in 0..T {
            acc[t] = _mm256_fmadd_ps(blk[t], d, acc[t]);
        }
        if W::MIN_AT.is_some() {
            let m = _mm256_cvtph_ps(_mm_loadu_si128(blk_at.add(2 * GROUP).cast()));
            for t in 0..T {
                let s = read_f32(tok[t].add(l.sums_at + 4 * b));
                acc[t] = _mm256_fmadd_ps(m, _mm256_set1_ps(s), acc[t]);
            }
        }
    }
    for (t, acc) in acc.iter().enumerate() {
        let mut v = [0.0f32; 8];
        _mm256_storeu_ps(v.as_mut_ptr(), *acc);
        core::ptr::copy_nonoverlapping(v.as_ptr(), out.add(t * out_stride), n_rows);
    }
}

/// The product of `n_rows` rows (whole groups from `groups`, `group_bytes` apart) by `n_tokens`
/// prepared tokens.
///
/// # Safety
/// `groups` holds `ceil(n_rows / 8)` groups; otherwise as [`tile`].
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn run_groups<W: PackedFormat, const VNNI: bool>(
    l: &Layout,
    groups: *const u8,
    group_bytes: usize,
    n_rows: usize,
    prepared: *const u8,
    n_tokens: usize,
    out: *mut f32,
    out_stride: usize,
) {
    let mut r0 = 0;
    while r0 < n_rows {
        let rows = GROUP.min(n_rows - r0);
        let g = groups.add(r0 / GROUP * group_bytes);
        let mut t0 = 0;
        while t0 < n_tokens {
            let p = prepared.add(t0 * l.bytes);
            let o = out.add(t0 * out_stride + r0);
            t0 += if n_tokens - t0 >= 4 {
                tile::<W, VNNI, 4>(g, l, p, rows, o, out_stride);
                4
            } else if n_tokens - t0 >= 2 {
                tile::<W, VNNI, 2>(g, l, p, rows, o, out_stride);
                2
            } else {
                tile::<W, VNNI, 1>(g, l, p, rows, o, out_stride);
                1
            };
        }
        r0 += rows;
    }
}

macro_rules! entry {
    ($name:ident, $w:ty) => {
        mod $name {
            use super::*;

            #[target_feature(enable = "avx2,fma,f16c")]
            #[allow(clippy::too_many_arguments)]
            unsafe fn plain(
                l: &Layout,
                g: &[u8],
                gb: usize,
                n: usize,
                p: &[u8],
                t: usize,
                o: &mut [f32],
                s: usize,
            ) {
                run_groups::<$w, false>(l, g.as_ptr(), gb, n, p.as_ptr(), t, o.as_mut_ptr(), s)
            }

            #[target_feature(enable = "avx2,fma,f16c,avxvnni")]
            #[allow(clippy::too_many_arguments)]
            unsafe fn vnni(
                l: &Layout,
                g: &[u8],
                gb: usize,
                n: usize,
                p: &[u8],
                t: usize,
                o: &mut [f32],
                s: usize,
            ) {
                run_groups::<$w, true>(l, g.as_ptr(), gb, n, p.as_ptr(), t, o.as_mut_ptr(), s)
            }

            fn run_with<const VNNI: bool>(
                plan: &PackPlan,
                groups: &[u8],
                n_rows: usize,
                prepared: &[u8],
                n_tokens: usize,
                out: &mut [f32],
                out_stride: usize,
            ) {
                let Some((l, gb)) = check_run::<$w>(
                    plan, GROUP, groups, n_rows, prepared, n_tokens, out, out_stride,
                ) else {
                    return;
                };
                // SAFETY: registered only through `Kernels::new(Isa::Avx2 | Isa::Avx512)`, which
                // checked AVX2/FMA/F16C (and `packed` below checked AVX-VNNI for the VNNI
                // entry); the kernel reads the whole groups of `n_rows` rows and `n_tokens`
                // prepared rows and writes `n_rows` values at each `t·out_stride`, all checked.
                unsafe {
                    if VNNI {
                        vnni(&l, groups, gb, n_rows, prepared, n_tokens, out, out_stride)
                    } else {
                        plain(&l, groups, gb, n_rows, prepared, n_tokens, out, out_stride)
                    }
                }
            }

            // Q8_0 never uses its plain variant (it saturates without VNNI).
            #[allow(dead_code)]
            pub(super) const PLAIN: PackedKernel = PackedKernel {
                group_rows: GROUP,
                prepared_bytes: gemm_layout::prepared_bytes::<$w>,
                prepare: gemm_layout::prepare_row::<$w>,
                run: run_with::<false>,
            };
            pub(super) const VNNI: PackedKernel = PackedKernel {
                group_rows: GROUP,
                prepared_bytes: gemm_layout::prepared_bytes::<$w>,
                prepare: gemm_layout::prepare_row::<$w>,
                run: run_with::<true>,
            };
        }
    };
}

entry!(k_q8_0, formats::Q8_0);
entry!(k_q4_0, formats::Q4_0);
entry!(k_q4_1, formats::Q4_1);
entry!(k_q5_0, formats::Q5_0);
entry!(k_q5_1, formats::Q5_1);
entry!(k_q1_0, formats::Q1_0);
entry!(k_q2_0, formats::Q2<1>);
entry!(k_pq2_0, formats::Q2<2>);
entry!(k_tq2_0, formats::TQ2_0);
entry!(k_ptq1_0, formats::PTQ1_0);

/// The AVX2 packed kernel of a format (the AVX-VNNI variant where the CPU has it; Q8_0 only
/// with it).
pub(crate) fn packed(kind: FormatKind) -> Option<PackedKernel> {
    let vnni = std::arch::is_x86_feature_detected!("avxvnni");
    let pick =
        |plain: PackedKernel, with_vnni: PackedKernel| Some(if vnni { with_vnni } else { plain });
    match kind {
        FormatKind::Q8_0 => vnni.then_some(k_q8_0::VNNI),
        FormatKind::Q4_0 => pick(k_q4_0::PLAIN, k_q4_0::VNNI),
        FormatKind::Q4_1 => pick(k_q4_1::PLAIN, k_q4_1::VNNI),
        FormatKind::Q5_0 => pick(k_q5_0::PLAIN, k_q5_0::VNNI),
        FormatKind::Q5_1 => pick(k_q5_1::PLAIN, k_q5_1::VNNI),
        FormatKind::Q1_0 => pick(k_q1_0::PLAIN, k_q1_0::VNNI),
        FormatKind::Q2_0 => pick(k_q2_0::PLAIN, k_q2_0::VNNI),
        FormatKind::PQ2_0 | FormatKind::Q2_0G128Legacy => pick(k_pq2_0::PLAIN, k_pq2_0::VNNI),
        // TQ1_0 is packed as TQ2_0 (`packed_layout`).
        FormatKind::TQ2_0 | FormatKind::TQ1_0 => pick(k_tq2_0::PLAIN, k_tq2_0::VNNI),
        FormatKind::PTQ1_0 => pick(k_ptq1_0::PLAIN, k_ptq1_0::VNNI),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format;
    use crate::kernels::test_data::{
        assert_matches_scalar_dot, random_activations, random_rows, xorshift,
    };
    use crate::kernels::{Isa, Packed};

    /// The plain (`vpmaddubsw`) variants, which the table skips on a CPU with AVX-VNNI, against
    /// the scalar dot on a partial group and every token-tile remainder; and bit-identical to
    /// the VNNI variants where the CPU has them (both sum exact integers in the same order).
    #[test]
    fn plain_variants_match_the_scalar_dot_and_the_vnni_ones() {
        if !Isa::Avx2.available() {
            eprintln!("no AVX2: not tested");
            return;
        }
        let vnni = std::arch::is_x86_feature_detected!("avxvnni");
        let mut next = xorshift(0x0bad_5eed_1234_5678);
        let variants = [
            (FormatKind::Q4_0, k_q4_0::PLAIN, k_q4_0::VNNI),
            (FormatKind::Q4_1, k_q4_1::PLAIN, k_q4_1::VNNI),
            (FormatKind::Q5_0, k_q5_0::PLAIN, k_q5_0::VNNI),
            (FormatKind::Q5_1, k_q5_1::PLAIN, k_q5_1::VNNI),
            (FormatKind::Q1_0, k_q1_0::PLAIN, k_q1_0::VNNI),
            (FormatKind::Q2_0, k_q2_0::PLAIN, k_q2_0::VNNI),
            (FormatKind::PQ2_0, k_pq2_0::PLAIN, k_pq2_0::VNNI),
            (FormatKind::TQ2_0, k_tq2_0::PLAIN, k_tq2_0::VNNI),
            (FormatKind::TQ1_0, k_tq2_0::PLAIN, k_tq2_0::VNNI),
            (FormatKind::PTQ1_0, k_ptq1_0::PLAIN, k_ptq1_0::VNNI),
        ];
        for (kind, plain, with_vnni) in variants {
            let f = format(kind);
            let partner = format(f.partner);
            let (n, rows, tokens) = (3 * f.block_elems.max(64), 13, 7);
            let weights = random_rows(f, n, rows, &mut next);
            let acts = random_activations(partner, n, tokens, &mut next);
            let plan = PackPlan::new(kind, Isa::Avx2, GROUP, n, rows).unwrap();
            let packed = Packed::pack(plan, &weights);
            let stride = (plain.prepared_bytes)(n).unwrap();
            let mut prepared = vec![0u8; tokens * stride];
            for (a, dst) in acts.iter().zip(prepared.chunks_exact_mut(stride)) {
                (plain.prepare)(n, a, dst);
            }
            let mut out = vec![f32::NAN; tokens * rows];
            (plain.run)(
                &plan,
                packed.storage(),
                rows,
                &prepared,
                tokens,
                &mut out,
                rows,
            );
            assert_matches_scalar_dot(f, partner, &weights, &acts, &out, rows, "plain");
            if vnni {
                let mut other = vec![f32::NAN; tokens * rows];
                (with_vnni.run)(
                    &plan,
                    packed.storage(),
                    rows,
                    &prepared,
                    tokens,
                    &mut other,
                    rows,
                );
                assert_eq!(out, other, "{kind:?}: plain vs VNNI variant");
            } else {
                eprintln!("no AVX-VNNI: {kind:?} VNNI variant not compared");
            }
        }
    }
}
