// Q1_0 weights × Q8_0 activations for N_TOK tokens (a prompt: the gemm), token-major:
// out[t · n_rows + row] = Σ_blocks d_w · Σ_k d_k · Σ ±q, the activation of token t at
// t · (its Q8_0 words) in `act` / `act_meta`. Layouts as q1_0_gemv.wgsl's; so is the split —
// R (≤ 8) rows an invocation, LANES invocations a row set taking every LANES-th block — with a
// tile of TILE (≤ 8) tokens a workgroup: each block's sign bits and scales of the R rows are read
// once and used for every token of the tile. Each (token, row) sum is q1_0_gemv.wgsl's to the
// bit: the same per-block terms added in the same block order, then the same lane sum
// (`reduce_lanes`, the gemv's piece, one token at a time). Workgroup g takes row set g mod G and
// tile g / G (G = the workgroups a gemv of the matrix has).

override LANES: u32 = 64u;
override R: u32 = 4u;
override ACCUM: bool = false;
override N_TOK: u32;
override TILE: u32 = 8u;
// The tile's tokens one after another, each over the row's blocks with one accumulator (the
// weights re-read from cache a token), instead of the blocks outermost with an accumulator a
// token (`Gpu::set_gemm_tokens_outer`: which a device runs faster is measured, `op_cost`). The
// same bits either way.
override TOKENS_OUTER: bool = false;

struct Dims {
    n_rows: u32,
    n_blocks: u32,
    pad0: u32,
    pad1: u32,
}

@group(0) @binding(0) var<storage, read> bits: array<vec4<u32>>;
@group(0) @binding(1) var<storage, read> scales: array<u32>;
@group(0) @binding(2) var<storage, read> act: array<vec4<u32>>;
@group(0) @binding(3) var<storage, read> act_meta: array<vec4<u32>>;
@group(0) @binding(4) var<storage, read_write> out: array<f32>;
@group(0) @binding(5) var<uniform> dims: Dims;

var<workgroup> partial: array<vec4<f32>, 256>;

@compute @workgroup_size(256)
fn main(
    @builtin(local_invocation_index) lid: u32,
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
) {
    let lane = lid % LANES;
    let sets = 256u / LANES;
    let g = wid.x + wid.y * nwg.x;
    let row_groups = (dims.n_rows + sets * R - 1u) / (sets * R);
    let t0 = (g / row_groups) * TILE;
    if t0 >= N_TOK {
        return;
    }
    let nt = min(TILE, N_TOK - t0);
    let row0 = ((g % row_groups) * sets + lid / LANES) * R;
    if TOKENS_OUTER {
        for (var k = 0u; k < TILE; k++) {
            if k >= nt {
                break;
            }
            var one: array<vec4<f32>, 2>;
            for (var blk = lane; blk < dims.n_blocks; blk += LANES) {
                let a = 8u * ((t0 + k) * dims.n_blocks + blk);
                let mb = 2u * ((t0 + k) * dims.n_blocks + blk);
                let m0 = act_meta[mb];
                let m1 = act_meta[mb + 1u];
                for (var r = 0u; r < R; r++) {
                    let row = row0 + r;
                    if row < dims.n_rows {
                        let at = row * dims.n_blocks + blk;
                        let w = bits[at];
                        var s = bitcast<f32>(m0.x) * signed_sum(w.x, act[a], act[a + 1u], m0.y);
                        s += bitcast<f32>(m0.z) * signed_sum(w.y, act[a + 2u], act[a + 3u], m0.w);
                        s += bitcast<f32>(m1.x) * signed_sum(w.z, act[a + 4u], act[a + 5u], m1.y);
                        s += bitcast<f32>(m1.z) * signed_sum(w.w, act[a + 6u], act[a + 7u], m1.w);
                        let pair = unpack2x16float(scales[at / 2u]);
                        one[r / 4u][r % 4u] += select(pair.x, pair.y, (at & 1u) == 1u) * s;
                    }
                }
            }
            write_token(lid, lane, row0, t0 + k, one);
        }
        return;
    }
    var acc: array<array<vec4<f32>, 2>, 8>;
    for (var blk = lane; blk < dims.n_blocks; blk += LANES) {
        var b: array<vec4<u32>, 8>;
        var dw: array<f32, 8>;
        for (var r = 0u; r < R; r++) {
            let row = row0 + r;
            if row < dims.n_rows {
                let at = row * dims.n_blocks + blk;
                b[r] = bits[at];
                let pair = unpack2x16float(scales[at / 2u]);
                dw[r] = select(pair.x, pair.y, (at & 1u) == 1u);
            }
        }
        for (var k = 0u; k < TILE; k++) {
            if k >= nt {
                break;
            }
            let a = 8u * ((t0 + k) * dims.n_blocks + blk);
            let a0 = act[a];
            let a1 = act[a + 1u];
            let a2 = act[a + 2u];
            let a3 = act[a + 3u];
            let a4 = act[a + 4u];
            let a5 = act[a + 5u];
            let a6 = act[a + 6u];
            let a7 = act[a + 7u];
            let mb = 2u * ((t0 + k) * dims.n_blocks + blk);
            let m0 = act_meta[mb];
            let m1 = act_meta[mb + 1u];
            for (var r = 0u; r < R; r++) {
                if row0 + r < dims.n_rows {
                    let w = b[r];
                    var s = bitcast<f32>(m0.x) * signed_sum(w.x, a0, a1, m0.y);
                    s += bitcast<f32>(m0.z) * signed_sum(w.y, a2, a3, m0.w);
                    s += bitcast<f32>(m1.x) * signed_sum(w.z, a4, a5, m1.y);
                    s += bitcast<f32>(m1.z) * signed_sum(w.w, a6, a7, m1.w);
                    acc[k][r / 4u][r % 4u] += dw[r] * s;
                }
            }
        }
    }
    for (var k = 0u; k < TILE; k++) {
        if k >= nt {
            break;
        }
        write_token(lid, lane, row0, t0 + k, acc[k]);
    }
}

// Token `tok`'s sums of rows row0 .. row0 + R: this invocation's part `part` (row r in
// part[r / 4][r % 4]) added to the row set's others by the gemv's `reduce_lanes` (the piece
// joined before this file), written (or added) by the set's first invocation.
fn write_token(lid: u32, lane: u32, row0: u32, tok: u32, part: array<vec4<f32>, 2>) {
    var sums: array<vec4<f32>, 2>;
    sums[0] = reduce_lanes(lid, part[0]);
    if R > 4u {
        sums[1] = reduce_lanes(lid, part[1]);
    }
    if lane == 0u {
        let base = tok * dims.n_rows;
        for (var r = 0u; r < R; r++) {
            if row0 + r < dims.n_rows {
                if ACCUM {
                    out[base + row0 + r] += sums[r / 4u][r % 4u];
                } else {
                    out[base + row0 + r] = sums[r / 4u][r % 4u];
                }
            }
        }
    }
    workgroupBarrier();
}
