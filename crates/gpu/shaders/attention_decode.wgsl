// Attention of one token's N_HEAD query heads over the device KV cache, one pass with an online
// softmax: out = Σ_t softmax(SCALE · q·k_t) v_t over positions t = 0 ..= n_past (causal: the
// token's own position n_past = `step[0]`). Query head h reads key head h / (N_HEAD / N_HEAD_KV)
// (GQA). The cache holds key head g's rows at [g][t] (N_CTX rows a head), f32 or f16 pairs.
//
// One workgroup per query head; positions in tiles of 256, an invocation scoring one position of
// the tile, then each invocation accumulating up to 4 output dimensions over the tile's weights,
// the running maximum, sum and outputs rescaled from tile to tile.

override N_HEAD: u32;
override N_HEAD_KV: u32;
override HEAD_DIM: u32;
override HEAD_DIM_V: u32;
override N_CTX: u32;
override SCALE: f32;
override KV_F16: bool;

@group(0) @binding(0) var<storage, read> q: array<f32>;
@group(0) @binding(1) var<storage, read> k_cache: array<u32>;
@group(0) @binding(2) var<storage, read> v_cache: array<u32>;
@group(0) @binding(3) var<storage, read> step: array<u32>;
@group(0) @binding(4) var<storage, read_write> out: array<f32>;

var<workgroup> weights: array<f32, 256>;
var<workgroup> red: array<f32, 256>;
var<workgroup> n_kv_shared: u32;

// Element i of the cache row starting at word `row` of a HEAD-wide head.
fn cached(from_k: bool, row: u32, i: u32) -> f32 {
    var word: u32;
    if KV_F16 {
        if from_k {
            word = k_cache[row + i / 2u];
        } else {
            word = v_cache[row + i / 2u];
        }
        return f16_value(select(word & 0xffffu, word >> 16u, (i & 1u) == 1u));
    }
    if from_k {
        word = k_cache[row + i];
    } else {
        word = v_cache[row + i];
    }
    return bitcast<f32>(word);
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
    if lid == 0u {
        n_kv_shared = min(step[0] + 1u, N_CTX);
    }
    let n_kv = workgroupUniformLoad(&n_kv_shared);
    let k_words = row_words(HEAD_DIM);
    let v_words = row_words(HEAD_DIM_V);
    var m = -3.0e38;
    var l = 0.0;
    var acc = array<f32, 4>(0.0, 0.0, 0.0, 0.0);
    for (var tile = 0u; tile < n_kv; tile += 256u) {
        let t = tile + lid;
        var s = -3.0e38;
        if t < n_kv {
            let row = (g * N_CTX + t) * k_words;
            var qk = 0.0;
            for (var i = 0u; i < HEAD_DIM; i++) {
                qk += q[h * HEAD_DIM + i] * cached(true, row, i);
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
                    sum += weights[u] * cached(false, (g * N_CTX + tile + u) * v_words, d);
                }
                acc[j] = acc[j] * corr + sum;
            }
        }
        m = new_m;
        workgroupBarrier();
    }
    for (var j = 0u; j < 4u; j++) {
        let d = lid + 256u * j;
        if d < HEAD_DIM_V {
            out[h * HEAD_DIM_V + d] = acc[j] / l;
        }
    }
}
