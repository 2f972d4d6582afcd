// The matrix-matrix walk of the gemv_rows family (gemm: N_TOK tokens, activations and outputs
// token-major, out[t · N_ROWS + row]): gemv_rows.wgsl's split — eight rows a workgroup, 32
// invocations a row, each format's `row_share` — with a tile of TILE tokens a workgroup, taken in
// turn, so a tile reads the eight rows' weights from memory once (the later tokens find them in
// cache; each token's decode is the format's own `row_share`). Each token's sum is gemv_rows.wgsl's
// to the bit: the same shares, added by the same halving tree. Workgroup g takes rows 8 (g mod R)
// .. and tile g / R (R = ⌈N_ROWS / 8⌉).

override N_TOK: u32;
override TILE: u32 = 8u;

var<workgroup> part: array<f32, 256>;

@compute @workgroup_size(256)
fn main(
    @builtin(local_invocation_index) lid: u32,
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
) {
    let lane = lid % 32u;
    let g = wid.x + wid.y * nwg.x;
    let row_groups = (N_ROWS + 7u) / 8u;
    let t0 = (g / row_groups) * TILE;
    if t0 >= N_TOK {
        return;
    }
    let row = (g % row_groups) * 8u + lid / 32u;
    for (var k = 0u; k < TILE; k++) {
        let tok = t0 + k;
        if tok >= N_TOK {
            break;
        }
        var acc = 0.0;
        if row < N_ROWS {
            acc = row_share(row, lane, tok);
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
            out[tok * N_ROWS + row] = part[lid];
        }
        workgroupBarrier();
    }
}
