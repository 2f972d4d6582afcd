// Attention of one token's N_HEAD query heads over the device KV cache, one pass with an online
// softmax: out = Σ_t softmax(SCALE · q·k_t) v_t over positions t = 0 ..= n_past (causal: the
// token's own position n_past = `step[0]`). Query head h reads key head h / (N_HEAD / N_HEAD_KV)
// (GQA). The cache holds key head g's rows at [g][t] (N_CTX rows a head), f32 or f16 pairs.
//
// One workgroup per query head; positions in tiles of 256, an invocation scoring one position of
// the tile, then each invocation accumulating up to 4 output dimensions over the tile's weights,
// the running maximum, sum and outputs rescaled from tile to tile. `emit` writes the head's
// output: f32 values (attention_out_f32.wgsl) or their Q8_0 blocks (attention_out_q8_0.wgsl).
// `prepare`, `query`, `key` and `value` read the inputs: the query and the cache as they are
// (attention_in_cache.wgsl), or a Q/K/V product's output with RoPE and the KV store fused in
// (attention_in_fresh.wgsl).

override N_HEAD: u32;
override N_HEAD_KV: u32;
override HEAD_DIM: u32;
override HEAD_DIM_V: u32;
override N_CTX: u32;
override SCALE: f32;
override KV_F16: bool;

@group(0) @binding(3) var<storage, read> step: array<u32>;

var<workgroup> weights: array<f32, 256>;
var<workgroup> red: array<f32, 256>;
var<workgroup> n_kv_shared: u32;

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

fn reduce(lid: u32, is_max: bool) -> f32 {
    for (var off = 128u; off > 0u; off >>= 1u) {
        if lid < off {
            if is_max {
                red[lid] = max(red[lid], red[lid + off]);
            } else {
                red[lid] += red[lid + off];
            }
        }
        workgroupBarrier();
    }
    let r = red[0];
    workgroupBarrier();
    return r;
}

@compute @workgroup_size(256)
fn main(
    @builtin(local_invocation_index) lid: u32,
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
) {
    let h = wid.x + wid.y * nwg.x;
    if h >= N_HEAD {
        return;
    }
    let g = h / (N_HEAD / N_HEAD_KV);
    prepare(h, g, lid);
    if lid == 0u {
        n_kv_shared = min(step[0] + 1u, N_CTX);
    }
    let n_kv = workgroupUniformLoad(&n_kv_shared);
    var m = -3.0e38;
    var l = 0.0;
    var acc = array<f32, 4>(0.0, 0.0, 0.0, 0.0);
    for (var tile = 0u; tile < n_kv; tile += 256u) {
        let t = tile + lid;
        var s = -3.0e38;
        if t < n_kv {
            var qk = 0.0;
            for (var i = 0u; i < HEAD_DIM; i++) {
                qk += query(h, i) * key(g, t, i);
            }
            s = qk * SCALE;
        }
        red[lid] = s;
        workgroupBarrier();
        let new_m = max(m, reduce(lid, true));
        var p = 0.0;
        if t < n_kv {
            p = exp(s - new_m);
        }
        weights[lid] = p;
        red[lid] = p;
        workgroupBarrier();
        let tile_sum = reduce(lid, false);
        let corr = exp(m - new_m);
        l = l * corr + tile_sum;
        let in_tile = min(256u, n_kv - tile);
        for (var j = 0u; j < 4u; j++) {
            let d = lid + 256u * j;
            if d < HEAD_DIM_V {
                var sum = 0.0;
                for (var u = 0u; u < in_tile; u++) {
                    sum += weights[u] * value(g, tile + u, d);
                }
                acc[j] = acc[j] * corr + sum;
            }
        }
        m = new_m;
        workgroupBarrier();
    }
    emit(h, lid, acc, l);
}
