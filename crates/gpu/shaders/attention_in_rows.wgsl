// attention_decode.wgsl's inputs for one token of a chunk (a run of one token,
// `Recorder::chunk_attention`): its query heads at row `step[1]` of the token-major query rows,
// and the cache holding every position up to its own (`step[0]`).

@group(0) @binding(0) var<storage, read> q: array<f32>;
@group(0) @binding(1) var<storage, read> k_cache: array<u32>;
@group(0) @binding(2) var<storage, read> v_cache: array<u32>;

fn prepare(h: u32, g: u32, lid: u32, last_chunk: bool) {}

fn query(h: u32, i: u32) -> f32 {
    return q[(step[1] * N_HEAD + h) * HEAD_DIM + i];
}

fn key(g: u32, t: u32, i: u32) -> f32 {
    return unpack(k_cache[cache_word(g, t, i, HEAD_DIM)], i);
}

fn value(g: u32, t: u32, d: u32) -> f32 {
    return unpack(v_cache[cache_word(g, t, d, HEAD_DIM_V)], d);
}
