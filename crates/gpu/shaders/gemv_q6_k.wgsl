// Q6_K × a Q8_K activation (as `quantize` leaves it: quantize_wg.wgsl), one token, as
// `ggml_vec_dot_q6_K_q8_K` sums: per block d·d_a · Σ over 16-value groups of sc · Σ (code − 32)·q
// (sc: the group's int8 scale).
//
// Weights as in the file but split apart at upload (the 210-byte block is not word aligned):
// `qs` holds a block's 32 words of low nibbles (ql) then its 16 words of high bit pairs (qh);
// `scales` 5 words a block, the 16 int8 scales then d. In half h (128 values) value
// 128h + 32k + l has its low 4 bits in ql byte 64h + 32(k % 2) + l (nibble k / 2) and its high 2
// in qh byte 32h + l (bits 2k), so a word of each lines up with activation word 8(4h + k) + l / 4.
// The codes become code − 32 bytewise (bits 6–7 free: no carries), summed by packed dots.
// Eight rows per workgroup, 32 invocations a row, each taking every 32nd 32-value sub-block.

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
    for (var sub = lane; sub < 8u * N_BLOCKS; sub += 32u) {
        let blk = sub / 8u;
        let j = sub % 8u;
        let at = row * N_BLOCKS + blk;
        let h = j / 4u;
        let k = j % 4u;
        let low = 48u * at + 16u * h + 8u * (k % 2u);
        let high = 48u * at + 32u + 8u * h;
        let a = 64u * blk + 8u * j;
        var s = 0i;
        for (var g = 0u; g < 2u; g++) {
            var sg = 0i;
            for (var i = 4u * g; i < 4u * g + 4u; i++) {
                let c = ((qs[low + i] >> (4u * (k / 2u))) & 0x0f0f0f0fu)
                    | (((qs[high + i] >> (2u * k)) & 0x03030303u) << 4u);
                // c − 32 in each byte: flip bit 5, and where it was clear set bits 6 and 7.
                let clear = ~c & 0x20202020u;
                sg += dot4I8Packed((c ^ 0x20202020u) | (clear << 1u) | (clear << 2u), act[xa + a + i]);
            }
            let group = 2u * j + g;
            let sc = (scales[5u * at + group / 4u] >> (8u * (group % 4u))) & 0xffu;
            s += (i32(sc << 24u) >> 24u) * sg;
        }
        let d = f16_value(scales[5u * at + 4u] & 0xffffu);
        acc += (d * bitcast<f32>(act_meta[xm + 2u * blk])) * f32(s);
    }
    return acc;
}
