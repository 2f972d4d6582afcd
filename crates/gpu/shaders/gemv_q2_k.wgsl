// Q2_K and Q3_K (THREE) × a Q8_K activation (as `quantize` leaves it: quantize_wg.wgsl), one token, as
// `ggml_vec_dot_q2_K_q8_K` / `ggml_vec_dot_q3_K_q8_K` sum: per 16-value group g of a block,
// Q2_K: d·d_a · sc_g · Σ code·q − dmin·d_a · m_g · Σ q (sc_g, m_g: the group's 4-bit scale and
// minimum); Q3_K: d·d_a · sc_g · Σ (code − 4)·q (sc_g: the group's signed 6-bit scale).
//
// Both files' 2-bit codes already line up with Q8_K's order: value 128n + 32j + l is bits 2j of
// qs byte 32n + l, so qs word 8n + w shifted by 2j holds the codes of sub-block 4n + j's
// activation word w; Q3_K's third bit of value 32s + l is bit s of hmask byte l. `qs`: a block's
// 16 qs words (Q3_K: then its 8 hmask words); `scales`: 5 words a block — the 16 scale bytes as
// stored (Q2_K: scale | min << 4) or unpacked to int8 at upload (Q3_K), then d (| dmin << 16).
// Eight rows per workgroup, 32 invocations a row, each taking every 32nd 32-value sub-block.

override N_ROWS: u32;
override N_BLOCKS: u32;
override THREE: bool;

@group(0) @binding(0) var<storage, read> qs: array<u32>;
@group(0) @binding(1) var<storage, read> scales: array<u32>;
@group(0) @binding(2) var<storage, read> act: array<u32>;
@group(0) @binding(3) var<storage, read> act_meta: array<u32>;
@group(0) @binding(4) var<storage, read_write> out: array<f32>;

// Row `row`'s share of invocation `lane` (of 32) for token `tok` (gemv_rows.wgsl / gemm_rows.wgsl add
// the shares).
fn row_share(row: u32, lane: u32, tok: u32) -> f32 {
    // Token `tok`'s activation (a gemm's are back to back).
    let xa = tok * (64u * N_BLOCKS);
    let xm = tok * (2u * N_BLOCKS);
    var acc = 0.0;
    for (var sub = lane; sub < 8u * N_BLOCKS; sub += 32u) {
        let blk = sub / 8u;
        let s = sub % 8u;
        let at = row * N_BLOCKS + blk;
        let words = select(16u, 24u, THREE) * at;
        let w = words + 8u * (s / 4u);
        let shift = 2u * (s % 4u);
        let a = 64u * blk + 8u * s;
        var codes = 0i;
        var mins = 0i;
        for (var g = 0u; g < 2u; g++) {
            var sg = 0i;
            var tg = 0i;
            for (var i = 4u * g; i < 4u * g + 4u; i++) {
                var c = (qs[w + i] >> shift) & 0x03030303u;
                if THREE {
                    c |= ((qs[words + 16u + i] >> s) & 0x01010101u) << 2u;
                }
                sg += dot4I8Packed(c, act[xa + a + i]);
                tg += dot4I8Packed(0x01010101u, act[xa + a + i]);
            }
            let group = 2u * s + g;
            let sc = (scales[5u * at + group / 4u] >> (8u * (group % 4u))) & 0xffu;
            if THREE {
                codes += (i32(sc << 24u) >> 24u) * (sg - 4i * tg);
            } else {
                codes += i32(sc & 0xfu) * sg;
                mins += i32(sc >> 4u) * tg;
            }
        }
        let d = scales[5u * at + 4u];
        let da = bitcast<f32>(act_meta[xm + 2u * blk]);
        acc += (f16_value(d & 0xffffu) * da) * f32(codes);
        if !THREE {
            acc -= (f16_value(d >> 16u) * da) * f32(mins);
        }
    }
    return acc;
}
