// The RMS norm's factor of the N values of the shader's row from `base`: 1 / sqrt(mean(x²) + EPS)
// (its `N`, `EPS`), the squares summed by the workgroup's 256 invocations in one fixed tree, so
// every shader taking this piece norms a row to the same bits. The shader says where its row's
// value i comes from: `rms_in(i)` (its `x[i]`; q1_0_out_norm.wgsl's residual, an atomic). Every
// invocation of the workgroup calls it (its barriers) and gets the factor.

var<workgroup> part: array<f32, 256>;

fn rms_scale(base: u32, lid: u32) -> f32 {
    var s = 0.0;
    for (var i = lid; i < N; i += 256u) {
        let v = rms_in(base + i);
        s += v * v;
    }
    part[lid] = s;
    workgroupBarrier();
    for (var off = 128u; off > 0u; off >>= 1u) {
        if lid < off {
            part[lid] += part[lid + off];
        }
        workgroupBarrier();
    }
    return 1.0 / sqrt(part[0] / f32(N) + EPS);
}
