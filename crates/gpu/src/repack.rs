//! Weight blocks as the GGUF file stores them to the words the product shaders read (each
//! shader's header describes its layout): codes lined up with the activation's code order so one
//! packed 4×8-bit dot product sums four of them, scales apart.

use oxibonsai_formats::iq4_nl::{BlockIq4Nl, LEVELS};
use oxibonsai_formats::ptq1_0::{self, BlockPTQ1_0, QK_PTQ1_0};
use oxibonsai_formats::q2_k::BlockQ2_K;
use oxibonsai_formats::q3_k::BlockQ3_K;
use oxibonsai_formats::q4_k::BlockQ4_K;
use oxibonsai_formats::q5_k::BlockQ5_K;
use oxibonsai_formats::q6_k::BlockQ6_K;
use oxibonsai_formats::q8_0::{BlockQ8_0, QK8_0};
use oxibonsai_formats::tq2_0::BlockTQ2_0;
use oxibonsai_formats::FormatKind;

/// A repacked matrix: code words and scale words.
pub(crate) struct Repacked {
    pub words: Vec<u32>,
    pub scales: Vec<u32>,
}

/// f16 scales, one a block, as pairs in words (a trailing half zero).
fn f16_pairs(halves: &[u16]) -> Vec<u32> {
    halves
        .chunks(2)
        .map(|p| u32::from(p[0]) | u32::from(*p.get(1).unwrap_or(&0)) << 16)
        .collect()
}

fn le_word(b: &[u8]) -> u32 {
    u32::from_le_bytes([b[0], b[1], b[2], b[3]])
}

/// `rows` (whole blocks of `format`, `bytes` each, as checked by the caller) for its shader;
/// `None` for the float formats and the formats without a product.
pub(crate) fn repack(format: FormatKind, rows: &[u8], bytes: usize) -> Option<Repacked> {
    let n_blocks = rows.len() / bytes;
    let blocks = rows.chunks_exact(bytes);
    Some(match format {
        FormatKind::TQ2_0 => {
            let mut words = Vec::with_capacity(n_blocks * 16);
            let mut halves = Vec::with_capacity(n_blocks);
            for b in blocks {
                let b: BlockTQ2_0 = bytemuck::pod_read_unaligned(b);
                halves.push(b.d.to_bits());
                words.extend(b.qs.chunks_exact(4).map(le_word));
            }
            Repacked {
                words,
                scales: f16_pairs(&halves),
            }
        }
        FormatKind::Q2_0 | FormatKind::PQ2_0 | FormatKind::Q2_0G128Legacy => {
            repack_q2(rows, oxibonsai_formats::format(format).block_elems, bytes)
        }
        FormatKind::Q8_0 => {
            let mut words = Vec::with_capacity(n_blocks * 8);
            let mut halves = Vec::with_capacity(n_blocks);
            for b in blocks {
                let b: BlockQ8_0 = bytemuck::pod_read_unaligned(b);
                halves.push(b.d.to_bits());
                for i in 0..8 {
                    words.push(u32::from_le_bytes(
                        [0, 1, 2, 3].map(|l| b.qs[8 * l + i] as u8),
                    ));
                }
            }
            Repacked {
                words,
                scales: f16_pairs(&halves),
            }
        }
        FormatKind::PTQ1_0 => {
            // Its trits are the Q2_0 codec's codes (value (t − 1)·d) and its dot the codec's
            // shape (d · Σ_k d_k · Σ (t − 1)·q): PQ2_0's words, decoded from base 3 here once.
            let mut pq2 = Vec::with_capacity(n_blocks * 34);
            for b in blocks {
                let b: BlockPTQ1_0 = bytemuck::pod_read_unaligned(b);
                pq2.extend_from_slice(&b.d.to_bits().to_le_bytes());
                let codes = ptq1_0::block_codes(&b);
                pq2.extend(codes.chunks_exact(4).map(|c| {
                    c.iter()
                        .enumerate()
                        .fold(0u8, |byte, (s, &t)| byte | t << (2 * s))
                }));
            }
            repack_q2(&pq2, QK_PTQ1_0, 34)
        }
        FormatKind::IQ4_NL => {
            // The levels as int8 codes: Q8_0's words (its dot is Q8_0's over the levels).
            let mut words = Vec::with_capacity(n_blocks * 8);
            let mut halves = Vec::with_capacity(n_blocks);
            for b in blocks {
                let b: BlockIq4Nl = bytemuck::pod_read_unaligned(b);
                halves.push(b.d.to_bits());
                let level = |v: usize| {
                    let q = if v < 16 {
                        b.qs[v] & 0xF
                    } else {
                        b.qs[v - 16] >> 4
                    };
                    LEVELS[usize::from(q)] as u8
                };
                for i in 0..8 {
                    words.push(u32::from_le_bytes([0, 1, 2, 3].map(|l| level(8 * l + i))));
                }
            }
            Repacked {
                words,
                scales: f16_pairs(&halves),
            }
        }
        FormatKind::Q4_0 | FormatKind::Q4_1 | FormatKind::Q5_0 | FormatKind::Q5_1 => {
            repack_nibbles(format, rows, bytes)
        }
        FormatKind::Q2_K => {
            let mut words = Vec::with_capacity(n_blocks * 16);
            let mut scales = Vec::with_capacity(n_blocks * 5);
            for b in blocks {
                let b: BlockQ2_K = bytemuck::pod_read_unaligned(b);
                scales.extend(b.scales.chunks_exact(4).map(le_word));
                scales.push(u32::from(b.d.to_bits()) | u32::from(b.dmin.to_bits()) << 16);
                words.extend(b.qs.chunks_exact(4).map(le_word));
            }
            Repacked { words, scales }
        }
        FormatKind::Q3_K => {
            let mut words = Vec::with_capacity(n_blocks * 24);
            let mut scales = Vec::with_capacity(n_blocks * 5);
            for b in blocks {
                let b: BlockQ3_K = bytemuck::pod_read_unaligned(b);
                scales.extend(
                    b.signed_scales()
                        .chunks_exact(4)
                        .map(|s| u32::from_le_bytes([0, 1, 2, 3].map(|l| s[l] as u8))),
                );
                scales.push(u32::from(b.d.to_bits()));
                words.extend(b.qs.chunks_exact(4).map(le_word));
                words.extend(b.hmask.chunks_exact(4).map(le_word));
            }
            Repacked { words, scales }
        }
        FormatKind::Q4_K => {
            let mut words = Vec::with_capacity(n_blocks * 32);
            let mut scales = Vec::with_capacity(n_blocks * 4);
            for b in blocks {
                let b: BlockQ4_K = bytemuck::pod_read_unaligned(b);
                scales.push(u32::from(b.d.to_bits()) | u32::from(b.dmin.to_bits()) << 16);
                scales.extend(b.scales.chunks_exact(4).map(le_word));
                words.extend(b.qs.chunks_exact(4).map(le_word));
            }
            Repacked { words, scales }
        }
        FormatKind::Q5_K => {
            let mut words = Vec::with_capacity(n_blocks * 40);
            let mut scales = Vec::with_capacity(n_blocks * 4);
            for b in blocks {
                let b: BlockQ5_K = bytemuck::pod_read_unaligned(b);
                scales.push(u32::from(b.d.to_bits()) | u32::from(b.dmin.to_bits()) << 16);
                scales.extend(b.scales.chunks_exact(4).map(le_word));
                words.extend(b.qs.chunks_exact(4).map(le_word));
                words.extend(b.qh.chunks_exact(4).map(le_word));
            }
            Repacked { words, scales }
        }
        FormatKind::Q6_K => {
            let mut words = Vec::with_capacity(n_blocks * 48);
            let mut scales = Vec::with_capacity(n_blocks * 5);
            for b in blocks {
                let b: BlockQ6_K = bytemuck::pod_read_unaligned(b);
                words.extend(b.ql.chunks_exact(4).map(le_word));
                words.extend(b.qh.chunks_exact(4).map(le_word));
                scales.extend(
                    b.scales
                        .chunks_exact(4)
                        .map(|s| u32::from_le_bytes([0, 1, 2, 3].map(|l| s[l] as u8))),
                );
                scales.push(u32::from(b.d.to_bits()));
            }
            Repacked { words, scales }
        }
        _ => return None,
    })
}

/// TQ2_0 rows (`n_blocks` blocks a row, as checked by the caller) for `tq2_0_gemv.wgsl`: each
/// block's 16 code words (the file's bytes, as `repack`'s TQ2_0 words) as four 16-byte quarters,
/// a row holding quarter 0 of every block, then quarter 1, … — word c of quarter j of block b of
/// row r at word 4 · ((4r + j) · n_blocks + b) + c is the file's word 4j + c of that block — so
/// invocations taking consecutive blocks read consecutive 16 bytes; the scales as `repack`'s
/// (f16 pairs in block order).
pub(crate) fn tq2_0_quarters(rows: &[u8], n_blocks: usize) -> Repacked {
    let bytes = size_of::<BlockTQ2_0>();
    let total = rows.len() / bytes;
    let mut words = vec![0u32; total * 16];
    let mut halves = Vec::with_capacity(total);
    for (i, b) in rows.chunks_exact(bytes).enumerate() {
        let b: BlockTQ2_0 = bytemuck::pod_read_unaligned(b);
        halves.push(b.d.to_bits());
        let (row, blk) = (i / n_blocks, i % n_blocks);
        for (j, quarter) in b.qs.chunks_exact(16).enumerate() {
            let at = 4 * ((4 * row + j) * n_blocks + blk);
            for (c, word) in quarter.chunks_exact(4).enumerate() {
                words[at + c] = le_word(word);
            }
        }
    }
    Repacked {
        words,
        scales: f16_pairs(&halves),
    }
}

/// Blocks of the Q2_0 codec (an f16 scale, then `elems / 4` bytes of 2-bit codes, lowest bits
/// first) to `gemv_q2.wgsl`'s words: per 32 values two, word c holding at byte L, bits 2s, the
/// code of value 8L + 4c + s.
fn repack_q2(rows: &[u8], elems: usize, bytes: usize) -> Repacked {
    let n_blocks = rows.len() / bytes;
    let mut halves = Vec::with_capacity(n_blocks);
    let mut words = Vec::with_capacity(n_blocks * elems / 16);
    for b in rows.chunks_exact(bytes) {
        halves.push(u16::from_le_bytes([b[0], b[1]]));
        let code = |j: usize| u32::from((b[2 + j / 4] >> (2 * (j % 4))) & 3);
        for k in 0..elems / QK8_0 {
            for c in 0..2 {
                let mut w = 0u32;
                for l in 0..4 {
                    for s in 0..4 {
                        w |= code(32 * k + 8 * l + 4 * c + s) << (8 * l + 2 * s);
                    }
                }
                words.push(w);
            }
        }
    }
    Repacked {
        words,
        scales: f16_pairs(&halves),
    }
}

/// Q4_0 / Q4_1 / Q5_0 / Q5_1 blocks (f16 d, [f16 m], [the fifth bits as a u32], 16 bytes of
/// nibbles: value v < 16 in byte v's low nibble, v ≥ 16 in byte v − 16's high one) to
/// `gemv_q8.wgsl`'s words: 4 a block, word m holding the low 4 bits of the codes of activation
/// word 2m in its low nibbles and of word 2m + 1 in its high ones, then for the 5-bit formats a
/// word whose bit 4i + L is the fifth bit of value 8L + i. Scales: f16 pairs, or for the formats
/// with an offset (Q4_1, Q5_1) d | m << 16 a block.
fn repack_nibbles(format: FormatKind, rows: &[u8], bytes: usize) -> Repacked {
    let offset = matches!(format, FormatKind::Q4_1 | FormatKind::Q5_1);
    let five = matches!(format, FormatKind::Q5_0 | FormatKind::Q5_1);
    let n_blocks = rows.len() / bytes;
    let mut words = Vec::with_capacity(n_blocks * if five { 5 } else { 4 });
    let mut halves = Vec::with_capacity(n_blocks);
    let mut scales = Vec::new();
    for b in rows.chunks_exact(bytes) {
        let d = u16::from_le_bytes([b[0], b[1]]);
        let mut at = 2;
        if offset {
            scales.push(u32::from(d) | u32::from(u16::from_le_bytes([b[2], b[3]])) << 16);
            at += 2;
        } else {
            halves.push(d);
        }
        let fifth = if five {
            at += 4;
            le_word(&b[at - 4..at])
        } else {
            0
        };
        let qs = &b[at..at + 16];
        let nibble = |v: usize| {
            if v < 16 {
                qs[v] & 0x0F
            } else {
                qs[v - 16] >> 4
            }
        };
        for m in 0..4 {
            let bytes =
                [0, 1, 2, 3].map(|l| nibble(8 * l + 2 * m) | nibble(8 * l + 2 * m + 1) << 4);
            words.push(u32::from_le_bytes(bytes));
        }
        if five {
            let mut high = 0u32;
            for i in 0..8 {
                for l in 0..4 {
                    high |= ((fifth >> (8 * l + i)) & 1) << (4 * i + l);
                }
            }
            words.push(high);
        }
    }
    if !offset {
        scales = f16_pairs(&halves);
    }
    Repacked { words, scales }
}
