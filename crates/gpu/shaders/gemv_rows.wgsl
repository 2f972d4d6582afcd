// The walk the matrix-vector shaders share (gemv_q8, gemv_q2, gemv_q2_k, gemv_q4_k, gemv_q6_k,
// gemv_tq2_0, gemv_float, gemv_f16_native): eight rows a workgroup, 32 invocations a row, each summing its share
// of the row (`row_share`, the including shader's, which also declares N_ROWS and `out`), then
// the row's 32 shares added by halves in workgroup memory and written by the row's first
// invocation — or, with ACCUM, added to what `out` holds there (a residual add as the product's
// epilogue: `add`'s bits, f32 addition being commutative).

override ACCUM: bool = false;

var<workgroup> part: array<f32, 256>;

@compute @workgroup_size(256)
fn main(
    @builtin(local_invocation_index) lid: u32,
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
) {
    let lane = lid % 32u;
    let row = (wid.x + wid.y * nwg.x) * 8u + lid / 32u;
    var acc = 0.0;
    if row < N_ROWS {
        acc = row_share(row, lane, 0u);
    }
    part[lid] = acc;
    workgroupBarrier();
    for (var off = 16u; off > 0u; off >>= 1u) {
        if lane < off {
            part[lid] += part[lid + off];
        }
        workgroupBarrier();
    }
    if lane == 0u && row < N_ROWS {
        if ACCUM {
            out[row] = out[row] + part[lid];
        } else {
            out[row] = part[lid];
        }
    }
}
