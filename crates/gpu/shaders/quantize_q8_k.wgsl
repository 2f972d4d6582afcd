// Activations to Q8_K on the device, bit for bit the CPU backend's conversion
// (`q8_k::quantize_activation`, the reference quantizer): per 256 values, iscale = −127 / max
// (max: the value of largest magnitude, with its sign), codes nearest_int(iscale · x) capped at
// 127, d = 1 / iscale. Both quotients by `div_exact` (WGSL's division is not correctly rounded);
// `round` is ties-to-even, as `nearest_int` is. A block whose amax is below 2^-100 gets d = 0 and
// zero codes (outside what this matches: the CPU keeps a tiny d).
//
// Output: each block's codes in order, 4 to a word (64 words), and per block (d, Σ codes).

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
    let base = blk * 256u;
    var amax = 0.0;
    var max_signed = 0.0;
    for (var j = 0u; j < 256u; j++) {
        let v = x[base + j];
        if abs(v) > amax {
            amax = abs(v);
            max_signed = v;
        }
    }
    var iscale = 0.0;
    var d = 0.0;
    if amax >= bitcast<f32>(0x0d800000u) {
        let sign = select(1.0, -1.0, max_signed > 0.0);
        let magnitude = div_exact(127.0, amax);
        iscale = sign * magnitude;
        d = sign * div_exact(1.0, magnitude);
    }
    var total = 0i;
    for (var w = 0u; w < 64u; w++) {
        var word = 0u;
        for (var l = 0u; l < 4u; l++) {
            let q = i32(clamp(round(iscale * x[base + 4u * w + l]), -128.0, 127.0));
            total += q;
            word |= (bitcast<u32>(q) & 0xffu) << (8u * l);
        }
        words[64u * blk + w] = word;
    }
    block_meta[2u * blk] = bitcast<u32>(d);
    block_meta[2u * blk + 1u] = bitcast<u32>(total);
}
