// Q4_K and Q5_K (FIVE) × a Q8_K activation (as `quantize` leaves it: quantize_wg.wgsl), one token, as
// `ggml_vec_dot_q{4,5}_K_q8_K` sum: per 32-value sub-block j of a block,
// d·d_a · sc_j · Σ code·q − dmin·d_a · m_j · Σ q (sc_j, m_j: the 6-bit scale and minimum).
//
// The file's own code layout already lines up with Q8_K's order (codes in order, 4 to a word):
// each 64 values own 32 bytes, the first 32 values in the low nibbles, the next 32 in the high
// ones, so word w of sub-block pair c masked to its low (high) nibbles holds the codes of
// activation word 16c + w (16c + 8 + w). Q5_K's fifth bits: value 32j + l's is bit j of its
// qh byte l, so qh word w shifted by j lines up with sub-block j's activation word w.
// `qs`: a block's 32 code words (Q5_K: then its 8 qh words); `scales`: 4 words a block
// (d | dmin << 16, then the 12 packed scale bytes). Σ q by a packed dot with 1s.
// Eight rows per workgroup, 32 invocations a row, each taking every 32nd sub-block.

override N_ROWS: u32;
override N_BLOCKS: u32;
override FIVE: bool;

@group(0) @binding(0) var<storage, read> qs: array<u32>;
@group(0) @binding(1) var<storage, read> scales: array<u32>;
@group(0) @binding(2) var<storage, read> act: array<u32>;
@group(0) @binding(3) var<storage, read> act_meta: array<u32>;
@group(0) @binding(4) var<storage, read_write> out: array<f32>;

// Byte k (0..12) of block `at`'s packed scales.
fn scale_byte(at: u32, k: u32) -> u32 {
    return (scales[4u * at + 1u + k / 4u] >> (8u * (k % 4u))) & 0xffu;
}

// Row `row`'s share of invocation `lane` (of 32) for token `tok` (gemv_rows.wgsl / gemm_rows.wgsl add
// the shares).
fn row_share(row: u32, lane: u32, tok: u32) -> f32 {
    // Token `tok`'s activation (a gemm's are back to back).
    let xa = tok * (64u * N_BLOCKS);
    let xm = tok * (2u * N_BLOCKS);
    var acc = 0.0;
    for (var sub = lane; sub < 8u * N_BLOCKS; sub += 32u) {
        let blk = sub / 8u;
        let j = sub % 8u;
        let at = row * N_BLOCKS + blk;
        // `get_scale_min_k4`.
        var sc: u32;
        var mn: u32;
        if j < 4u {
            sc = scale_byte(at, j) & 63u;
            mn = scale_byte(at, j + 4u) & 63u;
        } else {
            let b = scale_byte(at, j + 4u);
            sc = (b & 0xfu) | ((scale_byte(at, j - 4u) >> 6u) << 4u);
            mn = (b >> 4u) | ((scale_byte(at, j) >> 6u) << 4u);
        }
        let words = select(32u, 40u, FIVE) * at;
        let w = words + 8u * (j / 2u);
        let shift = 4u * (j % 2u);
        let a = 64u * blk + 8u * j;
        var s = 0i;
        var t = 0i;
        for (var i = 0u; i < 8u; i++) {
            let q = act[xa + a + i];
            var c = (qs[w + i] >> shift) & 0x0f0f0f0fu;
            if FIVE {
                c |= ((qs[words + 32u + i] >> j) & 0x01010101u) << 4u;
            }
            s += dot4I8Packed(c, q);
            t += dot4I8Packed(0x01010101u, q);
        }
        let d = scales[4u * at];
        let da = bitcast<f32>(act_meta[xm + 2u * blk]);
        acc += (f16_value(d & 0xffffu) * da) * f32(i32(sc) * s);
        acc -= (f16_value(d >> 16u) * da) * f32(i32(mn) * t);
    }
    return acc;
}
