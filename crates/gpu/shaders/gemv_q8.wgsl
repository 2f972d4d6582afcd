// The 32-value formats × their 8-bit partner (as `quantize_q8_0` / `quantize_q8_1` leave it), one
// token: out[row] = Σ_blocks d_w · d_a · Σ w·q (+ m_w · s_a where the format has an offset),
// the integer part by packed 4×8-bit dot products.
//
// FORM: 0 Q8_0, 1 Q4_0, 2 Q4_1, 3 Q5_0, 4 Q5_1 (Q4_1 / Q5_1 take Q8_1, the others Q8_0).
// Weights are repacked at upload to the activation's code order (byte L of word i = value 8L + i):
// Q8_0 as 8 such words a block; the 4- and 5-bit formats as 4 words a block, word m holding in
// its low nibbles the codes' low 4 bits of word 2m and in its high nibbles those of word 2m + 1,
// and for Q5_0 / Q5_1 a fifth word whose bit 4i + L is the fifth bit of value 8L + i. Codes are
// unsigned: Σ (c − o)·q = Σ c·q − o · Σ q, Σ q from the Q8_0 activation (o = 8 for Q4_0, 16 for
// Q5_0). Scales apart: Q8_0 / Q4_0 / Q5_0 as f16 pairs (a block a half), Q4_1 / Q5_1 a word a
// block (d low, m high). Eight rows per workgroup, 32 invocations a row, each taking every 32nd
// block.

override N_ROWS: u32;
override N_BLOCKS: u32;
override FORM: u32;

@group(0) @binding(0) var<storage, read> qs: array<u32>;
@group(0) @binding(1) var<storage, read> scales: array<u32>;
@group(0) @binding(2) var<storage, read> act: array<u32>;
@group(0) @binding(3) var<storage, read> act_meta: array<u32>;
@group(0) @binding(4) var<storage, read_write> out: array<f32>;

// Four fifth bits (bit L: byte L's) to 0x10 in each byte.
fn spread(h: u32) -> u32 {
    return ((h & 1u) | ((h & 2u) << 7u) | ((h & 4u) << 14u) | ((h & 8u) << 21u)) << 4u;
}

// Row `row`'s share of invocation `lane` (of 32) for token `tok` (gemv_rows.wgsl / gemm_rows.wgsl add
// the shares).
fn row_share(row: u32, lane: u32, tok: u32) -> f32 {
    // Token `tok`'s activation (a gemm's are back to back).
    let xa = tok * (8u * N_BLOCKS);
    let xm = tok * (2u * N_BLOCKS);
    let five = FORM >= 3u;
    let offset = FORM == 2u || FORM == 4u;
    var acc = 0.0;
    for (var blk = lane; blk < N_BLOCKS; blk += 32u) {
        let at = row * N_BLOCKS + blk;
        let a = 8u * blk;
        var s = 0i;
        if FORM == 0u {
            for (var i = 0u; i < 8u; i++) {
                s += dot4I8Packed(qs[8u * at + i], act[xa + a + i]);
            }
        } else {
            let base = select(4u, 5u, five) * at;
            var high = 0u;
            if five {
                high = qs[base + 4u];
            }
            for (var m = 0u; m < 4u; m++) {
                let wq = qs[base + m];
                let lo = (wq & 0x0f0f0f0fu) | spread((high >> (8u * m)) & 0xfu);
                let hi = ((wq >> 4u) & 0x0f0f0f0fu) | spread((high >> (8u * m + 4u)) & 0xfu);
                s += dot4I8Packed(lo, act[xa + a + 2u * m]);
                s += dot4I8Packed(hi, act[xa + a + 2u * m + 1u]);
            }
            if FORM == 1u {
                s -= 8i * bitcast<i32>(act_meta[xm + 2u * blk + 1u]);
            } else if FORM == 3u {
                s -= 16i * bitcast<i32>(act_meta[xm + 2u * blk + 1u]);
            }
        }
        let da = bitcast<f32>(act_meta[xm + 2u * blk]);
        if offset {
            let dm = scales[at];
            let sa = bitcast<f32>(act_meta[xm + 2u * blk + 1u]);
            acc += f32(s) * (f16_value(dm & 0xffffu) * da) + f16_value(dm >> 16u) * sa;
        } else {
            let pair = scales[at / 2u];
            let dw = f16_value(select(pair & 0xffffu, pair >> 16u, (at & 1u) == 1u));
            acc += f32(s) * (dw * da);
        }
    }
    return acc;
}
