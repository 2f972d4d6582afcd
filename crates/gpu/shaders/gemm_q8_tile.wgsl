// The 32-value formats × their 8-bit partner for N_TOK tokens (gemv_q8.wgsl's FORM, layouts and
// bindings; activations and outputs token-major) by q1_0_gemm_tile.wgsl's register tile: a
// workgroup ROWS rows (one an invocation) × TOKENS tokens, PER = TOKENS · ROWS / 256 tokens an
// invocation with an accumulator each; the tokens' codes and (d, Σ codes | s) staged in workgroup
// memory STAGE (token, block) pairs at a time and read as broadcasts (a warp is 32 rows of the
// same tokens). Each row's block is read from memory once a tile and decoded once into eight
// words of signed bytes (the 4- and 5-bit codes spread as gemv_q8.wgsl does), dotted with every
// token's eight words: per weight and token 1/4 of a dot4I8Packed. Each (token, row) adds its
// blocks in order (not the gemv's lanes and tree): the gemv's sum within rounding, not its bits.
//
// Workgroup g takes row tile g mod ceil(N_ROWS / ROWS) and token tile g / that.

override N_ROWS: u32;
override N_BLOCKS: u32;
override FORM: u32;
override N_TOK: u32;
override ROWS: u32 = 32u;
override TOKENS: u32 = 32u;

// (token, block) pairs staged at a time: TOKENS tokens × STAGE / TOKENS blocks.
const STAGE: u32 = 256u;
const MOST: u32 = 16u;

@group(0) @binding(0) var<storage, read> qs: array<u32>;
@group(0) @binding(1) var<storage, read> scales: array<u32>;
@group(0) @binding(2) var<storage, read> act: array<u32>;
@group(0) @binding(3) var<storage, read> act_meta: array<u32>;
@group(0) @binding(4) var<storage, read_write> out: array<f32>;

// Slot s = k · (STAGE / TOKENS) + j: the tile's token k, the stage's block j.
var<workgroup> codes: array<u32, 2048>;
var<workgroup> sums: array<u32, 512>;

// Four fifth bits (bit L: byte L's) to 0x10 in each byte (gemv_q8.wgsl's).
fn spread_bits(h: u32) -> u32 {
    return ((h & 1u) | ((h & 2u) << 7u) | ((h & 4u) << 14u) | ((h & 8u) << 21u)) << 4u;
}

@compute @workgroup_size(256)
fn main(
    @builtin(local_invocation_index) lid: u32,
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
) {
    let per = TOKENS * ROWS / 256u;
    let blocks = STAGE / TOKENS;
    let g = wid.x + wid.y * nwg.x;
    let row_tiles = (N_ROWS + ROWS - 1u) / ROWS;
    let t0 = (g / row_tiles) * TOKENS;
    // The same for the whole workgroup (the barriers below stay uniform).
    if t0 >= N_TOK {
        return;
    }
    let row = (g % row_tiles) * ROWS + lid % ROWS;
    let first = (lid / ROWS) * per;
    // Past the matrix's rows or the gemm's tokens: staging only (no barrier in the branch).
    let busy = row < N_ROWS && t0 + first < N_TOK;
    let five = FORM >= 3u;
    let offset = FORM == 2u || FORM == 4u;
    var acc: array<f32, MOST>;
    for (var b0 = 0u; b0 < N_BLOCKS; b0 += blocks) {
        for (var i = lid; i < STAGE * 8u; i += 256u) {
            let slot = i / 8u;
            let tok = t0 + slot / blocks;
            let blk = b0 + slot % blocks;
            var v = 0u;
            if tok < N_TOK && blk < N_BLOCKS {
                v = act[8u * (tok * N_BLOCKS + blk) + i % 8u];
            }
            codes[i] = v;
        }
        for (var i = lid; i < STAGE * 2u; i += 256u) {
            let slot = i / 2u;
            let tok = t0 + slot / blocks;
            let blk = b0 + slot % blocks;
            var v = 0u;
            if tok < N_TOK && blk < N_BLOCKS {
                v = act_meta[2u * (tok * N_BLOCKS + blk) + i % 2u];
            }
            sums[i] = v;
        }
        workgroupBarrier();
        let here = select(0u, min(blocks, N_BLOCKS - b0), busy);
        for (var j = 0u; j < here; j++) {
            let at = row * N_BLOCKS + b0 + j;
            // The block's codes as signed bytes in the activation's order.
            var w: array<u32, 8>;
            if FORM == 0u {
                for (var i = 0u; i < 8u; i++) {
                    w[i] = qs[8u * at + i];
                }
            } else {
                let base = select(4u, 5u, five) * at;
                var high = 0u;
                if five {
                    high = qs[base + 4u];
                }
                for (var m = 0u; m < 4u; m++) {
                    let wq = qs[base + m];
                    w[2u * m] = (wq & 0x0f0f0f0fu) | spread_bits((high >> (8u * m)) & 0xfu);
                    w[2u * m + 1u] = ((wq >> 4u) & 0x0f0f0f0fu)
                        | spread_bits((high >> (8u * m + 4u)) & 0xfu);
                }
            }
            var dw: f32;
            var mw = 0.0;
            if offset {
                let dm = scales[at];
                dw = f16_value(dm & 0xffffu);
                mw = f16_value(dm >> 16u);
            } else {
                let pair = scales[at / 2u];
                dw = f16_value(select(pair & 0xffffu, pair >> 16u, (at & 1u) == 1u));
            }
            for (var k = 0u; k < per; k++) {
                let slot = (first + k) * blocks + j;
                var s = 0i;
                for (var i = 0u; i < 8u; i++) {
                    s += dot4I8Packed(w[i], codes[8u * slot + i]);
                }
                let second = sums[2u * slot + 1u];
                if FORM == 1u {
                    s -= 8i * bitcast<i32>(second);
                } else if FORM == 3u {
                    s -= 16i * bitcast<i32>(second);
                }
                let da = bitcast<f32>(sums[2u * slot]);
                if offset {
                    acc[k] += f32(s) * (dw * da) + mw * bitcast<f32>(second);
                } else {
                    acc[k] += f32(s) * (dw * da);
                }
            }
        }
        // The next stage overwrites the arrays.
        workgroupBarrier();
    }
    if busy {
        for (var k = 0u; k < per; k++) {
            let tok = t0 + first + k;
            if tok < N_TOK {
                out[tok * N_ROWS + row] = acc[k];
            }
        }
    }
}
