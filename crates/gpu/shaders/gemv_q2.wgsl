// The Q2_0 codec's formats (Q2_0: 64 values a block; PQ2_0 and the legacy layout: 128) × a Q8_0
// activation, one token, as `ggml_vec_dot_q2_0_q8_0` sums: per block
// d_w · Σ_k d_k · Σ (code − 1)·q over its SUBS 32-value parts k (one Q8_0 block each).
//
// Weights repacked at upload to the activation's code order: each 32-value part as two words,
// word c holding at byte L, bits 2s, the code of value 8L + 4c + s — so `(w >> 2s) & 0x03030303`
// lines up with activation word 4c + s (byte L = code 8L + 4c + s). Σ (code − 1)·q = Σ code·q − Σ q.
// Block scales apart, as f16 pairs. Eight rows per workgroup, 32 invocations a row.

override N_ROWS: u32;
override N_BLOCKS: u32;
override SUBS: u32;

@group(0) @binding(0) var<storage, read> qs: array<u32>;
@group(0) @binding(1) var<storage, read> scales: array<u32>;
@group(0) @binding(2) var<storage, read> act: array<u32>;
@group(0) @binding(3) var<storage, read> act_meta: array<u32>;
@group(0) @binding(4) var<storage, read_write> out: array<f32>;

// Row `row`'s share of invocation `lane` (of 32) for token `tok` (gemv_rows.wgsl / gemm_rows.wgsl add
// the shares).
fn row_share(row: u32, lane: u32, tok: u32) -> f32 {
    // Token `tok`'s activation (a gemm's are back to back).
    let xa = tok * (8u * SUBS * N_BLOCKS);
    let xm = tok * (2u * SUBS * N_BLOCKS);
    var acc = 0.0;
    for (var blk = lane; blk < N_BLOCKS; blk += 32u) {
        let at = row * N_BLOCKS + blk;
        var scaled = 0.0;
        for (var k = 0u; k < SUBS; k++) {
            let ab = blk * SUBS + k;
            let w = 2u * (at * SUBS + k);
            var s = 0i;
            for (var c = 0u; c < 2u; c++) {
                let wq = qs[w + c];
                for (var sh = 0u; sh < 4u; sh++) {
                    s += dot4I8Packed((wq >> (2u * sh)) & 0x03030303u, act[xa + 8u * ab + 4u * c + sh]);
                }
            }
            s -= bitcast<i32>(act_meta[xm + 2u * ab + 1u]);
            scaled += bitcast<f32>(act_meta[xm + 2u * ab]) * f32(s);
        }
        let pair = scales[at / 2u];
        acc += f16_value(select(pair & 0xffffu, pair >> 16u, (at & 1u) == 1u)) * scaled;
    }
    return acc;
}
