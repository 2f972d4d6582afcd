// TQ2_0 weights × a Q8_K activation (as `quantize` leaves it: quantize_wg.wgsl), one token:
// out[row] = Σ_blocks d_a · d_w · Σ (code − 1)·q = … · (Σ code·q − Σ q).
//
// The weights keep the file's layout (`ggml_vec_dot_tq2_0_q8_K`'s): byte m of each 32-byte half h
// holds, at bits 2l, the code of value 128h + 32l + m. So a word of bytes m..m + 3 shifted by 2l
// and masked holds the codes of values 128h + 32l + m .. + 3, which the activation keeps in order
// in one word: one packed 4×8-bit dot product per 4 values. Block scales apart, as f16 pairs.
// Eight rows per workgroup, 32 invocations a row, each taking every 32nd block. The old kernel
// (`Tq2Kernel::Old`, kept for an A/B): tq2_0_gemv.wgsl, on 16-byte quarter-block loads, is the default.

override N_ROWS: u32;
override N_BLOCKS: u32;

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
    for (var blk = lane; blk < N_BLOCKS; blk += 32u) {
        let at = row * N_BLOCKS + blk;
        let a = 64u * blk;
        var s = 0i;
        for (var h = 0u; h < 2u; h++) {
            for (var m4 = 0u; m4 < 8u; m4++) {
                let wq = qs[16u * at + 8u * h + m4];
                for (var l = 0u; l < 4u; l++) {
                    s += dot4I8Packed((wq >> (2u * l)) & 0x03030303u, act[xa + a + 32u * h + 8u * l + m4]);
                }
            }
        }
        s -= bitcast<i32>(act_meta[xm + 2u * blk + 1u]);
        let pair = scales[at / 2u];
        let dw = f16_value(select(pair & 0xffffu, pair >> 16u, (at & 1u) == 1u));
        acc += f32(s) * (bitcast<f32>(act_meta[xm + 2u * blk]) * dw);
    }
    return acc;
}
