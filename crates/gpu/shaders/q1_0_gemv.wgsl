// Q1_0 weights × Q8_0 activations, one token (decode): out[row] = Σ_blocks d_w · Σ_k d_k · Σ ±q.
//
// Weights are repacked at upload: `bits` holds each row's blocks as 16-byte words (word k of a
// block = values 32k .. 32k+31, bit j = value 32k + j, set for +d), `scales` the block scales
// apart as f16 pairs. The activation is quantized to Q8_0 with its codes permuted inside each
// 32-value block — byte L of word i is code 8L + i — so `(bits >> i) & 0x01010101` selects, lane
// by lane, exactly the codes word i holds and one packed dot product sums the positive ones:
// Σ ±q = 2 · Σ_{bit set} q − Σ q, with Σ q (`total`) computed with the activation.
//
// An invocation takes R (≤ 8) rows at once (each activation load serves them all) and every
// LANES-th block of them; the LANES invocations of a row set sum their parts by halves — through
// workgroup memory, or subgroup shuffles where the device has them (`reduce_lanes`, a piece:
// q1_0_reduce_tree.wgsl, q1_0_reduce_subgroup.wgsl; the same bits).
// A workgroup takes TILES such tiles of rows in turn (the same sums for each row: only which
// workgroup computes it changes).
//
// The activation comes through a piece joined before this file: `act_word(i)` (16-byte word i of
// the codes), `act_meta_word(i)` (meta words 4i .. 4i + 3) and `prologue(lid)`, which every
// invocation calls first — q1_0_act_storage.wgsl reads a quantized activation from memory and
// has no prologue; q1_0_act_norm.wgsl RMS-norms and quantizes the f32 row into workgroup memory
// in the workgroup itself (the norm as the product's prologue, one dispatch instead of two).
// Where the rows go comes through another piece: `tile_row0(g, tile, tile_rows)` (the first row
// of workgroup g's tile), `emit(row, local, value)` (a row's sum; `local` its place among the
// workgroup's rows) and `epilogue(lid, g)`, which every invocation calls last —
// q1_0_out_rows.wgsl writes each row's sum (or adds it: the residual epilogue), contiguous tiles;
// q1_0_out_swiglu.wgsl takes a Q8_0 block of SwiGLU's output a workgroup from a stacked
// gate|up matrix and quantizes it (SwiGLU as the product's epilogue).

override LANES: u32 = 64u;
override R: u32 = 4u;
override TILES: u32 = 1u;

struct Dims {
    n_rows: u32,
    // Q1_0 blocks per row.
    n_blocks: u32,
    pad0: u32,
    pad1: u32,
}

@group(0) @binding(0) var<storage, read> bits: array<vec4<u32>>;
@group(0) @binding(1) var<storage, read> scales: array<u32>;
// Bindings 2 and 3: the activation's piece. Eight 16-byte words per Q1_0 block (the permuted
// codes of its four Q8_0 blocks), two meta words per Q1_0 block: (d, Σq) of its Q8_0 blocks 0, 1
// and 2, 3 (d as f32 bits).
// Binding 4 (and 6): the output's piece.
@group(0) @binding(5) var<uniform> dims: Dims;

var<workgroup> partial: array<vec4<f32>, 256>;

// `signed_sum`: q1_0_sum.wgsl.

@compute @workgroup_size(256)
fn main(
    @builtin(local_invocation_index) lid: u32,
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
) {
    prologue(lid);
    let lane = lid % LANES;
    let sets = 256u / LANES;
    let g = wid.x + wid.y * nwg.x;
    for (var tile = 0u; tile < TILES; tile++) {
        let row0 = tile_row0(g, tile, sets * R) + (lid / LANES) * R;
        // Row r's part in acc[r / 4][r % 4] (R ≤ 8).
        var acc: array<vec4<f32>, 2>;
        for (var blk = lane; blk < dims.n_blocks; blk += LANES) {
            let a = 8u * blk;
            let a0 = act_word(a);
            let a1 = act_word(a + 1u);
            let a2 = act_word(a + 2u);
            let a3 = act_word(a + 3u);
            let a4 = act_word(a + 4u);
            let a5 = act_word(a + 5u);
            let a6 = act_word(a + 6u);
            let a7 = act_word(a + 7u);
            let m0 = act_meta_word(2u * blk);
            let m1 = act_meta_word(2u * blk + 1u);
            for (var r = 0u; r < R; r++) {
                let row = row0 + r;
                if row < dims.n_rows {
                    let at = row * dims.n_blocks + blk;
                    let b = bits[at];
                    var s = bitcast<f32>(m0.x) * signed_sum(b.x, a0, a1, m0.y);
                    s += bitcast<f32>(m0.z) * signed_sum(b.y, a2, a3, m0.w);
                    s += bitcast<f32>(m1.x) * signed_sum(b.z, a4, a5, m1.y);
                    s += bitcast<f32>(m1.z) * signed_sum(b.w, a6, a7, m1.w);
                    let pair = unpack2x16float(scales[at / 2u]);
                    acc[r / 4u][r % 4u] += select(pair.x, pair.y, (at & 1u) == 1u) * s;
                }
            }
        }
        // The row set's sums (`reduce_lanes`: q1_0_reduce_tree.wgsl or
        // q1_0_reduce_subgroup.wgsl, the same bits), four rows at a time.
        var sums: array<vec4<f32>, 2>;
        sums[0] = reduce_lanes(lid, acc[0]);
        if R > 4u {
            sums[1] = reduce_lanes(lid, acc[1]);
        }
        if lane == 0u {
            for (var r = 0u; r < R; r++) {
                if row0 + r < dims.n_rows {
                    emit(row0 + r, tile * sets * R + (lid / LANES) * R + r, sums[r / 4u][r % 4u]);
                }
            }
        }
        // The next tile reuses `partial`.
        if TILES > 1u {
            workgroupBarrier();
        }
    }
    epilogue(lid, g);
}
