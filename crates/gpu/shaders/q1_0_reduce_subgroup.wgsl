// The Q1_0 products' lane sum by subgroup shuffles (the `reduce_lanes` of
// q1_0_reduce_tree.wgsl, the same additions in the same order: the same bits). The steps across
// subgroups (off ≥ SG) go through workgroup memory as the tree's; the rest are shuffles — lanes l
// and l ^ off swap their sums and each adds the other's, which for l < off is the tree's
// partial[l] + partial[l + off] (the lanes ≥ off, which the tree leaves alone, no lane below off
// reads again), no barrier. SG is the adapter's smallest subgroup size (a power of two): a 1-D
// workgroup's invocations fill its subgroups in order of local_invocation_index, so each
// SG-aligned run of a row set's lanes shares a subgroup whatever its size. Needs the device's
// `subgroups` feature (naga 30 takes the functions without an `enable`).

override SG: u32;

fn reduce_lanes(lid: u32, part: vec4<f32>) -> vec4<f32> {
    var v = part;
    if LANES > SG {
        let lane = lid % LANES;
        partial[lid] = part;
        workgroupBarrier();
        for (var off = LANES / 2u; off >= SG; off >>= 1u) {
            if lane < off {
                partial[lid] += partial[lid + off];
            }
            workgroupBarrier();
        }
        v = partial[lid];
    }
    for (var off = min(LANES, SG) / 2u; off > 0u; off >>= 1u) {
        v += subgroupShuffleXor(v, off);
    }
    return v;
}
