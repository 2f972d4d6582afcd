// Activations to Q8_0 on the device (and to Q8_1 with the q8_1_meta.wgsl piece: the same d and
// codes, the block's s in place of Σ codes), bit for bit the CPU backend's conversion
// (`q8_0::quantize_activation`, `q8_1::quantize_activation`): per 32 values, d = f16(amax / 127) and codes
// round_ties_even(x · (127 / amax)). WGSL's division is not correctly rounded (2.5 ulp), so both
// quotients are computed exactly by long division; f32 → f16 rounds to nearest even in integers
// (the `half` crate's conversion, subnormals included). Multiplication and `round` are exact /
// ties-to-even in WGSL. A block whose amax is below 2^-100 gets
// d = 0 and zero codes (the CPU: the same d = 0, so the same products, but saturated codes).
//
// Output in the layout the products read: each block's codes as 8 words, byte L of word i = code
// 8L + i, and per block (d widened to f32, Σ codes — Q8_1: s widened to f32).

override N_BLOCKS: u32;

@group(0) @binding(0) var<storage, read> x: array<f32>;
@group(0) @binding(1) var<storage, read_write> words: array<u32>;
@group(0) @binding(2) var<storage, read_write> block_meta: array<u32>;

@compute @workgroup_size(64)
fn main(
    @builtin(global_invocation_id) gid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
) {
    let blk = gid.x + gid.y * nwg.x * 64u;
    if blk >= N_BLOCKS {
        return;
    }
    var v: array<f32, 32>;
    for (var j = 0u; j < 32u; j++) {
        v[j] = x[blk * 32u + j];
    }
    store_q8_0_block(blk, &v);
}
