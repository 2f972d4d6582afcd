// Activations to Q8_0 on the device, bit for bit the CPU backend's conversion
// (`q8_0::quantize_activation`): per 32 values, d = f16(amax / 127) and codes
// round_ties_even(x · (127 / amax)). WGSL's division is not correctly rounded (2.5 ulp), so both
// quotients are computed exactly by long division; f32 → f16 rounds to nearest even in integers
// (the `half` crate's conversion, subnormals included). Multiplication and `round` are exact /
// ties-to-even in WGSL. A block whose amax is below 2^-100 gets
// d = 0 and zero codes (the CPU: the same d = 0, so the same products, but saturated codes).
//
// Output in the layout the products read: each block's codes as 8 words, byte L of word i = code
// 8L + i, and per block (d widened to f32, Σ codes).

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
    let base = blk * 32u;
    var amax = 0.0;
    for (var j = 0u; j < 32u; j++) {
        amax = max(amax, abs(x[base + j]));
    }
    var d = 0.0;
    var id = 0.0;
    if amax >= bitcast<f32>(0x0d800000u) {
        d = div_exact(amax, 127.0);
        id = div_exact(127.0, amax);
    }
    let dh = f16_bits(d);
    var total = 0i;
    for (var i = 0u; i < 8u; i++) {
        var word = 0u;
        for (var l = 0u; l < 4u; l++) {
            let q = i32(clamp(round(x[base + 8u * l + i] * id), -128.0, 127.0));
            total += q;
            word |= (bitcast<u32>(q) & 0xffu) << (8u * l);
        }
        words[8u * blk + i] = word;
    }
    block_meta[2u * blk] = bitcast<u32>(f16_value(dh));
    block_meta[2u * blk + 1u] = bitcast<u32>(total);
}
