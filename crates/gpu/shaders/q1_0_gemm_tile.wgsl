// Q1_0 weights × Q8_0 activations for N_TOK tokens (a prompt: the gemm), token-major, as
// q1_0_gemm.wgsl (the same layouts and bindings) but a workgroup a tile of ROWS rows × TOKENS
// tokens that reads each weight once for all the tile's tokens and keeps the sums in registers:
// invocation i owns row i mod ROWS of the tile and PER = TOKENS · ROWS / 256 consecutive tokens
// (from (i / ROWS) · PER), one accumulator each. The tokens' Q8_0 codes and scales are staged in
// workgroup memory, STAGE (token, block) pairs at a time — every block of the stage for every
// token of the tile —, read by every row: a warp is 32 rows of the same tokens, so each read is
// one broadcast (no bank conflict). Each row's block — its 128 sign bits, 16 bytes, and its f16
// scale — is loaded once into registers, its eight 0/1 masks a word made once and dotted with
// every token's codes (q1_0_sum.wgsl's identity: Σ±q = 2 · Σ_{bit set} q − Σq). DIRECT: no
// staging — each warp reads its tokens' codes from the activation (one address a warp, from
// cache), no barrier; which is faster on a device is for `op_cost` to say.
//
// A term per (row, token, block): the block's four Q8_0 sub-block sums d_k · (2 · sel − total),
// added in sub-block order, times the row's scale, added to the accumulator in block order — not
// the gemv's order (its blocks are split over 64 lanes and added by a halving tree), so the
// results are the gemv's within rounding, not its bits. Per weight and token: 1/4 of a
// dot4I8Packed and 1/8 of a 16-byte broadcast read; per weight once a tile: 1/8 byte from memory
// (+ 1/64 for the scale) and 1/8 of a shift-and-mask.
//
// Workgroup g takes row tile g mod ceil(n_rows / ROWS) and token tile g / that.

override ACCUM: bool = false;
override N_TOK: u32;
// Rows of a tile, one an invocation: 32, 64, 128 or 256 (a warp's 32 rows share their tokens).
override ROWS: u32 = 32u;
// Tokens of a tile: a power of two ≤ 64, ROWS · TOKENS / 256 between 1 and 16.
override TOKENS: u32 = 32u;
// Each warp reads its tokens' codes and scales from the activation itself (one address for the
// whole warp, from cache) instead of from the staged copy: no staging, no barrier.
override DIRECT: bool = false;

// (token, block) pairs staged at a time: TOKENS tokens × STAGE / TOKENS blocks.
const STAGE: u32 = 64u;
// The most tokens an invocation owns.
const MOST: u32 = 16u;

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

// Slot s = k · (STAGE / TOKENS) + j: the tile's token k, the stage's block j — its 8 words of
// codes (two a Q8_0 sub-block) and its 2 words of (d, Σ codes) pairs.
var<workgroup> codes: array<vec4<u32>, 512>;
var<workgroup> sums: array<vec4<u32>, 128>;

@compute @workgroup_size(256)
fn main(
    @builtin(local_invocation_index) lid: u32,
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
) {
    let per = TOKENS * ROWS / 256u;
    let blocks = STAGE / TOKENS;
    let g = wid.x + wid.y * nwg.x;
    let row_tiles = (dims.n_rows + ROWS - 1u) / ROWS;
    let t0 = (g / row_tiles) * TOKENS;
    // The same for the whole workgroup (the barriers below stay uniform).
    if t0 >= N_TOK {
        return;
    }
    let row = (g % row_tiles) * ROWS + lid % ROWS;
    let first = (lid / ROWS) * per;
    // An invocation past the matrix's rows or the gemm's tokens (a short gemm's idle warps) only
    // stages; the branch around its sums holds no barrier.
    let busy = row < dims.n_rows && t0 + first < N_TOK;
    let row_at = row * dims.n_blocks;
    var acc: array<f32, MOST>;
    for (var b0 = 0u; b0 < dims.n_blocks; b0 += blocks) {
        for (var i = lid; i < STAGE * 8u && !DIRECT; i += 256u) {
            let slot = i / 8u;
            let tok = t0 + slot / blocks;
            let blk = b0 + slot % blocks;
            var v = vec4<u32>(0u);
            if tok < N_TOK && blk < dims.n_blocks {
                v = act[8u * (tok * dims.n_blocks + blk) + i % 8u];
            }
            codes[i] = v;
        }
        if lid < STAGE * 2u && !DIRECT {
            let slot = lid / 2u;
            let tok = t0 + slot / blocks;
            let blk = b0 + slot % blocks;
            var v = vec4<u32>(0u);
            if tok < N_TOK && blk < dims.n_blocks {
                v = act_meta[2u * (tok * dims.n_blocks + blk) + lid % 2u];
            }
            sums[lid] = v;
        }
        if !DIRECT {
            workgroupBarrier();
        }
        let here = select(0u, min(blocks, dims.n_blocks - b0), busy);
        for (var j = 0u; j < here; j++) {
            let at = row_at + b0 + j;
            let w = bits[at];
            let pair = unpack2x16float(scales[at / 2u]);
            let dw = select(pair.x, pair.y, (at & 1u) == 1u);
            var s: array<f32, MOST>;
            for (var q = 0u; q < 4u; q++) {
                let b = w[q];
                let m0 = b & 0x01010101u;
                let m1 = (b >> 1u) & 0x01010101u;
                let m2 = (b >> 2u) & 0x01010101u;
                let m3 = (b >> 3u) & 0x01010101u;
                let m4 = (b >> 4u) & 0x01010101u;
                let m5 = (b >> 5u) & 0x01010101u;
                let m6 = (b >> 6u) & 0x01010101u;
                let m7 = (b >> 7u) & 0x01010101u;
                for (var k = 0u; k < per; k++) {
                    var a0: vec4<u32>;
                    var a1: vec4<u32>;
                    var m: vec4<u32>;
                    if DIRECT {
                        // A token past the gemm's reads the last one (its sum is not written).
                        let at_act = min(t0 + first + k, N_TOK - 1u) * dims.n_blocks + b0 + j;
                        a0 = act[8u * at_act + 2u * q];
                        a1 = act[8u * at_act + 2u * q + 1u];
                        m = act_meta[2u * at_act + q / 2u];
                    } else {
                        let slot = (first + k) * blocks + j;
                        a0 = codes[8u * slot + 2u * q];
                        a1 = codes[8u * slot + 2u * q + 1u];
                        m = sums[2u * slot + q / 2u];
                    }
                    let odd = (q & 1u) == 1u;
                    let d = bitcast<f32>(select(m.x, m.z, odd));
                    let total = bitcast<i32>(select(m.y, m.w, odd));
                    var sel = dot4I8Packed(a0.x, m0);
                    sel += dot4I8Packed(a0.y, m1);
                    sel += dot4I8Packed(a0.z, m2);
                    sel += dot4I8Packed(a0.w, m3);
                    sel += dot4I8Packed(a1.x, m4);
                    sel += dot4I8Packed(a1.y, m5);
                    sel += dot4I8Packed(a1.z, m6);
                    sel += dot4I8Packed(a1.w, m7);
                    let term = d * f32(2 * sel - total);
                    if q == 0u {
                        s[k] = term;
                    } else {
                        s[k] += term;
                    }
                }
            }
            for (var k = 0u; k < per; k++) {
                acc[k] += dw * s[k];
            }
        }
        // The next stage overwrites the arrays.
        if !DIRECT {
            workgroupBarrier();
        }
    }
    if busy {
        for (var k = 0u; k < per; k++) {
            let tok = t0 + first + k;
            if tok < N_TOK {
                let at = tok * dims.n_rows + row;
                if ACCUM {
                    out[at] += acc[k];
                } else {
                    out[at] = acc[k];
                }
            }
        }
    }
}
