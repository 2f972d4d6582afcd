// Attention of one token's N_HEAD query heads over the device KV cache, split over positions
// (flash-decoding): out = Σ_t softmax(SCALE · q·k_t) v_t over positions t = 0 ..= n_past (causal:
// the token's own position n_past = `step[0]`). Query head h reads key head h / (N_HEAD /
// N_HEAD_KV) (GQA). The cache holds key head g's rows at [g][t] (N_CTX rows a head), f32 or f16
// pairs.
//
// The positions 0 ..= n_past are cut into chunks of whole TILE-position tiles: at least
// MIN_TILES tiles a chunk, at most SPLITS chunks a head (attention.rs: one slot per TILE ·
// MIN_TILES positions of the cache or of those in use, at most MAX_SPLITS), so the chunking never
// depends on scheduling; with enough slots every chunk is MIN_TILES tiles, a function of n_past
// alone. A workgroup is one (chunk, query head); those past the last chunk return at once. In a
// tile, 256 / TILE invocations score each position (each a share of the dot product, their sums
// added in a fixed order); the tile's maximum is a scan of its scores by every invocation, or
// (TREE_MAX) 8 invocations' maxima of 8 scores each, then theirs (a maximum is exact: the same
// bits either way); then each invocation sums up to 4 output dimensions over a share of the
// tile's positions
// (256 / DV_LANES shares side by side), the running maximum, sums and outputs rescaled from tile
// to tile (an online softmax). At the chunk's end the shares are added in order. A head of one
// chunk (a short context) emits directly. Otherwise each chunk writes its (max, sum, weighted
// values) to `partials` and counts itself done on the head's counter; the chunk that finishes
// last combines every chunk's partial in chunk order (so the bits do not depend on which one that
// is), resets the counter and emits: no second dispatch, and nothing waits on another workgroup.
// The partials are read and written as atomics, each side behind a device-scope barrier
// (storageBarrier: the writes before the count, the reads after it), so the combining workgroup
// sees the others' writes past any cache that is not coherent.
//
// `emit` writes the head's output: f32 values (attention_out_f32.wgsl), their Q8_0 blocks
// (attention_out_q8_0.wgsl) or Q8_K blocks, each quantized by the head that completes it
// (attention_out_q8_k.wgsl). `prepare`, `query`, `key` and `value` read the inputs: the query and
// the cache as they are (attention_in_cache.wgsl), or a Q/K/V product's output with RoPE and the
// KV store fused in (attention_in_fresh.wgsl).

override N_HEAD: u32;
override N_HEAD_KV: u32;
override HEAD_DIM: u32;
override HEAD_DIM_V: u32;
override N_CTX: u32;
override SCALE: f32;
override KV_F16: bool;
// Chunks a head is dispatched with (1 ..= MAX_SPLITS).
override SPLITS: u32;
// Invocations side by side over the value dimensions, each holding up to 4 of them: a power of
// two from 16 to 256, at least HEAD_DIM_V / 4. The other factor of 256 is how many shares of a
// tile's positions are summed side by side.
override DV_LANES: u32;

// The kernel's settings (attention.rs `AttentionKernel`; the defaults are the kernel as it was
// before they existed, the same code once the constants fold). Positions a tile, 64 or 32:
// 256 / TILE invocations score each.
override TILE: u32 = 64u;
// The fewest tiles a chunk holds, 1 or 2 (2 × 64: a context of up to 128 positions is one chunk).
override MIN_TILES: u32 = 2u;
// The key pass 4 loads at a time, issued before their products (the same products, added in
// the same order: the same bits).
override KEY_UNROLL: bool = false;
// The tile's maximum by 8 invocations' partial maxima (see above).
override TREE_MAX: bool = false;
// GQA packing: a workgroup is one (chunk, KV head) and all N_HEAD / N_HEAD_KV (at most
// MAX_GROUP) query heads of it (`packed` below): each key and value word is loaded once for the
// group, each head's products and sums in the unpacked kernel's order (the same bits). `prepare`
// is called once with the group's first head (the fresh input then rotates the group's query
// heads side by side; attention.rs packs it only where they fit its workgroup memory, and no
// group over MAX_GROUP: the unpacked kernel otherwise).
override GQA_PACK: bool = false;
const MAX_GROUP: u32 = 8u;
const MAX_TILE: u32 = 64u;
const MAX_SPLITS: u32 = 32u;
// Words of `partials` before the first partial: a done-counter a query head (words 0 .. 1024),
// then one a 256-value block of the output (words 1024 .. 2048, attention_out_q8_k.wgsl's), at
// the same place for every shape (a partial of one shape never lands on a counter of another).
const COUNTERS: u32 = 2048u;
const BLOCK_COUNTERS: u32 = 1024u;

@group(0) @binding(3) var<storage, read> step: array<u32>;
// The done-counters (words 0 .. COUNTERS), then per (head, chunk) a partial: max, sum, and
// HEAD_DIM_V weighted values (bits of f32); after the partials, room for the N_HEAD heads'
// outputs (`staged_at`, for an output piece that gathers heads).
@group(0) @binding(4) var<storage, read_write> partials: array<atomic<u32>>;

var<workgroup> scores: array<f32, MAX_TILE>;
var<workgroup> part_m: array<f32, 8>;
// The key lanes' quarter dots during the tiles; the value shares' sums at a chunk's end.
var<workgroup> sums: array<f32, 1024>;
var<workgroup> share_l: array<f32, 16>;
var<workgroup> chunk_m: array<f32, MAX_SPLITS>;
var<workgroup> chunk_l: array<f32, MAX_SPLITS>;
var<workgroup> chunk_w: array<f32, MAX_SPLITS>;
var<workgroup> n_kv_shared: u32;
var<workgroup> last_shared: u32;

// Value i of a cached row from its word: an f32, or one of an f16 pair.
fn unpack(word: u32, i: u32) -> f32 {
    if KV_F16 {
        return f16_value(select(word & 0xffffu, word >> 16u, (i & 1u) == 1u));
    }
    return bitcast<f32>(word);
}

// The word holding value i of head g's `dim`-wide row for position t.
fn cache_word(g: u32, t: u32, i: u32, dim: u32) -> u32 {
    return (g * N_CTX + t) * row_words(dim) + select(i, i / 2u, KV_F16);
}

// Words per cached row of `dim` values.
fn row_words(dim: u32) -> u32 {
    if KV_F16 {
        return dim / 2u;
    }
    return dim;
}

// Where chunk c's partial of head h starts in `partials`.
fn partial_at(h: u32, c: u32) -> u32 {
    return COUNTERS + (h * SPLITS + c) * (HEAD_DIM_V + 2u);
}

// Where output value i (of the N_HEAD · HEAD_DIM_V) is staged in `partials`, after the partials.
fn staged_at(i: u32) -> u32 {
    return partial_at(N_HEAD, 0u) + i;
}

@compute @workgroup_size(256)
fn main(
    @builtin(local_invocation_index) lid: u32,
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
) {
    let idx = wid.x + wid.y * nwg.x;
    if GQA_PACK {
        packed(lid, idx);
        return;
    }
    if idx >= N_HEAD * SPLITS {
        return;
    }
    // Chunk-major: the query heads of a KV group, which read the same rows, run side by side,
    // and the workgroups a short context leaves idle come last.
    let c = idx / N_HEAD;
    let h = idx % N_HEAD;
    let g = h / (N_HEAD / N_HEAD_KV);
    if lid == 0u {
        n_kv_shared = min(step[0] + 1u, N_CTX);
    }
    let n_kv = workgroupUniformLoad(&n_kv_shared);
    let n_tiles = (n_kv + TILE - 1u) / TILE;
    let chunk_tiles = max(MIN_TILES, (n_tiles + SPLITS - 1u) / SPLITS);
    let n_chunks = (n_tiles + chunk_tiles - 1u) / chunk_tiles;
    if c >= n_chunks {
        return;
    }
    let first = c * chunk_tiles * TILE;
    let end = min(n_kv, first + chunk_tiles * TILE);
    prepare(h, g, lid, c + 1u == n_chunks);

    let lanes = 256u / TILE;
    let kp = lid / lanes;
    let kl = lid % lanes;
    let shares = 256u / DV_LANES;
    let share = lid / DV_LANES;
    let dl = lid % DV_LANES;
    var m = -3.0e38;
    var l = 0.0;
    var acc = array<f32, 4>(0.0, 0.0, 0.0, 0.0);
    for (var t0 = first; t0 < end; t0 += TILE) {
        let in_tile = min(TILE, end - t0);
        var dot = 0.0;
        if kp < in_tile {
            if KEY_UNROLL {
                let t = t0 + kp;
                var i = kl;
                for (; i + 3u * lanes < HEAD_DIM; i += 4u * lanes) {
                    let k0 = key(g, t, i);
                    let k1 = key(g, t, i + lanes);
                    let k2 = key(g, t, i + 2u * lanes);
                    let k3 = key(g, t, i + 3u * lanes);
                    dot += query(h, i) * k0;
                    dot += query(h, i + lanes) * k1;
                    dot += query(h, i + 2u * lanes) * k2;
                    dot += query(h, i + 3u * lanes) * k3;
                }
                for (; i < HEAD_DIM; i += lanes) {
                    dot += query(h, i) * key(g, t, i);
                }
            } else {
                for (var i = kl; i < HEAD_DIM; i += lanes) {
                    dot += query(h, i) * key(g, t0 + kp, i);
                }
            }
        }
        sums[lid] = dot;
        workgroupBarrier();
        if kl == 0u && kp < in_tile {
            var score = sums[lid];
            for (var j = 1u; j < lanes; j++) {
                score += sums[lid + j];
            }
            scores[kp] = score * SCALE;
        }
        workgroupBarrier();
        var tile_m = -3.0e38;
        if TREE_MAX {
            let per = TILE / 8u;
            if lid < 8u {
                var part = -3.0e38;
                for (var u = lid * per; u < min(in_tile, lid * per + per); u++) {
                    part = max(part, scores[u]);
                }
                part_m[lid] = part;
            }
            workgroupBarrier();
            for (var u = 0u; u < 8u; u++) {
                tile_m = max(tile_m, part_m[u]);
            }
        } else {
            for (var u = 0u; u < in_tile; u++) {
                tile_m = max(tile_m, scores[u]);
            }
        }
        let new_m = max(m, tile_m);
        let corr = exp(m - new_m);
        l *= corr;
        for (var j = 0u; j < 4u; j++) {
            acc[j] *= corr;
        }
        for (var u = share; u < in_tile; u += shares) {
            let p = exp(scores[u] - new_m);
            l += p;
            for (var j = 0u; j < 4u; j++) {
                let d = dl + DV_LANES * j;
                if d < HEAD_DIM_V {
                    acc[j] += p * value(g, t0 + u, d);
                }
            }
        }
        m = new_m;
        workgroupBarrier();
    }

    // The shares side by side (dimension d = dl + DV_LANES · j of a share at share · 4 · DV_LANES
    // + d), then added in share order.
    for (var j = 0u; j < 4u; j++) {
        sums[share * 4u * DV_LANES + dl + DV_LANES * j] = acc[j];
    }
    if dl == 0u {
        share_l[share] = l;
    }
    workgroupBarrier();
    var chunk_sum = 0.0;
    for (var s = 0u; s < shares; s++) {
        chunk_sum += share_l[s];
    }
    var out = array<f32, 4>(0.0, 0.0, 0.0, 0.0);
    for (var j = 0u; j < 4u; j++) {
        let d = lid + 256u * j;
        if d < HEAD_DIM_V {
            var total = 0.0;
            for (var s = 0u; s < shares; s++) {
                total += sums[s * 4u * DV_LANES + d];
            }
            out[j] = total;
        }
    }
    finish_head(h, c, n_chunks, lid, out, m, chunk_sum);
}

// The GQA-packed workgroup (GQA_PACK): chunk c of KV head g for its query heads h0 .. h0 + group.
// Per head, the same products and sums in the same order as `main`'s (each key word's products
// for the heads, then the next word; each value word's for the heads, then the next), its tile
// scores in `sums[256 + head · TILE ..]` (the key lanes' dots use sums[0 .. 256], one head at a
// time), its tile maximum a scan (a maximum is exact: TREE_MAX's bits), then each head's chunk
// end, partial, combination and emit as `main`'s, one head after another.
fn packed(lid: u32, idx: u32) {
    let group = N_HEAD / N_HEAD_KV;
    if idx >= N_HEAD_KV * SPLITS {
        return;
    }
    let c = idx / N_HEAD_KV;
    let g = idx % N_HEAD_KV;
    let h0 = g * group;
    if lid == 0u {
        n_kv_shared = min(step[0] + 1u, N_CTX);
    }
    let n_kv = workgroupUniformLoad(&n_kv_shared);
    let n_tiles = (n_kv + TILE - 1u) / TILE;
    let chunk_tiles = max(MIN_TILES, (n_tiles + SPLITS - 1u) / SPLITS);
    let n_chunks = (n_tiles + chunk_tiles - 1u) / chunk_tiles;
    if c >= n_chunks {
        return;
    }
    let first = c * chunk_tiles * TILE;
    let end = min(n_kv, first + chunk_tiles * TILE);
    prepare(h0, g, lid, c + 1u == n_chunks);

    let lanes = 256u / TILE;
    let kp = lid / lanes;
    let kl = lid % lanes;
    let shares = 256u / DV_LANES;
    let share = lid / DV_LANES;
    let dl = lid % DV_LANES;
    var m: array<f32, MAX_GROUP>;
    var l: array<f32, MAX_GROUP>;
    var acc: array<array<f32, 4>, MAX_GROUP>;
    for (var e = 0u; e < group; e++) {
        m[e] = -3.0e38;
        l[e] = 0.0;
        acc[e] = array<f32, 4>(0.0, 0.0, 0.0, 0.0);
    }
    for (var t0 = first; t0 < end; t0 += TILE) {
        let in_tile = min(TILE, end - t0);
        var dot: array<f32, MAX_GROUP>;
        for (var e = 0u; e < group; e++) {
            dot[e] = 0.0;
        }
        if kp < in_tile {
            for (var i = kl; i < HEAD_DIM; i += lanes) {
                let k = key(g, t0 + kp, i);
                for (var e = 0u; e < group; e++) {
                    dot[e] += query(h0 + e, i) * k;
                }
            }
        }
        for (var e = 0u; e < group; e++) {
            sums[lid] = dot[e];
            workgroupBarrier();
            if kl == 0u && kp < in_tile {
                var score = sums[lid];
                for (var j = 1u; j < lanes; j++) {
                    score += sums[lid + j];
                }
                sums[256u + e * TILE + kp] = score * SCALE;
            }
            workgroupBarrier();
        }
        var new_m: array<f32, MAX_GROUP>;
        for (var e = 0u; e < group; e++) {
            var tile_m = -3.0e38;
            for (var u = 0u; u < in_tile; u++) {
                tile_m = max(tile_m, sums[256u + e * TILE + u]);
            }
            new_m[e] = max(m[e], tile_m);
            let corr = exp(m[e] - new_m[e]);
            l[e] *= corr;
            for (var j = 0u; j < 4u; j++) {
                acc[e][j] *= corr;
            }
        }
        for (var u = share; u < in_tile; u += shares) {
            var v = array<f32, 4>(0.0, 0.0, 0.0, 0.0);
            for (var j = 0u; j < 4u; j++) {
                let d = dl + DV_LANES * j;
                if d < HEAD_DIM_V {
                    v[j] = value(g, t0 + u, d);
                }
            }
            for (var e = 0u; e < group; e++) {
                let p = exp(sums[256u + e * TILE + u] - new_m[e]);
                l[e] += p;
                for (var j = 0u; j < 4u; j++) {
                    if dl + DV_LANES * j < HEAD_DIM_V {
                        acc[e][j] += p * v[j];
                    }
                }
            }
        }
        for (var e = 0u; e < group; e++) {
            m[e] = new_m[e];
        }
        workgroupBarrier();
    }

    for (var e = 0u; e < group; e++) {
        let h = h0 + e;
        // The previous head's readers of `sums`, `share_l`, `chunk_*` and its emit are done.
        workgroupBarrier();
        for (var j = 0u; j < 4u; j++) {
            sums[share * 4u * DV_LANES + dl + DV_LANES * j] = acc[e][j];
        }
        if dl == 0u {
            share_l[share] = l[e];
        }
        workgroupBarrier();
        var chunk_sum = 0.0;
        for (var s = 0u; s < shares; s++) {
            chunk_sum += share_l[s];
        }
        var out = array<f32, 4>(0.0, 0.0, 0.0, 0.0);
        for (var j = 0u; j < 4u; j++) {
            let d = lid + 256u * j;
            if d < HEAD_DIM_V {
                var total = 0.0;
                for (var s = 0u; s < shares; s++) {
                    total += sums[s * 4u * DV_LANES + d];
                }
                out[j] = total;
            }
        }
        finish_head(h, c, n_chunks, lid, out, m[e], chunk_sum);
    }
}

// A head's chunk done: a head of one chunk emits directly; otherwise the chunk writes its (max,
// sum, weighted values) partial and counts itself done on the head's counter, and the chunk that
// finishes last combines every chunk's partial in chunk order (the bits do not depend on which
// one that is), resets the counter and emits. The main kernel and the packed one share it.
fn finish_head(h: u32, c: u32, n_chunks: u32, lid: u32, out: array<f32, 4>, m: f32, chunk_sum: f32) {
    if n_chunks == 1u {
        emit(h, lid, out, chunk_sum);
        return;
    }

    let at = partial_at(h, c);
    if lid == 0u {
        atomicStore(&partials[at], bitcast<u32>(m));
        atomicStore(&partials[at + 1u], bitcast<u32>(chunk_sum));
    }
    for (var j = 0u; j < 4u; j++) {
        let d = lid + 256u * j;
        if d < HEAD_DIM_V {
            atomicStore(&partials[at + 2u + d], bitcast<u32>(out[j]));
        }
    }
    storageBarrier();
    if lid == 0u {
        last_shared = select(0u, 1u, atomicAdd(&partials[h], 1u) + 1u == n_chunks);
    }
    if workgroupUniformLoad(&last_shared) == 0u {
        return;
    }
    storageBarrier();
    if lid == 0u {
        atomicStore(&partials[h], 0u);
    }
    if lid < n_chunks {
        let b = partial_at(h, lid);
        chunk_m[lid] = bitcast<f32>(atomicLoad(&partials[b]));
        chunk_l[lid] = bitcast<f32>(atomicLoad(&partials[b + 1u]));
    }
    workgroupBarrier();
    var big_m = -3.0e38;
    for (var k = 0u; k < n_chunks; k++) {
        big_m = max(big_m, chunk_m[k]);
    }
    if lid < n_chunks {
        chunk_w[lid] = exp(chunk_m[lid] - big_m);
    }
    workgroupBarrier();
    var total_l = 0.0;
    for (var k = 0u; k < n_chunks; k++) {
        total_l += chunk_l[k] * chunk_w[k];
    }
    var combined = array<f32, 4>(0.0, 0.0, 0.0, 0.0);
    for (var j = 0u; j < 4u; j++) {
        let d = lid + 256u * j;
        if d < HEAD_DIM_V {
            var total = 0.0;
            for (var k = 0u; k < n_chunks; k++) {
                total += bitcast<f32>(atomicLoad(&partials[partial_at(h, k) + 2u + d])) * chunk_w[k];
            }
            combined[j] = total;
        }
    }
    emit(h, lid, combined, total_l);
}
