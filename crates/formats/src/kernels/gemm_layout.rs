//! What the matrix-matrix kernels of every tier share: how a weight format is seen (a value is
//! `d·(FACTOR·code − OFFSET)` (+ `m`), codes unsigned, 64 at a time), and the prepared form of an
//! activation row — its codes reordered to the weights' stored dword order, FACTOR·scale per
//! activation scale and the offset bias per weight block — built once per token per product.

/// Values per unit: one Q8_0 / Q8_1 activation block, an eighth of a Q8_K block.
pub(crate) const UNIT: usize = 32;

/// How an activation partner format lays out one block.
#[derive(Clone, Copy)]
pub(crate) struct Partner {
    pub bytes: usize,
    /// Units per activation scale (1 for Q8_0 / Q8_1, 8 for Q8_K).
    pub units: usize,
    pub codes_at: usize,
    /// The scale is an f32 (Q8_K) rather than an f16.
    pub f32_scale: bool,
    /// Offset of the f16 `s = d·Σq` (Q8_1).
    pub sum_at: Option<usize>,
    /// Offset of the i16 sums of each 16 codes (Q8_K).
    pub bsums_at: Option<usize>,
}

pub(crate) const Q8_0: Partner = Partner {
    bytes: 34,
    units: 1,
    codes_at: 2,
    f32_scale: false,
    sum_at: None,
    bsums_at: None,
};
pub(crate) const Q8_1: Partner = Partner {
    bytes: 36,
    units: 1,
    codes_at: 4,
    f32_scale: false,
    sum_at: Some(2),
    bsums_at: None,
};
pub(crate) const Q8_K: Partner = Partner {
    bytes: 292,
    units: 8,
    codes_at: 4,
    f32_scale: true,
    sum_at: None,
    bsums_at: Some(260),
};

/// A weight format as the matrix-matrix kernels see it (each tier adds its own decoder).
pub(crate) trait GemmFormat {
    const BLOCK_BYTES: usize;
    /// 32-value units per weight block (a multiple of the partner's units per scale).
    const UNITS_PER_BLOCK: usize;
    /// Offset of the block's f16 scale `d`.
    const SCALE_AT: usize = 0;
    /// Offset of the block's f16 minimum `m` (Q4_1, Q5_1; the K-quants' `dmin`).
    const MIN_AT: Option<usize> = None;
    /// A weight value is `d·(FACTOR·code − OFFSET)` (+ `m`), codes unsigned.
    const FACTOR: f32 = 1.0;
    const OFFSET: f32 = 0.0;
    /// Whether a pair's codes come out in the 2-bit order: byte i of 128-bit lane l ↔ value
    /// 4i + l of the 64 (the activation is permuted the same way).
    const PERMUTED: bool = false;
    const PARTNER: Partner;
    /// Values per weight sub-block whose activation code sums the kernel needs (the K-quants'
    /// minimums and code offsets), taken from the partner's `bsums`; 0 for none.
    const SUB_VALUES: usize = 0;
}

/// Stored order of a pair's 16 dwords: unit 0's eight, then unit 1's. In the 2-bit order dword
/// 4l + L sums values 16L + l + {0, 4, 8, 12}, which lie in unit L / 2.
const NATURAL: [u32; 16] = [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15];
const BY_UNIT_2BIT: [u32; 16] = [0, 1, 4, 5, 8, 9, 12, 13, 2, 3, 6, 7, 10, 11, 14, 15];

/// Where decoded dword `d` of a pair sits in the 2-bit stored order (the inverse of
/// `BY_UNIT_2BIT`): the packed 2-bit kernels read the activation dwords by it.
pub(crate) const STORED_2BIT: [usize; 16] = {
    let mut inv = [0usize; 16];
    let mut i = 0;
    while i < 16 {
        inv[BY_UNIT_2BIT[i] as usize] = i;
        i += 1;
    }
    inv
};

/// Dword `i` of a stored pair is dword `order()[i]` of the decoded pair.
pub(crate) fn order<F: GemmFormat>() -> &'static [u32; 16] {
    if F::PERMUTED {
        &BY_UNIT_2BIT
    } else {
        &NATURAL
    }
}

/// Where each part of one token's prepared activation lives (byte offsets).
#[derive(Clone, Copy)]
pub(crate) struct Layout {
    pub n_values: usize,
    /// FACTOR · d_a per activation scale, f32.
    pub scales_at: usize,
    /// −OFFSET · Σ d_a·Σq per weight block, f32.
    pub bias_at: usize,
    /// s_a per unit (formats with a minimum and a partner that stores it), f32.
    pub sums_at: usize,
    /// Σq per weight sub-block (`SUB_VALUES`), i16, paired per dword.
    pub sub_sums_at: usize,
    pub codes_at: usize,
    pub bytes: usize,
}

/// The prepared layout for rows of `n_values`, or `None` when the kernel does not take them
/// (not whole weight blocks, or not whole 64-value pairs).
pub(crate) fn layout<F: GemmFormat>(n_values: usize) -> Option<Layout> {
    let block_values = F::UNITS_PER_BLOCK * UNIT;
    if n_values == 0 || !n_values.is_multiple_of(block_values) || !n_values.is_multiple_of(64) {
        return None;
    }
    let units = n_values / UNIT;
    let scales_at = 0;
    let bias_at = scales_at + 4 * (units / F::PARTNER.units);
    let sums_at = bias_at + 4 * (n_values / block_values);
    let sub_sums_at = sums_at
        + if F::MIN_AT.is_some() && F::PARTNER.sum_at.is_some() {
            4 * units
        } else {
            0
        };
    let codes_at = sub_sums_at
        + n_values
            .checked_div(F::SUB_VALUES)
            .map_or(0, |n_sub| (2 * n_sub).next_multiple_of(4));
    Some(Layout {
        n_values,
        scales_at,
        bias_at,
        sums_at,
        sub_sums_at,
        codes_at,
        bytes: (codes_at + n_values).next_multiple_of(64),
    })
}

fn f16_at(b: &[u8], at: usize) -> f32 {
    half::f16::from_le_bytes([b[at], b[at + 1]]).to_f32()
}

fn put_f32(dst: &mut [u8], at: usize, v: f32) {
    dst[at..at + 4].copy_from_slice(&v.to_le_bytes());
}

/// One token's partner-format activation row (`act`) → its prepared form in `dst`
/// (`l.bytes` bytes). Panics when either is shorter than the layout says (a caller's bug).
pub(crate) fn prepare<F: GemmFormat>(l: &Layout, act: &[u8], dst: &mut [u8]) {
    let partner = F::PARTNER;
    let units = l.n_values / UNIT;
    let values_per_scale = UNIT * partner.units;
    let mut block_bias = 0.0f32;
    for s in 0..units / partner.units {
        let block = &act[s * partner.bytes..(s + 1) * partner.bytes];
        let d = if partner.f32_scale {
            f32::from_le_bytes([block[0], block[1], block[2], block[3]])
        } else {
            f16_at(block, 0)
        };
        let q = &block[partner.codes_at..partner.codes_at + values_per_scale];
        let sum: i32 = q.iter().map(|&c| i32::from(c as i8)).sum();
        put_f32(dst, l.scales_at + 4 * s, F::FACTOR * d);
        block_bias -= F::OFFSET * (d * sum as f32);
        let first_unit = s * partner.units;
        if (first_unit + partner.units).is_multiple_of(F::UNITS_PER_BLOCK) {
            put_f32(
                dst,
                l.bias_at + 4 * (first_unit / F::UNITS_PER_BLOCK),
                block_bias,
            );
            block_bias = 0.0;
        }
        if let Some(at) = partner.sum_at {
            put_f32(dst, l.sums_at + 4 * s, f16_at(block, at));
        }
        if let (Some(at), true) = (partner.bsums_at, F::SUB_VALUES > 0) {
            // Each sub-block sums SUB_VALUES / 16 of the partner's 16-code sums; they fit i16
            // (at most 32 codes of magnitude ≤ 128).
            let per_sub = F::SUB_VALUES / 16;
            let first_sub = s * values_per_scale / F::SUB_VALUES;
            for j in 0..values_per_scale / F::SUB_VALUES {
                let sum = (0..per_sub).fold(0i16, |sum, k| {
                    let b = at + 2 * (j * per_sub + k);
                    sum.wrapping_add(i16::from_le_bytes([block[b], block[b + 1]]))
                });
                let to = l.sub_sums_at + 2 * (first_sub + j);
                dst[to..to + 2].copy_from_slice(&sum.to_le_bytes());
            }
        }
    }
    // Codes, a pair (64 values) at a time, in the weights' stored dword order.
    let ord = order::<F>();
    for p in 0..units / 2 {
        let mut v = [0u8; 64];
        for (u, half) in v.chunks_exact_mut(UNIT).enumerate() {
            let unit = 2 * p + u;
            let block = &act[unit / partner.units * partner.bytes..];
            let at = partner.codes_at + unit % partner.units * UNIT;
            half.copy_from_slice(&block[at..at + UNIT]);
        }
        if F::PERMUTED {
            // Byte i of lane l ← value 4i + l.
            let natural = v;
            for (j, b) in v.iter_mut().enumerate() {
                let (lane, i) = (j / 16, j % 16);
                *b = natural[4 * i + lane];
            }
        }
        let out = &mut dst[l.codes_at + 64 * p..l.codes_at + 64 * (p + 1)];
        for (i, &d) in ord.iter().enumerate() {
            let d = d as usize;
            out[4 * i..4 * i + 4].copy_from_slice(&v[4 * d..4 * d + 4]);
        }
    }
}

/// The formats with matrix-matrix kernels, as [`GemmFormat`]s (the tiers add their decoders):
/// block sizes and the offsets of `d` (and `m` / `dmin`) from the block structs, what differs
/// from the trait's defaults (d at 0, no minimum, value `d·code`, stored order) stated.
pub(crate) mod formats {
    use core::mem::{offset_of, size_of};

    use super::{GemmFormat, Partner};
    use crate::ptq1_0::BlockPTQ1_0;
    use crate::q1_0::BlockQ1_0;
    use crate::q2_0::{BlockQ2_0, BlockQ2_0G128};
    use crate::q2_k::BlockQ2_K;
    use crate::q3_k::BlockQ3_K;
    use crate::q4_0::BlockQ4_0;
    use crate::q4_1::BlockQ4_1;
    use crate::q4_k::BlockQ4_K;
    use crate::q5_0::BlockQ5_0;
    use crate::q5_1::BlockQ5_1;
    use crate::q5_k::BlockQ5_K;
    use crate::q6_k::BlockQ6_K;
    use crate::q8_0::BlockQ8_0;
    use crate::tq1_0::BlockTQ1_0;
    use crate::tq2_0::BlockTQ2_0;

    pub(crate) struct Q1_0;
    impl GemmFormat for Q1_0 {
        const BLOCK_BYTES: usize = size_of::<BlockQ1_0>();
        const UNITS_PER_BLOCK: usize = 4;
        // ±1 = 2·bit − 1.
        const FACTOR: f32 = 2.0;
        const OFFSET: f32 = 1.0;
        const PARTNER: Partner = super::Q8_0;
    }

    /// The Q2_0 codec with `PAIRS` pairs (64 values) a block: Q2_0 (1), PQ2_0 and legacy (2).
    pub(crate) struct Q2<const PAIRS: usize>;
    impl<const PAIRS: usize> GemmFormat for Q2<PAIRS> {
        const BLOCK_BYTES: usize = [size_of::<BlockQ2_0>(), size_of::<BlockQ2_0G128>()][PAIRS - 1];
        const UNITS_PER_BLOCK: usize = 2 * PAIRS;
        const OFFSET: f32 = 1.0;
        const PERMUTED: bool = true;
        const PARTNER: Partner = super::Q8_0;
    }

    pub(crate) struct TQ2_0;
    impl GemmFormat for TQ2_0 {
        const BLOCK_BYTES: usize = size_of::<BlockTQ2_0>();
        const UNITS_PER_BLOCK: usize = 8;
        const SCALE_AT: usize = offset_of!(BlockTQ2_0, d);
        const OFFSET: f32 = 1.0;
        const PARTNER: Partner = super::Q8_K;
    }

    /// TQ1_0 (packed kernels only, in its base-3 bytes on AVX-512 VNNI): TQ2_0's values and partner.
    pub(crate) struct TQ1_0;
    impl GemmFormat for TQ1_0 {
        const BLOCK_BYTES: usize = size_of::<BlockTQ1_0>();
        const UNITS_PER_BLOCK: usize = 8;
        const SCALE_AT: usize = offset_of!(BlockTQ1_0, d);
        const OFFSET: f32 = 1.0;
        const PARTNER: Partner = super::Q8_K;
    }

    /// Trits as codes 0..=2, value d·(code − 1); the scale is last.
    pub(crate) struct PTQ1_0;
    impl GemmFormat for PTQ1_0 {
        const BLOCK_BYTES: usize = size_of::<BlockPTQ1_0>();
        const UNITS_PER_BLOCK: usize = 4;
        const SCALE_AT: usize = offset_of!(BlockPTQ1_0, d);
        const OFFSET: f32 = 1.0;
        const PARTNER: Partner = super::Q8_0;
    }

    pub(crate) struct Q8_0;
    impl GemmFormat for Q8_0 {
        const BLOCK_BYTES: usize = size_of::<BlockQ8_0>();
        const UNITS_PER_BLOCK: usize = 1;
        // Signed codes become unsigned by flipping the sign bit: q + 128.
        const OFFSET: f32 = 128.0;
        const PARTNER: Partner = super::Q8_0;
    }

    pub(crate) struct Q4_0;
    impl GemmFormat for Q4_0 {
        const BLOCK_BYTES: usize = size_of::<BlockQ4_0>();
        const UNITS_PER_BLOCK: usize = 1;
        const OFFSET: f32 = 8.0;
        const PARTNER: Partner = super::Q8_0;
    }

    pub(crate) struct Q4_1;
    impl GemmFormat for Q4_1 {
        const BLOCK_BYTES: usize = size_of::<BlockQ4_1>();
        const UNITS_PER_BLOCK: usize = 1;
        const MIN_AT: Option<usize> = Some(offset_of!(BlockQ4_1, m));
        const PARTNER: Partner = super::Q8_1;
    }

    /// Five-bit codes: value d·(code − 16).
    pub(crate) struct Q5_0;
    impl GemmFormat for Q5_0 {
        const BLOCK_BYTES: usize = size_of::<BlockQ5_0>();
        const UNITS_PER_BLOCK: usize = 1;
        const OFFSET: f32 = 16.0;
        const PARTNER: Partner = super::Q8_0;
    }

    pub(crate) struct Q5_1;
    impl GemmFormat for Q5_1 {
        const BLOCK_BYTES: usize = size_of::<BlockQ5_1>();
        const UNITS_PER_BLOCK: usize = 1;
        const MIN_AT: Option<usize> = Some(offset_of!(BlockQ5_1, m));
        const PARTNER: Partner = super::Q8_1;
    }

    /// The K-quants: a block is a 256-value super-block whose `d` (and `dmin`) sit at SCALE_AT
    /// (MIN_AT); the sub-block scales and minimums are the tiers' business, the activation
    /// sums per sub-block come prepared (`SUB_VALUES`). FACTOR / OFFSET are unused (1, 0).
    macro_rules! k_quant {
        ($name:ident, $block:ty, min: $min:expr, sub_values: $sub:expr) => {
            #[allow(non_camel_case_types)]
            pub(crate) struct $name;
            impl GemmFormat for $name {
                const BLOCK_BYTES: usize = size_of::<$block>();
                const UNITS_PER_BLOCK: usize = 8;
                const SCALE_AT: usize = offset_of!($block, d);
                const MIN_AT: Option<usize> = $min;
                const PARTNER: Partner = super::Q8_K;
                const SUB_VALUES: usize = $sub;
            }
        };
    }

    k_quant!(Q4_K, BlockQ4_K, min: Some(offset_of!(BlockQ4_K, dmin)), sub_values: 32);
    k_quant!(Q5_K, BlockQ5_K, min: Some(offset_of!(BlockQ5_K, dmin)), sub_values: 32);
    k_quant!(Q2_K, BlockQ2_K, min: Some(offset_of!(BlockQ2_K, dmin)), sub_values: 16);
    k_quant!(Q3_K, BlockQ3_K, min: None, sub_values: 16);
    k_quant!(Q6_K, BlockQ6_K, min: None, sub_values: 16);
}

/// A K-quant's integer sub-block scales, as every tier's kernel takes them: a value is
/// `d·sc·code − dmin·min` with unsigned codes, `dmin` the f16 at MIN_AT, or `d` itself when
/// MIN_AT is `None` (Q3_K / Q6_K: the code offset 4 / 32 becomes the minimum 4·sc / 32·sc).
pub(crate) trait SubScales: GemmFormat {
    /// Sub-blocks per block.
    const N_SUB: usize = Self::UNITS_PER_BLOCK * UNIT / Self::SUB_VALUES;
    /// `(sc, min)` of each sub-block of `block` (one whole block); entries past N_SUB are 0.
    fn sub_scales(block: &[u8]) -> ([i32; 16], [i16; 16]);
}

/// One block's sub-block scales of a group of rows, a lane per row (zero for absent rows).
pub(crate) struct GroupScales<const LANES: usize> {
    /// `[sub-block][lane]`.
    pub sc: [[i32; LANES]; 16],
    /// `[sub-block pair][lane]`: the two minimums as i16, the first in the low half.
    pub min_pairs: [[i32; LANES]; 8],
}

/// The sub-block scales of one block in each of `n_rows` rows (`block(r)`: row r's block).
pub(crate) fn group_sub_scales<'a, W: SubScales, const LANES: usize>(
    n_rows: usize,
    block: impl Fn(usize) -> &'a [u8],
) -> GroupScales<LANES> {
    let mut g = GroupScales {
        sc: [[0; LANES]; 16],
        min_pairs: [[0; LANES]; 8],
    };
    for r in 0..n_rows {
        let (sc, min) = W::sub_scales(block(r));
        for (lanes, &s) in g.sc.iter_mut().zip(&sc) {
            lanes[r] = s;
        }
        for (lanes, m) in g.min_pairs.iter_mut().zip(min.chunks_exact(2)) {
            lanes[r] = i32::from(m[0] as u16) | (i32::from(m[1]) << 16);
        }
    }
    g
}

/// A tier's vector of `LANES` i32 lanes (a row of the group a lane), as its matrix-matrix
/// decoders keep the K-quants' sub-block scales.
pub(crate) trait RowLanes<const LANES: usize> {
    type V: Copy;
    /// # Safety
    /// The tier's features are enabled (so for `load`).
    unsafe fn zero() -> Self::V;
    unsafe fn load(lanes: &[i32; LANES]) -> Self::V;
}

/// The sub-block scales (`sub_scales[b·N_SUB + j]`) and minimum pairs (`sub_mins[b·N_SUB/2 + i]`)
/// of every block of rows `base..base + n_rows` (`row_bytes` apart, `n_values` values each), a
/// row a lane (zero for absent rows): what every tier's K-quant tile multiplies by.
///
/// # Safety
/// The rows hold `n_values` values in whole blocks; the tier's features are enabled.
#[inline(always)]
pub(crate) unsafe fn decode_sub_scales<W: SubScales, L: RowLanes<LANES>, const LANES: usize>(
    base: *const u8,
    row_bytes: usize,
    n_rows: usize,
    n_values: usize,
    sub_scales: &mut Vec<L::V>,
    sub_mins: &mut Vec<L::V>,
) {
    let n_blocks = n_values / (W::UNITS_PER_BLOCK * UNIT);
    sub_scales.resize(n_blocks * W::N_SUB, L::zero());
    sub_mins.resize(n_blocks * W::N_SUB / 2, L::zero());
    for b in 0..n_blocks {
        let g = group_sub_scales::<W, LANES>(n_rows, |r| {
            // SAFETY: the caller's rows hold `n_blocks` whole blocks.
            unsafe {
                core::slice::from_raw_parts(
                    base.add(r * row_bytes + b * W::BLOCK_BYTES),
                    W::BLOCK_BYTES,
                )
            }
        });
        for (j, sc) in g.sc.iter().enumerate().take(W::N_SUB) {
            sub_scales[b * W::N_SUB + j] = L::load(sc);
        }
        for (i, m) in g.min_pairs.iter().enumerate().take(W::N_SUB / 2) {
            sub_mins[b * W::N_SUB / 2 + i] = L::load(m);
        }
    }
}

/// The little-endian words of 12 packed bytes.
fn words12(packed: &[u8; 12]) -> [u32; 3] {
    core::array::from_fn(|i| {
        u32::from_le_bytes([
            packed[4 * i],
            packed[4 * i + 1],
            packed[4 * i + 2],
            packed[4 * i + 3],
        ])
    })
}

/// Q4_K / Q5_K's 12 packed bytes of six-bit scales and minimums (`kquant_common::scale_min`'s
/// packing) unpacked word-wise: the 16 bytes of the result are the scales of sub-blocks 0..8,
/// then their minimums. Scales / minimums 0..4 are the low six bits of words 0 / 1; 4..8 take
/// their low nibbles from word 2 (low / high nibbles), their top bits from bits 6–7 of word 0 / 1.
/// For the tiers' vector decoders (one vector per row and block).
pub(crate) fn k4_scale_min_words(packed: &[u8; 12]) -> [u32; 4] {
    let [a0, a1, a2] = words12(packed);
    let (m6, m4, m2) = (0x3f3f_3f3f_u32, 0x0f0f_0f0f_u32, 0x0303_0303_u32);
    [
        a0 & m6,
        (a2 & m4) | (((a0 >> 6) & m2) << 4),
        a1 & m6,
        ((a2 >> 4) & m4) | (((a1 >> 6) & m2) << 4),
    ]
}

/// Q3_K's 12 packed bytes of six-bit levels (`BlockQ3_K::scales`) unpacked word-wise: byte j of
/// the result is sub-block j's level (scale + 32) = low four bits (byte j % 8, nibble j / 8) |
/// two high bits (byte 8 + j % 4, bits 2·(j / 4)) << 4.
pub(crate) fn q3_k_level_words(packed: &[u8; 12]) -> [u32; 4] {
    let [a0, a1, a2] = words12(packed);
    let (m4, m2) = (0x0f0f_0f0f_u32, 0x0303_0303_u32);
    [
        (a0 & m4) | ((a2 & m2) << 4),
        (a1 & m4) | (((a2 >> 2) & m2) << 4),
        ((a0 >> 4) & m4) | (((a2 >> 4) & m2) << 4),
        ((a1 >> 4) & m4) | (((a2 >> 6) & m2) << 4),
    ]
}

/// The 12 bytes of six-bit scales and minimums of Q4_K / Q5_K, after `d` and `dmin`.
fn k4_sub_scales(block: &[u8]) -> ([i32; 16], [i16; 16]) {
    let packed: &[u8; 12] = block[4..16].try_into().expect("a whole block");
    // `kquant_common::scale_min` for the eight sub-blocks, word-wise.
    let w = k4_scale_min_words(packed);
    let byte = |i: usize| (w[i / 4] >> (8 * (i % 4))) as u8;
    let (mut sc, mut min) = ([0i32; 16], [0i16; 16]);
    for j in 0..8 {
        sc[j] = i32::from(byte(j));
        min[j] = i16::from(byte(8 + j));
    }
    (sc, min)
}

impl SubScales for formats::Q4_K {
    fn sub_scales(block: &[u8]) -> ([i32; 16], [i16; 16]) {
        k4_sub_scales(block)
    }
}

impl SubScales for formats::Q5_K {
    fn sub_scales(block: &[u8]) -> ([i32; 16], [i16; 16]) {
        k4_sub_scales(block)
    }
}

impl SubScales for formats::Q2_K {
    fn sub_scales(block: &[u8]) -> ([i32; 16], [i16; 16]) {
        let (mut sc, mut min) = ([0i32; 16], [0i16; 16]);
        for (j, &packed) in block[..16].iter().enumerate() {
            sc[j] = i32::from(packed & 0xF);
            min[j] = i16::from(packed >> 4);
        }
        (sc, min)
    }
}

impl SubScales for formats::Q3_K {
    fn sub_scales(block: &[u8]) -> ([i32; 16], [i16; 16]) {
        // `BlockQ3_K::signed_scales` four at a time ([`q3_k_level_words`]), less 32. Once per
        // block and row of a matrix-matrix product, where the per-level loop cost more than the
        // product's few tokens.
        let at = core::mem::offset_of!(crate::q3_k::BlockQ3_K, scales);
        let packed: &[u8; 12] = block[at..at + 12].try_into().expect("a whole block");
        let levels = q3_k_level_words(packed);
        let (mut sc, mut min) = ([0i32; 16], [0i16; 16]);
        for j in 0..16 {
            let s = ((levels[j / 4] >> (8 * (j % 4))) & 0xff) as i16 - 32;
            sc[j] = i32::from(s);
            min[j] = 4 * s;
        }
        (sc, min)
    }
}

impl SubScales for formats::Q6_K {
    fn sub_scales(block: &[u8]) -> ([i32; 16], [i16; 16]) {
        let (mut sc, mut min) = ([0i32; 16], [0i16; 16]);
        for j in 0..16 {
            let s = block[192 + j] as i8;
            sc[j] = i32::from(s);
            min[j] = 32 * i16::from(s);
        }
        (sc, min)
    }
}

/// Bytes of one prepared token (the `GemmKernel::prepared_bytes` of every tier).
pub(crate) fn prepared_bytes<F: GemmFormat>(n_values: usize) -> Option<usize> {
    layout::<F>(n_values).map(|l| l.bytes)
}

/// `GemmKernel::prepare` of every tier: checks the lengths, then [`prepare`].
pub(crate) fn prepare_row<F: GemmFormat>(n_values: usize, act: &[u8], dst: &mut [u8]) {
    let l = layout::<F>(n_values).expect("gemm: a shape without a layout");
    let p = F::PARTNER;
    assert!(
        act.len() >= n_values / (UNIT * p.units) * p.bytes && dst.len() >= l.bytes,
        "gemm: activation or prepared buffer too short"
    );
    prepare::<F>(&l, act, dst)
}

/// Checks a `GemmKernel::run` call against its contract; returns the layout and the row length
/// in bytes, or `None` when there is nothing to compute. Panics on a caller's length bug (the
/// kernels read through raw pointers within exactly these bounds).
pub(crate) fn check_run<F: GemmFormat>(
    n_values: usize,
    weights: &[u8],
    n_rows: usize,
    prepared: &[u8],
    n_tokens: usize,
    out: &[f32],
    out_stride: usize,
) -> Option<(Layout, usize)> {
    let l = layout::<F>(n_values).expect("gemm: a shape without a layout");
    let row_bytes = n_values / (UNIT * F::UNITS_PER_BLOCK) * F::BLOCK_BYTES;
    assert!(
        weights.len() >= n_rows * row_bytes,
        "gemm: weights too short"
    );
    assert!(
        prepared.len() >= n_tokens * l.bytes,
        "gemm: prepared too short"
    );
    assert!(
        n_tokens == 0
            || (out_stride >= n_rows && out.len() >= (n_tokens - 1) * out_stride + n_rows),
        "gemm: out too short"
    );
    (n_rows > 0 && n_tokens > 0).then_some((l, row_bytes))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The word-wise unpacks against the per-sub-block definitions (`scale_min`,
    /// `BlockQ3_K::signed_scales`) over many packings.
    #[test]
    fn word_wise_scale_unpacks_match_the_definitions() {
        let mut x = 0x9e37_79b9_u32;
        for _ in 0..500 {
            let packed: [u8; 12] = core::array::from_fn(|_| {
                x ^= x << 13;
                x ^= x >> 17;
                x ^= x << 5;
                x as u8
            });
            let bytes =
                |w: [u32; 4]| -> Vec<u8> { w.iter().flat_map(|w| w.to_le_bytes()).collect() };
            let k4 = bytes(k4_scale_min_words(&packed));
            for j in 0..8 {
                let (sc, m) = crate::kquant_common::scale_min(&packed, j);
                assert_eq!((k4[j], k4[8 + j]), (sc, m), "{packed:?} sub-block {j}");
            }
            let block = crate::q3_k::BlockQ3_K {
                scales: packed,
                ..bytemuck::Zeroable::zeroed()
            };
            let q3 = bytes(q3_k_level_words(&packed));
            for (j, &s) in block.signed_scales().iter().enumerate() {
                assert_eq!(q3[j] as i8 - 32, s, "{packed:?} sub-block {j}");
            }
        }
    }
}
