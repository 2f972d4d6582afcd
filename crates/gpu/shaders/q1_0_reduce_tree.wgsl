// The Q1_0 products' lane sum (q1_0_gemv.wgsl's and q1_0_gemm.wgsl's `reduce_lanes`): the
// LANES parts of a row set (`part`, this invocation's; the set's lanes are LANES consecutive
// invocations) added by halves through workgroup memory, a barrier a step — lane l < off adds
// lane l + off's, off = LANES / 2 .. 1 — the sum returned to the set's first lane.

fn reduce_lanes(lid: u32, part: vec4<f32>) -> vec4<f32> {
    let lane = lid % LANES;
    partial[lid] = part;
    workgroupBarrier();
    for (var off = LANES / 2u; off > 0u; off >>= 1u) {
        if lane < off {
            partial[lid] += partial[lid + off];
        }
        workgroupBarrier();
    }
    return partial[lid];
}
