//! The packed weight layout: a matrix repacked once at load so the matrix-matrix kernel reads
//! its codes already transposed (no decode + transpose per call), for any number of tokens.
//!
//! Rows are taken `G` at a time (a group: one row per 32-bit lane of the tier's vector, 16 on
//! AVX-512). A group is stored block after block; one block of a group is
//!
//! ```text
//! header: d[G] (f16, the rows' block scales), m[G] (f16, minimums; formats with one),
//!         zero padding to a whole vector (4·G bytes) unless the codes are bits
//! units:  per 32-value unit of the block, vector k holds 4 codes of each row, lane r = row r:
//!   Bytes   8 vectors of 4·G bytes: byte 4r + i = unsigned code of value 4k + i
//!   Nibbles 4 vectors of 4·G bytes: byte 4r + i = the stored Q4 byte 4k + i (low nibble value
//!           4k + i, high nibble value 16 + 4k + i), so a shift + and yields two vectors
//!   Bits    8 masks of G / 2 bytes: bit 4r + i = the bit of value 4k + i
//!   Fives   Q5_0 / Q5_1: the 4 Nibbles vectors of the stored low nibbles, then 1 vector of
//!           the fifth bits as bit planes: bit k of byte 4r + i = the fifth bit of value
//!           4k + i, so dword k's fifth bits are one bit of the same vector for every k (a bit
//!           test, or a shift and a mask, per dword instead of a load)
//!   Crumbs  2 vectors of 4·G bytes: byte 4r + i = the unit's stored 2-bit code byte 4k + i,
//!           so shifts by 0, 2, 4, 6 + and yield four vectors of codes. Q2_0: the bytes hold
//!           values 16k + 4i .. +4, so the four vectors' bytes are values 4 apart (the 2-bit
//!           order of the prepared activation). TQ2_0: code byte j of a block (j = 32h + m)
//!           holds values 128h + 32l + m at bits 2l, so each shift is 4 consecutive values
//!           of another unit (the natural order). PTQ1_0 (`PackedFormat::TRITS`): its base-3
//!           bytes decoded at packing into 2-bit codes, byte 4r + i of vector k of unit u
//!           holding values 32u + 16k + 4s + i (s = 0..4, at bit 2s), so the shifted vectors
//!           are whole dwords of the activation in value order
//!   Base3   TQ1_0 on AVX-512 VNNI: 13 vectors of 4·G bytes a block (not a unit): byte 4r + i of vector k
//!           = stored code byte 4k + i of row r (`qs` then `qh`), its trit n (yₙ = byte·3ⁿ mod
//!           256, trit ⌊3yₙ/256⌋) being value 4·`base3_dword(k, n)` + i; scales ahead as Trits
//! ```
//!
//! so a group's block takes `G · block_bytes` bytes plus the header padding (+0 % for Q4_1, Q5_1 and
//! Q1_0, +3 % for TQ2_0, +6 % for Q8_0 and PQ2_0, +9 % for Q5_0, +11 % for Q4_0 and Q2_0). Rows past the
//! matrix in its last group are zeros. TQ1_0 keeps its 1.6875-bit base-3 bytes on AVX-512 VNNI
//! (Base3: the tiles read a trit by byte adds, exactly); elsewhere it is converted at packing to
//! TQ2_0 (`Transcode`; 26 % more bytes than its stored rows, read at a shift and a mask per
//! code), the per-tier choice being `Spec::of_kind`'s. PTQ1_0's trits become codes in
//! a layout of their own with no per-block header: the group's block scales (`d[G]` per block)
//! come first, all together, padded to a whole vector, then the blocks' codes (+21 % over its
//! 1.75 bits). The activation side is the matrix-matrix kernel's prepared token
//! (`gemm_layout::prepare`), so a packed product is bit-identical to the plain matrix-matrix
//! kernel's, whatever the token count.

use super::gemm_layout::{self, formats, GemmFormat, UNIT};
use super::Isa;
use crate::ptq1_0::{self, BlockPTQ1_0, QK_PTQ1_0};
use crate::FormatKind;

/// How a packed format stores a unit's codes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Codes {
    /// A byte per value; the unsigned code is the stored byte XOR `flip` (Q8_0: 0x80).
    Bytes { flip: u8 },
    /// Q4's 16 bytes per 32 values, kept as stored (only transposed).
    Nibbles,
    /// A bit per value.
    Bits,
    /// Q2_0's 2-bit codes, four consecutive values a byte, kept as stored (only transposed).
    Crumbs,
    /// Q5_0 / Q5_1: the low nibbles as [`Codes::Nibbles`] (at `CODES_AT`), then the fifth bits
    /// (the stored little-endian u32 4 bytes before them) regrouped as bit planes.
    Fives,
    /// TQ1_0's base-3 bytes (`qs` then `qh`: 13 dwords a row per 256-value block), kept as
    /// stored (only transposed; the block's scales ahead of its codes, as `TRITS`): vector k
    /// holds dword k of each row, and trit n of its bytes is activation dword
    /// [`base3_dword`]`(k, n)` of the block.
    Base3,
}

/// Dwords of a row's base-3 codes in one TQ1_0 block (48 `qs` + 4 `qh` bytes).
pub(crate) const BASE3_VECTORS: usize = 13;

/// Trits in each byte of base-3 dword `k`: five, four in the last (`qh`).
pub(crate) const fn base3_trits(k: usize) -> usize {
    if k + 1 < BASE3_VECTORS {
        5
    } else {
        4
    }
}

/// The block's value dword (values 4d..4d+4) that trit `n` of the bytes of base-3 dword `k`
/// holds: bytes 4k..4k+4 of `qs[..32]` keep values 4k + 32n + {0..4}, those of `qs[32..]`
/// values 160 + 4(k − 8) + 16n + {0..4}, `qh` values 240 + 4n + {0..4} (`tq1_0`).
pub(crate) const fn base3_dword(k: usize, n: usize) -> usize {
    if k < 8 {
        k + 8 * n
    } else if k < 12 {
        40 + (k - 8) + 4 * n
    } else {
        60 + n
    }
}

/// A weight format the packed kernels take: its [`GemmFormat`] plus where its codes sit.
pub(crate) trait PackedFormat: GemmFormat {
    const CODES: Codes;
    /// The group's scales ahead of its codes (no block header). With crumbs, PTQ1_0: crumbs
    /// decoded at packing from base-3 trits (1.75 bits a value become 2: the decode that made
    /// PTQ1_0's kernels compute-bound is done once here), laid out as "Trits" above. With
    /// `Base3` (TQ1_0), the scales only: the codes are the stored bytes.
    const TRITS: bool = false;
    /// Offset of the codes in a block.
    const CODES_AT: usize;
}

impl PackedFormat for formats::Q8_0 {
    const CODES: Codes = Codes::Bytes { flip: 0x80 };
    const CODES_AT: usize = 2;
}
impl PackedFormat for formats::Q4_0 {
    const CODES: Codes = Codes::Nibbles;
    const CODES_AT: usize = 2;
}
impl PackedFormat for formats::Q4_1 {
    const CODES: Codes = Codes::Nibbles;
    const CODES_AT: usize = 4;
}
impl PackedFormat for formats::Q1_0 {
    const CODES: Codes = Codes::Bits;
    const CODES_AT: usize = 2;
}
impl<const PAIRS: usize> PackedFormat for formats::Q2<PAIRS> {
    const CODES: Codes = Codes::Crumbs;
    const CODES_AT: usize = 2;
}
impl PackedFormat for formats::PTQ1_0 {
    const CODES: Codes = Codes::Crumbs;
    const TRITS: bool = true;
    const CODES_AT: usize = 0;
}

impl PackedFormat for formats::Q5_0 {
    const CODES: Codes = Codes::Fives;
    const CODES_AT: usize = core::mem::offset_of!(crate::q5_0::BlockQ5_0, qs);
}
impl PackedFormat for formats::Q5_1 {
    const CODES: Codes = Codes::Fives;
    const CODES_AT: usize = core::mem::offset_of!(crate::q5_1::BlockQ5_1, qs);
}
const _: () = {
    assert!(core::mem::offset_of!(crate::q5_0::BlockQ5_0, qh) + 4 == formats::Q5_0::CODES_AT);
    assert!(core::mem::offset_of!(crate::q5_1::BlockQ5_1, qh) + 4 == formats::Q5_1::CODES_AT);
};

// The ternary formats (TQ1_0 through its conversion, see `Transcode`, but on AVX-512 VNNI).
impl PackedFormat for formats::TQ2_0 {
    const CODES: Codes = Codes::Crumbs;
    const CODES_AT: usize = 0;
}
/// TQ1_0 in its own base-3 bytes (AVX-512 VNNI; `Spec::of_kind`).
impl PackedFormat for formats::TQ1_0 {
    const CODES: Codes = Codes::Base3;
    const TRITS: bool = true;
    const CODES_AT: usize = 0;
}

/// Bytes of a block's header in a group of `g` rows.
pub(crate) const fn header_bytes(codes: Codes, has_min: bool, g: usize) -> usize {
    let raw = if has_min { 4 * g } else { 2 * g };
    match codes {
        Codes::Bits => raw,
        _ => raw.next_multiple_of(4 * g),
    }
}

/// Bytes of a group's scales kept ahead of its codes (Trits: every block's `d[G]`, padded to a
/// vector), 0 for the formats whose blocks carry them in their header.
pub(crate) const fn scales_ahead(trits: bool, g: usize, n_blocks: usize) -> usize {
    if trits {
        (2 * g * n_blocks).next_multiple_of(4 * g)
    } else {
        0
    }
}

/// Bytes of the header of each block of `F` in a group of `g` rows (none for trits).
pub(crate) const fn block_header<F: PackedFormat>(g: usize) -> usize {
    if F::TRITS {
        0
    } else {
        header_bytes(F::CODES, F::MIN_AT.is_some(), g)
    }
}

/// Bytes of one 32-value unit's codes in a group of `g` rows.
pub(crate) const fn unit_bytes(codes: Codes, g: usize) -> usize {
    match codes {
        Codes::Bytes { .. } => UNIT * g,
        Codes::Nibbles => UNIT / 2 * g,
        Codes::Fives => (UNIT / 2 + UNIT / 8) * g,
        Codes::Bits => UNIT / 8 * g,
        Codes::Crumbs => UNIT / 4 * g,
        // 52 bytes a row per 8 units.
        Codes::Base3 => 4 * BASE3_VECTORS * g / 8,
    }
}

/// A packed format's description, read at run time by the scalar packer and unpacker.
#[derive(Clone, Copy, Debug)]
struct Spec {
    /// Bytes of a block of the packed format (as [`Transcode::to_packed`] gives it, if any).
    block_bytes: usize,
    units: usize,
    scale_at: usize,
    min_at: Option<usize>,
    codes_at: usize,
    codes: Codes,
    /// The matrix's own format when its blocks are converted to the packed format's.
    transcode: Option<Transcode>,
    trits: bool,
}

/// Whether tier `isa` packs TQ1_0 in its base-3 bytes (see `Spec::of_kind`).
fn base3_tier(isa: Isa) -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        isa == Isa::Avx512 && super::x86_avx512::takes_base3()
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = isa;
        false
    }
}

/// A format packed as another's: each block converted at packing, losslessly in values, and
/// back at unpacking.
#[derive(Clone, Copy, Debug)]
struct Transcode {
    /// Bytes of a block as stored in the file.
    stored_bytes: usize,
    /// A stored block → the packed format's block (`Spec::block_bytes`).
    to_packed: fn(&[u8], &mut [u8]),
    /// The packed format's block → a stored block of the same values.
    from_packed: fn(&[u8], &mut [u8]),
}

/// The largest block a [`Transcode`] converts, in either format.
const TRANSCODE_MAX: usize = 128;

const TQ1_0_AS_TQ2_0: Transcode = {
    use crate::tq1_0::{from_tq2_0, to_tq2_0, BlockTQ1_0};
    use crate::tq2_0::BlockTQ2_0;
    Transcode {
        stored_bytes: core::mem::size_of::<BlockTQ1_0>(),
        to_packed: |src, dst| {
            let b: &BlockTQ1_0 = bytemuck::from_bytes(src);
            dst.copy_from_slice(bytemuck::bytes_of(&to_tq2_0(b)));
        },
        from_packed: |src, dst| {
            let b: &BlockTQ2_0 = bytemuck::from_bytes(src);
            dst.copy_from_slice(bytemuck::bytes_of(&from_tq2_0(b)));
        },
    }
};

impl Spec {
    const fn of<F: PackedFormat>() -> Spec {
        Spec {
            block_bytes: F::BLOCK_BYTES,
            units: F::UNITS_PER_BLOCK,
            scale_at: F::SCALE_AT,
            min_at: F::MIN_AT,
            codes_at: F::CODES_AT,
            codes: F::CODES,
            transcode: None,
            trits: F::TRITS,
        }
    }

    /// Bytes of one block of the matrix as stored (before any conversion).
    const fn stored_bytes(&self) -> usize {
        match self.transcode {
            Some(t) => t.stored_bytes,
            None => self.block_bytes,
        }
    }

    /// The packed format of `kind` in tier `isa`: TQ1_0 keeps its base-3 bytes where the
    /// AVX-512 VNNI packed kernel runs (`x86_avx512::takes_base3`), and is converted
    /// to TQ2_0 elsewhere (AVX2 — its base-3 tiles measured slower than its TQ2_0 ones, 2 or
    /// 4 tokens a tile and 8 rows a vector —, AVX-512 without VNNI, which runs AVX2's packed
    /// kernels, and ARM).
    fn of_kind(kind: FormatKind, isa: Isa) -> Option<Spec> {
        Some(match kind {
            FormatKind::Q8_0 => Spec::of::<formats::Q8_0>(),
            FormatKind::Q4_0 => Spec::of::<formats::Q4_0>(),
            FormatKind::Q4_1 => Spec::of::<formats::Q4_1>(),
            FormatKind::Q5_0 => Spec::of::<formats::Q5_0>(),
            FormatKind::Q5_1 => Spec::of::<formats::Q5_1>(),
            FormatKind::Q1_0 => Spec::of::<formats::Q1_0>(),
            FormatKind::Q2_0 => Spec::of::<formats::Q2<1>>(),
            FormatKind::PQ2_0 | FormatKind::Q2_0G128Legacy => Spec::of::<formats::Q2<2>>(),
            FormatKind::TQ2_0 => Spec::of::<formats::TQ2_0>(),
            FormatKind::TQ1_0 if base3_tier(isa) => Spec::of::<formats::TQ1_0>(),
            FormatKind::TQ1_0 => Spec {
                transcode: Some(TQ1_0_AS_TQ2_0),
                ..Spec::of::<formats::TQ2_0>()
            },
            FormatKind::PTQ1_0 => Spec::of::<formats::PTQ1_0>(),
            _ => return None,
        })
    }
}

/// The layout of one matrix in one tier: what `Kernels::pack_plan` hands out. Packing a group
/// needs only this and the original rows, so a caller may pack groups in parallel.
#[derive(Clone, Copy, Debug)]
pub struct PackPlan {
    pub(crate) kind: FormatKind,
    pub(crate) isa: Isa,
    spec: Spec,
    n_in: usize,
    n_rows: usize,
    group_rows: usize,
    n_blocks: usize,
    header: usize,
    unit: usize,
    block_stride: usize,
    /// `scales_ahead` of the group.
    ahead: usize,
}

impl PackPlan {
    /// The plan for `n_rows` rows of `n_in` values of `kind` in groups of `group_rows`, or `None`
    /// for a format without a packed layout or rows the matrix-matrix kernel does not take.
    pub(crate) fn new(
        kind: FormatKind,
        isa: Isa,
        group_rows: usize,
        n_in: usize,
        n_rows: usize,
    ) -> Option<PackPlan> {
        let spec = Spec::of_kind(kind, isa)?;
        let block_values = spec.units * UNIT;
        // The prepared activations need whole 64-value pairs (and whole blocks).
        let has_layout = match kind {
            FormatKind::Q8_0 => gemm_layout::layout::<formats::Q8_0>(n_in).is_some(),
            FormatKind::Q4_0 => gemm_layout::layout::<formats::Q4_0>(n_in).is_some(),
            FormatKind::Q4_1 => gemm_layout::layout::<formats::Q4_1>(n_in).is_some(),
            FormatKind::Q5_0 => gemm_layout::layout::<formats::Q5_0>(n_in).is_some(),
            FormatKind::Q5_1 => gemm_layout::layout::<formats::Q5_1>(n_in).is_some(),
            FormatKind::Q1_0 => gemm_layout::layout::<formats::Q1_0>(n_in).is_some(),
            FormatKind::Q2_0 => gemm_layout::layout::<formats::Q2<1>>(n_in).is_some(),
            FormatKind::PQ2_0 | FormatKind::Q2_0G128Legacy => {
                gemm_layout::layout::<formats::Q2<2>>(n_in).is_some()
            }
            FormatKind::TQ2_0 => gemm_layout::layout::<formats::TQ2_0>(n_in).is_some(),
            FormatKind::TQ1_0 => gemm_layout::layout::<formats::TQ1_0>(n_in).is_some(),
            FormatKind::PTQ1_0 => gemm_layout::layout::<formats::PTQ1_0>(n_in).is_some(),
            _ => false,
        };
        if !has_layout || n_rows == 0 || group_rows == 0 || !group_rows.is_multiple_of(2) {
            return None;
        }
        let header = if spec.trits {
            0
        } else {
            header_bytes(spec.codes, spec.min_at.is_some(), group_rows)
        };
        let unit = unit_bytes(spec.codes, group_rows);
        Some(PackPlan {
            kind,
            isa,
            spec,
            n_in,
            n_rows,
            group_rows,
            n_blocks: n_in / block_values,
            header,
            unit,
            block_stride: header + spec.units * unit,
            ahead: scales_ahead(spec.trits, group_rows, n_in / block_values),
        })
    }

    pub fn kind(&self) -> FormatKind {
        self.kind
    }
    pub fn n_in(&self) -> usize {
        self.n_in
    }
    pub fn n_rows(&self) -> usize {
        self.n_rows
    }
    /// Rows per group (16 on AVX-512): a product's first row must be a multiple of it.
    pub fn group_rows(&self) -> usize {
        self.group_rows
    }
    pub fn n_groups(&self) -> usize {
        self.n_rows.div_ceil(self.group_rows)
    }
    pub fn group_bytes(&self) -> usize {
        self.ahead + self.n_blocks * self.block_stride
    }
    /// Bytes of the packed matrix.
    pub fn packed_bytes(&self) -> usize {
        self.n_groups() * self.group_bytes()
    }
    /// Bytes of one original row.
    pub fn row_bytes(&self) -> usize {
        self.n_blocks * self.spec.stored_bytes()
    }
    pub(crate) fn block_stride(&self) -> usize {
        self.block_stride
    }

    /// Packs group `g` of `rows` (the whole original matrix, `n_rows` rows) into `dst`
    /// (`group_bytes()` bytes). Panics on lengths that do not match the plan (a caller's bug).
    pub fn pack_group(&self, g: usize, rows: &[u8], dst: &mut [u8]) {
        let rb = self.row_bytes();
        assert!(
            g < self.n_groups()
                && rows.len() >= self.n_rows * rb
                && dst.len() == self.group_bytes(),
            "pack_group: group {g} or buffer lengths do not match the plan"
        );
        dst.fill(0);
        let g0 = g * self.group_rows;
        let present = self.group_rows.min(self.n_rows - g0);
        let bb = self.spec.block_bytes;
        if self.spec.codes == Codes::Bits {
            // Two rows share each mask byte: write whole bytes, a row pair at a time.
            for r in (0..present).step_by(2) {
                for b in 0..self.n_blocks {
                    let block = |r: usize| &rows[(g0 + r) * rb + b * bb..][..bb];
                    let out = &mut dst[b * self.block_stride..(b + 1) * self.block_stride];
                    self.pack_bits(r, block(r), (r + 1 < present).then(|| block(r + 1)), out);
                }
            }
            return;
        }
        if self.spec.trits {
            let (scales, codes) = dst.split_at_mut(self.ahead);
            for r in 0..present {
                for b in 0..self.n_blocks {
                    let block = &rows[(g0 + r) * rb + b * bb..][..bb];
                    let scale = &mut scales[2 * (self.group_rows * b + r)..][..2];
                    let out = &mut codes[b * self.block_stride..(b + 1) * self.block_stride];
                    if self.spec.codes == Codes::Base3 {
                        self.pack_base3(r, block, scale, out);
                    } else {
                        self.pack_trits(r, block, scale, out);
                    }
                }
            }
            return;
        }
        let sb = self.spec.stored_bytes();
        let mut converted = [0u8; TRANSCODE_MAX];
        for r in 0..present {
            let row = &rows[(g0 + r) * rb..(g0 + r + 1) * rb];
            for b in 0..self.n_blocks {
                let mut block = &row[b * sb..(b + 1) * sb];
                if let Some(t) = self.spec.transcode {
                    (t.to_packed)(block, &mut converted[..bb]);
                    block = &converted[..bb];
                }
                let out = &mut dst[b * self.block_stride..(b + 1) * self.block_stride];
                self.pack_block(r, block, out);
            }
        }
    }

    /// Row `r` of one PTQ1_0 block → its scale and its trits as 2-bit codes (see `PackedFormat::TRITS`).
    fn pack_trits(&self, r: usize, block: &[u8], scale: &mut [u8], out: &mut [u8]) {
        let g = self.group_rows;
        let b: BlockPTQ1_0 = bytemuck::pod_read_unaligned(block);
        scale.copy_from_slice(&block[self.spec.scale_at..][..2]);
        let codes = ptq1_0::block_codes(&b);
        for (u, unit) in codes.chunks_exact(UNIT).enumerate() {
            let dst = &mut out[self.header + u * self.unit..][..self.unit];
            for (k, run) in unit.chunks_exact(16).enumerate() {
                for i in 0..4 {
                    dst[4 * g * k + 4 * r + i] =
                        (0..4).fold(0, |byte, s| byte | run[4 * s + i] << (2 * s));
                }
            }
        }
    }

    /// Row `r` of one TQ1_0 block → its scale and its 13 code dwords, as stored.
    fn pack_base3(&self, r: usize, block: &[u8], scale: &mut [u8], out: &mut [u8]) {
        let g = self.group_rows;
        scale.copy_from_slice(&block[self.spec.scale_at..][..2]);
        for (k, q) in block[self.spec.codes_at..][..4 * BASE3_VECTORS]
            .chunks_exact(4)
            .enumerate()
        {
            out[4 * g * k + 4 * r..][..4].copy_from_slice(q);
        }
    }

    /// The inverse of [`PackPlan::pack_trits`] (and of [`PackPlan::pack_base3`]): the block
    /// re-encoded from its codes (the base-3 bytes: as stored).
    fn unpack_trits(&self, group: &[u8], r: usize, b: usize, dst: &mut [u8]) {
        let g = self.group_rows;
        let blk = &group[self.ahead + b * self.block_stride..][..self.block_stride];
        if self.spec.codes == Codes::Base3 {
            for k in 0..BASE3_VECTORS {
                dst[self.spec.codes_at + 4 * k..][..4]
                    .copy_from_slice(&blk[4 * g * k + 4 * r..][..4]);
            }
            let at = self.spec.scale_at;
            dst[at..at + 2].copy_from_slice(&group[2 * (g * b + r)..][..2]);
            return;
        }
        let codes: [u8; QK_PTQ1_0] = core::array::from_fn(|v| {
            let (u, k, s, i) = (v / UNIT, v % UNIT / 16, v % 16 / 4, v % 4);
            (blk[self.header + u * self.unit + 4 * g * k + 4 * r + i] >> (2 * s)) & 3
        });
        let d = bytemuck::pod_read_unaligned(&group[2 * (g * b + r)..][..2]);
        dst[..self.spec.block_bytes]
            .copy_from_slice(bytemuck::bytes_of(&ptq1_0::block_of_codes(&codes, d)));
    }

    /// Row `r` (of its group) of one original block → its places in the group's packed block.
    fn pack_block(&self, r: usize, block: &[u8], out: &mut [u8]) {
        let (g, s) = (self.group_rows, &self.spec);
        out[2 * r..2 * r + 2].copy_from_slice(&block[s.scale_at..s.scale_at + 2]);
        if let Some(at) = s.min_at {
            out[2 * g + 2 * r..2 * g + 2 * r + 2].copy_from_slice(&block[at..at + 2]);
        }
        for u in 0..s.units {
            let codes = &mut out[self.header + u * self.unit..][..self.unit];
            let src = &block[s.codes_at..];
            // Whole dwords (4 values, or 8 for nibbles) at a time: packing runs at load.
            match s.codes {
                Codes::Bytes { flip } => {
                    let flip = u32::from_ne_bytes([flip; 4]);
                    for (k, q) in src[UNIT * u..UNIT * (u + 1)].chunks_exact(4).enumerate() {
                        let q = u32::from_ne_bytes([q[0], q[1], q[2], q[3]]) ^ flip;
                        codes[4 * g * k + 4 * r..][..4].copy_from_slice(&q.to_ne_bytes());
                    }
                }
                Codes::Crumbs => {
                    for (k, q) in src[UNIT / 4 * u..UNIT / 4 * (u + 1)]
                        .chunks_exact(4)
                        .enumerate()
                    {
                        codes[4 * g * k + 4 * r..][..4].copy_from_slice(q);
                    }
                }
                Codes::Nibbles => {
                    for (k, q) in src[UNIT / 2 * u..UNIT / 2 * (u + 1)]
                        .chunks_exact(4)
                        .enumerate()
                    {
                        codes[4 * g * k + 4 * r..][..4].copy_from_slice(q);
                    }
                }
                Codes::Fives => {
                    // One unit a block: the nibbles as Q4's, then the planes.
                    for (k, q) in src[..UNIT / 2].chunks_exact(4).enumerate() {
                        codes[4 * g * k + 4 * r..][..4].copy_from_slice(q);
                    }
                    let at = s.codes_at - 4;
                    let qh = u32::from_le_bytes([
                        block[at],
                        block[at + 1],
                        block[at + 2],
                        block[at + 3],
                    ]);
                    let planes = &mut codes[UNIT / 2 * g + 4 * r..][..4];
                    for (i, byte) in planes.iter_mut().enumerate() {
                        *byte = (0..8).fold(0, |p, k| p | (((qh >> (4 * k + i)) & 1) as u8) << k);
                    }
                }
                Codes::Bits => unreachable!("bit codes are packed a row pair at a time"),
                Codes::Base3 => unreachable!("base-3 codes are packed with their scales ahead"),
            }
        }
    }

    /// Rows `r` (even) and `r + 1` (if present) of one original block → their places in the
    /// group's packed block: values 4k..4k+4 are one nibble of the stored bits, and a row pair's
    /// two nibbles make byte r / 2 of mask k.
    fn pack_bits(&self, r: usize, a: &[u8], b: Option<&[u8]>, out: &mut [u8]) {
        let (g, s) = (self.group_rows, &self.spec);
        for (i, block) in [Some(a), b].into_iter().enumerate() {
            if let Some(block) = block {
                let r = r + i;
                out[2 * r..2 * r + 2].copy_from_slice(&block[s.scale_at..s.scale_at + 2]);
            }
        }
        let bits = |block: &[u8], u: usize| {
            let at = s.codes_at + UNIT / 8 * u;
            u32::from_le_bytes([block[at], block[at + 1], block[at + 2], block[at + 3]])
        };
        for u in 0..s.units {
            let codes = &mut out[self.header + u * self.unit..][..self.unit];
            let (wa, wb) = (bits(a, u), b.map_or(0, |b| bits(b, u)));
            for k in 0..UNIT / 4 {
                let nibble = |w: u32| ((w >> (4 * k)) & 0xF) as u8;
                codes[g / 2 * k + r / 2] = nibble(wa) | (nibble(wb) << 4);
            }
        }
    }

    /// The scalar reference of the layout: block `b` of row `r` of the matrix, as originally
    /// stored (a converted one: of the same values), from `packed` (the whole packed matrix)
    /// into `dst` (one block as stored).
    fn unpack_block(&self, packed: &[u8], r: usize, b: usize, dst: &mut [u8]) {
        if let Some(t) = self.spec.transcode {
            let mut converted = [0u8; TRANSCODE_MAX];
            let converted = &mut converted[..self.spec.block_bytes];
            self.unpack_packed_block(packed, r, b, converted);
            (t.from_packed)(converted, &mut dst[..t.stored_bytes]);
        } else {
            self.unpack_packed_block(packed, r, b, dst);
        }
    }

    /// Block `b` of row `r` in the packed format's own blocks.
    fn unpack_packed_block(&self, packed: &[u8], r: usize, b: usize, dst: &mut [u8]) {
        let (g, s) = (self.group_rows, &self.spec);
        if s.trits {
            let group = &packed[(r / g) * self.group_bytes()..][..self.group_bytes()];
            return self.unpack_trits(group, r % g, b, dst);
        }
        let blk =
            &packed[(r / g) * self.group_bytes() + b * self.block_stride..][..self.block_stride];
        let r = r % g;
        dst[s.scale_at..s.scale_at + 2].copy_from_slice(&blk[2 * r..2 * r + 2]);
        if let Some(at) = s.min_at {
            dst[at..at + 2].copy_from_slice(&blk[2 * g + 2 * r..2 * g + 2 * r + 2]);
        }
        for u in 0..s.units {
            let codes = &blk[self.header + u * self.unit..][..self.unit];
            if s.codes == Codes::Fives {
                // One unit a block (Q5_0 / Q5_1).
                let planes = &codes[UNIT / 2 * g + 4 * r..][..4];
                let qh = (0..UNIT).fold(0u32, |qh, v| {
                    qh | u32::from((planes[v % 4] >> (v / 4)) & 1) << v
                });
                // The stored u32 just before the nibbles.
                dst[s.codes_at - 4..s.codes_at].copy_from_slice(&qh.to_le_bytes());
            }
            let out = &mut dst[s.codes_at..];
            match s.codes {
                Codes::Bytes { flip } => {
                    for v in 0..UNIT {
                        out[UNIT * u + v] = codes[4 * g * (v / 4) + 4 * r + v % 4] ^ flip;
                    }
                }
                Codes::Nibbles => {
                    for j in 0..UNIT / 2 {
                        out[UNIT / 2 * u + j] = codes[4 * g * (j / 4) + 4 * r + j % 4];
                    }
                }
                Codes::Crumbs => {
                    for j in 0..UNIT / 4 {
                        out[UNIT / 4 * u + j] = codes[4 * g * (j / 4) + 4 * r + j % 4];
                    }
                }
                Codes::Fives => {
                    // Its fifth bits are written above.
                    for j in 0..UNIT / 2 {
                        out[j] = codes[4 * g * (j / 4) + 4 * r + j % 4];
                    }
                }
                Codes::Base3 => unreachable!("base-3 codes are unpacked with their scales"),
                Codes::Bits => {
                    for byte in &mut out[UNIT / 8 * u..UNIT / 8 * (u + 1)] {
                        *byte = 0;
                    }
                    for v in 0..UNIT {
                        let at = 4 * r + v % 4;
                        let bit = (codes[g / 2 * (v / 4) + at / 8] >> (at % 8)) & 1;
                        out[(UNIT * u + v) / 8] |= bit << (v % 8);
                    }
                }
            }
        }
    }
}

/// How far ahead of the block a packed kernel is reading its weights are prefetched, in bytes.
/// Each thread streams its rows once per product; the hardware prefetcher alone brings them in
/// too late (without this, about half of the 1-bit decode's kernel time waited on weight loads:
/// Bonsai-1.7B Q1_0 decode 35 → 50 tokens/s, Bonsai-8B 9.8 → 13.9 on 2 threads).
pub(crate) const PREFETCH_AHEAD: usize = 4096;

/// Asks for the cache lines of `len` bytes `PREFETCH_AHEAD` bytes past `at` (past the end of a
/// group: the next group's, which the same thread reads next). Only a hint: the addresses may lie
/// outside the weights, which a prefetch never faults on.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
pub(crate) fn prefetch_ahead(at: *const u8, len: usize) {
    prefetch(at.wrapping_add(PREFETCH_AHEAD), len);
}

/// Asks for the cache lines of `len` bytes at `at`; a hint, as [`prefetch_ahead`].
#[cfg(target_arch = "x86_64")]
#[inline(always)]
pub(crate) fn prefetch(at: *const u8, len: usize) {
    use core::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
    let mut line = 0;
    while line < len {
        // SAFETY: a prefetch is a hint that never faults, whatever the address.
        unsafe { _mm_prefetch::<_MM_HINT_T0>(at.wrapping_add(line).cast()) };
        line += 64;
    }
}

/// For a plain row-band kernel (rows read in place, `rows` at a time, each a stream of its own):
/// where the first row's prefetch goes while the band reads `at` bytes into each row — its
/// stream `PREFETCH_AHEAD / rows` bytes further on, past the row's end continuing into the same
/// row of the next band, which the thread reads next (row r's is `row_bytes · r` past it). The
/// band's streams together keep as much ahead as a packed kernel's one. Without it most of the
/// K-quant and Q5 kernels' time waited on their weight loads. Only an address for a hint.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
pub(crate) fn band_ahead(band: *const u8, rows: usize, row_bytes: usize, at: usize) -> *const u8 {
    let ahead = at + PREFETCH_AHEAD / rows;
    let (bands, col) = (ahead / row_bytes, ahead % row_bytes);
    band.wrapping_add(bands * rows * row_bytes + col)
}

/// The checks every tier's packed kernel makes before its unchecked loop: the plan is of this
/// tier's group size, and `groups`, `prepared` and `out` hold what the call reads and writes.
/// Returns the activation layout and the bytes per group, or `None` when there is nothing to do.
#[allow(clippy::too_many_arguments)]
pub(crate) fn check_run<F: PackedFormat>(
    plan: &PackPlan,
    group_rows: usize,
    groups: &[u8],
    n_rows: usize,
    prepared: &[u8],
    n_tokens: usize,
    out: &[f32],
    out_stride: usize,
) -> Option<(gemm_layout::Layout, usize)> {
    let l = gemm_layout::layout::<F>(plan.n_in()).expect("a plan has a layout");
    let gb = plan.group_bytes();
    assert!(
        plan.group_rows() == group_rows
            && plan.block_stride()
                == block_header::<F>(group_rows)
                    + F::UNITS_PER_BLOCK * unit_bytes(F::CODES, group_rows),
        "packed gemm: a plan of another tier"
    );
    assert!(
        groups.len() >= n_rows.div_ceil(group_rows) * gb,
        "packed gemm: groups too short"
    );
    assert!(
        prepared.len() >= n_tokens * l.bytes,
        "packed gemm: prepared too short"
    );
    assert!(
        n_tokens == 0
            || (out_stride >= n_rows && out.len() >= (n_tokens - 1) * out_stride + n_rows),
        "packed gemm: out too short"
    );
    (n_rows > 0 && n_tokens > 0).then_some((l, gb))
}

/// A weight matrix in the packed layout: it replaces the original rows (see [`Packed::unpack_row`]
/// for the way back, e.g. for an embedding lookup).
pub struct Packed {
    plan: PackPlan,
    /// The packed bytes start `start` bytes in, on a cache line (a 512-bit vector).
    buffer: Vec<u8>,
    start: usize,
}

impl std::fmt::Debug for Packed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Packed").field("plan", &self.plan).finish()
    }
}

impl Packed {
    /// An all-zero packed matrix of `plan`, to be filled group by group with
    /// [`PackPlan::pack_group`] through [`Packed::storage_mut`].
    pub fn zeroed(plan: PackPlan) -> Packed {
        // A plain zeroed byte buffer comes from the allocator's zeroed pages, first touched by
        // whoever packs the groups (in parallel, in the engine); an over-aligned type would be
        // zeroed here, on one thread. The start is aligned by hand instead.
        let buffer = vec![0u8; plan.packed_bytes() + 63];
        let start = buffer.as_ptr().align_offset(64).min(63);
        Packed {
            plan,
            buffer,
            start,
        }
    }

    /// Packs the whole matrix on the calling thread.
    pub fn pack(plan: PackPlan, rows: &[u8]) -> Packed {
        let mut packed = Packed::zeroed(plan);
        let gb = plan.group_bytes();
        for (g, dst) in packed.storage_mut().chunks_exact_mut(gb).enumerate() {
            plan.pack_group(g, rows, dst);
        }
        packed
    }

    pub fn plan(&self) -> &PackPlan {
        &self.plan
    }

    /// The packed bytes, `n_groups · group_bytes`.
    pub fn storage(&self) -> &[u8] {
        &self.buffer[self.start..self.start + self.plan.packed_bytes()]
    }

    /// The packed bytes for filling, one chunk of `group_bytes` per group.
    pub fn storage_mut(&mut self) -> &mut [u8] {
        let n = self.plan.packed_bytes();
        &mut self.buffer[self.start..self.start + n]
    }

    /// Row `r` as originally stored (`row_bytes` bytes into `dst`), block by block. A format
    /// converted at packing (TQ1_0) comes back as blocks of the same values in the bytes its
    /// quantizer writes, which are the stored ones unless the file holds other encodings.
    pub fn unpack_row(&self, r: usize, dst: &mut [u8]) {
        let bb = self.plan.spec.stored_bytes();
        assert!(
            r < self.plan.n_rows && dst.len() >= self.plan.row_bytes(),
            "unpack_row: row {r} or buffer out of range"
        );
        for (b, block) in dst
            .chunks_exact_mut(bb)
            .take(self.plan.n_blocks)
            .enumerate()
        {
            self.plan.unpack_block(self.storage(), r, b, block);
        }
    }

    /// Block `b` of row `r` as originally stored (`block_bytes` bytes into `dst`; see
    /// [`Packed::unpack_row`] for a converted format).
    pub fn unpack_block(&self, r: usize, b: usize, dst: &mut [u8]) {
        assert!(
            r < self.plan.n_rows
                && b < self.plan.n_blocks
                && dst.len() >= self.plan.spec.stored_bytes(),
            "unpack_block: row {r} block {b} or buffer out of range"
        );
        self.plan.unpack_block(self.storage(), r, b, dst);
    }
}
