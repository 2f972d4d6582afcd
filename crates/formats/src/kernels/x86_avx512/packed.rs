//! The matrix-matrix (and matrix-vector) kernel on packed weights (`packed_layout`), AVX-512
//! VNNI: 16 rows a group, one row per dword lane, codes read straight from the packed copy (a
//! shift + and for nibbles, a mask expansion for bits) into one `vpdpbusd` per 4 values × 16
//! rows × token. The float work is the plain kernel's (`gemm::tile`) in the same order, so a
//! row's result does not depend on how many tokens share the call, and matches the plain kernel.

use core::arch::x86_64::*;

use super::lanes_left;

use crate::kernels::gemm_layout::{self, formats, Layout, STORED_2BIT, UNIT};
use crate::kernels::packed_layout::{
    base3_dword, base3_trits, block_header, check_run, prefetch_ahead, scales_ahead, unit_bytes,
    Codes, PackPlan, PackedFormat, BASE3_VECTORS,
};
use crate::kernels::PackedKernel;
use crate::FormatKind;

/// Rows per group: the dword lanes of a 512-bit vector.
pub(crate) const GROUP: usize = 16;

/// Integer accumulators per token: several independent `vpdpbusd` chains when few tokens share
/// the call (their sums are exact, so splitting them changes no result).
const fn chains(t: usize) -> usize {
    if t >= 4 {
        1
    } else {
        4 / t
    }
}

/// Integer accumulators a tile keeps at most (`chains` per token).
const ISUMS: usize = 16;

/// Chains per token of `W`'s tiles of `T` tokens: `chains(T)`, but two in TQ2_0's [`TILE`]-token
/// tiles. 8 chains leave `vpdpbusd` short of its rate by its latency (7.4 vs 8.2 G/s a core on
/// this host's AVX-512 VNNI, 8 vs 16 chains, memory-broadcast operands); the 16 fit in registers
/// beside the 8 float sums because TQ2_0 has one activation scale a block (Q8_K), so no float sum
/// is held across the units (see `bias` in [`tile`]). TQ1_0's base-3 tiles measured 20 % slower
/// so (the compiler spills around their trit loop): one chain, as the other formats.
const fn chains_of<W: PackedFormat, const T: usize>() -> usize {
    let tq2_0 = matches!(W::CODES, Codes::Crumbs) && !W::PERMUTED && !W::TRITS;
    if T == TILE && tq2_0 {
        2
    } else {
        chains(T)
    }
}

/// Whether one token's ternary 2-bit codes (TQ2_0, PTQ1_0) are summed in place (`crumbs`): a
/// chain per code. Q2_0 / PQ2_0 measured no faster so: unchanged.
const fn in_place<W: PackedFormat, const T: usize>() -> bool {
    chains_of::<W, T>() == 4 && matches!(W::CODES, Codes::Crumbs) && (W::TRITS || !W::PERMUTED)
}

/// Code `s` (bits 2s..2s+2) of each byte of `v`: `in_place` (see [`in_place`]: one token, in
/// decode), each of the four codes has a chain of its own (`chains`), so it is left in
/// place, 4ˢ times the code, and the chain's sum is divided back once per unit instead of
/// shifting every vector (`vpdpbusd` sums exact integers, at most 3 · 4³ · 128 · 4 a call).
/// Otherwise the code shifted down.
///
/// # Safety
/// AVX-512 F/BW enabled.
#[inline(always)]
unsafe fn crumbs(v: __m512i, s: usize, in_place: bool) -> __m512i {
    if in_place {
        _mm512_and_si512(v, _mm512_set1_epi8((3u8 << (2 * s)) as i8))
    } else {
        let x = match s {
            0 => v,
            1 => _mm512_srli_epi16::<2>(v),
            2 => _mm512_srli_epi16::<4>(v),
            _ => _mm512_srli_epi16::<6>(v),
        };
        _mm512_and_si512(x, _mm512_set1_epi8(3))
    }
}

/// Each byte of `y` times 3, mod 256: the next trit of a base-3 byte brought to the top. Two
/// byte adds, written as such: from intrinsics LLVM folds the chain yₙ = y₀·3ⁿ into byte
/// multiplies (`vpmullw` on both halves, shifts and masks), several times the cost.
///
/// # Safety
/// AVX-512 F/BW available.
#[target_feature(enable = "avx512f,avx512bw")]
#[inline]
unsafe fn times3(y: __m512i) -> __m512i {
    let (out, _twice): (__m512i, __m512i);
    // SAFETY: register-only byte adds of features this function enables.
    unsafe {
        core::arch::asm!(
            "vpaddb {t}, {y}, {y}",
            "vpaddb {o}, {t}, {y}",
            y = in(zmm_reg) y,
            t = out(zmm_reg) _twice,
            o = lateout(zmm_reg) out,
            options(pure, nomem, nostack, preserves_flags),
        );
    }
    out
}

/// One token × one base-3 code vector (`N` trits a byte, trit n against activation `a(n)`):
/// Σ a·yₙ into `lin[n % 2]`, Σ a·yₙ₊₁ into `lin[2 + n % 2]` (the linear form of the tile).
///
/// # Safety
/// AVX-512 F/BW + VNNI enabled.
#[inline(always)]
unsafe fn base3_linear<const N: usize>(
    mut y: __m512i,
    a: impl Fn(usize) -> __m512i,
    lin: &mut [__m512i; 4],
) {
    for n in 0..N {
        let a = a(n);
        lin[n % 2] = _mm512_dpbusd_epi32(lin[n % 2], y, a);
        y = times3(y);
        lin[2 + n % 2] = _mm512_dpbusd_epi32(lin[2 + n % 2], y, a);
    }
}

/// `T` tokens × one base-3 code vector (`N` trits a byte): each trit decoded once, against
/// token t's activation `a(t, n)` into chain `t·j + n % j` of `isum` (`T · j` ≤ `ISUMS`).
///
/// # Safety
/// AVX-512 F/BW + VNNI enabled.
#[inline(always)]
unsafe fn base3_decoded<const N: usize, const T: usize>(
    mut y: __m512i,
    a: impl Fn(usize, usize) -> __m512i,
    isum: &mut [__m512i; ISUMS],
    j: usize,
) {
    for n in 0..N {
        let c = top_trit(y);
        for t in 0..T {
            let i = t * j + n % j;
            isum[i] = _mm512_dpbusd_epi32(isum[i], c, a(t, n));
        }
        if n + 1 < N {
            y = times3(y);
        }
    }
}

/// The top trit ⌊3y/256⌋ of each byte of `y`: [y ≥ 86] + [y ≥ 171].
///
/// # Safety
/// AVX-512 F/BW enabled.
#[inline(always)]
unsafe fn top_trit(y: __m512i) -> __m512i {
    let one = _mm512_maskz_mov_epi8(
        _mm512_cmpge_epu8_mask(y, _mm512_set1_epi8(86)),
        _mm512_set1_epi8(1),
    );
    _mm512_mask_mov_epi8(
        one,
        _mm512_cmpge_epu8_mask(y, _mm512_set1_epi8(171u8 as i8)),
        _mm512_set1_epi8(2),
    )
}

/// Q5's planes (`packed_layout`) shifted in 16-bit lanes so that bit 4 of each byte is its own
/// bit `k`: dword k's fifth bits (the other bits are masked off by the caller).
///
/// # Safety
/// AVX-512 F/BW enabled.
#[inline(always)]
unsafe fn fifth_shifted(planes: __m512i, k: usize) -> __m512i {
    match k {
        0 => _mm512_slli_epi16::<4>(planes),
        1 => _mm512_slli_epi16::<3>(planes),
        2 => _mm512_slli_epi16::<2>(planes),
        3 => _mm512_slli_epi16::<1>(planes),
        4 => planes,
        5 => _mm512_srli_epi16::<1>(planes),
        6 => _mm512_srli_epi16::<2>(planes),
        _ => _mm512_srli_epi16::<3>(planes),
    }
}

/// `T` tokens × one packed group of 16 rows; results of the first `n_rows` rows go to
/// `out[t·out_stride + r]`.
///
/// # Safety
/// `group` points at one whole packed group of rows of `l.n_values` values; `prepared` holds
/// `T` prepared tokens `stride` bytes apart; `out` takes `n_rows` values at each
/// `t·out_stride`; AVX-512 F/BW/VL/DQ + VNNI + F16C enabled.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn tile<W: PackedFormat, const T: usize>(
    group: *const u8,
    l: &Layout,
    prepared: *const u8,
    stride: usize,
    n_rows: usize,
    out: *mut f32,
    out_stride: usize,
) {
    let j = chains_of::<W, T>();
    let header = block_header::<W>(GROUP);
    let unit = unit_bytes(W::CODES, GROUP);
    let block_stride = header + W::UNITS_PER_BLOCK * unit;
    let n_blocks = l.n_values / (W::UNITS_PER_BLOCK * UNIT);
    let tok: [*const u8; T] = core::array::from_fn(|t| prepared.add(t * stride));
    let nibble = _mm512_set1_epi8(0x0F);
    let one = _mm512_set1_epi8(1);
    let mut acc = [_mm512_setzero_ps(); T];
    // Trits keep the group's scales ahead of its codes (`packed_layout`).
    let ahead = scales_ahead(W::TRITS, GROUP, n_blocks);
    for b in 0..n_blocks {
        let blk_at = group.add(ahead + b * block_stride);
        // The block's stream is asked for a unit at a time, spread through the block (a
        // TQ2_0 block is 17 lines on AVX-512: asked at once they measured 12-16 % slower).
        prefetch_ahead(blk_at, header);
        // Token t's sum of the block, from its bias on: the bias is added at the block's first
        // activation scale (the same operations as starting from it), so with one scale a block
        // (Q8_K) no float sum is live across the units, only the integer chains.
        let bias =
            |t: usize| _mm512_set1_ps(tok[t].add(l.bias_at + 4 * b).cast::<f32>().read_unaligned());
        let mut blk = [_mm512_setzero_ps(); T];
        // Exact integer sums over each activation scale's units (one unit for Q8_0 / Q8_1, the
        // whole block for Q8_K), as the plain kernel.
        let mut isum = [_mm512_setzero_si512(); ISUMS];
        for u in 0..W::UNITS_PER_BLOCK {
            let unit_index = b * W::UNITS_PER_BLOCK + u;
            let codes = blk_at.add(header + u * unit);
            prefetch_ahead(codes, unit);
            // Activation dword `dword` of token `t` (8 per unit), broadcast.
            let act = |t: usize, dword: usize| {
                _mm512_set1_epi32(
                    tok[t]
                        .add(l.codes_at + 4 * dword)
                        .cast::<i32>()
                        .read_unaligned(),
                )
            };
            match W::CODES {
                Codes::Bytes { .. } => {
                    for k in 0..8 {
                        let v = _mm512_loadu_si512(codes.add(64 * k).cast());
                        for t in 0..T {
                            let i = t * j + k % j;
                            isum[i] = _mm512_dpbusd_epi32(isum[i], v, act(t, 8 * unit_index + k));
                        }
                    }
                }
                Codes::Nibbles => {
                    for k in 0..4 {
                        let v = _mm512_loadu_si512(codes.add(64 * k).cast());
                        let lo = _mm512_and_si512(v, nibble);
                        let hi = _mm512_and_si512(_mm512_srli_epi16::<4>(v), nibble);
                        for t in 0..T {
                            let i = t * j + (2 * k) % j;
                            isum[i] = _mm512_dpbusd_epi32(isum[i], lo, act(t, 8 * unit_index + k));
                            let i = t * j + (2 * k + 1) % j;
                            isum[i] =
                                _mm512_dpbusd_epi32(isum[i], hi, act(t, 8 * unit_index + k + 4));
                        }
                    }
                }
                Codes::Crumbs if !W::PERMUTED && !W::TRITS => {
                    // TQ2_0: row dword `jv` of the block's codes (byte j = 32h + m holds values
                    // 128h + 32l + m at bits 2l) shifted by 2l is block dword 32h + 8l + jv % 8.
                    for kk in 0..2 {
                        let v = _mm512_loadu_si512(codes.add(64 * kk).cast());
                        let jv = 2 * u + kk;
                        let first = 64 * b + 32 * (jv / 8) + jv % 8;
                        for s in 0..4 {
                            let c = crumbs(v, s, in_place::<W, T>());
                            for t in 0..T {
                                let i = t * j + (4 * kk + s) % j;
                                isum[i] = _mm512_dpbusd_epi32(isum[i], c, act(t, first + 8 * s));
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
                        let v = _mm512_loadu_si512(codes.add(64 * kk).cast());
                        let k = 2 * (unit_index % 2) + kk;
                        for s in 0..4 {
                            let c = crumbs(v, s, in_place::<W, T>());
                            let dword = pair_dwords
                                + if W::TRITS {
                                    4 * k + s
                                } else {
                                    STORED_2BIT[4 * s + k]
                                };
                            for t in 0..T {
                                let i = t * j + (4 * kk + s) % j;
                                isum[i] = _mm512_dpbusd_epi32(isum[i], c, act(t, dword));
                            }
                        }
                    }
                }
                Codes::Fives => {
                    // Q5_0 / Q5_1: the nibbles as Q4's, each joined (one ternary logic
                    // operation: nibble | x & 16) with its fifth bits, bit k of the planes after
                    // them for dword k, shifted to bit 4.
                    let planes = _mm512_loadu_si512(codes.add(64 * 4).cast());
                    let sixteen = _mm512_set1_epi8(0x10);
                    let join = |n: __m512i, k: usize| {
                        _mm512_ternarylogic_epi32::<0xF8>(n, fifth_shifted(planes, k), sixteen)
                    };
                    for k in 0..4 {
                        let v = _mm512_loadu_si512(codes.add(64 * k).cast());
                        let lo = join(_mm512_and_si512(v, nibble), k);
                        let hi = join(_mm512_and_si512(_mm512_srli_epi16::<4>(v), nibble), k + 4);
                        for t in 0..T {
                            let i = t * j + (2 * k) % j;
                            isum[i] = _mm512_dpbusd_epi32(isum[i], lo, act(t, 8 * unit_index + k));
                            let i = t * j + (2 * k + 1) % j;
                            isum[i] =
                                _mm512_dpbusd_epi32(isum[i], hi, act(t, 8 * unit_index + k + 4));
                        }
                    }
                }
                Codes::Base3 if u == 0 => {
                    // TQ1_0's base-3 bytes, the whole block at its first unit (one activation
                    // scale: Q8_K). With yₙ = byte·3ⁿ mod 256, trit n is ⌊3yₙ/256⌋ and
                    // 3yₙ − yₙ₊₁ = 256·trit. One token (decode): Σ a·trit = (3·Σ a·yₙ −
                    // Σ a·yₙ₊₁) / 256, exact (|3·Σ a·yₙ| < 3 · 256 · 255 · 128 a block), two
                    // `vpdpbusd` per trit and no decode. More tokens: each trit decoded once
                    // (`top_trit`) for all of them, one `vpdpbusd` per trit and token.
                    // The last vector (`qh`) has four trits a byte, the others five.
                    let first = 64 * b;
                    let load = |k: usize| _mm512_loadu_si512(blk_at.add(64 * k).cast());
                    let last = BASE3_VECTORS - 1;
                    const _: () = assert!(base3_trits(0) == 5 && base3_trits(12) == 4);
                    if T == 1 {
                        let mut lin = [_mm512_setzero_si512(); 4];
                        for k in 0..last {
                            let a = |n| act(0, first + base3_dword(k, n));
                            base3_linear::<5>(load(k), a, &mut lin);
                        }
                        let a = |n| act(0, first + base3_dword(last, n));
                        base3_linear::<4>(load(last), a, &mut lin);
                        let s1 = _mm512_add_epi32(lin[0], lin[1]);
                        let s2 = _mm512_add_epi32(lin[2], lin[3]);
                        let s1x3 = _mm512_add_epi32(s1, _mm512_add_epi32(s1, s1));
                        isum[0] = _mm512_srai_epi32::<8>(_mm512_sub_epi32(s1x3, s2));
                    } else {
                        for k in 0..last {
                            let a = |t, n| act(t, first + base3_dword(k, n));
                            base3_decoded::<5, T>(load(k), a, &mut isum, j);
                        }
                        let a = |t, n| act(t, first + base3_dword(last, n));
                        base3_decoded::<4, T>(load(last), a, &mut isum, j);
                    }
                }
                Codes::Base3 => {}
                Codes::Bits => {
                    for k in 0..8 {
                        let bits = codes.add(8 * k).cast::<u64>().read_unaligned();
                        let v = _mm512_maskz_mov_epi8(u64::from_le(bits), one);
                        for t in 0..T {
                            let i = t * j + k % j;
                            isum[i] = _mm512_dpbusd_epi32(isum[i], v, act(t, 8 * unit_index + k));
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
                    2 => _mm512_add_epi32(s[0], s[1]),
                    // One token's 2-bit codes: chain s summed the codes in place, 4ˢ × theirs
                    // (see `crumbs`), a multiple of 4ˢ that the shift divides exactly.
                    _ if in_place::<W, T>() => _mm512_add_epi32(
                        _mm512_add_epi32(s[0], _mm512_srai_epi32::<2>(s[1])),
                        _mm512_add_epi32(
                            _mm512_srai_epi32::<4>(s[2]),
                            _mm512_srai_epi32::<6>(s[3]),
                        ),
                    ),
                    _ => {
                        _mm512_add_epi32(_mm512_add_epi32(s[0], s[1]), _mm512_add_epi32(s[2], s[3]))
                    }
                };
                let fd = tok[t]
                    .add(l.scales_at + 4 * scale_index)
                    .cast::<f32>()
                    .read_unaligned();
                let from = if u + 1 == W::PARTNER.units {
                    bias(t)
                } else {
                    blk[t]
                };
                blk[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sum), _mm512_set1_ps(fd), from);
            }
            isum = [_mm512_setzero_si512(); ISUMS];
        }
        let scale_at = if ahead > 0 {
            group.add(2 * GROUP * b)
        } else {
            blk_at
        };
        let d = _mm512_cvtph_ps(_mm256_loadu_si256(scale_at.cast()));
        for t in 0..T {
            acc[t] = _mm512_fmadd_ps(blk[t], d, acc[t]);
        }
        if W::MIN_AT.is_some() {
            let m = _mm512_cvtph_ps(_mm256_loadu_si256(blk_at.add(2 * GROUP).cast()));
            for t in 0..T {
                // One unit per block for the formats with a minimum (Q4_1, Q5_1).
                let s = tok[t].add(l.sums_at + 4 * b).cast::<f32>().read_unaligned();
                acc[t] = _mm512_fmadd_ps(m, _mm512_set1_ps(s), acc[t]);
            }
        }
    }
    let mask = lanes_left(n_rows);
    for (t, acc) in acc.iter().enumerate() {
        _mm512_mask_storeu_ps(out.add(t * out_stride), mask, *acc);
    }
}

/// Token tile width, as the plain kernel's.
const TILE: usize = 8;

/// The product of `n_rows` rows (whole groups from `groups`, `group_bytes` apart) by `n_tokens`
/// prepared tokens.
///
/// # Safety
/// `groups` holds `ceil(n_rows / 16)` groups; otherwise as [`tile`].
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn run_groups<W: PackedFormat>(
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
            let left = n_tokens - t0;
            let p = prepared.add(t0 * l.bytes);
            let o = out.add(t0 * out_stride + r0);
            t0 += if left >= TILE {
                tile::<W, TILE>(g, l, p, l.bytes, rows, o, out_stride);
                TILE
            } else if left >= 4 {
                tile::<W, 4>(g, l, p, l.bytes, rows, o, out_stride);
                4
            } else if left >= 2 {
                tile::<W, 2>(g, l, p, l.bytes, rows, o, out_stride);
                2
            } else {
                tile::<W, 1>(g, l, p, l.bytes, rows, o, out_stride);
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

            #[target_feature(
                enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq,avx512vnni"
            )]
            #[allow(clippy::too_many_arguments)]
            unsafe fn run_unchecked(
                l: &Layout,
                groups: &[u8],
                group_bytes: usize,
                n_rows: usize,
                prepared: &[u8],
                n_tokens: usize,
                out: &mut [f32],
                out_stride: usize,
            ) {
                run_groups::<$w>(
                    l,
                    groups.as_ptr(),
                    group_bytes,
                    n_rows,
                    prepared.as_ptr(),
                    n_tokens,
                    out.as_mut_ptr(),
                    out_stride,
                )
            }

            fn run(
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
                // SAFETY: registered only for a tier that checked AVX-512 + VNNI; the kernel
                // reads the whole groups of `n_rows` rows and `n_tokens` prepared rows and
                // writes `n_rows` values at each `t·out_stride`, all just checked.
                unsafe {
                    run_unchecked(&l, groups, gb, n_rows, prepared, n_tokens, out, out_stride)
                }
            }

            pub(crate) const KERNEL: PackedKernel = PackedKernel {
                group_rows: GROUP,
                prepared_bytes: gemm_layout::prepared_bytes::<$w>,
                prepare: gemm_layout::prepare_row::<$w>,
                run,
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
entry!(k_tq1_0, formats::TQ1_0);

/// Whether this tier's packed kernels run here (with VNNI, as the plain matrix-matrix
/// kernels), and so read TQ1_0 in its base-3 bytes (`packed_layout::Spec::of_kind`; without
/// them the tier runs AVX2's, on TQ1_0 converted to TQ2_0).
pub(crate) fn takes_base3() -> bool {
    std::arch::is_x86_feature_detected!("avx512vnni")
}

/// The packed kernel of a format (with VNNI, as the plain matrix-matrix kernels).
pub(crate) fn packed(kind: FormatKind) -> Option<PackedKernel> {
    if !takes_base3() {
        return None;
    }
    Some(match kind {
        FormatKind::Q8_0 => k_q8_0::KERNEL,
        FormatKind::Q4_0 => k_q4_0::KERNEL,
        FormatKind::Q4_1 => k_q4_1::KERNEL,
        FormatKind::Q5_0 => k_q5_0::KERNEL,
        FormatKind::Q5_1 => k_q5_1::KERNEL,
        FormatKind::Q1_0 => k_q1_0::KERNEL,
        FormatKind::Q2_0 => k_q2_0::KERNEL,
        FormatKind::PQ2_0 | FormatKind::Q2_0G128Legacy => k_pq2_0::KERNEL,
        FormatKind::TQ2_0 => k_tq2_0::KERNEL,
        // TQ1_0 in its own base-3 bytes (`packed_layout`).
        FormatKind::TQ1_0 => k_tq1_0::KERNEL,
        FormatKind::PTQ1_0 => k_ptq1_0::KERNEL,
        _ => return None,
    })
}
