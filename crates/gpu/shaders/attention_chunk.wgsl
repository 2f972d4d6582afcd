// Causal attention of a run of T tokens of one sequence (a prompt, or a sequence's part of a
// batched chunk) over the device KV cache, in one dispatch: token t (row `run[1] + t` of the
// token-major query rows `q`, N_HEAD heads of HEAD_DIM) sits at position `run[0] + t` and attends
// over the cache positions 0 ..= its own, out = Σ_k softmax(SCALE · q·k_k) v_k, written to row
// `run[1] + t` of the token-major `out` (N_HEAD heads of HEAD_DIM_V). Query head h reads key head
// h / (N_HEAD / N_HEAD_KV) (GQA); the cache holds key head g's rows at [g][k] (N_CTX rows a head),
// f32 or f16 pairs, as attention_decode.wgsl reads it. The run's keys and values are in the cache
// already (kv_store_rows.wgsl, before this dispatch).
//
// Tiled (flash attention): a workgroup is one (query head, tile of TQ tokens); it walks the keys
// 0 ..= its last token's position in tiles of TK, each key and value row of a tile read once into
// workgroup memory (in slabs of SLAB values) for all the tile's queries. Invocation (i, j) of the
// 16 × 16: the score of query i and key j of the tile (a dot product in dimension order, times
// SCALE); then for query i the online softmax (running maximum and sum, rescaled tile to tile) and
// the output dimensions j, j + 16, … (at most 16 of them: HEAD_DIM_V ≤ 256). Its summation order
// is not the decode shader's (that one splits a head's positions into chunks and shares).

override N_HEAD: u32;
override N_HEAD_KV: u32;
override HEAD_DIM: u32;
override HEAD_DIM_V: u32;
override N_CTX: u32;
override SCALE: f32;
override KV_F16: bool;

// Queries a tile, keys a key tile (both the workgroup's 16 × 16), values of a row a slab.
const TQ: u32 = 16u;
const TK: u32 = 16u;
const SLAB: u32 = 64u;
// Output dimensions an invocation holds: HEAD_DIM_V ≤ 16 · 16.
const DV_EACH: u32 = 16u;

@group(0) @binding(0) var<storage, read> q: array<f32>;
@group(0) @binding(1) var<storage, read> k_cache: array<u32>;
@group(0) @binding(2) var<storage, read> v_cache: array<u32>;
// (first position, first row of `q` / `out`, tokens)
@group(0) @binding(3) var<storage, read> run: array<u32>;
@group(0) @binding(4) var<storage, read_write> out: array<f32>;

// A slab of the tile's query rows; of its key rows, then of its value rows.
var<workgroup> qs: array<f32, 1024>;
var<workgroup> kvs: array<f32, 1024>;
// Query i's scores of the tile's keys, then their weights.
var<workgroup> ps: array<f32, 256>;
var<workgroup> p0_shared: u32;
var<workgroup> r0_shared: u32;
var<workgroup> n_shared: u32;

// Value i of a cached row from its word: an f32, or one of an f16 pair.
fn unpack(word: u32, i: u32) -> f32 {
    if KV_F16 {
        return f16_value(select(word & 0xffffu, word >> 16u, (i & 1u) == 1u));
    }
    return bitcast<f32>(word);
}

// Value i of head g's `dim`-wide cached row for position t.
fn cached(cache_is_k: bool, g: u32, t: u32, i: u32, dim: u32) -> f32 {
    let per_row = select(dim, dim / 2u, KV_F16);
    let at = (g * N_CTX + t) * per_row + select(i, i / 2u, KV_F16);
    if cache_is_k {
        return unpack(k_cache[at], i);
    }
    return unpack(v_cache[at], i);
}

@compute @workgroup_size(256)
fn main(
    @builtin(local_invocation_index) lid: u32,
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
) {
    if lid == 0u {
        p0_shared = run[0];
        r0_shared = run[1];
        n_shared = run[2];
    }
    let p0 = workgroupUniformLoad(&p0_shared);
    let r0 = workgroupUniformLoad(&r0_shared);
    let n_tok = workgroupUniformLoad(&n_shared);
    // Head-major within a tile: the query heads of a KV group, which read the same rows, side
    // by side.
    let idx = wid.x + wid.y * nwg.x;
    let h = idx % N_HEAD;
    let tile = idx / N_HEAD;
    if tile * TQ >= n_tok {
        return;
    }
    let g = h / (N_HEAD / N_HEAD_KV);
    let q_first = tile * TQ;
    let q_n = min(TQ, n_tok - q_first);
    // Keys 0 ..= the tile's last position (never past the cache).
    let n_kv = min(p0 + q_first + q_n, N_CTX);
    let qi = lid / 16u;
    let lane = lid % 16u;
    let live_q = qi < q_n;
    let my_pos = p0 + q_first + qi;

    var m = -3.0e38;
    var l = 0.0;
    var acc: array<f32, DV_EACH>;
    for (var c = 0u; c < DV_EACH; c++) {
        acc[c] = 0.0;
    }
    for (var k0 = 0u; k0 < n_kv; k0 += TK) {
        // Score of query qi and key k0 + lane, a slab of dimensions at a time.
        var dot = 0.0;
        for (var s0 = 0u; s0 < HEAD_DIM; s0 += SLAB) {
            for (var e = lid; e < TQ * SLAB; e += 256u) {
                let r = e / SLAB;
                let i = s0 + e % SLAB;
                var x = 0.0;
                var y = 0.0;
                if i < HEAD_DIM {
                    if r < q_n {
                        x = q[((r0 + q_first + r) * N_HEAD + h) * HEAD_DIM + i];
                    }
                    if k0 + r < n_kv {
                        y = cached(true, g, k0 + r, i, HEAD_DIM);
                    }
                }
                qs[e] = x;
                kvs[e] = y;
            }
            workgroupBarrier();
            let in_slab = min(SLAB, HEAD_DIM - s0);
            for (var i = 0u; i < in_slab; i++) {
                dot += qs[qi * SLAB + i] * kvs[lane * SLAB + i];
            }
            workgroupBarrier();
        }
        let key = k0 + lane;
        let live = live_q && key <= my_pos && key < n_kv;
        let score = dot * SCALE;
        ps[lid] = select(-3.0e38, score, live);
        workgroupBarrier();
        var tile_m = -3.0e38;
        for (var u = 0u; u < TK; u++) {
            tile_m = max(tile_m, ps[qi * TK + u]);
        }
        let new_m = max(m, tile_m);
        workgroupBarrier();
        ps[lid] = select(0.0, exp(score - new_m), live);
        let corr = exp(m - new_m);
        m = new_m;
        workgroupBarrier();
        var tile_l = 0.0;
        for (var u = 0u; u < TK; u++) {
            tile_l += ps[qi * TK + u];
        }
        l = l * corr + tile_l;
        // The values, a slab of dimensions at a time: dimension d0 + lane + 16 c of the slab is
        // acc[d0 / 16 + c].
        for (var d0 = 0u; d0 < HEAD_DIM_V; d0 += SLAB) {
            for (var e = lid; e < TK * SLAB; e += 256u) {
                let r = e / SLAB;
                let d = d0 + e % SLAB;
                var y = 0.0;
                if d < HEAD_DIM_V && k0 + r < n_kv {
                    y = cached(false, g, k0 + r, d, HEAD_DIM_V);
                }
                kvs[e] = y;
            }
            workgroupBarrier();
            for (var c = 0u; c < SLAB / 16u; c++) {
                let at = d0 / 16u + c;
                var sum = 0.0;
                for (var u = 0u; u < TK; u++) {
                    sum += ps[qi * TK + u] * kvs[u * SLAB + lane + 16u * c];
                }
                acc[at] = acc[at] * corr + sum;
            }
            workgroupBarrier();
        }
    }
    if live_q {
        let row = (r0 + q_first + qi) * N_HEAD + h;
        for (var c = 0u; c < DV_EACH; c++) {
            let d = lane + 16u * c;
            if d < HEAD_DIM_V {
                out[row * HEAD_DIM_V + d] = acc[c] / l;
            }
        }
    }
}
