// A run of T tokens' keys and values into the device cache in one dispatch: token t's rows (row
// `run[1] + t` of the token-major `k_src` / `v_src`, N_HEAD_KV heads of HEAD_DIM / HEAD_DIM_V
// values) to position `run[0] + t` (t < `run[2]`), rows [g][pos] (N_CTX rows a head), kept f32 or
// rounded to f16 pairs as kv_store.wgsl does (to nearest even, the CPU cache's conversion). A
// position past the cache is not stored (the caller refuses it first).

override N_HEAD_KV: u32;
override HEAD_DIM: u32;
override HEAD_DIM_V: u32;
override N_CTX: u32;
override KV_F16: bool;

@group(0) @binding(0) var<storage, read> k_src: array<f32>;
@group(0) @binding(1) var<storage, read> v_src: array<f32>;
// (first position, first row of the sources, tokens)
@group(0) @binding(2) var<storage, read> run: array<u32>;
@group(0) @binding(3) var<storage, read_write> k_cache: array<u32>;
@group(0) @binding(4) var<storage, read_write> v_cache: array<u32>;

// Words per cached row of `dim` values.
fn row_words(dim: u32) -> u32 {
    if KV_F16 {
        return dim / 2u;
    }
    return dim;
}

// Where word w of a position's N_HEAD_KV cached rows of `dim` values lies in the cache.
fn cached(w: u32, dim: u32, pos: u32) -> u32 {
    let per_head = row_words(dim);
    let g = w / per_head;
    let p = w % per_head;
    return (g * N_CTX + pos) * per_head + p;
}

@compute @workgroup_size(256)
fn main(
    @builtin(global_invocation_id) gid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
) {
    let k = gid.x + gid.y * nwg.x * 256u;
    let words_k = N_HEAD_KV * row_words(HEAD_DIM);
    let words_v = N_HEAD_KV * row_words(HEAD_DIM_V);
    let t = k / (words_k + words_v);
    if t >= run[2] {
        return;
    }
    let pos = run[0] + t;
    if pos >= N_CTX {
        return;
    }
    let row = run[1] + t;
    var w = k % (words_k + words_v);
    if w < words_k {
        let base = row * N_HEAD_KV * HEAD_DIM;
        let at = cached(w, HEAD_DIM, pos);
        if KV_F16 {
            let i = base + (w / (HEAD_DIM / 2u)) * HEAD_DIM + 2u * (w % (HEAD_DIM / 2u));
            k_cache[at] = f16_bits(k_src[i]) | (f16_bits(k_src[i + 1u]) << 16u);
        } else {
            k_cache[at] = bitcast<u32>(k_src[base + w]);
        }
    } else {
        w -= words_k;
        let base = row * N_HEAD_KV * HEAD_DIM_V;
        let at = cached(w, HEAD_DIM_V, pos);
        if KV_F16 {
            let i = base + (w / (HEAD_DIM_V / 2u)) * HEAD_DIM_V + 2u * (w % (HEAD_DIM_V / 2u));
            v_cache[at] = f16_bits(v_src[i]) | (f16_bits(v_src[i + 1u]) << 16u);
        } else {
            v_cache[at] = bitcast<u32>(v_src[base + w]);
        }
    }
}
