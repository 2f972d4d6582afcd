// TQ2_0 weights × Q8_K activations for N_TOK tokens, token-major (the gemv: N_TOK = TILE = 1):
// out[t · N_ROWS + row] = Σ_blocks d_a · d_w · (Σ code·q − Σ q), gemv_tq2_0.wgsl's block term.
//
// The weights are repacked at upload (`repack::tq2_0_quarters`): each 256-value block's 64 bytes
// of codes as four 16-byte quarters, a row holding quarter 0 of all its blocks, then quarter 1, …
// — quarter j of block b of row r at vec4 (4r + j) · N_BLOCKS + b — so the LANES invocations of a
// row set, taking consecutive blocks, read consecutive 16 bytes. Quarter j's word c is the file's
// word 4j + c: shifted by 2l and masked it holds the codes of the four values whose codes the
// activation's word 32h + 8l + 4(j mod 2) + c holds (h = j / 2; gemv_tq2_0.wgsl's word), i.e.
// component c of activation vec4 8h + 2l + (j mod 2) of the block: one 16-byte weight load feeds
// 16 packed 4×8-bit dot products a row, each 16-byte activation load R rows' four (`word_dot`
// masks the codes at shifts 2 and 6 in place, their sum 4 times the codes'). Block scales apart,
// as f16 pairs.
//
// An invocation takes R rows (R ≤ 4) and every LANES-th block of them; each (token, row) sums its
// blocks' terms in block order, then the row set's LANES sums are added by halves in workgroup
// memory. With LANES = 32 and R = 1 that is gemv_tq2_0.wgsl's (with gemv_rows.wgsl) sum to the
// bit. A gemm's tile of TILE (≤ 8) tokens reads each block's weights once for all of them; each
// token's sum is the gemv's to the bit (the same terms in the same order, the same tree).
// Workgroup g takes row group g mod G and tile g / G (G = ⌈N_ROWS / (256 / LANES · R)⌉).

override N_ROWS: u32;
override N_BLOCKS: u32;
override LANES: u32 = 16u;
override R: u32 = 2u;
// The residual epilogue: out += the product (gemv_rows.wgsl's ACCUM, the same f32 addition).
override ACCUM: bool = false;
override N_TOK: u32 = 1u;
override TILE: u32 = 1u;

@group(0) @binding(0) var<storage, read> qs: array<vec4<u32>>;
@group(0) @binding(1) var<storage, read> scales: array<u32>;
// Sixteen 16-byte words a block: its 256 codes in order, 4 to a word.
@group(0) @binding(2) var<storage, read> act: array<vec4<u32>>;
// Two a block: d as f32 bits, Σ codes.
@group(0) @binding(3) var<storage, read> act_meta: array<u32>;
@group(0) @binding(4) var<storage, read_write> out: array<f32>;

var<workgroup> partial: array<vec4<f32>, 256>;

// Σ code·q of one quarter word `w` (16 codes) against the activation words of its codes at
// shifts 0, 2, 4, 6 (`a0` … `a3`), as (Σ at shifts 0 and 4, 4 · Σ at shifts 2 and 6): the codes at
// shift 2 and 6 masked in place (code · 4 ≤ 12, still a positive int8) and the 4 taken out of their
// exact sum once — one shift and four masks a word instead of three shifts and four masks.
fn word_dot(w: u32, a0: u32, a1: u32, a2: u32, a3: u32) -> vec2<i32> {
    let lo = 0x03030303u;
    let hi = 0x0c0c0c0cu;
    let w4 = w >> 4u;
    return vec2<i32>(
        dot4I8Packed(w & lo, a0) + dot4I8Packed(w4 & lo, a2),
        dot4I8Packed(w & hi, a1) + dot4I8Packed(w4 & hi, a3),
    );
}

@compute @workgroup_size(256)
fn main(
    @builtin(local_invocation_index) lid: u32,
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
) {
    let lane = lid % LANES;
    let sets = 256u / LANES;
    let g = wid.x + wid.y * nwg.x;
    let row_groups = (N_ROWS + sets * R - 1u) / (sets * R);
    let t0 = (g / row_groups) * TILE;
    if t0 >= N_TOK {
        return;
    }
    let nt = min(TILE, N_TOK - t0);
    let row0 = ((g % row_groups) * sets + lid / LANES) * R;
    var acc: array<vec4<f32>, 8>;
    for (var blk = lane; blk < N_BLOCKS; blk += LANES) {
        // The R rows' quarters and scales (a row past the last reads the last: its sums are
        // never written).
        var w: array<array<vec4<u32>, 4>, 4>;
        var dw = vec4<f32>(0.0);
        for (var r = 0u; r < R; r++) {
            let row = min(row0 + r, N_ROWS - 1u);
            let base = 4u * row * N_BLOCKS + blk;
            for (var j = 0u; j < 4u; j++) {
                w[r][j] = qs[base + j * N_BLOCKS];
            }
            let at = row * N_BLOCKS + blk;
            let pair = scales[at / 2u];
            dw[r] = f16_value(select(pair & 0xffffu, pair >> 16u, (at & 1u) == 1u));
        }
        for (var k = 0u; k < TILE; k++) {
            if k >= nt {
                break;
            }
            let tb = (t0 + k) * N_BLOCKS + blk;
            let a0 = 16u * tb;
            // Per row (Σ at shifts 0 and 4, 4 · Σ at shifts 2 and 6).
            var s: array<vec2<i32>, 4>;
            for (var j = 0u; j < 4u; j++) {
                // The activation words of quarter j's codes at shift 2l: vec4 8h + 2l + (j mod 2).
                let at = a0 + 8u * (j >> 1u) + (j & 1u);
                let x0 = act[at];
                let x1 = act[at + 2u];
                let x2 = act[at + 4u];
                let x3 = act[at + 6u];
                for (var r = 0u; r < R; r++) {
                    let q = w[r][j];
                    s[r] += word_dot(q.x, x0.x, x1.x, x2.x, x3.x);
                    s[r] += word_dot(q.y, x0.y, x1.y, x2.y, x3.y);
                    s[r] += word_dot(q.z, x0.z, x1.z, x2.z, x3.z);
                    s[r] += word_dot(q.w, x0.w, x1.w, x2.w, x3.w);
                }
            }
            let da = bitcast<f32>(act_meta[2u * tb]);
            let sq = bitcast<i32>(act_meta[2u * tb + 1u]);
            for (var r = 0u; r < R; r++) {
                // The integer sum, exact: 4 · Σ divides by 4 exactly.
                let sum = s[r].x + (s[r].y >> 2u);
                acc[k][r] += f32(sum - sq) * (da * dw[r]);
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

// Token `tok`'s sums of rows row0 .. row0 + R: this invocation's part added to the row set's
// others by halves in workgroup memory, written (or added) by the set's first invocation.
fn write_token(lid: u32, lane: u32, row0: u32, tok: u32, part: vec4<f32>) {
    partial[lid] = part;
    workgroupBarrier();
    for (var off = LANES / 2u; off > 0u; off >>= 1u) {
        if lane < off {
            partial[lid] += partial[lid + off];
        }
        workgroupBarrier();
    }
    if lane == 0u {
        let base = tok * N_ROWS;
        for (var r = 0u; r < R; r++) {
            if row0 + r < N_ROWS {
                if ACCUM {
                    out[base + row0 + r] = out[base + row0 + r] + partial[lid][r];
                } else {
                    out[base + row0 + r] = partial[lid][r];
                }
            }
        }
    }
    workgroupBarrier();
}
