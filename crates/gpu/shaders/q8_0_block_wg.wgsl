// One 32-value block to Q8_0 by 32 invocations of a 256-invocation workgroup — eight blocks at a
// time, block slot `lid / 32`, value `lid % 32` — with the same result bits as q8_0_block.wgsl's
// one-invocation `store_q8_0_block` (the maximum and the codes' sum do not depend on the order,
// the scale and every code are the same expressions), but the values loaded and rounded in
// parallel: a block per invocation leaves a decode step's quantizations latency-bound (the H200
// spent 19–25 µs on a 4096- or 12288-value one). Every invocation of the workgroup must call it
// (it has barriers); `valid` false for a slot past the data (nothing is written for it).

var<workgroup> q8_lanes: array<f32, 256>;
var<workgroup> q8_codes: array<i32, 256>;

fn store_q8_0_block_wg(blk: u32, lid: u32, value: f32, valid: bool) {
    let slot = lid & ~31u;
    let lane = lid & 31u;
    q8_lanes[lid] = abs(value);
    workgroupBarrier();
    for (var off = 16u; off > 0u; off >>= 1u) {
        if lane < off {
            q8_lanes[lid] = max(q8_lanes[lid], q8_lanes[lid + off]);
        }
        workgroupBarrier();
    }
    let amax = q8_lanes[slot];
    var d = 0.0;
    var id = 0.0;
    if amax >= bitcast<f32>(0x0d800000u) {
        d = div_exact(amax, 127.0);
        id = div_exact(127.0, amax);
    }
    q8_codes[lid] = i32(clamp(round(value * id), -128.0, 127.0));
    workgroupBarrier();
    if valid && lane < 8u {
        // Word i of the block: codes i, 8 + i, 16 + i, 24 + i (q8_0_block.wgsl's order).
        var word = 0u;
        for (var l = 0u; l < 4u; l++) {
            word |= (bitcast<u32>(q8_codes[slot + 8u * l + lane]) & 0xffu) << (8u * l);
        }
        words[8u * blk + lane] = word;
    }
    if valid && lane == 0u {
        var total = 0i;
        for (var j = 0u; j < 32u; j++) {
            total += q8_codes[slot + j];
        }
        block_meta[2u * blk] = bitcast<u32>(f16_value(f16_bits(d)));
        block_meta[2u * blk + 1u] = q8_second(total, d);
    }
    // The next call reuses the workgroup arrays.
    workgroupBarrier();
}

// The fused ops' entry (the interface q8_k_block_wg.wgsl also has): the workgroup's 256 values
// from the activation's value `first` (a multiple of 32), the invocation's value `first + lid`.
fn store_wg(first: u32, lid: u32, value: f32, valid: bool) {
    store_q8_0_block_wg(first / 32u + lid / 32u, lid, value, valid);
}
