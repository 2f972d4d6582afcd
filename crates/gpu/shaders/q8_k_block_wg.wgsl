// One 256-value block to Q8_K by the 256 invocations of a workgroup, an invocation a value, bit for
// bit the CPU's reference quantizer (`q8_k::quantize_activation`; quantize_wg.wgsl, the standalone
// quantization, is this piece over an activation):
// the value of largest magnitude found by a tree that keeps, between equal magnitudes, the
// earlier value — what the in-order `abs(v) > amax` keeps, so the sign is the same —, the same
// scale and code expressions, and Σ codes (an integer sum: any order). The fused ops' `store_wg`
// (q8_0_block_wg.wgsl has the same interface): the workgroup's values from the activation's value
// `first` (a multiple of 256), the invocation's value `first + lid`; `valid` is the same for the
// whole workgroup (whole blocks). Every invocation must call it (it has barriers).

var<workgroup> qk_abs: array<f32, 256>;
var<workgroup> qk_at: array<u32, 256>;
var<workgroup> qk_value: array<f32, 256>;
var<workgroup> qk_codes: array<i32, 256>;

fn store_wg(first: u32, lid: u32, value: f32, valid: bool) {
    qk_abs[lid] = abs(value);
    qk_at[lid] = lid;
    qk_value[lid] = value;
    workgroupBarrier();
    for (var off = 128u; off > 0u; off >>= 1u) {
        if lid < off {
            let a = qk_abs[lid + off];
            let at = qk_at[lid + off];
            if a > qk_abs[lid] || (a == qk_abs[lid] && at < qk_at[lid]) {
                qk_abs[lid] = a;
                qk_at[lid] = at;
            }
        }
        workgroupBarrier();
    }
    let amax = qk_abs[0];
    let max_signed = qk_value[qk_at[0]];
    var iscale = 0.0;
    var d = 0.0;
    if amax >= bitcast<f32>(0x0d800000u) {
        let sign = select(1.0, -1.0, max_signed > 0.0);
        let magnitude = div_exact(127.0, amax);
        iscale = sign * magnitude;
        d = sign * div_exact(1.0, magnitude);
    }
    qk_codes[lid] = i32(clamp(round(iscale * value), -128.0, 127.0));
    workgroupBarrier();
    let blk = first / 256u;
    if valid && lid < 64u {
        var word = 0u;
        for (var l = 0u; l < 4u; l++) {
            word |= (bitcast<u32>(qk_codes[4u * lid + l]) & 0xffu) << (8u * l);
        }
        words[64u * blk + lid] = word;
    }
    workgroupBarrier();
    for (var off = 128u; off > 0u; off >>= 1u) {
        if lid < off {
            qk_codes[lid] += qk_codes[lid + off];
        }
        workgroupBarrier();
    }
    if valid && lid == 0u {
        block_meta[2u * blk] = bitcast<u32>(d);
        block_meta[2u * blk + 1u] = bitcast<u32>(qk_codes[0]);
    }
    // The next call reuses the workgroup arrays.
    workgroupBarrier();
}
