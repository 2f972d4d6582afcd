// Activations to Q8_1 on the device, bit for bit the CPU backend's conversion
// (`q8_1::quantize_activation`): Q8_0's block (`store_q8_0_block`, the same d and codes) plus
// s = f16(Σ codes · d), d the unrounded amax / 127 (an exact product: one f32 rounding, as the
// CPU's `sum as f32 * d`, then f32 → f16 to nearest even). Q4_1 / Q5_1 read s for their offset.
//
// Output: codes as Q8_0's (8 words a block, byte L of word i = code 8L + i), and per block
// (d widened to f32, s widened to f32).

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
    var amax = 0.0;
    for (var j = 0u; j < 32u; j++) {
        v[j] = x[blk * 32u + j];
        amax = max(amax, abs(v[j]));
    }
    store_q8_0_block(blk, &v);
    var d = 0.0;
    if amax >= bitcast<f32>(0x0d800000u) {
        d = div_exact(amax, 127.0);
    }
    let total = bitcast<i32>(block_meta[2u * blk + 1u]);
    block_meta[2u * blk + 1u] = bitcast<u32>(f16_value(f16_bits(f32(total) * d)));
}
